"""Kueue v0.17.0, the real one, on a running control plane: its CRDs, RBAC and webhooks as
its release manifests make them (config/ in its module), and its manager as a process of this
machine (no images here), under its own ServiceAccount.

    kueue = Kueue(admin_kubeconfig, state_dir).start()   # returns once a Workload is admitted
    cluster_queue(kueue.api, "team", cpu="2")            # what a cluster's admin sets up
    ...
    kueue.stop()

What differs from an in-cluster install, and why:

- The API server reaches the webhooks at ``https://127.0.0.1:<port>/<path>`` (``url:``, with
  the CA of a certificate made here), not through the ``kueue-webhook-service`` Service: no
  Service routes to a process of this machine. The same for the CRDs' conversion webhook
  (``/convert``: the v1beta1 the backend writes is converted to Kueue's v1beta2 there).
- Internal certificate management is off (its certificates name the Service, not
  127.0.0.1); the metrics server reads its certificate from a path Kueue fixes,
  /etc/kueue/metrics/certs, so the manager runs in a mount namespace of its own where /etc is
  an overlay on a tmpfs holding that certificate: nothing is written to this machine's /etc.
- No visibility API (``VisibilityOnDemand`` off): it is an APIService the API server reaches
  through a Service only. The backend does without it (no position in the queue is shown).
- Leader election off; metrics, health and webhooks on free ports of 127.0.0.1.

The mount namespace takes root (CAP_SYS_ADMIN), as the suite's network namespaces do.

Stopping removes the webhook configurations first (their ``failurePolicy: Fail`` would make
the API server refuse every Job, StatefulSet and Pod once nothing answers), then ends the
manager. The CRDs stay, with the control plane's other objects.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from tests.registry_server import free_port

KUEUE_VERSION = "v0.17.0"
NAMESPACE = "kueue-system"
PREFIX = "kueue-"  # config/default's namePrefix
SERVICE_ACCOUNT = f"{PREFIX}controller-manager"
# The frameworks the backend uses: the trainers' Job and the pservers' StatefulSet (which
# implies "pod": Kueue gates a StatefulSet's pods until its Workload is admitted).
FRAMEWORKS = ("batch/job", "statefulset")
KUEUE_API = "kueue.x-k8s.io/v1beta2"
READY_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0
METRICS_CERTS = "/etc/kueue/metrics/certs"  # fixed in cmd/kueue/main.go without internal certs
FIELD_MANAGER = "paddlecloud-tests"


def kueue_source() -> Path:
    """Kueue's module in Go's module cache (CRDs, RBAC and webhooks under config/)."""
    try:
        cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        cache = str(Path.home() / "go" / "pkg" / "mod")
    return Path(cache) / "sigs.k8s.io" / f"kueue@{KUEUE_VERSION}"


def kueue_binary() -> Path:
    """The kueue manager: $PADDLECLOUD_KUEUE, else the binaries' cache (tests/real_kube's
    build), else the scratch build's."""
    candidates = [os.environ.get("PADDLECLOUD_KUEUE", ""),
                  str(Path.home() / ".cache" / "paddlecloud" / "kube" / f"kueue-{KUEUE_VERSION}"
                      / "bin" / "kueue"),
                  "/work/kubebuild/bin/kueue"]
    for candidate in filter(None, candidates):
        if os.access(candidate, os.X_OK):
            return Path(candidate)
    raise FileNotFoundError(f"no kueue binary; build it: GOBIN=... go install "
                            f"sigs.k8s.io/kueue/cmd/kueue@{KUEUE_VERSION}")


# --- certificates ----------------------------------------------------------------------------

class Pki:
    """A CA in ``root`` and certificates it signs (PEM files there)."""

    def __init__(self, root: Path):
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.ca_file = root / "ca.crt"
        self._x509, self._ec, self._oid, self._ser = x509, ec, NameOID, serialization
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "paddlecloud-tests-ca")])
        self._ca_name = name
        self._ca = (self._builder(name, self._ca_key.public_key())
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                   critical=True)
                    .add_extension(x509.KeyUsage(
                        digital_signature=True, key_cert_sign=True, crl_sign=True,
                        content_commitment=False, key_encipherment=False,
                        data_encipherment=False, key_agreement=False, encipher_only=False,
                        decipher_only=False), critical=True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(
                        self._ca_key.public_key()), critical=False)
                    .sign(self._ca_key, self._hash()))
        self.ca_file.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))

    def _hash(self):
        from cryptography.hazmat.primitives import hashes

        return hashes.SHA256()

    def _builder(self, subject, public_key):
        now = datetime.datetime.now(datetime.UTC)
        return (self._x509.CertificateBuilder().subject_name(subject)
                .issuer_name(getattr(self, "_ca_name", subject)).public_key(public_key)
                .serial_number(self._x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=7)))

    def _issue(self, file: str, subject, extension) -> tuple[Path, Path]:
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        # Python's strict verification (3.13) wants the issuer's key identifier.
        cert = (self._builder(subject, key.public_key())
                .add_extension(extension, critical=False)
                .add_extension(self._x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self._ca_key.public_key()), critical=False)
                .sign(self._ca_key, self._hash()))
        crt, key_file = self.root / f"{file}.crt", self.root / f"{file}.key"
        crt.write_bytes(cert.public_bytes(self._ser.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(self._ser.Encoding.PEM,
                                               self._ser.PrivateFormat.PKCS8,
                                               self._ser.NoEncryption()))
        key_file.chmod(0o600)
        return crt, key_file

    def server(self, common_name: str, file: str) -> tuple[Path, Path]:
        """A serving certificate for 127.0.0.1 (and localhost)."""
        import ipaddress

        x509 = self._x509
        return self._issue(file, x509.Name([x509.NameAttribute(self._oid.COMMON_NAME,
                                                                common_name)]),
                           x509.SubjectAlternativeName([
                               x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                               x509.DNSName("localhost")]))

    def client(self, common_name: str, organization: str, file: str) -> tuple[Path, Path]:
        x509 = self._x509
        return self._issue(file, x509.Name([
            x509.NameAttribute(self._oid.COMMON_NAME, common_name),
            x509.NameAttribute(self._oid.ORGANIZATION_NAME, organization)]),
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]))

    def key_file(self, file: str) -> Path:
        """A lone RSA key (the API server's service-account tokens)."""
        from cryptography.hazmat.primitives.asymmetric import rsa

        path = self.root / f"{file}.key"
        path.write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(
            self._ser.Encoding.PEM, self._ser.PrivateFormat.TraditionalOpenSSL,
            self._ser.NoEncryption()))
        path.chmod(0o600)
        return path

    def kubeconfig(self, server: str, crt: Path, key: Path) -> str:
        return kubeconfig_text(server, self.ca_file.read_bytes(),
                               {"client-certificate": str(crt), "client-key": str(key)})


def kubeconfig_text(server: str, ca: bytes, user: dict) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca).decode()}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]})


# --- the API ------------------------------------------------------------------------------------

# The plural of each kind applied here (everything else goes through the tests' clients).
PLURALS = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts",
           "CustomResourceDefinition": "customresourcedefinitions",
           "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
           "Role": "roles", "RoleBinding": "rolebindings",
           "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
           "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
           "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues", "Workload": "workloads"}


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Api:
    """Plain REST on the API server of an (admin) kubeconfig, through the official client."""

    def __init__(self, kubeconfig: Path):
        from kubernetes import config

        self.client = config.new_client_from_config(config_file=str(kubeconfig))
        self.server = self.client.configuration.host
        self.ca = Path(self.client.configuration.ssl_ca_cert).read_bytes()

    def open(self, method: str, path: str, body=None, *, query=(), content_type=None,
             timeout=30):
        """The response, unread (a watch's stream); ``ApiError`` for a status >= 400."""
        headers = {"Accept": "application/json",
                   "Content-Type": content_type or "application/json"}
        method, url, headers, body, post = self.client.param_serialize(
            method=method, resource_path=path, query_params=list(query),
            header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.client.call_api(method, url, headers, body, post,
                                        _request_timeout=timeout)
        if response.status >= 400:
            response.read()
            raise ApiError(response.status, f"{method} {path}: {response.status} "
                                            f"{response.data.decode(errors='replace')[:500]}")
        return response

    def call(self, method: str, path: str, body=None, *, query=(), content_type=None):
        response = self.open(method, path, body, query=query, content_type=content_type)
        response.read()
        return json.loads(response.data) if response.data else None

    def get(self, path: str) -> dict | None:
        try:
            return self.call("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, path: str) -> None:
        try:
            self.call("DELETE", path)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def apply(self, obj: dict) -> dict:
        """Server-side apply (create or update) of ``obj``."""
        return self.call("PATCH", object_path(obj), json.dumps(obj),
                         query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                         content_type="application/apply-patch+yaml")

    def close(self) -> None:
        self.client.close()


def object_path(obj: dict, name: str | None = None) -> str:
    api_version, meta = obj["apiVersion"], obj["metadata"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{where}/{PLURALS[obj['kind']]}/{name or meta['name']}"


# --- the manifests -----------------------------------------------------------------------------

def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _prefixed(obj: dict) -> dict:
    """config/default's transformations: names prefixed, namespace ``system`` → kueue-system."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta["name"] = PREFIX + meta["name"]
    if "namespace" in meta:
        meta["namespace"] = NAMESPACE
    if "roleRef" in obj:
        obj["roleRef"]["name"] = PREFIX + obj["roleRef"]["name"]
    for subject in obj.get("subjects", []):
        subject["name"], subject["namespace"] = PREFIX + subject["name"], NAMESPACE
    return obj


def rbac_objects(source: Path) -> list[dict]:
    """Kueue's ServiceAccount, its roles and bindings, and the user-facing aggregated roles."""
    rbac = source / "config" / "components" / "rbac"
    names = yaml.safe_load((rbac / "kustomization.yaml").read_text())["resources"]
    return [_prefixed(doc) for name in names for doc in _documents(rbac / name)]


def crd_objects(source: Path, url: str, ca: bytes) -> list[dict]:
    """Kueue's CRDs, those its kustomization patches for a conversion webhook calling ``url``
    (``/convert``)."""
    crd = source / "config" / "components" / "crd"
    kustomization = yaml.safe_load((crd / "kustomization.yaml").read_text())
    converted = {_documents(crd / patch["path"])[0]["metadata"]["name"]
                 for patch in kustomization["patches"]}
    objects = []
    for name in kustomization["resources"]:
        doc = _documents(crd / name)[0]
        if doc["metadata"]["name"] in converted:
            doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": f"{url}/convert",
                                 "caBundle": base64.b64encode(ca).decode()},
                "conversionReviewVersions": ["v1"]}}
        objects.append(doc)
    return objects


def webhook_objects(source: Path, url: str, ca: bytes) -> list[dict]:
    """Kueue's Mutating and ValidatingWebhookConfigurations, with its kustomization's
    namespaceSelectors, each webhook calling ``url`` + its path."""
    webhook = source / "config" / "components" / "webhook"
    kustomization = yaml.safe_load((webhook / "kustomization.yaml").read_text())
    selectors = {}
    for patch in kustomization.get("patches", []):
        for hook in yaml.safe_load(patch["patch"]).get("webhooks", []):
            selectors[hook["name"]] = hook["namespaceSelector"]
    objects = []
    for doc in _documents(webhook / "manifests.yaml"):
        doc = _prefixed(doc)
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url + path,
                                    "caBundle": base64.b64encode(ca).decode()}
            if hook["name"] in selectors:
                hook["namespaceSelector"] = selectors[hook["name"]]
        objects.append(doc)
    return objects


def manager_config(*, webhook_port: int, metrics_port: int, health_port: int,
                   cert_dir: Path, frameworks=FRAMEWORKS) -> dict:
    """Kueue's controller_manager_config.yaml, for a process of this machine."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "featureGates": {"VisibilityOnDemand": False},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5,
            "LocalQueue.kueue.x-k8s.io": 1, "Cohort.kueue.x-k8s.io": 1,
            "ClusterQueue.kueue.x-k8s.io": 1, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(frameworks)},
    }


# --- what an admin sets up ---------------------------------------------------------------------

def cluster_queue(api: Api, name: str, *, cpu: str, memory: str = "64Gi",
                  flavor: str = "default", **spec) -> None:
    """A ResourceFlavor ``flavor`` and a ClusterQueue ``name`` of that much quota for every
    namespace, as a cluster's admin makes them (users' LocalQueues are the portal's)."""
    api.apply({"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}})
    api.apply({"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name},
               "spec": {"namespaceSelector": {}, "resourceGroups": [{
                   "coveredResources": ["cpu", "memory"],
                   "flavors": [{"name": flavor, "resources": [
                       {"name": "cpu", "nominalQuota": cpu},
                       {"name": "memory", "nominalQuota": memory}]}]}], **spec}})


def workload_admitted(workload: dict | None) -> bool:
    conditions = (workload or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


# --- the manager -------------------------------------------------------------------------------

class Kueue:
    """Kueue installed on the control plane of ``kubeconfig`` (an admin's), its manager a
    child process; its files (certificates, configuration, log) in ``state``."""

    def __init__(self, kubeconfig: Path, state: Path, *, binary: Path | None = None,
                 frameworks=FRAMEWORKS):
        self.kubeconfig, self.state = Path(kubeconfig), Path(state)
        self.binary, self.frameworks = binary, frameworks
        self.source = kueue_source()
        self.api = Api(self.kubeconfig)
        self.process: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.webhooks: list[dict] = []

    @property
    def log(self) -> Path:
        return self.state / "kueue.log"

    @property
    def metrics_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['metrics']}/metrics"

    def start(self) -> Kueue:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        binary = self.binary or kueue_binary()
        self.state.mkdir(parents=True, exist_ok=True)
        self.ports = {"webhook": free_port(), "metrics": free_port(), "health": free_port()}
        pki = Pki(self.state / "pki")
        webhook_certs = self.state / "webhook-certs"
        webhook_certs.mkdir(exist_ok=True)
        crt, key = pki.server("kueue-webhook", "kueue")
        for name, path in (("tls.crt", crt), ("tls.key", key)):
            shutil.copy(path, webhook_certs / name)
        url, ca = f"https://127.0.0.1:{self.ports['webhook']}", pki.ca_file.read_bytes()

        self.api.apply({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": NAMESPACE}})
        crds = crd_objects(self.source, url, ca)
        for obj in crds + rbac_objects(self.source):
            self.api.apply(obj)
        self._wait("Kueue's CRDs to be established", lambda: all(
            self._established(crd["metadata"]["name"]) for crd in crds))
        (self.state / "kueue.kubeconfig").write_text(self._own_kubeconfig())
        (self.state / "config.yaml").write_text(yaml.safe_dump(manager_config(
            webhook_port=self.ports["webhook"], metrics_port=self.ports["metrics"],
            health_port=self.ports["health"], cert_dir=webhook_certs,
            frameworks=self.frameworks)))
        self._run(binary, webhook_certs)
        self._wait("Kueue's health probe", self._healthy)
        self.webhooks = webhook_objects(self.source, url, ca)
        for obj in self.webhooks:
            self.api.apply(obj)
        self._probe()

    def _established(self, name: str) -> bool:
        crd = self.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (crd or {}).get("status", {}).get("conditions", []))

    def _own_kubeconfig(self) -> str:
        """Kueue's identity: its ServiceAccount's token (bound by Kueue's own ClusterRole)."""
        token = self.api.call(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 7 * 24 * 3600}})["status"]["token"]
        return kubeconfig_text(self.server, self.api.ca, {"token": token})

    @property
    def server(self) -> str:
        return self.api.server

    def _run(self, binary: Path, webhook_certs: Path) -> None:
        """The manager, in a mount namespace where /etc is an overlay whose upper layer (a
        tmpfs) holds the metrics certificate at the path Kueue reads it from."""
        overlay = self.state / "etc-overlay"
        overlay.mkdir(exist_ok=True)
        script = (
            'set -e; mount -t tmpfs tmpfs "$O"; mkdir "$O/upper" "$O/work"; '
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$O/upper,workdir=$O/work" /etc; '
            f'mkdir -p {METRICS_CERTS}; cp "$C/tls.crt" "$C/tls.key" {METRICS_CERTS}/; '
            'exec "$K" --config "$F" --zap-log-level=2')
        env = {**os.environ, "O": str(overlay), "C": str(webhook_certs), "K": str(binary),
               "F": str(self.state / "config.yaml"),
               "KUBECONFIG": str(self.state / "kueue.kubeconfig")}
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.ports['health']}/readyz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def _wait(self, what: str, predicate, timeout: float = READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"kueue exited {self.process.returncode} waiting for {what}"
                                   f":\n{self.log_tail()}")
            if result := predicate():
                return result
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n"
                           f"{self.log_tail()}")

    def _probe(self) -> None:
        """Ready once a Workload is admitted: a ClusterQueue, a LocalQueue and a Workload
        made through the webhooks (v1beta1, converted by Kueue), then deleted."""
        v1beta1 = "kueue.x-k8s.io/v1beta1"
        cluster = {"apiVersion": v1beta1, "kind": "ClusterQueue",
                   "metadata": {"name": "kueue-probe"},
                   "spec": {"namespaceSelector": {"matchLabels": {
                       "kubernetes.io/metadata.name": NAMESPACE}}, "resourceGroups": [{
                           "coveredResources": ["cpu"], "flavors": [{
                               "name": "kueue-probe", "resources": [
                                   {"name": "cpu", "nominalQuota": "1"}]}]}]}}
        local = {"apiVersion": v1beta1, "kind": "LocalQueue",
                 "metadata": {"name": "kueue-probe", "namespace": NAMESPACE},
                 "spec": {"clusterQueue": "kueue-probe"}}
        workload = {"apiVersion": v1beta1, "kind": "Workload",
                    "metadata": {"name": "kueue-probe", "namespace": NAMESPACE},
                    "spec": {"queueName": "kueue-probe", "podSets": [{
                        "name": "main", "count": 1, "template": {"spec": {
                            "restartPolicy": "Never", "containers": [{
                                "name": "c", "image": "none",
                                "resources": {"requests": {"cpu": "100m"}}}]}}}]}}
        flavor = {"apiVersion": v1beta1, "kind": "ResourceFlavor",
                  "metadata": {"name": "kueue-probe"}}
        made = [flavor, cluster, local, workload]

        def apply_all() -> bool:
            try:
                for obj in made:
                    self.api.apply(obj)
            except ApiError as exc:  # the webhook server may not listen yet
                if exc.status in (500, 502, 503, 504):
                    return False
                raise
            return True

        try:
            self._wait("Kueue's webhooks to answer", apply_all)
            self._wait("Kueue to admit a Workload", lambda: workload_admitted(
                self.api.get(object_path(workload))))
        finally:
            for obj in reversed(made):
                self.api.delete(object_path(obj))

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """The webhook configurations go, then the manager (SIGTERM, its clean shutdown)."""
        try:
            for obj in self.webhooks:
                self.api.delete(object_path(obj))
        finally:
            self.webhooks = []
            if self.process is not None:
                if self.process.poll() is None:
                    os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
                self.process = None
            self.api.close()
