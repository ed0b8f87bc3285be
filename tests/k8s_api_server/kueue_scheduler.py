"""Kueue's scheduler, queue controllers and visibility API in the fake, with Kueue's own
conditions and messages (pkg/scheduler, pkg/controller/core, pkg/visibility):

- each ClusterQueue admits its pending Workloads (those of the LocalQueues pointing at it,
  from namespaces its ``namespaceSelector`` matches) in queue order: priority, then creation
  time; ``BestEffortFIFO`` tries every one, ``StrictFIFO`` stops at the first that does not
  fit. A Workload fits when, for every resource its pod sets request (summed over the pods,
  LimitRange defaults applied), a flavor of the resource group covering it has
  ``nominalQuota`` left (no cohorts, borrowing or preemption);
- admission writes ``status.admission`` and the QuotaReserved and Admitted conditions; a
  Workload left pending gets QuotaReserved False with Kueue's message, e.g.
  ``couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in
  flavor default, 2 more needed``;
- Finished Workloads (and deleted ones) hold no quota;
- LocalQueue and ClusterQueue status: pending, reserving and admitted counts, flavor usage,
  the Active condition;
- GET /apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/<ns>/localqueues/<lq>/pendingworkloads
  (and clusterqueues/<cq>/pendingworkloads): a PendingWorkloadsSummary, in queue order."""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

from . import errors, quota, resources
from .errors import ApiError
from .objects import now_iso, seconds_since
from .quantity import Quantity
from .resources import ResourceType
from .rules import parse_quantity
from .selectors import labels_match, selector_from_spec

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
_COMPONENT = "kueue-admission"
_RESERVED, _ADMITTED, _FINISHED = "QuotaReserved", "Admitted", "Finished"


@dataclass(frozen=True)
class VirtualType(ResourceType):
    """A resource of an aggregated API server: nothing stored, ``serve(namespace, name,
    subresource, query)`` answers the GETs (handler.py)."""

    verbs: tuple = ()
    serve: object = field(default=None, compare=False, repr=False)


def condition(obj: dict, type_: str) -> dict | None:
    """The condition of that type when it is True."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == type_ and c["status"] == "True"), None)


def set_metav1_condition(obj: dict, type_: str, status: str, reason: str,
                         message: str) -> bool:
    """A metav1.Condition (apimeta.SetStatusCondition); True when something changed."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    entry = next((c for c in conditions if c["type"] == type_), None)
    if entry is not None and (entry.get("status"), entry.get("reason"),
                              entry.get("message")) == (status, reason, message):
        return False
    new = {"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": now_iso() if entry is None or entry.get("status") != status
           else entry.get("lastTransitionTime") or now_iso(),
           "observedGeneration": obj["metadata"].get("generation", 1)}
    if entry is None:
        conditions.append(new)
    else:
        entry.clear()
        entry.update(new)
    return True


@dataclass
class _State:
    """One look at the objects: queues, flavors, quota in use, pending Workloads per queue."""

    cluster_queues: dict
    local_queues: dict
    flavors: set
    namespaces: dict
    workloads: list
    used: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(Fraction)))
    queues: dict = field(default_factory=lambda: defaultdict(list))  # cq -> pending, ordered
    blocked: list = field(default_factory=list)  # (workload, message)


class KueueScheduler:
    def __init__(self, api, kinds: dict, order):
        self.api = api
        self.flavors = kinds["ResourceFlavor"]
        self.cluster_queues = kinds["ClusterQueue"]
        self.local_queues = kinds["LocalQueue"]
        self.workloads = kinds["Workload"]
        self.order = order  # Kueue.order: creation order, for equal timestamps
        self.visibility = (
            VirtualType("localqueues", "localqueue", "PendingWorkloadsSummary",
                        VISIBILITY_GROUP, "v1beta1", subresources=("pendingworkloads",),
                        serve=self._serve_local_queue),
            VirtualType("clusterqueues", "clusterqueue", "PendingWorkloadsSummary",
                        VISIBILITY_GROUP, "v1beta1", namespaced=False,
                        subresources=("pendingworkloads",), serve=self._serve_cluster_queue))

    # --- the loop ----------------------------------------------------------------------------

    def sync(self) -> None:
        state = self._state()
        for workload, message in state.blocked:
            self._pending(workload, "Inadmissible", message, event=False)
        for name, queue in state.queues.items():
            cluster_queue = state.cluster_queues[name]
            strict = cluster_queue["spec"].get("queueingStrategy") == "StrictFIFO"
            for workload in queue:
                assignments, message = self._assign(cluster_queue, workload, state)
                if assignments is not None:
                    self._admit(workload, name, assignments, state)
                    continue
                self._pending(workload, "Pending", message)
                if strict and message != _NAMESPACE_MISMATCH:
                    break  # the head blocks the rest
        self._write_statuses(self._state())

    def _state(self) -> _State:
        store = self.api.store
        state = _State(
            {q["metadata"]["name"]: q for q in store.list(self.cluster_queues.key)},
            {(q["metadata"]["namespace"], q["metadata"]["name"]): q
             for q in store.list(self.local_queues.key)},
            {f["metadata"]["name"] for f in store.list(self.flavors.key)},
            {n["metadata"]["name"]: n for n in store.list(resources.NAMESPACES.key)},
            [w for w in store.list(self.workloads.key)
             if not w["metadata"].get("deletionTimestamp") and not condition(w, _FINISHED)])
        pending = []
        for workload in state.workloads:
            admission = (workload.get("status") or {}).get("admission")
            if condition(workload, _RESERVED) and admission:
                for key, amount in _usage(admission).items():
                    state.used[admission["clusterQueue"]][key] += amount
            elif workload["spec"].get("active", True):
                pending.append(workload)
        for workload in pending:
            name, message = self._queue_of(workload, state)
            if message:
                state.blocked.append((workload, message))
            else:
                state.queues[name].append(workload)
        for queue in state.queues.values():
            queue.sort(key=lambda w: (-(w["spec"].get("priority") or 0),
                                      w["metadata"]["creationTimestamp"], self.order(w)))
        return state

    def _queue_of(self, workload: dict, state: _State) -> tuple[str | None, str | None]:
        """(ClusterQueue, None), or (None, why the Workload cannot queue there)."""
        name = workload["spec"].get("queueName") or ""
        local = state.local_queues.get((workload["metadata"]["namespace"], name))
        if local is None:
            return None, f"LocalQueue {name} doesn't exist"
        if local["spec"].get("stopPolicy", "None") != "None":
            return None, f"LocalQueue {name} is inactive"
        cq_name = local["spec"]["clusterQueue"]
        cluster_queue = state.cluster_queues.get(cq_name)
        if cluster_queue is None:
            return None, f"ClusterQueue {cq_name} doesn't exist"
        if _inactive(cluster_queue, state.flavors):
            return None, f"ClusterQueue {cq_name} is inactive"
        return cq_name, None

    # --- flavor assignment --------------------------------------------------------------------

    def _assign(self, cluster_queue: dict, workload: dict, state: _State):
        """(podSetAssignments, "") when the Workload fits, else (None, Kueue's message)."""
        namespace = state.namespaces.get(workload["metadata"]["namespace"]) or {"metadata": {}}
        selector = cluster_queue["spec"].get("namespaceSelector")
        if selector is None or not labels_match(selector_from_spec(selector),
                                                namespace["metadata"].get("labels")):
            return None, _NAMESPACE_MISMATCH
        groups = cluster_queue["spec"].get("resourceGroups") or []
        used = state.used[cluster_queue["metadata"]["name"]]
        assumed: dict = defaultdict(Fraction)  # this Workload's earlier pod sets
        assignments, messages = [], []
        for name, count, requests in self._requests(workload, groups):
            flavors, reasons = _fit(groups, requests, used, assumed)
            if reasons:
                messages.append(f"couldn't assign flavors to pod set {name}: {reasons}")
                continue
            for resource, amount in requests.items():
                assumed[(flavors[resource], resource)] += amount
            assignments.append({"name": name, "count": count, "flavors": flavors,
                                "resourceUsage": {r: format_amount(r, a)
                                                  for r, a in requests.items()}})
        return (None, "; ".join(messages)) if messages else (assignments, "")

    def _requests(self, workload: dict, groups: list) -> list[tuple[str, int, dict]]:
        """(pod set, count, total requests) per pod set, as Kueue's workload.Info sums them:
        LimitRange defaults applied, limits standing in for missing requests."""
        limits = [item for lr in self.api.store.list(resources.LIMITRANGES.key,
                                                     workload["metadata"]["namespace"])
                  for item in (lr.get("spec") or {}).get("limits") or []
                  if item.get("type") == "Container"]
        counts_pods = any("pods" in g.get("coveredResources", []) for g in groups)
        found = []
        for pod_set in workload["spec"]["podSets"]:
            spec = copy.deepcopy((pod_set.get("template") or {}).get("spec") or {})
            for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                _default_resources(container, limits)
            per_pod = {key.removeprefix("requests."): value.value
                       for key, value in quota.pod_compute_usage(spec).items()
                       if key.startswith("requests.")}
            for name, value in (spec.get("overhead") or {}).items():
                per_pod[name] = per_pod.get(name, 0) + parse_quantity(value).value
            count = pod_set.get("count", 1)
            requests = {name: value * count for name, value in per_pod.items() if value}
            if counts_pods:
                requests["pods"] = Fraction(count)
            found.append((pod_set.get("name", "main"), count, dict(sorted(requests.items()))))
        return found

    # --- writing --------------------------------------------------------------------------

    def _admit(self, workload: dict, cq_name: str, assignments: list, state: _State) -> None:
        workload.setdefault("status", {})["admission"] = {"clusterQueue": cq_name,
                                                          "podSetAssignments": assignments}
        set_metav1_condition(workload, _RESERVED, "True", "QuotaReserved",
                             f"Quota reserved in ClusterQueue {cq_name}")
        set_metav1_condition(workload, _ADMITTED, "True", "Admitted",
                             "The workload is admitted")
        if not self._write_status(self.workloads, workload):
            return
        for key, amount in _usage(workload["status"]["admission"]).items():
            state.used[cq_name][key] += amount
        waited = seconds_since(workload["metadata"]["creationTimestamp"])
        self._event(workload, "Normal", "QuotaReserved", f"Quota reserved in ClusterQueue "
                    f"{cq_name}, wait time since queued was {waited:.0f}s")
        self._event(workload, "Normal", "Admitted", f"Admitted by ClusterQueue {cq_name}, wait "
                    f"time since reservation was 0s")

    def _pending(self, workload: dict, reason: str, message: str, *, event: bool = True
                 ) -> None:
        workload.setdefault("status", {}).pop("admission", None)
        if set_metav1_condition(workload, _RESERVED, "False", reason, message) and \
                self._write_status(self.workloads, workload) and event:
            self._event(workload, "Warning", reason, message)

    def _write_statuses(self, state: _State) -> None:
        counts = defaultdict(lambda: defaultdict(int))  # queue key -> count name -> n
        usage = defaultdict(lambda: defaultdict(Fraction))  # queue key -> (flavor, res) -> n
        for workload in state.workloads:
            local = (workload["metadata"]["namespace"], workload["spec"].get("queueName"))
            admission = (workload.get("status") or {}).get("admission")
            reserved = bool(condition(workload, _RESERVED) and admission)
            keys = [local] + ([admission["clusterQueue"]] if reserved else [])
            if reserved:
                for key in keys:
                    counts[key]["reservingWorkloads"] += 1
                    counts[key]["admittedWorkloads"] += bool(condition(workload, _ADMITTED))
                    for flavor_resource, amount in _usage(admission).items():
                        usage[key][flavor_resource] += amount
            elif workload["spec"].get("active", True):
                counts[local]["pendingWorkloads"] += 1
        for name, queue in state.queues.items():
            counts[name]["pendingWorkloads"] = len(queue)
        for name, cluster_queue in state.cluster_queues.items():
            flavors = _flavor_usage(cluster_queue, usage[name], borrowed=True)
            self._set_status(self.cluster_queues, cluster_queue, counts[name], {
                "flavorsReservation": flavors, "flavorsUsage": copy.deepcopy(flavors)},
                _cluster_queue_active(cluster_queue, state.flavors))
        for key, local in state.local_queues.items():
            cluster_queue = state.cluster_queues.get(local["spec"]["clusterQueue"])
            flavors = _flavor_usage(cluster_queue, usage[key]) if cluster_queue else []
            active = ("True", "Ready", "Can submit new workloads to localQueue") \
                if cluster_queue is not None else \
                ("False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
            if local["spec"].get("stopPolicy", "None") != "None":
                active = ("False", "Stopped", "LocalQueue is stopped")
            self._set_status(self.local_queues, local, counts[key], {
                "flavorsReservation": flavors, "flavorUsage": copy.deepcopy(flavors)}, active)

    def _set_status(self, rt, queue: dict, counts: dict, flavors: dict, active: tuple) -> None:
        before = copy.deepcopy(queue.get("status") or {})
        status = queue.setdefault("status", {})
        for name in ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads"):
            status[name] = counts.get(name, 0)
        status.update(flavors)
        set_metav1_condition(queue, "Active", *active)
        if status != before:
            self._write_status(rt, queue)

    def _write_status(self, rt, obj: dict) -> bool:
        try:
            self.api.update(rt, obj, subresource="status")
        except ApiError as exc:
            if exc.code in (404, 409):  # gone, or changed since read: the next pass
                return False
            raise
        return True

    def _event(self, workload: dict, type_: str, reason: str, message: str) -> None:
        self.api.recorder.record(self.workloads, workload, type_, reason, message,
                                 component=_COMPONENT)

    # --- the visibility API -------------------------------------------------------------------

    def _serve_local_queue(self, namespace: str, name: str | None, subresource: str | None,
                           query: dict) -> dict:
        if name is None or subresource != "pendingworkloads":
            raise errors.method_not_allowed("get")
        with self.api.store.lock:
            local = self.api.store.get(self.local_queues.key, namespace, name)
            if local is None:
                raise _not_found("localqueue", name)
            queue = self._state().queues.get(local["spec"]["clusterQueue"], [])
            mine = [(i, w) for i, w in enumerate(queue) if w["metadata"]["namespace"] ==
                    namespace and w["spec"].get("queueName") == name]
        return _summary(mine, query, lambda position, _: position)

    def _serve_cluster_queue(self, namespace: str | None, name: str | None,
                             subresource: str | None, query: dict) -> dict:
        if name is None or subresource != "pendingworkloads":
            raise errors.method_not_allowed("get")
        with self.api.store.lock:
            if self.api.store.get(self.cluster_queues.key, "", name) is None:
                raise _not_found("clusterqueue", name)
            queue = self._state().queues.get(name, [])
        seen: dict = defaultdict(int)

        def in_local_queue(_, workload: dict) -> int:
            key = (workload["metadata"]["namespace"], workload["spec"].get("queueName"))
            seen[key] += 1
            return seen[key] - 1
        return _summary(list(enumerate(queue)), query, in_local_queue)


_NAMESPACE_MISMATCH = "workload namespace doesn't match ClusterQueue selector"
_MEMORY_LIKE = ("memory", "ephemeral-storage")


def format_amount(resource: str, amount: Fraction) -> str:
    """A quantity as Kueue prints it: cpu in decimal ("500m"), memory in binary ("1Gi")."""
    binary = resource in _MEMORY_LIKE or resource.startswith("hugepages-")
    return str(Quantity(Fraction(amount), binary=binary))


def _fit(groups: list, requests: dict, used: dict, assumed: dict) -> tuple[dict, str]:
    """({resource: flavor}, "") or ({}, the reasons, sorted and joined as Kueue does)."""
    for resource in requests:
        if not any(resource in g.get("coveredResources", []) for g in groups):
            return {}, f"resource {resource} unavailable in ClusterQueue"
    chosen, reasons = {}, []
    for group in groups:
        wanted = [r for r in requests if r in group.get("coveredResources", [])]
        if not wanted:
            continue
        tried = []
        for flavor in group.get("flavors") or []:
            quotas = {r["name"]: parse_quantity(r.get("nominalQuota", 0)).value
                      for r in flavor.get("resources") or []}
            problems = []
            for resource in wanted:
                key = (flavor["name"], resource)
                nominal = quotas.get(resource, Fraction(0))
                value = assumed[key] + requests[resource]
                if value > nominal:
                    problems.append(
                        f"insufficient quota for {resource} in flavor {flavor['name']}, "
                        f"previously considered podsets requests "
                        f"({format_amount(resource, assumed[key])}) + current podset request "
                        f"({format_amount(resource, requests[resource])}) > maximum capacity "
                        f"({format_amount(resource, nominal)})")
                elif value > nominal - used[key]:
                    problems.append(
                        f"insufficient unused quota for {resource} in flavor {flavor['name']}, "
                        f"{format_amount(resource, value - nominal + used[key])} more needed")
            if not problems:
                chosen.update({r: flavor["name"] for r in wanted})
                break
            tried += problems
        else:
            reasons += tried or [f"resource {wanted[0]} unavailable in ClusterQueue"]
    return (chosen, "") if not reasons else ({}, ", ".join(sorted(reasons)))


def _usage(admission: dict) -> dict:
    """(flavor, resource) -> amount an admission holds."""
    found: dict = defaultdict(Fraction)
    for assignment in admission.get("podSetAssignments") or []:
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            flavor = (assignment.get("flavors") or {}).get(resource)
            if flavor:
                found[(flavor, resource)] += parse_quantity(amount).value
    return found


def _default_resources(container: dict, limits: list[dict]) -> None:
    res = container.setdefault("resources", {})
    for item in limits:
        for source, target in (("default", "limits"), ("defaultRequest", "requests")):
            for name, value in (item.get(source) or {}).items():
                res.setdefault(target, {}).setdefault(name, value)
    for name, value in (res.get("limits") or {}).items():
        res.setdefault("requests", {}).setdefault(name, value)


def _inactive(cluster_queue: dict, flavors: set) -> bool:
    return _cluster_queue_active(cluster_queue, flavors)[0] != "True"


def _cluster_queue_active(cluster_queue: dict, flavors: set) -> tuple[str, str, str]:
    reasons, messages = [], []
    if cluster_queue["spec"].get("stopPolicy", "None") != "None":
        reasons.append("Stopped")
        messages.append("is stopped")
    missing = sorted({f["name"] for g in cluster_queue["spec"].get("resourceGroups") or []
                      for f in g.get("flavors") or []} - flavors)
    if missing:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    if reasons:
        return "False", reasons[0], f"Can't admit new workloads: {', '.join(messages)}."
    return "True", "Ready", "Can admit new workloads"


def _flavor_usage(cluster_queue: dict, usage: dict, *, borrowed: bool = False) -> list[dict]:
    found = []
    for group in cluster_queue["spec"].get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            entries = []
            for resource in flavor.get("resources") or []:
                amount = usage.get((flavor["name"], resource["name"]), Fraction(0))
                entry = {"name": resource["name"],
                         "total": format_amount(resource["name"], amount)}
                if borrowed:
                    entry["borrowed"] = "0"
                entries.append(entry)
            found.append({"name": flavor["name"], "resources": entries})
    return found


def _not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource}.{VISIBILITY_GROUP} "{name}" not found',
                    details={"name": name, "group": VISIBILITY_GROUP, "kind": resource})


def _summary(queue: list[tuple[int, dict]], query: dict, local_position) -> dict:
    """A PendingWorkloadsSummary of ``queue`` ((position in the ClusterQueue, workload)),
    ``offset`` and ``limit`` (1000 by default) applied."""
    limit = int(query.get("limit") or 0) or 1000
    offset = max(int(query.get("offset") or 0), 0)
    items = []
    for position, (in_cluster_queue, workload) in enumerate(queue):
        in_local_queue = local_position(position, workload)
        if position < offset or len(items) >= max(limit, 0):
            continue
        meta = workload["metadata"]
        owners = [{k: ref[k] for k in ("apiVersion", "kind", "name", "uid")}
                  for ref in meta.get("ownerReferences") or []]
        items.append({
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "creationTimestamp": meta["creationTimestamp"],
                         **({"ownerReferences": owners} if owners else {})},
            "priority": workload["spec"].get("priority") or 0,
            "localQueueName": workload["spec"].get("queueName", ""),
            "positionInClusterQueue": in_cluster_queue,
            "positionInLocalQueue": in_local_queue})
    return {"kind": "PendingWorkloadsSummary", "apiVersion": f"{VISIBILITY_GROUP}/v1beta1",
            "metadata": {"creationTimestamp": None}, "items": items}
