"""The in-process control plane: one thread running the garbage collector, namespace, quota,
StatefulSet and Job controllers, the scheduler and the kubelets, woken by every write and
every ``tick_seconds``. Tests steer it through the methods below; ``pause()`` and ``sync()``
make a scenario step by step."""

from __future__ import annotations

import threading
import traceback

from . import quota, resources
from .gc import GarbageCollector
from .job_controller import JobController
from .kubelet import HOLD_REASONS, Kubelet, PodPlan, Script
from .logs import pick_container
from .namespaces import NamespaceController
from .statefulset_controller import StatefulSetController
from .storage import ServiceAccountController, VolumeBinder


class Controller:
    def __init__(self, api, logs, kubelet_class=Kubelet):
        self.api = api
        self.logs = logs
        self.kubelet = kubelet_class(api, logs)
        self._loops = [GarbageCollector(api).sync, NamespaceController(api).sync,
                       ServiceAccountController(api).sync, VolumeBinder(api).sync,
                       lambda: quota.sync_status(api), StatefulSetController(api).sync,
                       JobController(api).sync, self.kubelet.sync]
        self.errors: list[str] = []  # tracebacks of failed passes (the fixture reports them)
        self._paused = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-k8s-controller",
                                        daemon=True)

    # --- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self.api.store.notify()
        self._thread.join(timeout=5)
        close = getattr(self.kubelet, "close", None)
        if close is not None:  # the process kubelet: its pods, network and files go
            close()

    def add_loop(self, loop) -> None:
        """An add-on's controller (addons.py): from now on it runs in every pass, before the
        scheduler and kubelets."""
        with self.api.store.lock:
            self._loops.insert(len(self._loops) - 1, loop)
            self.api.store.notify()

    def pause(self) -> None:
        """Stop reconciling in the background; ``sync()`` then runs single passes."""
        with self.api.store.lock:
            self._paused = True

    def resume(self) -> None:
        with self.api.store.lock:
            self._paused = False
            self.api.store.notify()

    def sync(self) -> None:
        """One reconciliation pass of every controller, now, in the caller's thread."""
        with self.api.store.lock:
            for loop in self._loops:
                try:
                    loop()
                except Exception:  # a bug in the fake: keep serving, report at teardown
                    self.errors.append(traceback.format_exc())

    def _run(self) -> None:
        store = self.api.store
        while not self._stopping.is_set():
            with store.lock:
                if not self._paused:
                    self.sync()
                store.changed.wait(self.api.settings.tick_seconds)

    # --- steering pods -------------------------------------------------------------------

    def hold_pods(self, name: str = "*", *, namespace: str | None = None,
                  reason: str = "Unschedulable", message: str | None = None) -> PodPlan:
        """Keep matching pods Pending: ``Unschedulable`` (PodScheduled False and a
        FailedScheduling event; ``TriggeredScaleUp`` or ``NotTriggerScaleUp``: so, and
        cluster-autoscaler's Event of that reason), ``ErrImagePull`` (then ImagePullBackOff,
        with the kubelet's events), ``Pulling`` (its image pull begun, not ended: the
        kubelet's Pulling event, Pulled once released) or ``ContainerCreating``. ``name`` is a
        glob on the pod name."""
        if reason not in HOLD_REASONS:
            raise ValueError(f"reason must be one of {HOLD_REASONS}")
        return self._add_plan(PodPlan(name, namespace, hold=reason, message=message))

    def release_pods(self, name: str | None = None, *, namespace: str | None = None) -> None:
        """Drop the holds added with this ``name`` glob (all holds when None)."""
        with self.api.store.lock:
            self.kubelet.plans = [p for p in self.kubelet.plans if not p.hold or (
                name is not None and (p.name, p.namespace) != (name, namespace))]
            self.api.store.notify()

    def script_pods(self, name: str = "*", *, namespace: str | None = None,
                    lines: tuple[str, ...] | list[str] = (), exit_code: int = 0,
                    reason: str | None = None, line_interval: float = 0.0,
                    run_seconds: float = 0.0, container: str | None = None,
                    message: str | None = None) -> PodPlan:
        """Matching pods' containers print ``lines`` once running, then exit with
        ``exit_code`` (``reason`` e.g. "OOMKilled"; ``message`` what they wrote to their
        terminationMessagePath); restarted containers run it again."""
        script = Script(tuple(lines), exit_code, reason, line_interval, run_seconds, message)
        return self._add_plan(PodPlan(name, namespace, script=script, container=container))

    def _add_plan(self, plan: PodPlan) -> PodPlan:
        with self.api.store.lock:
            self.kubelet.plans.append(plan)
            self.api.store.notify()
        return plan

    def terminate_container(self, namespace: str, pod: str, *, exit_code: int = 0,
                            container: str | None = None, reason: str | None = None) -> None:
        """The container (every running one when None) exits now with ``exit_code``."""
        with self.api.store.lock:
            obj = self._pod(namespace, pod)
            names = [container] if container else [
                s["name"] for s in obj["status"].get("containerStatuses") or []
                if "running" in s["state"]]
            if not names:
                raise ValueError(f"no container of pod {pod} is running")
            for name in names:
                self.kubelet.terminate(obj, name, exit_code, reason)
            self.api.store.write(resources.PODS.key, obj)

    def signal_container(self, namespace: str, pod: str, signum: int, *,
                         container: str | None = None) -> None:
        """Send ``signum`` to the container's PID 1 (every running container's when None);
        process kubelet only: its pods are processes."""
        with self.api.store.lock:
            self.kubelet.signal_container(self._pod(namespace, pod), container, signum)

    def lose_node(self, node: str) -> None:
        """``node`` (``fake-node-N``) stops answering: its pods get ``DisruptionTarget`` and stay
        Terminating until force-deleted; nothing more is scheduled there."""
        with self.api.store.lock:
            self.kubelet.lost_nodes.add(node)
            self.api.lose_node(node)
            self.api.store.notify()

    def set_pod_phase(self, namespace: str, pod: str, phase: str, *, reason: str | None = None,
                      message: str | None = None) -> None:
        """Force ``status.phase`` (e.g. Failed with reason Evicted); containers end."""
        with self.api.store.lock:
            obj = self._pod(namespace, pod)
            self.kubelet.set_phase(obj, phase, reason, message)
            self.api.store.write(resources.PODS.key, obj)

    def append_log(self, namespace: str, pod: str, lines: list[str] | str, *,
                   container: str | None = None) -> None:
        with self.api.store.lock:
            obj = self._pod(namespace, pod)
            name = pick_container(obj, container)
            self.logs.append(obj["metadata"]["uid"], name,
                             [lines] if isinstance(lines, str) else list(lines))

    def _pod(self, namespace: str, name: str) -> dict:
        return self.api.get(resources.PODS, namespace, name)
