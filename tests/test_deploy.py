"""deploy/ runs the portal in a cluster. No cluster here: these check what can be checked
without one. Every object is valid Kubernetes (the OpenAPI schemas of kubernetes-validate), the
portal's RBAC is exactly what its code calls, every container is locked down, every variable a
pod reads exists, the Secret template holds placeholders only, and kubectl renders it all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from django.core.management import get_commands
from django.urls import resolve

from jobs.backends.kubernetes.client import RESOURCES
from jobs.backends.kubernetes.names import MANAGED_BY, MANAGED_BY_LABEL
from jobs.backends.kubernetes.names import PORTAL_NAMESPACE_ROLE as NAMESPACE_ROLE
from jobs.backends.kubernetes.validation import SUPPORTED_VERSIONS

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
NAMESPACE = "paddlecloud"
# The oldest and newest Kubernetes the backend runs on (and validates the job manifests for):
# deploy/ must apply on both.
VERSIONS = SUPPORTED_VERSIONS
KUSTOMIZED = ["namespace.yaml", "rbac.yaml", "admission-policy.yaml", "config.yaml", "pfs.yaml",
              "web.yaml", "worker.yaml", "beat.yaml"]
PORTAL = {"paddlecloud-web", "paddlecloud-worker", "paddlecloud-beat"}
WORKLOADS = ("Deployment", "StatefulSet")

# What the portal may do, by (API group, resource): the verbs its kubernetes client calls
# (jobs/backends/kubernetes/), nothing more. Changing this is changing the portal's rights.
# Cluster-wide (the ClusterRole bound by a ClusterRoleBinding): what is cluster-scoped and the
# binding it makes in each of its namespaces.
CLUSTER_RBAC = {
    # list, watch: the namespaces whose pods the pod watch watches, the orphans' namespaces
    ("", "namespaces"): {"create", "get", "list", "watch", "update"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"create", "get"},
    ("rbac.authorization.k8s.io", "clusterroles"): {"bind"},  # paddlecloud-portal-namespace
    ("", "nodes"): {"list"},  # a datacenter's capacity from the cluster: read, never written
    ("", "persistentvolumes"): {"create", "get"},
}
# In each namespace the portal made (paddlecloud-portal-namespace, bound there by the portal).
NAMESPACE_RBAC = {
    ("", "resourcequotas"): {"create", "get", "update"},
    ("", "limitranges"): {"create", "get", "update"},
    ("", "secrets"): {"create", "get", "update", "delete"},
    ("", "configmaps"): {"create", "get", "list", "delete"},
    ("", "services"): {"create", "get", "list", "delete"},
    ("apps", "statefulsets"): {"create", "get", "list", "delete"},
    ("batch", "jobs"): {"create", "get", "list", "update", "delete"},  # update: elastic jobs
    ("", "pods"): {"list", "watch", "delete"},  # the pod watch; a lost node's trainer pods
    ("", "pods/log"): {"get"},
    ("", "pods/exec"): {"get", "create"},  # exec: a WebSocket upgrade is both
    ("", "pods/portforward"): {"get", "create"},  # port-forward, the sessions' proxy
    ("", "events"): {"list"},
    ("", "persistentvolumeclaims"): {"create", "get"},
    ("networking.k8s.io", "networkpolicies"): {"create", "get", "update"},
    ("kueue.x-k8s.io", "localqueues"): {"create", "get"},
    ("kueue.x-k8s.io", "workloads"): {"get", "list"},
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads"): {"get"},
    ("scheduling.volcano.sh", "podgroups"): {"create", "get"},
}
# Everything the portal may do in a namespace of its own.
RBAC = {**CLUSTER_RBAC, **NAMESPACE_RBAC}


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")


def load(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def objects() -> list[tuple[Path, dict]]:
    return [(path, obj) for path in manifest_files() for obj in load(path)]


def one(kind: str, name: str) -> dict:
    found = [obj for _, obj in objects()
             if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def workloads() -> list[dict]:
    return [obj for _, obj in objects() if obj["kind"] in WORKLOADS]


def containers(workload: dict) -> list[dict]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def config() -> dict[str, str]:
    return one("ConfigMap", "paddlecloud")["data"]


def secret_keys() -> set[str]:
    return set(one("Secret", "paddlecloud")["stringData"])


def env_names(container: dict) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            names |= set(config())
    return names


# --- every object is Kubernetes ------------------------------------------------------------------

def test_the_manifests_are_there():
    kinds = {(obj["kind"], obj["metadata"]["name"]) for _, obj in objects()}
    assert {("Namespace", NAMESPACE), ("ServiceAccount", "paddlecloud"),
            ("ClusterRole", "paddlecloud-portal"), ("ClusterRoleBinding", "paddlecloud-portal"),
            ("ClusterRole", NAMESPACE_ROLE), ("ConfigMap", "paddlecloud"),
            ("Secret", "paddlecloud"),
            ("PersistentVolumeClaim", "pfs"), ("Service", "paddlecloud"),
            *(("Deployment", name) for name in PORTAL)} <= kinds
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == NAMESPACE
    assert kustomization["resources"] == KUSTOMIZED
    # Everything else is applied by hand: the Secret template never, the trial on purpose.
    assert {p.relative_to(DEPLOY).as_posix() for p in manifest_files()} - set(KUSTOMIZED) == {
        "secret.example.yaml", "trial/postgres.yaml", "trial/redis.yaml"}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_kubernetes(version):
    problems = []
    for path, obj in objects():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{path.relative_to(DEPLOY)}: {obj['kind']} "
                            f"{obj['metadata']['name']}: {str(exc).splitlines()[0]}")
    assert not problems


def test_namespaced_objects_name_the_portal_namespace():
    cluster_wide = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for path, obj in objects():
        if obj["kind"] not in cluster_wide:
            assert obj["metadata"].get("namespace") == NAMESPACE, (path, obj["kind"])


def test_nothing_here_looks_managed_by_the_portal():
    """The portal makes namespaces with this label and watches the pods with it in each
    namespace with it: its own objects must not carry it."""
    for _, obj in objects():
        labelled = [obj["metadata"]]
        if obj["kind"] in WORKLOADS:
            labelled.append(obj["spec"]["template"]["metadata"])
        for meta in labelled:
            assert meta.get("labels", {}).get(MANAGED_BY_LABEL) != MANAGED_BY, obj["kind"]


# --- RBAC ----------------------------------------------------------------------------------------

def granted(role: str) -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in one("ClusterRole", role)["rules"]:
        if rule["resources"] == ["clusterroles"]:  # bind, on the namespace role by name only
            assert rule == {"apiGroups": ["rbac.authorization.k8s.io"],
                            "resources": ["clusterroles"], "verbs": ["bind"],
                            "resourceNames": [NAMESPACE_ROLE]}, rule
        else:
            assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule  # no names, no URLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


def test_rbac_grants_exactly_what_the_portal_calls():
    assert granted("paddlecloud-portal") == CLUSTER_RBAC
    assert granted(NAMESPACE_ROLE) == NAMESPACE_RBAC


def test_rbac_has_no_wildcards_and_no_dangerous_rights():
    for (group, resource), verbs in {**granted("paddlecloud-portal"),
                                     **granted(NAMESPACE_ROLE)}.items():
        assert "*" not in group + resource and "*" not in verbs
        assert not verbs & {"escalate", "impersonate", "patch", "deletecollection"}
        if resource == "clusterroles":
            assert verbs == {"bind"}  # on the namespace role only (granted() holds it)
        else:
            assert "bind" not in verbs
        assert resource.split("/")[0] not in {"roles", "clusterrolebindings", "serviceaccounts"}
        if resource == "rolebindings":
            assert verbs == {"create", "get"}  # admission-policy.yaml: its own, in its own
        if resource.startswith("nodes"):
            assert (resource, verbs) == ("nodes", {"list"})  # only read, for the capacity
    roles = [obj for _, obj in objects() if obj["kind"] in {"Role", "ClusterRole"}]
    assert len(roles) == 2


def test_users_objects_are_granted_only_in_the_namespaces_the_portal_made():
    """No pod, Secret, ConfigMap, log or job object of any namespace through the cluster-wide
    role: those rights come with the RoleBinding the portal makes in its namespaces."""
    assert not set(CLUSTER_RBAC) & set(NAMESPACE_RBAC)
    assert {resource for _, resource in CLUSTER_RBAC} == {
        "namespaces", "rolebindings", "clusterroles", "nodes", "persistentvolumes"}


def test_rbac_covers_every_resource_the_client_addresses():
    """A kind added to the client without a rule would fail in the cluster only (403)."""
    groups = {"/api/v1": ""} | {r.api: r.api.split("/")[2] for r in RESOURCES.values()
                                 if r.api.startswith("/apis/")}
    addressed = {(groups[r.api], r.plural) for r in RESOURCES.values()} | {
        ("", "pods/log"), ("", "pods/exec"), ("", "pods/portforward"),
        ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads"),
        ("rbac.authorization.k8s.io", "clusterroles")}
    assert addressed == set(RBAC)


def test_the_role_is_bound_to_the_portal_service_account_only():
    binding = one("ClusterRoleBinding", "paddlecloud-portal")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "paddlecloud-portal"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "paddlecloud",
                                    "namespace": NAMESPACE}]
    # The namespace role is bound by the portal, namespace by namespace: not here.
    assert [obj["kind"] for _, obj in objects() if obj["kind"] in {
        "RoleBinding", "ClusterRoleBinding"}] == ["ClusterRoleBinding"]
    account = one("ServiceAccount", "paddlecloud")
    assert account["automountServiceAccountToken"] is False  # only where a pod asks


def test_only_web_and_worker_get_the_kubernetes_token():
    for workload in workloads():
        spec = workload["spec"]["template"]["spec"]
        uses_client = workload["metadata"]["name"] in {"paddlecloud-web", "paddlecloud-worker"}
        assert spec["automountServiceAccountToken"] is uses_client, workload["metadata"]["name"]
        assert (spec.get("serviceAccountName") == "paddlecloud") is uses_client


# --- pods ----------------------------------------------------------------------------------------

def test_every_container_is_locked_down():
    for workload in workloads():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True
        assert pod["enableServiceLinks"] is False
        for container in containers(workload):
            where = f"{workload['metadata']['name']}/{container['name']}"
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) >= {"cpu", "memory"}, where
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert not context.get("privileged"), where


def test_the_portal_writes_only_to_its_volumes():
    """The root filesystem is read-only: the var dir (beat schedule) and /tmp are emptyDirs in
    every portal container; the PFS is the claim, in web and worker. The static files are
    the image's (collected when it was built), so web does not collect them again."""
    var_dir = config()["PADDLECLOUD_VAR_DIR"]
    assert "STATIC_ROOT" not in config()
    web, = one("Deployment", "paddlecloud-web")["spec"]["template"]["spec"]["containers"]
    assert "--skip-collectstatic" in web["command"]
    for name in PORTAL:
        workload = one("Deployment", name)
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        for container in containers(workload):
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            assert "emptyDir" in mounts[var_dir] and "emptyDir" in mounts["/tmp"]
            pfs = mounts.get(config()["PADDLECLOUD_PFS_ROOT"])
            wants_pfs = container["name"] in {"web", "worker"}
            assert (pfs is not None) is wants_pfs, (name, container["name"])
            if wants_pfs:
                assert pfs == {"name": "pfs", "persistentVolumeClaim": {"claimName": "pfs"}}


def test_the_pfs_claim_is_shared_storage():
    claim = one("PersistentVolumeClaim", "pfs")
    volume = one("PersistentVolume", claim["spec"]["volumeName"])
    assert claim["spec"]["accessModes"] == volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert volume["spec"]["claimRef"] == {"namespace": NAMESPACE, "name": "pfs"}
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # A source that the datacenter's kube_volume can name too (jobs run in other namespaces).
    assert {"nfs", "cephfs", "hostPath"} & set(volume["spec"])


def test_commands_are_the_ones_compose_runs():
    commands = get_commands()
    web = one("Deployment", "paddlecloud-web")["spec"]["template"]["spec"]
    assert [c["command"] for c in web["initContainers"]] == [
        ["paddlecloud", "migrate", "--no-input"]]
    assert web["containers"][0]["command"][:2] == ["paddlecloud", "runportal"]
    assert "--no-worker" in web["containers"][0]["command"]
    assert {"migrate", "runportal"} <= set(commands)
    for name, role in (("paddlecloud-worker", "worker"), ("paddlecloud-beat", "beat")):
        spec = one("Deployment", name)["spec"]["template"]["spec"]
        assert spec["containers"][0]["command"][:4] == ["celery", "-A", "paddlecloud", role]
        assert spec["initContainers"][0]["command"][-1].startswith(
            "until paddlecloud migrate --check;")
    beat = one("Deployment", "paddlecloud-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    schedule = beat["spec"]["template"]["spec"]["containers"][0]["command"]
    assert Path(schedule[schedule.index("--schedule") + 1]).parent == Path(
        config()["PADDLECLOUD_VAR_DIR"])
    for workload in workloads():
        if workload["metadata"]["name"] in PORTAL:
            assert {c["image"] for c in containers(workload)} == {"paddlecloud:latest"}


def test_web_probes_reach_healthz_and_readyz():
    web = one("Deployment", "paddlecloud-web")["spec"]["template"]["spec"]["containers"][0]
    allowed = config()["ALLOWED_HOSTS"].split(",")
    for name in ("healthz", "readyz"):
        assert resolve(f"/{name}").url_name == name
        assert f"^{name}$" in settings.SECURE_REDIRECT_EXEMPT  # plain HTTP from the kubelet
    # Liveness while the process answers; readiness while its dependencies do.
    paths = {"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in paths.items():
        get = web[probe]["httpGet"]
        assert get["path"] == path and get["port"] == web["ports"][0]["name"]
        host = {h["name"]: h["value"] for h in get["httpHeaders"]}["Host"]
        assert host in allowed  # else Django answers 400 (DisallowedHost)


# --- configuration -------------------------------------------------------------------------------

def test_every_variable_a_pod_reads_exists():
    config_maps = {obj["metadata"]["name"] for _, obj in objects() if obj["kind"] == "ConfigMap"}
    secrets = {obj["metadata"]["name"] for _, obj in objects() if obj["kind"] == "Secret"}
    for workload in workloads():
        for container in containers(workload):
            where = f"{workload['metadata']['name']}/{container['name']}"
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps, where
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    assert ref["secretKeyRef"]["name"] in secrets, where
                    assert ref["secretKeyRef"]["key"] in secret_keys(), where
                    assert not ref["secretKeyRef"].get("optional"), where
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["key"] in config(), where


def test_every_setting_is_one_the_portal_reads():
    source = (ROOT / "paddlecloud" / "settings.py").read_text()
    for name in set(config()) | secret_keys() - {"POSTGRES_PASSWORD"}:  # that one: trial only
        assert f'"{name}"' in source, name


def test_the_portal_runs_with_the_settings_it_needs():
    needs = {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "PADDLECLOUD_CREDENTIAL_KEYS"}
    for name in PORTAL:
        workload = one("Deployment", name)
        main = workload["spec"]["template"]["spec"]["containers"][0]
        wanted = needs if name != "paddlecloud-beat" else {"REDIS_URL", "SECRET_KEY"}
        assert wanted <= env_names(main), name
        for init in workload["spec"]["template"]["spec"]["initContainers"]:
            assert {"DATABASE_URL", "SECRET_KEY"} <= env_names(init), name
    assert config()["DEBUG"] == "0"
    assert config()["PADDLECLOUD_BACKEND"] == "kubernetes"
    assert config()["TRUSTED_PROXIES"] == "1"
    assert config()["CSRF_TRUSTED_ORIGINS"].startswith("https://")


def test_the_secret_template_holds_placeholders_only():
    secret = one("Secret", "paddlecloud")
    assert "data" not in secret  # base64 would hide what is in it
    for key, value in secret["stringData"].items():
        assert re.search(r"<[^<>]+>", value), f"{key} has no <placeholder>"
        assert not re.search(r"[A-Za-z0-9_\-]{32,}={0,2}", value), f"{key} looks like a key"
    text = (DEPLOY / "secret.example.yaml").read_text()
    assert not re.search(r"[A-Za-z0-9_\-]{40,}", text)


# --- kubectl -------------------------------------------------------------------------------------

KUBECTL = shutil.which("kubectl")


def kustomize() -> list[dict]:
    done = subprocess.run([KUBECTL, "kustomize", str(DEPLOY)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_kustomize_renders_every_file():
    rendered = kustomize()
    expected = [obj for name in KUSTOMIZED for obj in load(DEPLOY / name)]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in expected)
    for obj in rendered:
        if obj["kind"] in WORKLOADS:
            assert {c["image"] for c in containers(obj)} == {"paddlecloud:latest"}
        if obj["kind"] == "ClusterRoleBinding":
            assert obj["subjects"][0]["namespace"] == NAMESPACE


@pytest.mark.real_kubernetes
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_apply_dry_run_on_a_real_api_server(real_kube):
    """What `kubectl apply -k deploy/` sends, validated by a real API server (its schemas,
    its admission, the policy deploy/ itself installs) without being stored."""
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(real_kube.admin_kubeconfig), "apply", "--dry-run=server",
         "--request-timeout=30s", "-o", "name", "-f", "-"],
        input=yaml.safe_dump_all(kustomize()), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == len(kustomize())


# --- metrics -------------------------------------------------------------------------------------

def test_prometheus_finds_the_web_and_worker_pods_and_sends_the_token():
    """The pods carry the kubernetes-pods scrape annotations (no ServiceMonitor), on the port
    their container serves /metrics on; both read the token from the Secret. Only the worker
    runs several processes (prefork), whose metrics its main process sums from an emptyDir."""
    for name, port_name in (("paddlecloud-web", "http"), ("paddlecloud-worker", "metrics")):
        template = one("Deployment", name)["spec"]["template"]
        main = template["spec"]["containers"][0]
        port = {p["name"]: p["containerPort"] for p in main["ports"]}[port_name]
        assert template["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/path": "/metrics",
            "prometheus.io/port": str(port)}, name
        env = {e["name"]: e for e in main["env"]}
        assert env["PADDLECLOUD_METRICS_TOKEN"]["valueFrom"] == {"secretKeyRef": {
            "name": "paddlecloud", "key": "PADDLECLOUD_METRICS_TOKEN"}}, name
        if name == "paddlecloud-worker":
            assert env["PADDLECLOUD_METRICS_PORT"]["value"] == str(port)
            volumes = {v["name"]: v for v in template["spec"]["volumes"]}
            mounts = {m["mountPath"]: volumes[m["name"]] for m in main["volumeMounts"]}
            assert "emptyDir" in mounts[env["PROMETHEUS_MULTIPROC_DIR"]["value"]]
        else:
            assert "PROMETHEUS_MULTIPROC_DIR" not in env_names(main)  # one process a pod
    beat = one("Deployment", "paddlecloud-beat")["spec"]["template"]
    assert "annotations" not in beat["metadata"]  # it runs no task: nothing to scrape


def test_the_dashboard_shows_what_the_portal_exports():
    from jobs.collector import JobsCollector
    from kernel import metrics

    exported = {family.name for family in JobsCollector().describe()} | {
        family.name for instrument in (
            metrics.HTTP_REQUESTS, metrics.HTTP_DURATION, metrics.WEBSOCKETS,
            metrics.TASK_DURATION, metrics.ADMISSION_WAIT, metrics.START_LATENCY,
            metrics.REPLICA_RESTARTS, metrics.PFS_BYTES, metrics.PFS_OPERATIONS)
        for family in instrument.describe()}
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 5
    for expr in exprs:
        for name in re.findall(r"paddlecloud_[a-z_]+", expr):
            assert re.sub(r"_(bucket|count|sum|total)$", "", name) in exported, name
        # Every web pod counts the database's gauges alike: one of them, not their sum.
        if re.search(r"paddlecloud_(jobs|queue_)", expr):
            assert expr.startswith("max by"), expr
