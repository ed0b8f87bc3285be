"""Pods through scheduler and kubelet: lifecycle, holds, scripts, logs (plain, followed,
previous), graceful termination, ResourceQuota and LimitRange admission."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from .helpers import condition, job_body, pod_body, status_of


def _running(core, ns: str, name: str):
    pod = core.read_namespaced_pod(name, ns)
    return pod if pod.status.phase == "Running" else None


def test_a_pod_is_scheduled_then_runs(k8s_api, core, ns):
    created = core.create_namespaced_pod(ns, pod_body("p"))
    assert created.status.phase == "Pending" and created.spec.node_name is None
    pod = k8s_api.wait_for(lambda: _running(core, ns, "p"), message="Running")
    assert pod.spec.node_name.startswith("fake-node-")
    assert pod.status.pod_ip and pod.status.host_ip and pod.status.start_time
    state = pod.status.container_statuses[0]
    assert state.ready and state.state.running.started_at and state.container_id
    assert {c.type: c.status for c in pod.status.conditions} == {
        "PodScheduled": "True", "Initialized": "True", "Ready": "True",
        "ContainersReady": "True", "PodReadyToStartContainers": "True"}
    reasons = [e["reason"] for e in sorted(k8s_api.events(ns, involved_name="p"),
                                           key=lambda e: e["metadata"]["name"])]
    assert reasons == ["Scheduled", "Pulled", "Created", "Started"]


def test_pods_start_pending_with_container_creating(k8s_api, core, ns):
    k8s_api.controller.hold_pods("p", reason="ContainerCreating")
    core.create_namespaced_pod(ns, pod_body("p"))
    pod = k8s_api.wait_for(lambda: core.read_namespaced_pod("p", ns).status.container_statuses
                           and core.read_namespaced_pod("p", ns), message="scheduled")
    assert pod.status.phase == "Pending"
    assert condition(pod, "PodScheduled").status == "True"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"


def test_unschedulable_pods_stay_pending_with_an_event(k8s_api, core, ns):
    k8s_api.controller.hold_pods("gpu-*", namespace=ns, reason="Unschedulable")
    core.create_namespaced_pod(ns, pod_body("gpu-0"))
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    events = k8s_api.wait_for(lambda: k8s_api.events(ns, reason="FailedScheduling"),
                              message="FailedScheduling")
    assert (events[0]["type"], events[0]["message"]) == ("Warning", message)
    pod = core.read_namespaced_pod("gpu-0", ns)
    scheduled = condition(pod, "PodScheduled")
    assert (pod.status.phase, scheduled.status, scheduled.reason, scheduled.message) == (
        "Pending", "False", "Unschedulable", message)
    k8s_api.controller.release_pods("gpu-*", namespace=ns)
    k8s_api.wait_for(lambda: _running(core, ns, "gpu-0"), message="Running after release")


def test_image_pull_failures_back_off_with_events(k8s_api, core, ns):
    k8s_api.controller.hold_pods("p", reason="ErrImagePull")
    core.create_namespaced_pod(ns, pod_body("p", image="registry.local/nope:1"))
    with pytest.raises(client.ApiException) as error:
        k8s_api.wait_for(lambda: core.read_namespaced_pod("p", ns).status.container_statuses)
        core.read_namespaced_pod_log("p", ns)
    assert error.value.status == 400
    waiting = k8s_api.wait_for(
        lambda: (w := core.read_namespaced_pod("p", ns).status.container_statuses[0]
                 .state.waiting) and w.reason == "ImagePullBackOff" and w, message="back-off")
    assert waiting.message == 'Back-off pulling image "registry.local/nope:1"'
    failures = [e["message"] for e in k8s_api.events(ns, involved_name="p", reason="Failed")]
    assert "Error: ErrImagePull" in failures and "Error: ImagePullBackOff" in failures
    with pytest.raises(client.ApiException) as error:
        core.read_namespaced_pod_log("p", ns)
    assert status_of(error.value)["message"] == (
        'container "main" in pod "p" is waiting to start: trying and failing to pull image')


def test_logs_are_400_while_creating_then_served(k8s_api, core, ns):
    k8s_api.controller.hold_pods("p", reason="ContainerCreating")
    core.create_namespaced_pod(ns, pod_body("p"))
    k8s_api.wait_for(lambda: core.read_namespaced_pod("p", ns).status.container_statuses)
    with pytest.raises(client.ApiException) as error:
        core.read_namespaced_pod_log("p", ns)
    status = status_of(error.value)
    assert (error.value.status, status["reason"], status["message"]) == (
        400, "BadRequest", 'container "main" in pod "p" is waiting to start: ContainerCreating')
    k8s_api.controller.release_pods()
    k8s_api.wait_for(lambda: _running(core, ns, "p"))
    k8s_api.controller.append_log(ns, "p", ["epoch 1", "epoch 2", "epoch 3"])
    assert core.read_namespaced_pod_log("p", ns) == "epoch 1\nepoch 2\nepoch 3\n"
    assert core.read_namespaced_pod_log("p", ns, tail_lines=1) == "epoch 3\n"
    stamped = core.read_namespaced_pod_log("p", ns, timestamps=True).splitlines()
    assert stamped[0].endswith("Z epoch 1") and stamped[0][:4].isdigit()


def test_a_multi_container_pod_needs_a_container_name_for_logs(k8s_api, core, ns):
    body = pod_body("p")
    body["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    core.create_namespaced_pod(ns, body)
    k8s_api.wait_for(lambda: _running(core, ns, "p"))
    with pytest.raises(client.ApiException) as error:
        core.read_namespaced_pod_log("p", ns)
    assert status_of(error.value)["message"] == (
        "a container name must be specified for pod p, choose one of: [main sidecar]")
    k8s_api.controller.append_log(ns, "p", "from the sidecar", container="sidecar")
    assert core.read_namespaced_pod_log("p", ns, container="sidecar") == "from the sidecar\n"


def test_followed_logs_stream_until_the_container_ends(k8s_api, core, ns):
    core.create_namespaced_pod(ns, pod_body("p", restartPolicy="Never"))
    k8s_api.wait_for(lambda: _running(core, ns, "p"))
    k8s_api.controller.append_log(ns, "p", ["line 1"])
    response = core.read_namespaced_pod_log("p", ns, follow=True, _preload_content=False)
    received = []
    reader = threading.Thread(target=lambda: received.extend(
        chunk.decode() for chunk in response.stream(amt=None, decode_content=True)))
    reader.start()
    k8s_api.wait_for(lambda: "".join(received) == "line 1\n", message="the first line")
    k8s_api.controller.append_log(ns, "p", ["line 2"])
    k8s_api.wait_for(lambda: "".join(received).endswith("line 2\n"), message="the second line")
    assert reader.is_alive()
    k8s_api.controller.terminate_container(ns, "p", exit_code=0)
    reader.join(timeout=5)
    assert not reader.is_alive() and "".join(received) == "line 1\nline 2\n"
    assert core.read_namespaced_pod("p", ns).status.phase == "Succeeded"


def test_scripted_pods_print_then_exit(k8s_api, core, ns):
    k8s_api.controller.script_pods("p", lines=["loading data", "pass 0 cost 1.5"],
                                   exit_code=3)
    core.create_namespaced_pod(ns, pod_body("p", restartPolicy="Never"))
    pod = k8s_api.wait_for(lambda: (p := core.read_namespaced_pod("p", ns)).status.phase
                           == "Failed" and p, message="Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert core.read_namespaced_pod_log("p", ns) == "loading data\npass 0 cost 1.5\n"


def test_previous_logs_after_a_restart(k8s_api, core, ns):
    k8s_api.settings.crash_backoff_seconds = 0.0
    core.create_namespaced_pod(ns, pod_body("p", restartPolicy="OnFailure"))
    k8s_api.wait_for(lambda: _running(core, ns, "p"))
    k8s_api.controller.append_log(ns, "p", "first run")
    k8s_api.controller.terminate_container(ns, "p", exit_code=1)
    k8s_api.wait_for(lambda: (s := core.read_namespaced_pod("p", ns).status
                              .container_statuses[0]).restart_count == 1 and s.state.running)
    assert core.read_namespaced_pod_log("p", ns, previous=True) == "first run\n"
    assert core.read_namespaced_pod_log("p", ns) == ""


def test_deleted_pods_terminate_for_the_grace_time(k8s_api, core, ns):
    k8s_api.settings.pod_termination_seconds = 0.5
    core.create_namespaced_pod(ns, pod_body("p"))
    k8s_api.wait_for(lambda: _running(core, ns, "p"))
    deleted = core.delete_namespaced_pod("p", ns)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 30
    terminating = core.read_namespaced_pod("p", ns)
    assert terminating.status.phase == "Running"
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_pod(ns, pod_body("p"))
    assert error.value.status == 409
    k8s_api.wait_for(lambda: not core.list_namespaced_pod(ns).items, timeout=3,
                     message="the pod gone")
    core.create_namespaced_pod(ns, pod_body("p"))


def test_a_job_name_is_reusable_while_its_old_pods_terminate(k8s_api, core, batch, ns):
    k8s_api.settings.pod_termination_seconds = 0.5
    batch.create_namespaced_job(ns, job_body("train", completions=1))
    old = k8s_api.wait_for(lambda: _running_job_pods(core, ns), message="a running pod")
    batch.delete_namespaced_job("train", ns, propagation_policy="Background")
    k8s_api.wait_for(lambda: core.read_namespaced_pod(old[0], ns).metadata.deletion_timestamp,
                     message="the old pod terminating")
    batch.create_namespaced_job(ns, job_body("train", completions=1))
    new = k8s_api.wait_for(lambda: [n for n in _running_job_pods(core, ns) if n not in old],
                           message="the new job's pod")
    names = [p.metadata.name for p in core.list_namespaced_pod(ns).items]
    assert old[0] in names and new[0] in names


def _running_job_pods(core, ns: str) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod(ns).items
            if p.status.phase == "Running"]


def _quota(core, ns: str, **hard) -> None:
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "compute"},
                                               "spec": {"hard": hard}})


def _cpu_pod(name: str, cpu: str) -> dict:
    return pod_body(name, resources={"limits": {"cpu": cpu, "memory": "1Gi"}})


def test_a_pod_over_quota_is_403_with_the_real_message(k8s_api, core, ns):
    _quota(core, ns, **{"limits.cpu": "4"})
    core.create_namespaced_pod(ns, _cpu_pod("p1", "1"))
    core.create_namespaced_pod(ns, _cpu_pod("p2", "2"))
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_pod(ns, _cpu_pod("p3", "2"))
    status = status_of(error.value)
    assert (error.value.status, status["reason"]) == (403, "Forbidden")
    assert status["message"] == ('pods "p3" is forbidden: exceeded quota: compute, requested: '
                                 'limits.cpu=2, used: limits.cpu=3, limited: limits.cpu=4')
    k8s_api.wait_for(lambda: core.read_namespaced_resource_quota("compute", ns).status.used ==
                     {"limits.cpu": "3"}, message="status.used")
    k8s_api.wait_for(lambda: _running(core, ns, "p2"))
    k8s_api.controller.set_pod_phase(ns, "p2", "Succeeded")
    core.create_namespaced_pod(ns, _cpu_pod("p3", "2"))  # terminated pods use no quota


def test_quota_counts_gpus_and_memory_and_requires_limits(core, ns):
    _quota(core, ns, **{"requests.nvidia.com/gpu": "1", "limits.memory": "2Gi"})
    gpu = {"limits": {"nvidia.com/gpu": "1", "memory": "1536Mi"}}
    core.create_namespaced_pod(ns, pod_body("a", resources=gpu))
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_pod(ns, pod_body("b", resources=gpu))
    assert status_of(error.value)["message"] == (
        'pods "b" is forbidden: exceeded quota: compute, requested: limits.memory=1536Mi,'
        'requests.nvidia.com/gpu=1, used: limits.memory=1536Mi,requests.nvidia.com/gpu=1, '
        'limited: limits.memory=2Gi,requests.nvidia.com/gpu=1')
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_pod(ns, pod_body("c"))
    assert status_of(error.value)["message"] == (
        'pods "c" is forbidden: failed quota: compute: must specify limits.memory')


def test_limit_ranges_default_and_bound_container_resources(core, ns):
    core.create_namespaced_limit_range(ns, {"metadata": {"name": "limits"}, "spec": {"limits": [
        {"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "250m"},
         "max": {"cpu": "2"}}]}})
    pod = core.create_namespaced_pod(ns, pod_body("p"))
    assert pod.spec.containers[0].resources.limits == {"cpu": "500m"}
    assert pod.spec.containers[0].resources.requests == {"cpu": "250m"}
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_pod(ns, pod_body("big", resources={"limits": {"cpu": "4"}}))
    assert status_of(error.value)["message"] == (
        'pods "big" is forbidden: maximum cpu usage per Container is 2, but limit is 4')


def test_a_paused_controller_advances_one_sync_at_a_time(k8s_api, core, ns):
    k8s_api.settings.pod_start_seconds = 0.0
    k8s_api.controller.pause()
    core.create_namespaced_pod(ns, pod_body("p"))
    assert core.read_namespaced_pod("p", ns).spec.node_name is None
    k8s_api.controller.sync()
    assert core.read_namespaced_pod("p", ns).status.phase == "Running"
    k8s_api.controller.resume()
