"""The node agent (tests/real_kube/node.py) on a real control plane: a Job and a StatefulSet made
through the real API run on it, their pods reach each other by IP and by the cluster DNS,
``kubectl logs`` and a followed log read what they print, deleting a pod ends its processes, a
failed OnFailure container runs again, host services reach pods, and when the agent stops its
Node goes NotReady and nothing of it is left on this machine."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.k8s_api_server.runtime.network import NETNS_DIR
from tests.processes import processes_naming
from tests.real_kube.node_kubelet import expose_host_port

from .cluster import ControlPlane

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the node agent runs pods in namespaces: root"),
]


@pytest.fixture(scope="module")
def cluster():
    plane = ControlPlane()
    try:
        plane.start()
        yield plane
    finally:
        agent_pid = plane.agent.pid if plane.agent else None
        plane.stop()
        if agent_pid is not None:  # whatever the tests did, the agent left nothing
            assert not [n for n in os.listdir(NETNS_DIR) if n.startswith(f"pck8s-{agent_pid}-")]


@pytest.fixture(scope="module")
def api(cluster):
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def core(api):
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def ns(cluster, core):
    core.create_namespace({"metadata": {"name": "work"}})
    cluster.wait(lambda: core.list_namespaced_service_account("work").items, 60,
                 "the namespace's default ServiceAccount")
    return "work"


def spec(command: str, *, restart: str = "Never", **extra) -> dict:
    """A pod spec whose one container runs ``command`` with /bin/sh (no token: the agent
    mounts no projected volumes)."""
    return {"restartPolicy": restart, "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "debian:12",
                            "command": ["/bin/sh", "-c", command]}], **extra}


def run_python(cluster, core, ns: str, name: str, code: str) -> str:
    """Run ``python3 -c code`` in a pod ``name`` to its end; its output (it succeeded)."""
    core.create_namespaced_pod(ns, {"metadata": {"name": name},
                                    "spec": spec(f'python3 -c "{code}"')})
    done = wait_pod(cluster, core, ns, name,
                    lambda p: p.status.phase in ("Succeeded", "Failed"))
    out = core.read_namespaced_pod_log(name, ns)
    assert done.status.phase == "Succeeded", out
    return out


def pod_gone(core, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def wait_pod(cluster, core, ns: str, name: str, check, timeout: float = 60):
    def found():
        try:
            pod = core.read_namespaced_pod(name, ns)
        except client.ApiException:
            return None
        return pod if check(pod) else None
    return cluster.wait(found, timeout, f"pod {name}")


def test_the_node_is_registered_ready_and_keeps_its_lease(cluster, core, api):
    node = core.read_node(cluster.node)
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True"
    assert node.status.allocatable["pods"] == "110"
    assert {(a.type, a.address) for a in node.status.addresses} >= {("InternalIP", "127.0.0.1")}
    assert node.status.daemon_endpoints.kubelet_endpoint.port == cluster.agent_port
    leases = client.CoordinationV1Api(api)
    first = leases.read_namespaced_lease(cluster.node, "kube-node-lease").spec.renew_time
    renewed = cluster.wait(lambda: (t := leases.read_namespaced_lease(
        cluster.node, "kube-node-lease").spec.renew_time) != first and t, 20, "a renewal")
    assert renewed > first
    # The Ready condition's heartbeat moved with it; it has been Ready since registration.
    again = next(c for c in core.read_node(cluster.node).status.conditions if c.type == "Ready")
    assert again.last_heartbeat_time > ready.last_heartbeat_time
    assert again.last_transition_time == ready.last_transition_time


def test_a_job_runs_to_completion_and_kubectl_reads_its_logs(cluster, core, api, ns):
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(ns, {"metadata": {"name": "count"}, "spec": {
        "completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 0,
        "template": {"spec": spec('echo "index $JOB_COMPLETION_INDEX on $(hostname)"')}}})

    def finished():
        job = batch.read_namespaced_job("count", ns)
        return job if any(c.type in ("Complete", "Failed") and c.status == "True"
                          for c in job.status.conditions or []) else None
    job = cluster.wait(finished, 90, "the Job to finish")
    assert job.status.succeeded == 2
    assert any(c.type == "Complete" for c in job.status.conditions)
    pods = core.list_namespaced_pod(ns, label_selector="job-name=count").items
    assert {p.spec.node_name for p in pods} == {cluster.node}
    assert all(p.status.host_ip == "127.0.0.1" and p.status.pod_ip.startswith("10.244.")
               for p in pods)
    first = next(p for p in pods if p.metadata.annotations[
        "batch.kubernetes.io/job-completion-index"] == "0")
    out = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "-n", ns, "logs",
                          first.metadata.name], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "index 0 on count-0\n"  # an Indexed Job's pods get a hostname
    events = core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={first.metadata.name}").items
    assert {"Scheduled", "Started"} <= {e.reason for e in events}


SERVE = ("import http.server, socket; "
         "H = type('H', (http.server.BaseHTTPRequestHandler,), {'do_GET': lambda self: "
         "(self.send_response(200), self.end_headers(), "
         "self.wfile.write(socket.gethostname().encode()))}); "
         "http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()")


def test_a_statefulset_runs_and_its_pods_reach_each_other_by_name(cluster, core, api, ns):
    core.create_namespaced_service(ns, {"metadata": {"name": "web"}, "spec": {
        "clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]}})
    client.AppsV1Api(api).create_namespaced_stateful_set(ns, {
        "metadata": {"name": "web"}, "spec": {
            "serviceName": "web", "replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": spec(f'exec python3 -c "{SERVE}"', restart="Always")}}})
    for name in ("web-0", "web-1"):
        wait_pod(cluster, core, ns, name, lambda p: p.status.phase == "Running" and any(
            c.type == "Ready" and c.status == "True" for c in p.status.conditions or []), 90)
    web1 = core.read_namespaced_pod("web-1", ns)
    check = ("import socket, urllib.request; "
             "print(socket.gethostbyname('web-1.web')); "
             "print(urllib.request.urlopen('http://web-1.web:8080', timeout=5).read().decode()); "
             f"print(urllib.request.urlopen('http://{web1.status.pod_ip}:8080').read().decode())")
    out = run_python(cluster, core, ns, "probe", check)
    assert out.splitlines() == [web1.status.pod_ip, "web-1", "web-1"]


def test_a_followed_log_streams_until_the_container_ends(cluster, core, ns):
    core.create_namespaced_pod(ns, {"metadata": {"name": "ticker"}, "spec": spec(
        "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done")})
    wait_pod(cluster, core, ns, "ticker", lambda p: p.status.phase == "Running")
    response = core.read_namespaced_pod_log("ticker", ns, follow=True, _preload_content=False)
    lines, started = [], time.monotonic()
    for raw in response.stream():
        lines += raw.decode().splitlines()
    response.release_conn()
    assert lines == [f"tick {i}" for i in range(1, 6)]
    assert time.monotonic() - started < 30
    assert core.read_namespaced_pod_log("ticker", ns, tail_lines=2) == "tick 4\ntick 5\n"


def test_a_deleted_pods_processes_are_gone(cluster, core, ns):
    marker = f"marker-{uuid.uuid4().hex}"
    core.create_namespaced_pod(ns, {"metadata": {"name": "sleeper"}, "spec": spec(
        f"sleep 1000; echo {marker}")})
    wait_pod(cluster, core, ns, "sleeper", lambda p: p.status.phase == "Running")
    cluster.wait(lambda: processes_naming(marker), 10, "the container's process")
    started = time.monotonic()
    core.delete_namespaced_pod("sleeper", ns)  # its sh (PID 1) ignores SIGTERM: SIGKILL at 2 s

    cluster.wait(lambda: pod_gone(core, ns, "sleeper"), 30, "the pod to go")
    assert 2 <= time.monotonic() - started < 20
    assert processes_naming(marker) == []


def test_a_jobs_pod_deleted_while_it_initializes_fails_then_goes(cluster, core, api, ns):
    """A Job's pods carry its tracking finalizer, which the Job controller takes off a
    finished pod only: the kubelet reports a deleted pod Failed before its last delete."""
    template = spec("true", initContainers=[{"name": "wait", "image": "debian:12",
                                              "command": ["/bin/sh", "-c", "sleep 1000"]}])
    client.BatchV1Api(api).create_namespaced_job(ns, {
        "metadata": {"name": "initializing"},
        "spec": {"backoffLimit": 0, "template": {"spec": template}}})
    pod = cluster.wait(lambda: next(iter(core.list_namespaced_pod(
        ns, label_selector="job-name=initializing").items), None), 30, "the Job's pod")
    name = pod.metadata.name
    wait_pod(cluster, core, ns, name, lambda p: (p.status.init_container_statuses or [
        None])[0] is not None and p.status.init_container_statuses[0].state.running)
    core.delete_namespaced_pod(name, ns, grace_period_seconds=1)

    cluster.wait(lambda: pod_gone(core, ns, name), 30, "the pod to go")
    client.BatchV1Api(api).delete_namespaced_job("initializing", ns,
                                                 propagation_policy="Background")


def test_an_on_failure_container_is_restarted(cluster, core, ns):
    command = ("if [ -e /data/ran ]; then echo second; exit 0; fi; "
               "touch /data/ran; echo first; exit 3")
    core.create_namespaced_pod(ns, {"metadata": {"name": "retry"}, "spec": spec(
        command, restart="OnFailure", volumes=[{"name": "data", "emptyDir": {}}],
        containers=[{"name": "main", "image": "debian:12", "command": ["/bin/sh", "-c", command],
                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}])})
    done = wait_pod(cluster, core, ns, "retry", lambda p: p.status.phase == "Succeeded")
    status = done.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 3
    assert core.read_namespaced_pod_log("retry", ns) == "second\n"
    assert core.read_namespaced_pod_log("retry", ns, previous=True) == "first\n"


def test_a_pods_config_map_secret_and_claim_come_from_the_real_api(cluster, core, ns,
                                                                    tmp_path):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "settings"},
                                           "data": {"MODE": "fast"}})
    core.create_namespaced_secret(ns, {"metadata": {"name": "creds"},
                                       "stringData": {"password": "s3cret"}})
    core.create_persistent_volume({"metadata": {"name": "shared"}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
        "storageClassName": "", "hostPath": {"path": str(tmp_path)}}})
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "shared"}, "spec": {
        "accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": "shared",
        "resources": {"requests": {"storage": "1Gi"}}}})
    command = "echo $MODE $(cat /creds/password) > /shared/out"
    core.create_namespaced_pod(ns, {"metadata": {"name": "reader"}, "spec": spec(
        command, volumes=[{"name": "creds", "secret": {"secretName": "creds"}},
                          {"name": "shared", "persistentVolumeClaim": {"claimName": "shared"}}],
        containers=[{"name": "main", "image": "debian:12", "command": ["/bin/sh", "-c", command],
                     "envFrom": [{"configMapRef": {"name": "settings"}}],
                     "volumeMounts": [{"name": "creds", "mountPath": "/creds"},
                                      {"name": "shared", "mountPath": "/shared"}]}])})
    done = wait_pod(cluster, core, ns, "reader",
                    lambda p: p.status.phase in ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded", core.read_namespaced_pod_log("reader", ns)
    assert (tmp_path / "out").read_text() == "fast s3cret\n"


def test_a_projected_volume_is_a_failed_mount(cluster, core, ns):
    core.create_namespaced_pod(ns, {"metadata": {"name": "token"}, "spec": {
        **spec("true"), "automountServiceAccountToken": True}})

    def failed_mount():
        events = core.list_namespaced_event(
            ns, field_selector="involvedObject.name=token,reason=FailedMount").items
        return events[0] if events else None
    event = cluster.wait(failed_mount, 30, "a FailedMount event")
    assert "does not support projected volumes" in event.message
    assert core.read_namespaced_pod("token", ns).status.phase == "Pending"
    core.delete_namespaced_pod("token", ns)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from the host")

    def log_message(self, *args):
        pass


def test_a_pod_reaches_a_host_service(cluster, core, api, ns):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = expose_host_port(api, server.server_address[1], namespace=ns, service="portal")
        assert url == f"http://portal.{ns}.svc"
        found = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
            ns, label_selector="kubernetes.io/service-name=portal").items
        assert found[0].endpoints[0].addresses == ["10.244.0.1"]  # the node, on the pod network
        fetch = f"import urllib.request; print(urllib.request.urlopen('{url}').read())"
        out = run_python(cluster, core, ns, "caller", fetch)
        assert out == "b'hello from the host'\n"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_killed_agents_pods_run_again_on_the_next_and_its_leftovers_go(cluster, core, ns):
    marker = f"marker-{uuid.uuid4().hex}"
    core.create_namespaced_pod(ns, {"metadata": {"name": "survivor"}, "spec": spec(
        f"echo up; sleep 1000; echo {marker}", restart="Always", initContainers=[
            {"name": "init", "image": "debian:12", "command": ["true"]}])})
    core.create_namespaced_pod(ns, {"metadata": {"name": "once"}, "spec": spec("sleep 1000")})
    first = wait_pod(cluster, core, ns, "survivor", lambda p: p.status.phase == "Running")
    wait_pod(cluster, core, ns, "once", lambda p: p.status.phase == "Running")
    cluster.wait(lambda: processes_naming(marker), 10, "the container's process")
    old = cluster.agent.pid
    cluster.agent.kill()  # no cleanup of its own: its containers die with it (bwrap)
    cluster.agent.wait()
    cluster.agent.stdout.close()
    cluster.agent = None
    cluster.wait(lambda: not processes_naming(marker), 10, "the container to die with it")
    assert [n for n in os.listdir(NETNS_DIR) if n.startswith(f"pck8s-{old}-")]
    cluster.start_agent()  # the next agent removes what the killed one left, runs the pod
    assert not [n for n in os.listdir(NETNS_DIR) if n.startswith(f"pck8s-{old}-")]
    before = first.status.container_statuses[0].container_id
    again = wait_pod(cluster, core, ns, "survivor", lambda p: (
        (c := p.status.container_statuses[0]).container_id != before and c.state.running))
    assert again.status.init_container_statuses[0].state.terminated.exit_code == 0
    assert again.status.phase == "Running"
    assert processes_naming(marker)
    # its shell echoes a moment after it starts: the new container's log, not the old one's
    cluster.wait(lambda: core.read_namespaced_pod_log("survivor", ns) == "up\n", 10,
                 "the new container's log")
    # A pod that must not run twice (restartPolicy Never) failed instead, as on a kubelet.
    lost = wait_pod(cluster, core, ns, "once", lambda p: p.status.phase == "Failed")
    ended = lost.status.container_statuses[0].state.terminated
    assert (ended.exit_code, ended.reason) == (137, "ContainerStatusUnknown")


def test_the_node_goes_not_ready_and_leaves_nothing_when_the_agent_stops(cluster, core, ns):
    marker = f"marker-{uuid.uuid4().hex}"
    core.create_namespaced_pod(ns, {"metadata": {"name": "left"}, "spec": spec(
        f"sleep 1000; echo {marker}")})
    wait_pod(cluster, core, ns, "left", lambda p: p.status.phase == "Running")
    pid = cluster.agent.pid
    cgroups = Path("/sys/fs/cgroup/memory/paddlecloud-fake")
    assert [n for n in os.listdir(NETNS_DIR) if n.startswith(f"pck8s-{pid}-")]  # before
    had_cgroup = bool(list(cgroups.glob(f"pck8s-{pid}-*")))
    assert had_cgroup or not os.access("/sys/fs/cgroup/memory", os.W_OK)
    assert cluster.stop_agent() == 0
    ready = next(c for c in core.read_node(cluster.node).status.conditions
                 if c.type == "Ready")
    assert ready.status == "False"
    assert processes_naming(marker) == []
    assert not [n for n in os.listdir(NETNS_DIR) if n.startswith(f"pck8s-{pid}-")]
    assert not list(Path("/dev/shm").glob(f"pck8s-{pid}-*"))
    assert not list(cgroups.glob(f"pck8s-{pid}-*"))
