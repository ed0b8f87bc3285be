"""The scheduler and the kubelets of the fake nodes: bind pods to nodes, start their
containers after a delay, run the tests' scripts (log lines, then an exit code), restart or
finish containers by the pod's restartPolicy, and remove pods whose termination is over.
Tests steer pods with plans: hold them unschedulable (a node being added for them by the
cluster's autoscaler, or none), failing to pull, pulling, or creating."""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
import secrets
import time
from dataclasses import dataclass, field

from . import resources
from .env import pod_env, pod_fields
from .objects import now_iso, set_condition
from .storage import claim_problem
from .store import json_copy

HOLD_REASONS = ("Unschedulable", "ErrImagePull", "ContainerCreating", "Pulling",
                "TriggeredScaleUp", "NotTriggerScaleUp")
# Unschedulable, and what cluster-autoscaler says of the pod (its Event's reason and message,
# worded as its own): a node group grows for it, or none can.
SCALE_UP_VERDICTS = {
    "TriggeredScaleUp": "pod triggered scale-up: [{fake-pool 3->4 (max: 10)}]",
    "NotTriggerScaleUp": "pod didn't trigger scale-up: 1 max node group size reached",
}
_TERMINAL = ("Succeeded", "Failed")
_SCHEDULER, _KUBELET, _AUTOSCALER = "default-scheduler", "kubelet", "cluster-autoscaler"


@dataclass(frozen=True)
class Script:
    """What a container does once running: print ``lines`` (one per ``line_interval``), keep
    running ``run_seconds`` more, then exit with ``exit_code``."""

    lines: tuple[str, ...] = ()
    exit_code: int = 0
    reason: str | None = None  # terminated reason; default Completed (0) or Error
    line_interval: float = 0.0
    run_seconds: float = 0.0
    message: str | None = None  # what the container wrote to its terminationMessagePath


@dataclass
class PodPlan:
    """Applies to pods whose name matches the glob ``name`` (in ``namespace``, or any);
    when several match, the latest added wins."""

    name: str
    namespace: str | None
    hold: str | None = None  # one of HOLD_REASONS
    message: str | None = None
    script: Script | None = None
    container: str | None = None  # the script's container; None: every container

    def matches(self, pod: dict) -> bool:
        meta = pod["metadata"]
        return fnmatch.fnmatchcase(meta["name"], self.name) and \
            self.namespace in (None, meta["namespace"])


@dataclass
class _Run:
    started_at: float
    lines_done: int = 0


@dataclass
class _PodRuntime:
    scheduled_at: float
    metadata: dict  # the pod's, as scheduled (what its logs are kept under once it is gone)
    pull_failed_at: float | None = None
    pulling: str | None = None  # the container whose image is being pulled (a Pulling hold)
    runs: dict[str, _Run] = field(default_factory=dict)  # running containers
    restart_at: dict[str, float] = field(default_factory=dict)  # containers in back-off


class Kubelet:
    def __init__(self, api, logs):
        self.api = api
        self.logs = logs
        self.plans: list[PodPlan] = []
        self._runtimes: dict[str, _PodRuntime] = {}
        self._binds = itertools.count()
        self._ips = itertools.count(2)
        self.lost_nodes: set[str] = set()  # nodes whose kubelet is gone (``lose_node``)
        self._verdicts: dict[str, str] = {}  # the autoscaler's last word on a pod, by uid

    # --- the loop ----------------------------------------------------------------------

    def sync(self) -> None:
        for original in self.api.store.list(resources.PODS.key, read_only=True):
            pod = json_copy(original)
            if self._sync_pod(pod) and pod != original:
                self.api.store.write(resources.PODS.key, pod)
        alive = self.api.store.uids(resources.PODS.key)
        for uid in [u for u in self._runtimes if u not in alive]:
            self.logs.forget(uid, self._runtimes.pop(uid).metadata)
        for uid in [u for u in self._verdicts if u not in alive]:
            del self._verdicts[uid]

    def _sync_pod(self, pod: dict) -> bool:
        """Advance one pod; False when it was removed instead."""
        uid = pod["metadata"]["uid"]
        if pod["spec"].get("nodeName") in self.lost_nodes:
            return True  # nobody there to run it, or to confirm it stopped
        kept = self._sync_termination(pod)
        if kept is not None:
            return kept
        if pod["status"].get("phase") in _TERMINAL:
            self._finished(pod)
            return True
        if not pod["spec"].get("nodeName"):
            self._schedule(pod)
        if pod["spec"].get("nodeName") and uid not in self._runtimes:
            self._accept(pod)
        runtime = self._runtimes.get(uid)
        if runtime is not None:
            self._run(pod, runtime)
        return True

    def _sync_termination(self, pod: dict) -> bool | None:
        """A terminating pod whose time is up fails, then goes (False once removed); None for
        a pod that is not done terminating."""
        due = self.api.pod_removal_due.get(pod["metadata"]["uid"])
        if due is None or time.monotonic() < due:
            return None
        if pod["status"].get("phase") not in _TERMINAL:  # its containers were stopped:
            self.set_phase(pod, "Failed", None, None)  # the pod fails first, as for real
            return True
        self.api.remove_terminated_pod(pod)
        return False

    def _finished(self, pod: dict) -> None:
        """A pod that has succeeded or failed (nothing to do for scripted pods)."""

    def _run(self, pod: dict, runtime: _PodRuntime) -> None:
        """A pod on this kubelet's node: start it, play its scripts, restart its containers."""
        if pod["status"]["phase"] == "Pending":
            self._start(pod, runtime)
        if pod["status"]["phase"] == "Running":
            self._run_scripts(pod, runtime)
            self._restart_backed_off(pod, runtime)

    # --- scheduling ----------------------------------------------------------------------

    def _schedule(self, pod: dict) -> None:
        if pod["spec"].get("schedulingGates"):
            return  # SchedulingGated (the API server says so at creation) until they are gone
        if pod["spec"].get("schedulerName", _SCHEDULER) != _SCHEDULER:
            return  # another scheduler's pod: never bound here (volcano.py binds Volcano's)
        message = self.unschedulable(pod)
        if message is not None:
            self.report_unschedulable(pod, message)
            self._autoscaler_verdict(pod)
        else:
            self.bind(pod)

    def _autoscaler_verdict(self, pod: dict) -> None:
        """cluster-autoscaler's Event on an unschedulable pod a test holds so: once per
        verdict, as it does not repeat a scale-up it has triggered."""
        plan = self.hold_for(pod)
        uid = pod["metadata"]["uid"]
        if plan and plan.hold in SCALE_UP_VERDICTS and self._verdicts.get(uid) != plan.hold:
            self._verdicts[uid] = plan.hold
            self.api.recorder.record(resources.PODS, pod, "Normal", plan.hold,
                                     SCALE_UP_VERDICTS[plan.hold], component=_AUTOSCALER)

    def unschedulable(self, pod: dict) -> str | None:
        """Why no node can take the pod (its claims, or a test's ``Unschedulable`` hold), as
        the scheduler words it; None when a node can."""
        plan = self.hold_for(pod)
        nodes = self.api.settings.node_count
        claims = claim_problem(self.api.store, pod)
        if not claims and not (plan and plan.hold in ("Unschedulable", *SCALE_UP_VERDICTS)):
            return None
        return (f"0/{nodes} nodes are available: {claims}. preemption: 0/{nodes} nodes "
                f"are available: {nodes} Preemption is not helpful for scheduling."
                if claims else plan.message or (
                    f"0/{nodes} nodes are available: {nodes} Insufficient nvidia.com/gpu."))

    def report_unschedulable(self, pod: dict, message: str, *,
                             component: str = _SCHEDULER) -> None:
        """PodScheduled False (Unschedulable), and a FailedScheduling event when new."""
        conditions = pod["status"].setdefault("conditions", [])
        already = any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                      and c.get("message") == message for c in conditions)
        set_condition(conditions, "PodScheduled", "False", reason="Unschedulable",
                      message=message)
        if not already:
            self.api.recorder.record(resources.PODS, pod, "Warning", "FailedScheduling",
                                     message, component=component)

    def bind(self, pod: dict, *, component: str = _SCHEDULER) -> bool:
        """Give the pod a live node (round robin), PodScheduled True and a Scheduled event;
        False when every node is lost. The caller writes the pod."""
        nodes = self.api.settings.node_count
        live = [f"fake-node-{n}" for n in range(nodes) if f"fake-node-{n}" not in self.lost_nodes]
        node = live[next(self._binds) % len(live)] if live else None
        if node is None:
            return False
        pod["spec"]["nodeName"] = node
        set_condition(pod["status"].setdefault("conditions", []), "PodScheduled", "True")
        meta = pod["metadata"]
        self.api.recorder.record(resources.PODS, pod, "Normal", "Scheduled",
                                 f"Successfully assigned {meta['namespace']}/{meta['name']} to "
                                 f"{node}", component=component)
        return True

    def _accept(self, pod: dict) -> None:
        """The node's kubelet takes the pod: containers wait in ContainerCreating."""
        status = pod["status"]
        match = re.fullmatch(r"fake-node-(\d+)", pod["spec"]["nodeName"])
        ip = f"10.0.0.{int(match.group(1)) + 1}" if match else "10.0.0.250"
        status.update(hostIP=ip, hostIPs=[{"ip": ip}], startTime=now_iso())
        conditions = status.setdefault("conditions", [])
        set_condition(conditions, "PodScheduled", "True")
        inits = pod["spec"].get("initContainers") or []
        if inits:  # the containers wait for them: PodInitializing, the pod not initialized
            set_condition(conditions, "Initialized", "False", reason="ContainersNotInitialized",
                          message=f"containers with incomplete status: "
                                  f"[{' '.join(c['name'] for c in inits)}]")
            status["initContainerStatuses"] = [_waiting_status(c, "PodInitializing")
                                               for c in inits]
        else:
            set_condition(conditions, "Initialized", "True")
        self._set_not_ready(pod, "ContainersNotReady")
        status["containerStatuses"] = [_waiting_status(c, "PodInitializing" if inits
                                                       else "ContainerCreating")
                                       for c in pod["spec"]["containers"]]
        self._runtimes[pod["metadata"]["uid"]] = _PodRuntime(time.monotonic(),
                                                               json_copy(pod["metadata"]))

    # --- starting ------------------------------------------------------------------------

    def _held(self, pod: dict, runtime: _PodRuntime) -> bool:
        """Whether a test holds the pod before its containers start (``hold_pods``): still
        being created, failing to pull its image or pulling it (which this reports: the
        first container's, an init container's when it has one, as the kubelet pulls)."""
        plan = self.hold_for(pod)
        if plan and plan.hold == "ErrImagePull":
            self._fail_pull(pod, runtime, plan)
        if plan and plan.hold == "Pulling" and runtime.pulling is None:
            first = (pod["spec"].get("initContainers") or pod["spec"]["containers"])[0]
            runtime.pulling = first["name"]
            self._event(pod, "Normal", "Pulling", f'Pulling image "{first["image"]}"',
                        first["name"])
        return bool(plan) and plan.hold in ("ContainerCreating", "ErrImagePull", "Pulling")

    def _start(self, pod: dict, runtime: _PodRuntime) -> None:
        if self._held(pod, runtime):
            return
        if time.monotonic() - runtime.scheduled_at < self.api.settings.pod_start_seconds:
            return
        if runtime.pulling is not None:  # the pull a test held is over
            image = next(c["image"] for c in (pod["spec"].get("initContainers") or [])
                         + pod["spec"]["containers"] if c["name"] == runtime.pulling)
            self._event(pod, "Normal", "Pulled", f'Successfully pulled image "{image}"',
                        runtime.pulling)
            runtime.pulling = None
        status, now = pod["status"], time.monotonic()
        for entry in status.get("initContainerStatuses") or []:
            entry.update(state={"terminated": _terminated(0, "Completed", _new_id())},
                         ready=True, started=False)
        status["containerStatuses"] = [_running_status(c) for c in pod["spec"]["containers"]]
        for container in pod["spec"]["containers"]:
            runtime.runs[container["name"]] = _Run(now)
            for reason, message in (("Pulled", f'Container image "{container["image"]}" already '
                                               f"present on machine"),
                                    ("Created", f"Created container {container['name']}"),
                                    ("Started", f"Started container {container['name']}")):
                self._event(pod, "Normal", reason, message, container["name"])
        number = next(self._ips)
        status.update(phase="Running", podIP=f"10.244.{number // 250}.{number % 250 + 2}")
        status["podIPs"] = [{"ip": status["podIP"]}]
        self._set_ready(pod)

    def _fail_pull(self, pod: dict, runtime: _PodRuntime, plan: PodPlan) -> None:
        now = time.monotonic()
        for entry in pod["status"]["containerStatuses"]:
            image, reason = entry["image"], entry["state"]["waiting"]["reason"]
            if reason not in ("ErrImagePull", "ImagePullBackOff"):
                message = plan.message or _pull_error(image)
                entry["state"] = {"waiting": {"reason": "ErrImagePull", "message": message}}
                runtime.pull_failed_at = now
                self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"', entry["name"])
                self._event(pod, "Warning", "Failed",
                            f'Failed to pull image "{image}": {message}', entry["name"])
                self._event(pod, "Warning", "Failed", "Error: ErrImagePull", entry["name"])
            elif reason == "ErrImagePull" and \
                    now - runtime.pull_failed_at >= self.api.settings.image_pull_backoff_seconds:
                entry["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                              "message": f'Back-off pulling image "{image}"'}}
                self._event(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"',
                            entry["name"])
                self._event(pod, "Warning", "Failed", "Error: ImagePullBackOff", entry["name"])

    # --- running ------------------------------------------------------------------------

    def _run_scripts(self, pod: dict, runtime: _PodRuntime) -> None:
        now = time.monotonic()
        for name, run in list(runtime.runs.items()):
            script = self.script_for(pod, name)
            if script is None:
                continue
            interval = script.line_interval
            due = len(script.lines) if interval <= 0 else min(
                len(script.lines), int((now - run.started_at) / interval))
            if due > run.lines_done:
                printed = list(script.lines[run.lines_done:due])
                self.logs.append(pod["metadata"]["uid"], name, printed)
                _tee(pod, name, printed)
                run.lines_done = due
            ends_at = run.started_at + len(script.lines) * max(interval, 0) + script.run_seconds
            if run.lines_done == len(script.lines) and now >= ends_at:
                self.terminate(pod, name, script.exit_code, script.reason, script.message)

    def terminate(self, pod: dict, container: str, exit_code: int,
                  reason: str | None = None, message: str | None = None) -> None:
        """End a running container; restart it later or finish the pod, per restartPolicy."""
        runtime = self._runtimes.get(pod["metadata"]["uid"])
        entry = next((e for e in pod["status"].get("containerStatuses") or []
                      if e["name"] == container), None)
        if runtime is None or entry is None or "running" not in entry["state"]:
            raise ValueError(f"container {container} of pod {pod['metadata']['name']} is not "
                             f"running")
        runtime.runs.pop(container, None)
        reason = reason or ("Completed" if exit_code == 0 else "Error")
        ended = _terminated(exit_code, reason, entry["containerID"],
                            entry["state"]["running"]["startedAt"])
        if message:
            ended["message"] = message
        policy = pod["spec"].get("restartPolicy", "Always")
        entry.update(ready=False, started=False)
        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
            meta = pod["metadata"]
            self._back_off(pod, entry, ended)
            self._event(pod, "Warning", "BackOff", f"Back-off restarting failed container "
                        f"{container} in pod {meta['name']}_{meta['namespace']}({meta['uid']})",
                        container)
        else:
            entry["state"] = {"terminated": ended}
        self._settle(pod)

    def _back_off(self, pod: dict, entry: dict, ended: dict) -> None:
        """The container of status ``entry`` ended (``ended``, its terminated state) and will
        run again: CrashLoopBackOff until its back-off is over (``_restart_backed_off``)."""
        meta = pod["metadata"]
        entry["lastState"] = {"terminated": ended}
        entry["state"] = {"waiting": {
            "reason": "CrashLoopBackOff",
            "message": f"back-off 10s restarting failed container={entry['name']} "
                       f"pod={meta['name']}_{meta['namespace']}({meta['uid']})"}}
        self._runtimes[meta["uid"]].restart_at[entry["name"]] = \
            time.monotonic() + self.api.settings.crash_backoff_seconds

    def _restart_backed_off(self, pod: dict, runtime: _PodRuntime) -> None:
        """Containers whose CrashLoopBackOff is over run again (a fresh log, restartCount+1)."""
        now = time.monotonic()
        due = [name for name, at in runtime.restart_at.items() if now >= at]
        for name in due:
            del runtime.restart_at[name]
            entry = next(e for e in pod["status"]["containerStatuses"] if e["name"] == name)
            self.logs.restart(pod["metadata"]["uid"], name)
            restarts = entry.get("restartCount", 0) + 1
            container = next(c for c in pod["spec"]["containers"] if c["name"] == name)
            entry.update(_running_status(container), restartCount=restarts,
                         lastState=entry.get("lastState", {}))
            runtime.runs[name] = _Run(now)
            self._event(pod, "Normal", "Started", f"Started container {name}", name)
        if due:
            self._settle(pod)

    def signal_container(self, pod: dict, container: str | None, number: int) -> None:
        raise ValueError("the scripted kubelet runs no processes: use terminate_container")

    def set_phase(self, pod: dict, phase: str, reason: str | None, message: str | None) -> None:
        """Force a pod's phase; containers still alive end (exit 0 for Succeeded, else 137)."""
        runtime = self._runtimes.get(pod["metadata"]["uid"])
        exit_code = 0 if phase == "Succeeded" else 137
        for entry in pod["status"].get("containerStatuses") or []:
            if "terminated" not in entry["state"]:
                entry.update(ready=False, started=False, state={"terminated": _terminated(
                    exit_code, "Completed" if exit_code == 0 else "Error",
                    entry.get("containerID") or _new_id())})
        if runtime:
            runtime.runs.clear()
            runtime.restart_at.clear()
        pod["status"].update(phase=phase)
        for key, value in (("reason", reason), ("message", message)):
            if value:
                pod["status"][key] = value
        self._settle(pod)

    # --- status bookkeeping ------------------------------------------------------------

    def _settle(self, pod: dict) -> None:
        """Derive phase and readiness from the container states."""
        status = pod["status"]
        states = [e["state"] for e in status.get("containerStatuses") or []]
        if states and all("terminated" in s for s in states) and \
                status["phase"] not in _TERMINAL:
            failed = any(s["terminated"]["exitCode"] != 0 for s in states)
            status["phase"] = "Failed" if failed else "Succeeded"
        if status["phase"] in _TERMINAL:
            self._set_not_ready(pod, "PodFailed" if status["phase"] == "Failed"
                                else "PodCompleted")
            set_condition(status["conditions"], "PodReadyToStartContainers", "False")
        elif states and all("running" in s for s in states):
            self._set_ready(pod)
        else:
            self._set_not_ready(pod, "ContainersNotReady")

    def _set_ready(self, pod: dict) -> None:
        conditions = pod["status"].setdefault("conditions", [])
        for type_ in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
            set_condition(conditions, type_, "True")

    def _set_not_ready(self, pod: dict, reason: str) -> None:
        conditions = pod["status"].setdefault("conditions", [])
        waiting = [e["name"] for e in pod["status"].get("containerStatuses") or []
                   if not e.get("ready")] or [c["name"] for c in pod["spec"]["containers"]]
        message = f"containers with unready status: [{' '.join(waiting)}]" \
            if reason == "ContainersNotReady" else None
        for type_ in ("Ready", "ContainersReady"):
            set_condition(conditions, type_, "False", reason=reason, message=message)

    def _event(self, pod: dict, type_: str, reason: str, message: str, container: str) -> None:
        self.api.recorder.record(resources.PODS, pod, type_, reason, message,
                                 component=_KUBELET, host=pod["spec"].get("nodeName"),
                                 field_path=f"spec.containers{{{container}}}")

    # --- plans -------------------------------------------------------------------------

    def hold_for(self, pod: dict) -> PodPlan | None:
        return next((p for p in reversed(self.plans) if p.hold and p.matches(pod)), None)

    def script_for(self, pod: dict, container: str) -> Script | None:
        return next((p.script for p in reversed(self.plans) if p.script and p.matches(pod)
                     and p.container in (None, container)), None)


def _new_id() -> str:
    return "containerd://" + secrets.token_hex(32)


def _waiting_status(container: dict, reason: str) -> dict:
    return {"name": container["name"], "image": container["image"], "imageID": "",
            "ready": False, "started": False, "restartCount": 0,
            "state": {"waiting": {"reason": reason}}, "lastState": {}}


def _running_status(container: dict) -> dict:
    image = container["image"]
    return {"name": container["name"], "image": image,
            "imageID": f"docker.io/library/{image}@sha256:{secrets.token_hex(32)}",
            "containerID": _new_id(), "ready": True, "started": True, "restartCount": 0,
            "state": {"running": {"startedAt": now_iso()}}, "lastState": {}}


def _terminated(exit_code: int, reason: str, container_id: str,
                started_at: str | None = None) -> dict:
    return {"exitCode": exit_code, "reason": reason, "startedAt": started_at or now_iso(),
            "finishedAt": now_iso(), "containerID": container_id}


def _pull_error(image: str) -> str:
    ref = image if "/" in image else f"docker.io/library/{image}"
    ref = ref if ":" in ref.rsplit("/", 1)[-1] else f"{ref}:latest"
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed '
            f'to resolve reference "{ref}": {ref}: not found')


def _tee(pod: dict, container: str, lines: list[str]) -> None:
    """What the container's start script does with its output besides printing it: append it
    to the file named by PADDLECLOUD_LOG, when that is on a hostPath volume that exists on
    this machine (the tests' PFS)."""
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    target = pod_env(spec, pod_fields(pod)).get("PADDLECLOUD_LOG")
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    for mount in spec.get("volumeMounts") or []:
        prefix = mount["mountPath"].rstrip("/") + "/"
        host = (volumes.get(mount["name"]) or {}).get("hostPath", {}).get("path")
        if not target or not host or not target.startswith(prefix) or \
                not os.path.isdir(host):
            continue
        path = os.path.join(host, mount.get("subPath", ""), target[len(prefix):])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as f:
            f.write("".join(f"{line}\n" for line in lines))
        return
