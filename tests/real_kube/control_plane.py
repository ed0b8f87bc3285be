"""A real single-node Kubernetes control plane on this machine, for the tests and for trials:
etcd, kube-apiserver, kube-controller-manager and kube-scheduler (tests/real_kube/build.py's
binaries), and the node agent (tests/real_kube/node.py), each a child process with its log and
pid file in a state directory. Everything listens on 127.0.0.1 only, on ports free when it
starts, so several control planes run side by side.

``up`` makes a CA and the certificates and keys the components use, starts them, and returns
once the API server is ready and the default ServiceAccount exists (the controllers run). It
then sets up what the portal runs with in a cluster (deploy/namespace.yaml, deploy/rbac.yaml
and deploy/admission-policy.yaml, applied) and writes a kubeconfig of the portal's own
ServiceAccount beside the admin's. ``down`` stops every process the pid files name (SIGTERM,
then SIGKILL); ``up`` does the same first with what a crashed run left."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from jobs.backends.local.sandbox import start_of
from tests.real_kube import build

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DEFAULT_DIR = ROOT / "var" / "kube"
# In start order; ``down`` stops them the other way round.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "node",
              "kueue")
# Started only when asked for (``up --kueue``: tests/real_kube/kueue.py), stopped by down.
OPTIONAL = ("kueue",)
NODE_NAME = "node-1"
# The NFS server the node agent plays with this machine's directories: where the tests' PFS
# volumes are (tests/kube.py).
NFS_SERVER = "pfs.paddlecloud.test"
NODE_MODULE = "tests.real_kube.node"
# The portal's ServiceAccount (deploy/rbac.yaml, in the namespace of deploy/namespace.yaml),
# whose username the admission policy matches.
PORTAL_NAMESPACE, PORTAL_ACCOUNT = "paddlecloud", "paddlecloud"
SERVICE_CIDR = "10.96.0.0/12"
# A TokenRequest's longest life is the API server's --service-account-max-token-expiration.
TOKEN_SECONDS = 30 * 24 * 3600
# What up writes in the state directory, and all that down and a later up remove there (the
# directory itself may be one the user named: nothing else in it is touched).
OWNED = ("pki", "etcd", "node", "kueue", "run", "logs", "admin.kubeconfig", "portal.kubeconfig")


class ControlPlaneError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class ControlPlane:
    dir: Path
    url: str
    admin_kubeconfig: Path
    portal_kubeconfig: Path

    @classmethod
    def of(cls, state_dir: Path) -> ControlPlane:
        state_dir = Path(state_dir)
        admin = state_dir / "admin.kubeconfig"
        url = yaml.safe_load(admin.read_text())["clusters"][0]["cluster"]["server"]
        return cls(state_dir, url, admin, state_dir / "portal.kubeconfig")


# --- certificates ----------------------------------------------------------------------------

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(subject: x509.Name, key, issuer: tuple | None, *, ca: bool = False,
                 usages: tuple = (), names: tuple[str, ...] = ()) -> x509.Certificate:
    """A certificate of ``key`` for ``subject``, signed by ``issuer`` (its certificate and key;
    None: self-signed), valid for a year."""
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = (subject, key) if issuer is None else (issuer[0].subject, issuer[1])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(
                   digital_signature=True, key_encipherment=not ca, key_cert_sign=ca,
                   crl_sign=ca, content_commitment=False, data_encipherment=False,
                   key_agreement=False, encipher_only=False, decipher_only=False),
                   critical=True))
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if names:
        sans = []
        for name in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _name(common: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


SERVER, CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
# name -> (common name, organization, usages, subject alternative names) of the certificates
# signed by the cluster's CA. The API server's names are those its Service and clients use.
CERTIFICATES = {
    "apiserver": ("kube-apiserver", None, (SERVER,),
                  ("127.0.0.1", "localhost", "10.96.0.1", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")),
    "admin": ("kubernetes-admin", "system:masters", (CLIENT,), ()),
    # How the API server reaches the node agent (logs); its group lets it do so.
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters", (CLIENT,),
                                 ()),
    "controller-manager": ("system:kube-controller-manager", None, (CLIENT,), ()),
    "scheduler": ("system:kube-scheduler", None, (CLIENT,), ()),
}


def make_pki(pki: Path) -> None:
    """The cluster's CA and the certificates above, the front proxy's CA and client (the
    aggregation layer: Kueue's visibility API), and the ServiceAccount tokens' key pair."""
    pki.mkdir(parents=True)

    def write(name: str, certificate: x509.Certificate, key) -> None:
        (pki / f"{name}.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        (pki / f"{name}.key").write_bytes(_pem_key(key))
        (pki / f"{name}.key").chmod(0o600)

    authorities = {}
    for ca_name, common in (("ca", "paddlecloud-test-ca"),
                            ("front-proxy-ca", "paddlecloud-test-front-proxy-ca")):
        key = _key()
        authorities[ca_name] = (_certificate(_name(common), key, None, ca=True), key)
        write(ca_name, *authorities[ca_name])
    for name, (common, organization, usages, names) in CERTIFICATES.items():
        key = _key()
        write(name, _certificate(_name(common, organization), key, authorities["ca"],
                                 usages=usages, names=names), key)
    key = _key()
    write("front-proxy-client", _certificate(_name("front-proxy-client"), key,
                                             authorities["front-proxy-ca"], usages=(CLIENT,)),
          key)
    service_accounts = _key()
    (pki / "sa.key").write_bytes(_pem_key(service_accounts))
    (pki / "sa.pub").write_bytes(service_accounts.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def serving_certificate(directory: Path, common: str, names: tuple[str, ...]) -> bytes:
    """``tls.crt`` and ``tls.key`` in ``directory``: a serving certificate for ``names``,
    signed by a CA made for it alone (a webhook's, which the API server calls). Returns that
    CA's certificate (PEM), the ``caBundle`` to trust it by."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, key = _key(), _key()
    ca = _certificate(_name(f"{common}-ca"), ca_key, None, ca=True)
    certificate = _certificate(_name(common), key, (ca, ca_key), usages=(SERVER,), names=names)
    (directory / "tls.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(_pem_key(key))
    (directory / "tls.key").chmod(0o600)
    return ca.public_bytes(serialization.Encoding.PEM)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, url: str, ca: Path, *, user: str, cert: Path | None = None,
                     key: Path | None = None, token: str | None = None) -> None:
    """A kubeconfig with everything in it (no file it names can go missing)."""
    credentials = ({"token": token} if token is not None else
                   {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)})
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": user, "preferences": {},
        "clusters": [{"name": "paddlecloud-test",
                      "cluster": {"server": url, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "paddlecloud-test", "user": user}}],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


# --- processes -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _spawn(state_dir: Path, name: str, command: list[str], **popen) -> int:
    """Starts ``name`` in a session of its own (a terminal's Ctrl-C after ``up`` returned is
    not for it), its output in logs/<name>.log, and writes run/<name>.pid: "pid start"."""
    log = open(state_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child's)
    with log:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True, **popen)
    # Not waited for by the Popen: stop() reaps it (when it is this process's child).
    child.returncode = 0
    (state_dir / "run" / f"{name}.pid").write_text(f"{child.pid} {start_of(child.pid)}\n")
    return child.pid


def _recorded(state_dir: Path) -> dict[str, tuple[int, int]]:
    """The pid files' processes still running (their start time as recorded), by name."""
    found = {}
    for name in COMPONENTS:
        try:
            pid, start = map(int, (state_dir / "run" / f"{name}.pid").read_text().split())
        except (OSError, ValueError):
            continue
        if start_of(pid) == start:
            found[name] = (pid, start)
    return found


def _reap(pid: int) -> None:
    # Not ours when an earlier `up` started it: init reaps it then.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(state_dir: Path, grace: float = 10, names: tuple[str, ...] = COMPONENTS) -> list[str]:
    """Stops what the pid files of ``state_dir`` name (those of ``names``), Kueue and the node
    first, etcd last: SIGTERM, then SIGKILL to its whole session after ``grace`` seconds.
    Returns the names stopped."""
    running = {name: pid for name, pid in _recorded(state_dir).items() if name in names}
    for name in names:  # one that died: reaped, if ours
        with contextlib.suppress(OSError, ValueError):
            _reap(int((state_dir / "run" / f"{name}.pid").read_text().split()[0]))
    for name in reversed(COMPONENTS):
        if name not in running:
            continue
        pid, start = running[name]
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while True:
            _reap(pid)
            if start_of(pid) != start:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            time.sleep(0.05)
    for name in names:
        (state_dir / "run" / f"{name}.pid").unlink(missing_ok=True)
    return [name for name in reversed(COMPONENTS) if name in running]


def _clean(state_dir: Path) -> None:
    for name in OWNED:
        path = state_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


# --- talking to the API server ---------------------------------------------------------------

def _admin_context(state_dir: Path) -> ssl.SSLContext:
    pki = state_dir / "pki"
    context = ssl.create_default_context(cafile=pki / "ca.crt")
    context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    return context


def _get(url: str, context: ssl.SSLContext, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(exc).encode()


def _wait(what: str, check, timeout: float, state_dir: Path, interval: float = 0.2) -> None:
    """Waits until ``check()`` is true; a component that exited meanwhile fails it at once
    with the end of its log."""
    deadline = time.monotonic() + timeout
    while not check():
        running = _recorded(state_dir)
        started = [path.stem for path in (state_dir / "run").glob("*.pid")]
        dead = [name for name in started if name not in running]
        if dead or time.monotonic() > deadline:
            name = dead[0] if dead else started[-1]
            log = (state_dir / "logs" / f"{name}.log").read_text(errors="replace")
            problem = f"{name} exited" if dead else f"{what} not within {timeout:.0f} s"
            raise ControlPlaneError(f"{problem}; the end of its log:\n{log[-3000:]}")
        time.sleep(interval)


def api_client(kubeconfig: Path):
    """The official client's ApiClient for ``kubeconfig``."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def apply(client, path: Path) -> None:
    """Every document of ``path``, server-side applied (created, or made what the file says)."""
    from kubernetes import dynamic

    resources = dynamic.DynamicClient(client).resources
    for document in yaml.safe_load_all(path.read_text()):
        if not document:
            continue
        resource = resources.get(api_version=document["apiVersion"], kind=document["kind"])
        resource.server_side_apply(body=document, namespace=document["metadata"].get(
            "namespace"), field_manager="paddlecloud-tests", force_conflicts=True)


# --- the components --------------------------------------------------------------------------

def _etcd(binary: Path, state_dir: Path, client_port: int) -> list[str]:
    peer = f"http://127.0.0.1:{free_port()}"
    client = f"http://127.0.0.1:{client_port}"
    return [str(binary), "--name=default", f"--data-dir={state_dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--log-level=warn",
            # A test cluster's data does not outlive a crash: skip the fsyncs (they are most
            # of etcd's time on a busy disk).
            "--unsafe-no-fsync=true"]


def _apiserver(binary: Path, state_dir: Path, etcd_port: int, port: int) -> list[str]:
    pki = state_dir / "pki"
    return [
        str(binary), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        # The default plugins (Pod Security, ResourceQuota, LimitRanger, ServiceAccount,
        # ValidatingAdmissionPolicy...) and kubeadm's one more.
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",  # what refuses a privileged pod is Pod Security, as in a cluster
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-account-max-token-expiration={TOKEN_SECONDS}s",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        # Aggregated APIs (Kueue's visibility) reached at their endpoints, not a Service IP
        # (no kube-proxy here).
        "--enable-aggregator-routing=true",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        # The `kubernetes` Service's endpoint would be 127.0.0.1, which no Endpoints may hold:
        # the reconciler would fail every 10 s. Nothing here reaches the API by that Service.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
    ]


def _controller_manager(binary: Path, state_dir: Path, kubeconfig: Path) -> list[str]:
    pki = state_dir / "pki"
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=true", "--controllers=*",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--leader-elect=false",
        "--profiling=false",
    ]


def _scheduler(binary: Path, kubeconfig: Path) -> list[str]:
    return [str(binary), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
            "--profiling=false"]


def node_available() -> bool:
    return importlib.util.find_spec(NODE_MODULE) is not None


def start_node(state_dir: Path, admin_kubeconfig: Path) -> int | None:
    """The node agent (tests/real_kube/node.py: registers the Node, runs its pods, serves
    their logs), started like the other components; None where this checkout has none."""
    if not node_available():
        return None
    (state_dir / "node").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return _spawn(state_dir, "node", [
        sys.executable, "-m", NODE_MODULE, "--kubeconfig", str(admin_kubeconfig),
        "--name", NODE_NAME, "--dir", str(state_dir / "node"), "--nfs-server", NFS_SERVER],
        cwd=ROOT, env=env)


# --- up, down, status ------------------------------------------------------------------------

def status(state_dir: Path = DEFAULT_DIR) -> dict[str, int]:
    """The components running from ``state_dir``, by name: their pids."""
    return {name: pid for name, (pid, _) in _recorded(Path(state_dir)).items()}


def is_up(state_dir: Path) -> bool:
    state_dir = Path(state_dir)
    running = status(state_dir)
    needed = {name for name in COMPONENTS if name not in OPTIONAL
              and (name != "node" or node_available())}
    if not needed <= set(running) or not (state_dir / "portal.kubeconfig").exists():
        return False
    url = ControlPlane.of(state_dir).url
    return _get(f"{url}/readyz", _admin_context(state_dir))[0] == 200


def up(state_dir: Path = DEFAULT_DIR, *, timeout: float = 120, node: bool = True
       ) -> ControlPlane:
    """Starts the control plane of ``state_dir`` (the one already running there, if it is
    whole and ready) and returns it; without its node agent for ``node=False`` (the agent's
    own tests start and stop one themselves)."""
    state_dir = Path(state_dir).resolve()
    if is_up(state_dir):
        return ControlPlane.of(state_dir)
    binaries = build.ensure()
    down(state_dir)  # what a crashed run left: its processes, then its files
    for name in ("run", "logs"):
        (state_dir / name).mkdir(parents=True, exist_ok=True)
    pki = state_dir / "pki"
    make_pki(pki)
    try:
        return _start(state_dir, pki, binaries, timeout, node=node)
    except BaseException:
        stop(state_dir)
        raise


def _start(state_dir: Path, pki: Path, binaries: dict[str, Path],
           timeout: float, *, node: bool = True) -> ControlPlane:
    etcd_port, port = free_port(), free_port()
    url = f"https://127.0.0.1:{port}"
    admin = state_dir / "admin.kubeconfig"
    write_kubeconfig(admin, url, pki / "ca.crt", user="admin", cert=pki / "admin.crt",
                     key=pki / "admin.key")
    components = {}
    for name in ("controller-manager", "scheduler"):
        components[name] = state_dir / "run" / f"{name}.kubeconfig"
        write_kubeconfig(components[name], url, pki / "ca.crt", user=name,
                         cert=pki / f"{name}.crt", key=pki / f"{name}.key")
    deadline = time.monotonic() + timeout
    _spawn(state_dir, "etcd", _etcd(binaries["etcd"], state_dir, etcd_port))
    _wait("etcd answering", lambda: _answering(etcd_port), timeout, state_dir)
    _spawn(state_dir, "kube-apiserver",
           _apiserver(binaries["kube-apiserver"], state_dir, etcd_port, port))
    context = _admin_context(state_dir)
    _wait("the API server ready (/readyz)",
          lambda: _get(f"{url}/readyz", context)[0] == 200, deadline - time.monotonic(),
          state_dir)
    _spawn(state_dir, "kube-controller-manager", _controller_manager(
        binaries["kube-controller-manager"], state_dir, components["controller-manager"]))
    _spawn(state_dir, "kube-scheduler",
           _scheduler(binaries["kube-scheduler"], components["scheduler"]))
    # The token controller's first work, and what every pod of a namespace needs.
    _wait("the default ServiceAccount",
          lambda: _get(f"{url}/api/v1/namespaces/default/serviceaccounts/default",
                       context)[0] == 200, deadline - time.monotonic(), state_dir)
    client = api_client(admin)
    try:
        portal_access(client, state_dir / "portal.kubeconfig", url, pki / "ca.crt")
    finally:
        client.close()
    if node and start_node(state_dir, admin) is not None:
        _wait(f"node {NODE_NAME} Ready", lambda: _node_ready(url, context),
              deadline - time.monotonic(), state_dir)
    return ControlPlane(state_dir, url, admin, state_dir / "portal.kubeconfig")


def _answering(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _node_ready(url: str, context: ssl.SSLContext) -> bool:
    code, body = _get(f"{url}/api/v1/nodes/{NODE_NAME}", context)
    if code != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def portal_access(client, kubeconfig: Path, url: str, ca: Path, timeout: float = 30) -> None:
    """What the portal has in a cluster, through the admin's ``client``: its namespace, its
    ServiceAccount and ClusterRole (deploy/namespace.yaml, rbac.yaml) and the admission policy
    that confines it (admission-policy.yaml); and ``kubeconfig``, the ServiceAccount's. Returns
    once the API server enforces the policy on the portal's requests."""
    from kubernetes import client as k8s

    for name in ("namespace.yaml", "rbac.yaml", "admission-policy.yaml"):
        apply(client, DEPLOY / name)
    token = k8s.CoreV1Api(client).create_namespaced_service_account_token(
        PORTAL_ACCOUNT, PORTAL_NAMESPACE, k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)))
    write_kubeconfig(kubeconfig, url, ca, user=PORTAL_ACCOUNT, token=token.status.token)
    # A new policy takes a moment to reach the admission plugin: until the portal's dry-run
    # write in kube-system (which its ClusterRole allows: a RoleBinding giving itself its
    # namespace role) is refused, it is not enforced.
    portal = api_client(kubeconfig)
    probe = k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name="policy-probe"),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                               name="paddlecloud-portal-namespace"),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=PORTAL_ACCOUNT,
                                    namespace=PORTAL_NAMESPACE)])
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                k8s.RbacAuthorizationV1Api(portal).create_namespaced_role_binding(
                    "kube-system", probe, dry_run="All")
            except k8s.ApiException as exc:
                if exc.status == 403 and "managed-namespace" in (exc.body or ""):
                    return
                if exc.status != 403:
                    raise
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"the admission policy is not enforced after {timeout} s")
            time.sleep(0.2)
    finally:
        portal.close()


def down(state_dir: Path = DEFAULT_DIR) -> list[str]:
    """Stops the control plane of ``state_dir`` and removes what ``up`` wrote there. Returns
    the names of the components that were running."""
    state_dir = Path(state_dir)
    stopped = stop(state_dir) if (state_dir / "run").is_dir() else []
    _clean(state_dir)
    return stopped
