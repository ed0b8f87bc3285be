"""Volcano in the fake cluster (``server.install("volcano")``), as volcano-sh/volcano does it:

- its ``root`` and ``default`` Queues exist from the start; a Queue is Open once its
  controller has seen it, and its status counts its PodGroups by phase;
- admission webhooks: a PodGroup may only be created in an existing, Open queue (else 400
  ``admission webhook "validatepodgroup.volcano.sh" denied the request: …``), ``default``
  and ``root`` cannot be deleted, a PodGroup in the ``default`` queue takes its namespace's
  ``scheduling.volcano.sh/queue-name`` annotation;
- the scheduler: pods with ``schedulerName: volcano`` are bound by it only (the default
  scheduler leaves them), by PodGroup (annotation ``scheduling.k8s.io/group-name``; a pod
  without one gets a one-pod PodGroup ``podgroup-<owner uid>``, as Volcano's podgroup
  controller does). A PodGroup goes Pending -> Inqueue when its queue is Open (and has
  ``capability`` left for ``minResources``); its pods are bound all at once, and only when
  at least ``minMember`` of them can be (pods a test holds ``Unschedulable`` cannot); then
  Running (Completed when all have succeeded), with ``running``/``succeeded``/``failed``
  counts and the gang plugin's conditions and messages."""

from __future__ import annotations

import copy
import uuid
from collections import Counter, defaultdict
from fractions import Fraction

from . import crds, resources
from .errors import ApiError
from .objects import now_iso
from .rules import parse_quantity

SCHEDULER_NAME = "volcano"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
MIN_MEMBER_ANNOTATION = "scheduling.volcano.sh/group-min-member"
_PERMANENT_QUEUES = ("root", "default")
_ALLOCATED = ("Bound", "Running", "Succeeded")  # tasks a gang counts as placed


class Volcano:
    def __init__(self, api, kubelet):
        self.api = api
        self.kubelet = kubelet  # binds pods and knows the tests' holds
        kinds = {rt.kind: rt for rt in crds.types("volcano")}
        self.queues, self.pod_groups = kinds["Queue"], kinds["PodGroup"]
        self._session = str(uuid.uuid4())  # the transition ID of the conditions it writes

    def install(self) -> None:
        """The queues Volcano's scheduler creates when it starts (weight 1, Open)."""
        for name in _PERMANENT_QUEUES:
            if self.api.store.get(self.queues.key, "", name) is None:
                queue = self.api.create(self.queues, "", {
                    "metadata": {"name": name},
                    "spec": {"weight": 1, "reclaimable": name == "default"}}, trusted=True)
                queue["status"] = {"state": "Open"}
                self.api.update(self.queues, queue, subresource="status")

    # --- webhooks ----------------------------------------------------------------------------

    def mutate(self, rt, obj: dict, old: dict | None) -> None:
        if old is not None:
            return
        if rt is self.queues:  # the queue mutating webhook
            spec = obj.setdefault("spec", {})
            spec.setdefault("reclaimable", True)
            spec["weight"] = spec.get("weight") or 1
        elif rt is self.pod_groups and (obj.get("spec") or {}).get("queue") == "default":
            namespace = self.api.store.get(resources.NAMESPACES.key, "",
                                           obj["metadata"]["namespace"]) or {"metadata": {}}
            queue = (namespace["metadata"].get("annotations") or {}).get(QUEUE_ANNOTATION)
            if queue:
                obj["spec"]["queue"] = queue

    def validate(self, rt, obj: dict, old: dict | None) -> None:
        if rt is not self.pod_groups or old is not None:
            return
        name = (obj.get("spec") or {}).get("queue") or ""
        queue = self.api.store.get(self.queues.key, "", name) if name else None
        if name and queue is None:
            _deny("validatepodgroup.volcano.sh",
                  f'unable to find queue: queue.scheduling.volcano.sh "{name}" not found')
        state = (queue or {}).get("status", {}).get("state", "")
        if name and state != "Open":
            _deny("validatepodgroup.volcano.sh", f"can only submit PodGroup to queue with "
                                                 f"state `Open`, queue `{name}` status is "
                                                 f"`{state}`")

    def validate_delete(self, rt, obj: dict) -> None:
        if rt is self.queues and obj["metadata"]["name"] in _PERMANENT_QUEUES:
            _deny("validatequeue.volcano.sh",
                  f"`{obj['metadata']['name']}` queue can not be deleted")

    # --- the loop ------------------------------------------------------------------------------

    def sync(self) -> None:
        store = self.api.store
        pods = [p for p in store.list(resources.PODS.key)
                if p["spec"].get("schedulerName") == SCHEDULER_NAME]
        members = defaultdict(list)
        for pod in pods:
            group = (pod["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION)
            if group is None:
                self._group_alone(pod)
            else:
                members[(pod["metadata"]["namespace"], group)].append(pod)
        queues = {q["metadata"]["name"]: q for q in store.list(self.queues.key)}
        groups = store.list(self.pod_groups.key)
        for group in groups:
            meta = group["metadata"]
            self._schedule(group, members[(meta["namespace"], meta["name"])], queues, groups)
        self._queue_status(queues, store.list(self.pod_groups.key))

    def _group_alone(self, pod: dict) -> None:
        """Volcano's podgroup controller: a pod with no group gets one, for its owner."""
        meta = pod["metadata"]
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")),
                     None)
        name = "podgroup-" + (owner["uid"] if owner else meta["uid"])
        annotations = meta.get("annotations") or {}
        if self.api.store.get(self.pod_groups.key, meta["namespace"], name) is None:
            reference = owner or {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                  "uid": meta["uid"], "controller": True}
            try:
                self.api.create(self.pod_groups, meta["namespace"], {
                    "metadata": {"name": name, "ownerReferences": [reference]},
                    "spec": {"minMember": int(annotations.get(MIN_MEMBER_ANNOTATION, 1)),
                             "queue": annotations.get(QUEUE_ANNOTATION, "default")}},
                    trusted=True)
            except ApiError as exc:
                if exc.code not in (400, 403, 404, 409):
                    raise
                return
        meta.setdefault("annotations", {})[GROUP_ANNOTATION] = name
        self.api.store.write(resources.PODS.key, pod)

    def _schedule(self, group: dict, pods: list[dict], queues: dict, groups: list) -> None:
        before = copy.deepcopy(group)
        spec, status = group.get("spec") or {}, group.setdefault("status", {})
        minimum = spec.get("minMember", 1)
        queue = queues.get(spec.get("queue") or "default")
        is_open = queue is not None and (queue.get("status") or {}).get("state") == "Open"
        phase = status.get("phase") or "Pending"
        if phase == "Pending" and is_open and _has_room(group, queue, groups):
            phase = "Inqueue"  # the enqueue action
        tasks = {p["metadata"]["uid"]: _task_status(p) for p in pods}
        pending = [p for p in pods if tasks[p["metadata"]["uid"]] == "Pending"
                   and not p["spec"].get("schedulingGates")]
        placed = sum(1 for t in tasks.values() if t in _ALLOCATED)
        ready = [p for p in pending if self.kubelet.unschedulable(p) is None]
        valid = sum(1 for t in tasks.values() if t in ("Pending", *_ALLOCATED))
        if phase in ("Inqueue", "Running", "Unknown") and is_open and valid >= minimum \
                and ready and placed + len(ready) >= minimum:  # the allocate action, all at once
            for pod in ready:
                if self.kubelet.bind(pod, component=SCHEDULER_NAME):
                    self.api.store.write(resources.PODS.key, pod)
                    tasks[pod["metadata"]["uid"]] = "Bound"
            placed = sum(1 for t in tasks.values() if t in _ALLOCATED)
        counts = Counter(tasks.values())
        if placed >= minimum and placed:
            phase = "Completed" if counts["Succeeded"] == placed else "Running"
        elif phase != "Inqueue":
            phase = "Pending"
        status.update(phase=phase, running=counts["Running"], succeeded=counts["Succeeded"],
                      failed=counts["Failed"])
        if tasks:
            self._gang_conditions(group, pods, tasks, placed >= minimum)
        if group != before:
            self._write(group)

    def _gang_conditions(self, group: dict, pods: list[dict], tasks: dict, ready: bool) -> None:
        """The gang plugin's condition at the end of a session, and what the scheduler tells
        the pods it could not place."""
        minimum = (group.get("spec") or {}).get("minMember", 1)
        histogram = Counter(tasks.values())
        reasons = sorted([f"{n} {status}" for status, n in histogram.items()] +
                         [f"{minimum} minAvailable"])
        fit_error = f"pod group is {'' if ready else 'not '}ready, {', '.join(reasons)}"
        if histogram["Pending"]:
            fit_error += f"; Pending: {histogram['Pending']} Unschedulable"
        if ready:
            _set_condition(group, "Scheduled", "tasks in gang are ready to be scheduled", "",
                           self._session)
            return
        unready = minimum - sum(1 for t in tasks.values() if t in _ALLOCATED)
        _set_condition(group, "Unschedulable", "NotEnoughResources",
                       f"{unready}/{len(tasks)} tasks in gang unschedulable: {fit_error}",
                       self._session)
        for pod in pods:
            if tasks[pod["metadata"]["uid"]] == "Pending" and not pod["spec"].get(
                    "schedulingGates"):
                original = copy.deepcopy(pod)
                self.kubelet.report_unschedulable(pod, fit_error, component=SCHEDULER_NAME)
                if pod != original:
                    self.api.store.write(resources.PODS.key, pod)

    def _queue_status(self, queues: dict, groups: list) -> None:
        phases = defaultdict(Counter)
        for group in groups:
            phases[(group.get("spec") or {}).get("queue") or "default"][
                (group.get("status") or {}).get("phase") or "Pending"] += 1
        for name, queue in queues.items():
            status = copy.deepcopy(queue.get("status") or {})
            status.setdefault("state", "Open")  # the queue controller opens a new queue
            counted = phases[name]
            for phase in ("Pending", "Inqueue", "Running", "Completed", "Unknown"):
                status[phase.lower()] = counted[phase]
            if status != (queue.get("status") or {}):
                queue["status"] = status
                try:
                    self.api.update(self.queues, queue, subresource="status")
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        raise

    def _write(self, group: dict) -> None:
        try:
            self.api.update(self.pod_groups, group)  # no status subresource: the whole object
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise


def _task_status(pod: dict) -> str:
    """The scheduler's view of a pod (its TaskStatus)."""
    phase = (pod.get("status") or {}).get("phase")
    if pod["metadata"].get("deletionTimestamp"):
        return "Releasing"
    if phase in ("Succeeded", "Failed"):
        return phase
    if not pod["spec"].get("nodeName"):
        return "Pending"
    return "Running" if phase == "Running" else "Bound"


def _has_room(group: dict, queue: dict, groups: list) -> bool:
    """The capacity check of enqueueing: the queue's ``capability`` holds the
    ``minResources`` of its admitted PodGroups and this one."""
    capability = (queue.get("spec") or {}).get("capability") or {}
    if not capability:
        return True
    name = queue["metadata"]["name"]
    used: dict = defaultdict(Fraction)
    others = [g for g in groups if g["metadata"]["uid"] != group["metadata"]["uid"]]
    for other in [*others, group]:
        if other is not group and (
                ((other.get("spec") or {}).get("queue") or "default") != name or
                (other.get("status") or {}).get("phase") not in ("Inqueue", "Running")):
            continue
        for resource, amount in ((other.get("spec") or {}).get("minResources") or {}).items():
            used[resource] += parse_quantity(amount).value
    return all(used[r] <= parse_quantity(limit).value for r, limit in capability.items())


def _set_condition(group: dict, type_: str, reason: str, message: str, session: str) -> None:
    """Volcano replaces the condition of that type; the other types stay as they were."""
    conditions = group["status"].setdefault("conditions", [])
    entry = next((c for c in conditions if c.get("type") == type_), None)
    if entry is not None and (entry.get("status"), entry.get("reason"),
                              entry.get("message")) == ("True", reason, message):
        return
    new = {"type": type_, "status": "True", "reason": reason, "message": message,
           "transitionID": session, "lastTransitionTime": now_iso()}
    if entry is None:
        conditions.append(new)
    else:
        entry.clear()
        entry.update(new)


def _deny(webhook: str, message: str) -> None:
    raise ApiError(400, "", f'admission webhook "{webhook}" denied the request: {message}')
