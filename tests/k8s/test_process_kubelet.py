"""The process kubelet: pods of the fake cluster really run, as a kubelet and a container
runtime would run them: environment, network and DNS, volumes and users, init containers, exit
codes, restarts, OOM kills, termination, logs; and nothing is left when the cluster stops."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.k8s_api_server import fixtures
from tests.k8s_api_server.runtime.network import NETNS_DIR

k8s_cluster = fixtures.k8s_cluster


@pytest.fixture
def kube(k8s_cluster):
    with k8s_cluster.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def ns(k8s_cluster, kube):
    kube.create_namespace({"metadata": {"name": "work"}})
    k8s_cluster.wait_for(lambda: k8s_cluster.store.get("serviceaccounts", "work", "default"),
                         message="the namespace's default ServiceAccount")
    return "work"


def pod(name: str, command: str, *, labels=None, restart="Never", **spec) -> dict:
    """A pod whose one container runs ``command`` with /bin/sh."""
    container = {"name": "main", "image": "debian:12", "command": ["/bin/sh", "-c", command]}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": restart, "containers": [container], **spec}}


def finished(cluster, kube, ns: str, name: str, timeout: float = 30) -> client.V1Pod:
    return cluster.wait_for(
        lambda: (p := kube.read_namespaced_pod(name, ns)).status.phase in ("Succeeded", "Failed")
        and p, timeout=timeout, interval=0.05, message=f"pod {name} to finish")


def running(cluster, kube, ns: str, name: str, text: str | None = None) -> client.V1Pod:
    """Once the pod runs (and its log has ``text``)."""
    def ready():
        found = kube.read_namespaced_pod(name, ns)
        if found.status.phase != "Running":
            return None
        return found if text is None or text in kube.read_namespaced_pod_log(name, ns) else None
    return cluster.wait_for(ready, timeout=30, interval=0.05, message=f"pod {name} running")


def log(kube, ns: str, name: str, **kwargs) -> str:
    return kube.read_namespaced_pod_log(name, ns, **kwargs)


def terminated(found: client.V1Pod, init: bool = False):
    statuses = found.status.init_container_statuses if init else found.status.container_statuses
    return statuses[0].state.terminated


# --- environment -------------------------------------------------------------------------------

def test_the_environment_is_resolved_as_a_kubelet_does(k8s_cluster, kube, ns):
    kube.create_namespaced_config_map(ns, {"metadata": {"name": "settings"},
                                           "data": {"MODE": "fast", "level": "3"}})
    secret = base64.b64encode(b"s3cret").decode()
    kube.create_namespaced_secret(ns, {"metadata": {"name": "creds"},
                                       "data": {"password": secret}})
    env = [
        {"name": "A", "value": "one"},
        {"name": "B", "value": "$(A)-two $$(A) $(MISSING)"},
        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
        {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds",
                                                            "key": "password"}}},
        {"name": "MEMORY_MI", "valueFrom": {"resourceFieldRef": {
            "containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"containerName": "main",
                                                           "resource": "limits.cpu"}}},
        {"name": "MODE", "value": "overridden"},
    ]
    kube.create_namespaced_pod(ns, pod(
        "env", "env | sort > /dev/stdout; echo args: \"$@\"", labels={"team": "ml"},
        container={"env": env, "args": ["$(A)", "$$(B)"],
                   "command": ["/bin/sh", "-c", "env | sort; echo args: \"$0\" \"$1\""],
                   "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                               {"configMapRef": {"name": "settings"}}],
                   "resources": {"limits": {"memory": "256Mi", "cpu": "1500m"}}}))
    found = finished(k8s_cluster, kube, ns, "env")
    assert found.status.phase == "Succeeded"
    lines = log(kube, ns, "env").splitlines()
    values = dict(line.split("=", 1) for line in lines if "=" in line)
    assert values["B"] == "one-two $(A) $(MISSING)"
    assert (values["ME"], values["NS"], values["TEAM"]) == ("env", ns, "ml")
    assert values["IP"] == found.status.pod_ip and values["IP"].startswith("10.244.")
    assert (values["LEVEL"], values["PASSWORD"]) == ("3", "s3cret")
    assert (values["MEMORY_MI"], values["CPUS"]) == ("256", "2")  # rounded up
    assert (values["CFG_MODE"], values["CFG_level"], values["MODE"]) == \
        ("fast", "3", "overridden")
    assert values["HOSTNAME"] == "env"
    assert values["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "args: one $(B)" in lines


def test_a_missing_config_map_key_is_a_create_container_config_error(k8s_cluster, kube, ns):
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nothing", "key": "k"}}}]
    kube.create_namespaced_pod(ns, pod("broken", "true", container={"env": env}))
    waiting = k8s_cluster.wait_for(
        lambda: (s := kube.read_namespaced_pod("broken", ns).status.container_statuses)
        and s[0].state.waiting and s[0].state.waiting.reason == "CreateContainerConfigError"
        and s[0].state.waiting, message="CreateContainerConfigError")
    assert waiting.message == 'configmap "nothing" not found'
    assert kube.read_namespaced_pod("broken", ns).status.phase == "Pending"
    # Once the ConfigMap exists, the kubelet's next try starts the container.
    kube.create_namespaced_config_map(ns, {"metadata": {"name": "nothing"}, "data": {"k": "v"}})
    assert finished(k8s_cluster, kube, ns, "broken").status.phase == "Succeeded"


# --- network and DNS ---------------------------------------------------------------------------

SERVE = ("import http.server, socket, sys; "
         "handler = type('H', (http.server.BaseHTTPRequestHandler,), {'do_GET': lambda self: "
         "(self.send_response(200), self.end_headers(), "
         "self.wfile.write(socket.gethostname().encode()))}); "
         "print('serving', flush=True); "
         "http.server.HTTPServer(('0.0.0.0', 8080), handler).serve_forever()")


def test_pods_have_their_own_ip_and_reach_each_other_by_dns_name(k8s_cluster, kube, ns):
    kube.create_namespaced_service(ns, {"metadata": {"name": "web"}, "spec": {
        "clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "web"},
        "ports": [{"port": 8080}]}})
    for name in ("web-0", "web-1"):  # both listen on 8080, each in its own network
        kube.create_namespaced_pod(ns, pod(name, f"exec python -c \"{SERVE}\"",
                                           labels={"app": "web"}, hostname=name,
                                           subdomain="web", restart="Always"))
    ips = {name: running(k8s_cluster, kube, ns, name, "serving").status.pod_ip
           for name in ("web-0", "web-1")}
    assert len(set(ips.values())) == 2
    client_script = (
        "import socket, urllib.request as u; "
        "print(socket.gethostname(), socket.getfqdn()); "
        "print(sorted(socket.gethostbyname_ex('web.work.svc.cluster.local')[2])); "
        f"print(u.urlopen('http://web-1.web.{ns}.svc:8080').read().decode()); "
        "print(u.urlopen('http://web-0.web:8080').read().decode()); "
        f"print(u.urlopen('http://{ips['web-1']}:8080').read().decode())")
    kube.create_namespaced_pod(ns, pod("caller", f"exec python -c \"{client_script}\"",
                                       hostname="caller", subdomain="web"))
    found = finished(k8s_cluster, kube, ns, "caller")
    assert found.status.phase == "Succeeded", log(kube, ns, "caller")
    assert log(kube, ns, "caller").splitlines() == [
        f"caller caller.web.{ns}.svc.cluster.local", str(sorted(ips.values())), "web-1", "web-0",
        "web-1"]


def test_a_pod_without_an_ip_has_no_dns_name(k8s_cluster, kube, ns):
    kube.create_namespaced_service(ns, {"metadata": {"name": "ps"}, "spec": {
        "clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "ps"},
        "ports": [{"port": 1}]}})
    k8s_cluster.controller.hold_pods("ps-0", reason="ContainerCreating")
    kube.create_namespaced_pod(ns, pod("ps-0", "sleep 60", labels={"app": "ps"},
                                       hostname="ps-0", subdomain="ps"))
    lookup = ("import socket, time\n"
              "for _ in range(300):\n"
              "    try:\n"
              "        print(socket.gethostbyname('ps-0.ps'), flush=True); break\n"
              "    except socket.gaierror as e:\n"
              "        print('no address', flush=True) if _ == 0 else None; time.sleep(0.1)\n")
    kube.create_namespaced_pod(ns, pod("waiter", f"exec python -c \"{lookup}\""))
    running(k8s_cluster, kube, ns, "waiter", "no address")
    assert kube.read_namespaced_pod("ps-0", ns).status.pod_ip is None
    k8s_cluster.controller.release_pods("ps-0")
    ip = running(k8s_cluster, kube, ns, "ps-0").status.pod_ip
    assert finished(k8s_cluster, kube, ns, "waiter").status.phase == "Succeeded"
    assert log(kube, ns, "waiter").splitlines() == ["no address", ip]


# --- volumes and users -------------------------------------------------------------------------

def test_volumes_are_mounted_at_their_paths(k8s_cluster, kube, ns, tmp_path):
    host = tmp_path / "data"
    (host / "sub").mkdir(parents=True)
    (host / "sub" / "in.txt").write_text("from the host\n")
    export = tmp_path / "export"
    export.mkdir()
    k8s_cluster.settings.nfs_exports["nfs.example:/exports/pfs"] = str(export)
    kube.create_namespaced_config_map(ns, {"metadata": {"name": "conf"},
                                           "data": {"a.yaml": "x: 1\n"}})
    kube.create_namespaced_secret(ns, {"metadata": {"name": "key"},
                                       "data": {"token": base64.b64encode(b"t0k").decode()}})
    script = """
set -u
cat /host/in.txt
cat /init/from-init
cat /conf/a.yaml /key/token; echo
echo nfs > /nfs/written
df -t tmpfs /mem >/dev/null && echo mem-is-tmpfs
(echo x > /ro/denied) 2>/dev/null || echo read-only
(echo x > /conf/denied) 2>/dev/null || echo configmap-read-only
"""
    mounts = [{"name": "host", "mountPath": "/host", "subPath": "sub"},
              {"name": "scratch", "mountPath": "/init"},
              {"name": "conf", "mountPath": "/conf"}, {"name": "key", "mountPath": "/key"},
              {"name": "nfs", "mountPath": "/nfs"}, {"name": "mem", "mountPath": "/mem"},
              {"name": "host", "mountPath": "/ro", "readOnly": True}]
    kube.create_namespaced_pod(ns, pod(
        "volumes", script, container={"volumeMounts": mounts},
        initContainers=[{"name": "init", "image": "debian:12", "command": [
            "/bin/sh", "-c", "echo made by init > /scratch/from-init"],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
        volumes=[{"name": "host", "hostPath": {"path": str(host), "type": "Directory"}},
                 {"name": "scratch", "emptyDir": {}},
                 {"name": "conf", "configMap": {"name": "conf"}},
                 {"name": "key", "secret": {"secretName": "key"}},
                 {"name": "nfs", "nfs": {"server": "nfs.example", "path": "/exports/pfs"}},
                 {"name": "mem", "emptyDir": {"medium": "Memory"}}]))
    found = finished(k8s_cluster, kube, ns, "volumes")
    assert found.status.phase == "Succeeded", log(kube, ns, "volumes")
    assert log(kube, ns, "volumes").splitlines() == [
        "from the host", "made by init", "x: 1", "t0k", "mem-is-tmpfs", "read-only",
        "configmap-read-only"]
    assert (export / "written").read_text() == "nfs\n"
    assert not Path("/host").exists() and not Path("/init").exists()  # nothing on the host


def test_a_claim_mounts_its_bound_volume(k8s_cluster, kube, ns, tmp_path):
    kube.create_persistent_volume({"metadata": {"name": "disk"}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": str(tmp_path)}}})
    kube.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    kube.create_namespaced_pod(ns, pod(
        "claimant", "echo kept > /data/file",
        container={"volumeMounts": [{"name": "d", "mountPath": "/data"}]},
        volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]))
    assert finished(k8s_cluster, kube, ns, "claimant").status.phase == "Succeeded"
    assert (tmp_path / "file").read_text() == "kept\n"


def test_a_volume_that_cannot_mount_holds_the_pod_with_failed_mount(k8s_cluster, kube, ns):
    kube.create_namespaced_pod(ns, pod("unmounted", "true", container={
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        volumes=[{"name": "data", "nfs": {"server": "nowhere", "path": "/x"}}]))
    event = k8s_cluster.wait_for(lambda: k8s_cluster.events(ns, involved_name="unmounted",
                                                            reason="FailedMount"),
                                 message="FailedMount")[0]
    assert "mount.nfs: access denied by server while mounting nowhere:/x" in event["message"]
    assert kube.read_namespaced_pod("unmounted", ns).status.phase == "Pending"


def test_the_process_runs_as_the_pods_user_and_fs_group(k8s_cluster, kube, ns, tmp_path):
    owned = tmp_path / "owned-by-root"
    owned.mkdir()
    script = ("id -u; id -g; id -G; touch /scratch/mine && stat -c '%g' /scratch/mine; "
              "touch /host/x 2>/dev/null || echo host-denied")
    kube.create_namespaced_pod(ns, pod(
        "user", script, securityContext={"runAsUser": 1234, "runAsGroup": 2345,
                                         "fsGroup": 3456},
        container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                    {"name": "host", "mountPath": "/host"}]},
        volumes=[{"name": "scratch", "emptyDir": {}},
                 {"name": "host", "hostPath": {"path": str(owned)}}]))
    found = finished(k8s_cluster, kube, ns, "user")
    assert found.status.phase == "Succeeded", log(kube, ns, "user")
    assert log(kube, ns, "user").splitlines() == ["1234", "2345", "2345 3456", "3456",
                                                  "host-denied"]


# --- lifecycle ---------------------------------------------------------------------------------

def test_init_containers_run_in_order_and_keep_the_pod_pending(k8s_cluster, kube, ns):
    inits = [{"name": f"init-{i}", "image": "debian:12",
              "command": ["/bin/sh", "-c", f"echo init {i} >> /w/order; sleep {0.5 if i else 1}"],
              "volumeMounts": [{"name": "w", "mountPath": "/w"}]} for i in range(2)]
    kube.create_namespaced_pod(ns, pod("inits", "cat /w/order", initContainers=inits,
                                       container={"volumeMounts": [{"name": "w",
                                                                    "mountPath": "/w"}]},
                                       volumes=[{"name": "w", "emptyDir": {}}]))
    pending = k8s_cluster.wait_for(
        lambda: (p := kube.read_namespaced_pod("inits", ns)).status.init_container_statuses
        and p.status.init_container_statuses[0].state.running and p,
        message="the first init container running")
    assert pending.status.phase == "Pending"
    assert pending.status.container_statuses[0].state.waiting.reason == "PodInitializing"
    initialized = next(c for c in pending.status.conditions if c.type == "Initialized")
    assert (initialized.status, initialized.reason) == ("False", "ContainersNotInitialized")
    assert pending.status.pod_ip  # the sandbox, and its IP, come first
    found = finished(k8s_cluster, kube, ns, "inits")
    assert log(kube, ns, "inits") == "init 0\ninit 1\n"
    assert [s.state.terminated.reason for s in found.status.init_container_statuses] == \
        ["Completed", "Completed"]


def test_exit_codes_restarts_and_previous_logs(k8s_cluster, kube, ns):
    kube.create_namespaced_pod(ns, pod(
        "flaky", "echo run; [ -e /tmp/x ] || exit 3", restart="OnFailure",
        container={"terminationMessagePolicy": "FallbackToLogsOnError"}))
    found = k8s_cluster.wait_for(  # (no statuses yet while the pod is being scheduled)
        lambda: (p := kube.read_namespaced_pod("flaky", ns)).status.container_statuses
        and p.status.container_statuses[0].restart_count >= 2 and p, timeout=30,
        message="two restarts")
    status = found.status.container_statuses[0]
    assert status.last_state.terminated.exit_code == 3
    assert status.last_state.terminated.reason == "Error"
    assert status.last_state.terminated.message == "run"
    assert found.status.phase == "Running"
    assert log(kube, ns, "flaky", previous=True) == "run\n"


def test_an_oom_kill_is_reported_so(k8s_cluster, kube, ns):
    if not Path("/sys/fs/cgroup/memory").is_dir():
        pytest.skip("no memory cgroup on this machine")
    kube.create_namespaced_pod(ns, pod(
        "hungry", "exec python -c 'b = bytearray(400 << 20); print(len(b))'",
        container={"resources": {"limits": {"memory": "64Mi"}}}))
    ended = terminated(finished(k8s_cluster, kube, ns, "hungry"))
    assert (ended.reason, ended.exit_code) == ("OOMKilled", 137)


def test_deletion_sends_sigterm_then_sigkill_after_the_grace(k8s_cluster, kube, ns, tmp_path):
    polite = "trap 'echo got TERM > /out/said; exit 0' TERM; echo ready; " \
             "while :; do sleep 0.1; done"
    stubborn = "exec python -c \"import signal, time; " \
               "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
               "time.sleep(120)\""
    kube.create_namespaced_pod(ns, pod(
        "polite", polite, terminationGracePeriodSeconds=30,
        container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
        volumes=[{"name": "out", "hostPath": {"path": str(tmp_path)}}]))
    kube.create_namespaced_pod(ns, pod("stubborn", stubborn, terminationGracePeriodSeconds=2))
    for name in ("polite", "stubborn"):
        running(k8s_cluster, kube, ns, name, "ready")
    started = time.monotonic()
    for name in ("polite", "stubborn"):
        kube.delete_namespaced_pod(name, ns)
    terminating = kube.read_namespaced_pod("stubborn", ns)
    assert terminating.metadata.deletion_timestamp is not None
    gone = {}
    while len(gone) < 2:
        for name in ("polite", "stubborn"):
            if name not in gone and not kube.list_namespaced_pod(
                    ns, field_selector=f"metadata.name={name}").items:
                gone[name] = time.monotonic() - started
        assert time.monotonic() - started < 20, gone
        time.sleep(0.05)
    assert gone["polite"] < 2 and 2 <= gone["stubborn"] < 6, gone
    assert (tmp_path / "said").read_text() == "got TERM\n"


def test_logs_follow_the_running_container(k8s_cluster, kube, ns):
    kube.create_namespaced_pod(ns, pod(
        "ticker", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done"))
    running(k8s_cluster, kube, ns, "ticker")
    followed = subprocess.run(
        ["kubectl", "--kubeconfig", str(k8s_cluster.kubeconfig_path), "-n", ns, "logs", "-f",
         "ticker"], capture_output=True, text=True, timeout=30)
    assert followed.stdout == "".join(f"tick {i}\n" for i in range(1, 6)), followed.stderr


# --- what is left ----------------------------------------------------------------------------

def test_a_stopped_cluster_leaves_no_namespace_process_or_file(tmp_path):
    from tests.k8s_api_server.server import FakeKubernetes

    cluster = FakeKubernetes(kubelet="process").start()
    try:
        with cluster.api_client() as api:
            kube = client.CoreV1Api(api)
            kube.create_namespace({"metadata": {"name": "w"}})
            cluster.wait_for(lambda: cluster.store.get("serviceaccounts", "w", "default"))
            kube.create_namespaced_pod("w", pod("sleeper", "echo up; sleep 600", container={
                "volumeMounts": [{"name": "m", "mountPath": "/m"}]},
                volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}]))
            running(cluster, kube, "w", "sleeper", "up")
        kubelet = cluster.controller.kubelet
        sandbox = next(iter(kubelet.sandboxes.values()))
        pid = next(iter(sandbox.runs.values())).container.pid
        made = [Path(NETNS_DIR, n) for n in kubelet.network.namespaces()] + \
            [kubelet.root, kubelet.shm_root]
        assert all(path.exists() for path in made) and len(made) == 4
    finally:
        cluster.stop()
    assert [path for path in made if path.exists()] == []
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, "the pod's process outlived the cluster"
        time.sleep(0.05)
    cgroups = Path("/sys/fs/cgroup/memory/paddlecloud-fake")
    assert not cgroups.exists() or not [c for c in cgroups.iterdir()
                                        if c.name.startswith(kubelet.network.tag)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_what_a_killed_run_left_is_swept_by_the_next_cluster():
    """A test run killed with SIGKILL cannot clean up: the next cluster removes its network
    namespaces and files."""
    from tests.k8s_api_server.runtime.network import PREFIX, sweeping
    from tests.k8s_api_server.server import FakeKubernetes

    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{PREFIX}-{dead.pid}-1-node"
    files = Path(tempfile.gettempdir(), f"{PREFIX}-{dead.pid}-1-abcd")
    with sweeping():  # a cluster starting in another test process must not sweep them half-made
        (files / "pod").mkdir(parents=True)
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        FakeKubernetes(kubelet="process").start().stop()
        left = [name] if name in os.listdir(NETNS_DIR) else []
        left += [files] if files.exists() else []
    finally:  # whatever the outcome, nothing of this test stays
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        shutil.rmtree(files, ignore_errors=True)
    assert left == []

