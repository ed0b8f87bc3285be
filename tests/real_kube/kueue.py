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
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from tests.real_kube import build, control_plane
from tests.real_kube.control_plane import free_port

KUEUE_VERSION = build.KUEUE_VERSION
NAMESPACE = "kueue-system"
PREFIX = "kueue-"  # config/default's namePrefix
SERVICE_ACCOUNT = f"{PREFIX}controller-manager"
# The frameworks the backend uses: the trainers' Job (a job without pservers) and plain pod
# groups (a pserver job's pods, made by its StatefulSet and its Job, admitted as one Workload:
# jobs/backends/kubernetes/pods.py kueue_pod_group). The StatefulSet's stays on, as a cluster
# has it (it would take a StatefulSet labelled with a queue, which the backend does not make).
FRAMEWORKS = ("batch/job", "pod", "statefulset")
KUEUE_API = "kueue.x-k8s.io/v1beta2"
READY_TIMEOUT = 90.0
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
        self.ca_file = self.client.configuration.ssl_ca_cert  # (a path; None over http)

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
    process started as control_plane.py starts the others, in ``state`` (a control plane's
    state directory, or one of its own): its log logs/kueue.log, its pid file run/kueue.pid
    (so ``down`` stops it too), its files (certificates, configuration) in kueue/."""

    def __init__(self, kubeconfig: Path, state: Path, *, binary: Path | None = None,
                 frameworks=FRAMEWORKS):
        self.kubeconfig, self.state = Path(kubeconfig), Path(state)
        self.files = self.state / "kueue"
        self.binary, self.frameworks = binary, frameworks
        self.source = kueue_source()
        self.api = Api(self.kubeconfig)
        self.ports: dict[str, int] = {}
        self.webhooks: list[dict] = []

    @property
    def log(self) -> Path:
        return self.state / "logs" / "kueue.log"

    @property
    def started(self) -> bool:
        return (self.state / "run" / "kueue.pid").exists()

    @property
    def running(self) -> bool:
        return "kueue" in control_plane.status(self.state)

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
        binary = self.binary or build.ensure((), kueue=True)["kueue"]
        for name in ("logs", "run"):
            (self.state / name).mkdir(parents=True, exist_ok=True)
        self.files.mkdir(exist_ok=True)
        self.ports = {"webhook": free_port(), "metrics": free_port(), "health": free_port()}
        webhook_certs = self.files / "webhook-certs"
        ca = control_plane.serving_certificate(webhook_certs, "kueue-webhook",
                                               ("127.0.0.1", "localhost"))
        url = f"https://127.0.0.1:{self.ports['webhook']}"

        self.api.apply({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": NAMESPACE}})
        crds = crd_objects(self.source, url, ca)
        for obj in crds + rbac_objects(self.source):
            self.api.apply(obj)
        self._wait("Kueue's CRDs to be established", lambda: all(
            self._established(crd["metadata"]["name"]) for crd in crds))
        self._own_kubeconfig(self.files / "kueue.kubeconfig")
        (self.files / "config.yaml").write_text(yaml.safe_dump(manager_config(
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

    def _own_kubeconfig(self, path: Path) -> None:
        """Kueue's identity: its ServiceAccount's token (bound by Kueue's own ClusterRole)."""
        token = self.api.call(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 30 * 24 * 3600}})["status"]["token"]
        control_plane.write_kubeconfig(path, self.server, Path(self.api.ca_file),
                                       user=SERVICE_ACCOUNT, token=token)

    @property
    def server(self) -> str:
        return self.api.server

    def _run(self, binary: Path, webhook_certs: Path) -> None:
        """The manager, in a mount namespace where /etc is an overlay whose upper layer (a
        tmpfs) holds the metrics certificate at the path Kueue reads it from."""
        overlay = self.files / "etc-overlay"
        overlay.mkdir(exist_ok=True)
        script = (
            'set -e; mount -t tmpfs tmpfs "$O"; mkdir "$O/upper" "$O/work"; '
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$O/upper,workdir=$O/work" /etc; '
            f'mkdir -p {METRICS_CERTS}; cp "$C/tls.crt" "$C/tls.key" {METRICS_CERTS}/; '
            'exec "$K" --config "$F" --zap-log-level=2')
        env = {**os.environ, "O": str(overlay), "C": str(webhook_certs), "K": str(binary),
               "F": str(self.files / "config.yaml"),
               "KUBECONFIG": str(self.files / "kueue.kubeconfig")}
        # unshare execs sh, which execs kueue: the pid recorded is the manager's.
        control_plane._spawn(self.state, "kueue", [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script], env=env)

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
            if self.started and not self.running:
                raise RuntimeError(f"kueue exited waiting for {what}:\n{self.log_tail()}")
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
            control_plane.stop(self.state, names=("kueue",))
            self.api.close()


def up(cluster: control_plane.ControlPlane) -> Kueue:
    """Kueue on ``cluster`` (``python -m tests.real_kube up --kueue``), started in its state
    directory unless it runs there already; ``down`` stops it with the rest."""
    kueue = Kueue(cluster.admin_kubeconfig, cluster.dir)
    return kueue if kueue.running else kueue.start()
