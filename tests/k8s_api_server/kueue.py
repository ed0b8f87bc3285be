"""Kueue in the fake cluster (``server.install("kueue")``): its admission webhooks and its
job framework, as Kueue's own code does it (sigs.k8s.io/kueue, pkg/controller/jobframework
and jobs/{job,statefulset,pod}):

- a batch/v1 Job labelled ``kueue.x-k8s.io/queue-name`` is suspended at creation; it gets a
  Workload ``job-<name>-<5 hex>`` (one pod set ``main``, ``count`` its parallelism), is
  unsuspended once the Workload is admitted, and finishes it when it completes or fails;
- a labelled StatefulSet's pods are created with the ``kueue.x-k8s.io/admission`` scheduling
  gate and Kueue's pod-group labels and annotations; the group has one Workload
  ``statefulset-<name>-<5 hex>`` (``count`` its replicas), and the gate goes once admitted;
- a plain pod group (pkg/controller/jobs/pod): pods whose owner is not queued, labelled
  ``queue-name`` and ``pod-group-name`` and annotated ``pod-group-total-count``, are gated at
  creation; once the group's pods all exist its Workload, named after the group, has a pod
  set per role (pods of one spec, Kueue's role hash), and the gates go once it is admitted,
  both roles at once. It is finished as Kueue finishes one (all its pods succeeded, or none
  left to run and a pod annotated ``retriable-in-group: "false"``); its pods keep Kueue's
  finalizer until then.

Admission itself (ClusterQueues, quota, queue order, the visibility API) is in
kueue_scheduler.py."""

from __future__ import annotations

import copy
import hashlib
import itertools

from . import crds, resources
from .errors import ApiError
from .kueue_scheduler import KueueScheduler, condition, set_metav1_condition
from .objects import condition_true, controller_uid, owner_reference

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
# What Kueue's StatefulSet integration writes on each pod of the group.
POD_GROUP_ANNOTATIONS = {"kueue.x-k8s.io/pod-group-fast-admission": "true",
                         "kueue.x-k8s.io/pod-group-serving": "true",
                         "kueue.x-k8s.io/pod-group-pod-index-label": "apps.kubernetes.io/pod-index",
                         "kueue.x-k8s.io/role-hash": "main"}
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
# A plain group's pods carry Kueue's finalizer until it counts the group finished: all its pods
# succeeded, or none runs and one says the group is not retried (pod_controller.go Finished).
POD_FINALIZER = "kueue.x-k8s.io/managed"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"
GROUP_WORKLOAD = "paddlecloud.test/kueue-group"  # the fake's own mark of a plain group's Workload
_COMPONENT = "kueue-job-controller"
# Labels the Job controller puts on its template, which Kueue leaves out of the pod set.
_JOB_LABELS = ("batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name",
               "controller-uid", "job-name")


def workload_name(kind: str, group: str, owner_name: str, owner_uid: str) -> str:
    """jobframework.GetWorkloadNameForOwnerWithGVK: ``<kind>-<name>-<sha1 of kind, group,
    name and uid, 5 hex>``, the prefix cut to 247 characters."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode(),
                          usedforsecurity=False).hexdigest()
    return f"{(kind.lower() + '-' + owner_name)[:253 - 6]}-{digest[:5]}"


class Kueue:
    """The webhooks (``mutate``, called by the API on every write) and the controller loop
    (``sync``)."""

    def __init__(self, api):
        self.api = api
        kinds = {rt.kind: rt for rt in crds.types("kueue")}
        self.workloads = kinds["Workload"]
        self.scheduler = KueueScheduler(api, kinds, self.order)
        self._order: dict[str, int] = {}  # uid -> when created: FIFO among equal timestamps
        self._sequence = itertools.count()

    def order(self, obj: dict) -> int:
        """When the object (or the Job or StatefulSet it is for) was created, relative to
        the others: creationTimestamps have one-second resolution."""
        uid = controller_uid(obj) or obj["metadata"]["uid"]
        return self._order.setdefault(uid, next(self._sequence))

    # --- webhooks --------------------------------------------------------------------------

    def mutate(self, rt, obj: dict, old: dict | None) -> None:
        meta = obj["metadata"]
        if old is None:
            self.order(obj)
        queued = QUEUE_LABEL in (meta.get("labels") or {})
        if rt is resources.JOBS and queued and old is None:
            obj["spec"]["suspend"] = True  # ApplyDefaultForSuspend
        elif rt is resources.STATEFULSETS and queued:
            template = obj["spec"].setdefault("template", {}).setdefault("metadata", {})
            template.setdefault("annotations", {})[SUSPENDING_PARENT] = "statefulset"
        elif rt is resources.PODS and old is None and \
                (meta.get("annotations") or {}).get(SUSPENDING_PARENT):
            _gate(obj)
        elif rt is resources.PODS and old is None and queued and \
                POD_GROUP_LABEL in meta["labels"] and not self._owner_queued(obj):
            _gate(obj)  # the pod webhook: a group's pod, its owner not Kueue's
            meta["labels"][MANAGED_LABEL] = "true"
            meta.setdefault("finalizers", []).append(POD_FINALIZER)
            meta.setdefault("annotations", {})[ROLE_HASH] = _role_hash(obj["spec"])

    def _owner_queued(self, pod: dict) -> bool:
        """FindAncestorJobManagedByKueue: the pod's Job or StatefulSet is in a queue."""
        uid = controller_uid(pod)
        for rt in (resources.JOBS, resources.STATEFULSETS):
            for owner in self.api.store.list(rt.key, pod["metadata"]["namespace"]):
                if owner["metadata"]["uid"] == uid:
                    return QUEUE_LABEL in (owner["metadata"].get("labels") or {})
        return False

    # --- the controller loop -----------------------------------------------------------------

    def sync(self) -> None:
        self.scheduler.sync()
        store = self.api.store
        owned = {}
        for workload in store.list(self.workloads.key):
            if controller_uid(workload):
                owned[controller_uid(workload)] = workload
        for job in sorted(store.list(resources.JOBS.key), key=self.order):
            self._sync_job(job, owned.get(job["metadata"]["uid"]))
        owners = set()
        for sts in sorted(store.list(resources.STATEFULSETS.key), key=self.order):
            self._sync_statefulset(sts, owned.get(sts["metadata"]["uid"]))
            owners.add(sts["metadata"]["uid"])
        owners.update(j["metadata"]["uid"] for j in store.list(resources.JOBS.key))
        self._finish_orphans(owners)
        self._sync_pod_groups()
        self._release()

    def _sync_job(self, job: dict, workload: dict | None) -> None:
        meta = job["metadata"]
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if not queue or meta.get("deletionTimestamp"):
            return
        finished = next((c for c in job["status"].get("conditions") or []
                         if c["type"] in ("Complete", "Failed") and c["status"] == "True"), None)
        if workload is None:
            if finished is None:
                spec = job["spec"]
                count = min(spec.get("parallelism", 1), spec.get("completions") or
                            spec.get("parallelism", 1))
                self._create_workload(resources.JOBS, job, queue, count,
                                      _clean(job["spec"]["template"]))
            return
        if finished is not None:
            return self._finish(workload, finished)
        admitted = condition_true(workload, "Admitted") and \
            not condition_true(workload, "Finished")
        if admitted == bool(job["spec"].get("suspend")):  # admitted: run; else: stop
            job["spec"]["suspend"] = not admitted
            self._write(resources.JOBS, job)
            if admitted:
                cluster_queue = workload["status"]["admission"]["clusterQueue"]
                self._event(resources.JOBS, job, "Started",
                            f"Admitted by clusterQueue {cluster_queue}")

    def _sync_statefulset(self, sts: dict, workload: dict | None) -> None:
        meta = sts["metadata"]
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if not queue or meta.get("deletionTimestamp"):
            return
        replicas = sts["spec"].get("replicas", 1)
        name = workload_name("StatefulSet", "apps", meta["name"], meta["uid"])
        if workload is None and replicas > 0:
            template = {"spec": copy.deepcopy(sts["spec"]["template"]["spec"])}
            workload = self._create_workload(resources.STATEFULSETS, sts, queue, replicas,
                                             template, name=name)
        admitted = workload is not None and condition_true(workload, "Admitted") and \
            not condition_true(workload, "Finished")
        for pod in self.api.store.list(resources.PODS.key, meta["namespace"]):
            if controller_uid(pod) == meta["uid"] and \
                    (pod["metadata"].get("annotations") or {}).get(SUSPENDING_PARENT):
                self._sync_group_pod(pod, queue, name, replicas, admitted)

    def _sync_group_pod(self, pod: dict, queue: str, group: str, replicas: int,
                        admitted: bool) -> None:
        """The StatefulSet pod reconciler's labels and annotations; the pod group
        reconciler's ungating once the Workload is admitted."""
        before = copy.deepcopy(pod)
        meta = pod["metadata"]
        meta.setdefault("labels", {}).update({MANAGED_LABEL: "true", QUEUE_LABEL: queue,
                                              POD_GROUP_LABEL: group, PREBUILT_LABEL: group})
        meta.setdefault("annotations", {}).update({**POD_GROUP_ANNOTATIONS,
                                                   POD_GROUP_TOTAL: str(replicas)})
        if admitted:
            _ungate(pod)
        if pod != before:
            self._write(resources.PODS, pod)

    def _sync_pod_groups(self) -> None:
        """Plain pod groups: the Workload once all the group's pods exist, the gates gone once
        it is admitted, finished as Kueue finishes one (all its pods succeeded, or none left
        to run and the group not retried), and then its pods' finalizers gone."""
        groups: dict[tuple[str, str], list[dict]] = {}
        for pod in self.api.store.list(resources.PODS.key):
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if labels.get(MANAGED_LABEL) == "true" and POD_GROUP_LABEL in labels and \
                    not (meta.get("annotations") or {}).get(SUSPENDING_PARENT):
                groups.setdefault((meta["namespace"], labels[POD_GROUP_LABEL]), []).append(pod)
        for workload in self.api.store.list(self.workloads.key):
            meta = workload["metadata"]
            if (meta.get("annotations") or {}).get(GROUP_WORKLOAD) == "plain" and \
                    (meta["namespace"], meta["name"]) not in groups and \
                    not condition_true(workload, "Finished"):
                set_metav1_condition(workload, "Finished", "True", "Succeeded",
                                     "Pods succeeded: 0/0.")
                self._write(self.workloads, workload, subresource="status")
        for (namespace, group), pods in groups.items():
            active = [p for p in pods if not p["metadata"].get("deletionTimestamp")
                      and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
            workload = self.api.store.get(self.workloads.key, namespace, group)
            if workload is None:
                total = int(pods[0]["metadata"]["annotations"].get(POD_GROUP_TOTAL, "1"))
                if len(active) >= total:
                    self._create_group_workload(namespace, group, active)
                continue
            total = int(pods[0]["metadata"]["annotations"].get(POD_GROUP_TOTAL, "1"))
            succeeded = sum((p.get("status") or {}).get("phase") == "Succeeded" for p in pods)
            unretriable = any((p["metadata"].get("annotations") or {}).get(RETRIABLE) == "false"
                              for p in pods)
            if not condition_true(workload, "Finished") and (
                    succeeded >= total or (not active and unretriable)):
                set_metav1_condition(workload, "Finished", "True", "Succeeded",
                                     f"Pods succeeded: {succeeded}/{total}.")
                self._write(self.workloads, workload, subresource="status")
            if condition_true(workload, "Finished"):  # Finalize: its pods may go
                for pod in pods:
                    finalizers = pod["metadata"].get("finalizers") or []
                    if POD_FINALIZER in finalizers:
                        pod["metadata"]["finalizers"] = [f for f in finalizers
                                                         if f != POD_FINALIZER]
                        self._write(resources.PODS, pod)
                continue
            admitted = condition_true(workload, "Admitted") and \
                not condition_true(workload, "Finished")
            for pod in active:
                if admitted and _ungate(pod):
                    self._write(resources.PODS, pod)

    def _create_group_workload(self, namespace: str, group: str, pods: list[dict]) -> None:
        roles: dict[str, list[dict]] = {}
        for pod in sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"]):
            roles.setdefault(pod["metadata"]["annotations"][ROLE_HASH], []).append(pod)
        body = {
            "apiVersion": self.workloads.api_version, "kind": "Workload",
            "metadata": {"name": group, "namespace": namespace,
                         "annotations": {"kueue.x-k8s.io/is-group-workload": "true",
                                         GROUP_WORKLOAD: "plain"},
                         "finalizers": [RESOURCE_IN_USE]},
            "spec": {"queueName": pods[0]["metadata"]["labels"][QUEUE_LABEL], "priority": 0,
                     "podSets": [{"name": role, "count": len(members),
                                  "template": {"spec": _pod_set_spec(members[0]["spec"])}}
                                 for role, members in roles.items()]}}
        try:
            self.api.create(self.workloads, namespace, body, trusted=True)
        except ApiError as exc:
            if exc.code not in (403, 404, 409):
                raise

    def _create_workload(self, owner_rt, owner: dict, queue: str, count: int, template: dict,
                         *, name: str | None = None) -> dict | None:
        meta = owner["metadata"]
        name = name or workload_name(owner_rt.kind, owner_rt.group, meta["name"], meta["uid"])
        body = {
            "apiVersion": self.workloads.api_version, "kind": "Workload",
            "metadata": {"name": name, "namespace": meta["namespace"],
                         "labels": {JOB_UID_LABEL: meta["uid"]},
                         "finalizers": [RESOURCE_IN_USE],
                         "ownerReferences": [owner_reference(owner_rt, owner)]},
            "spec": {"queueName": queue, "priority": 0,
                     "podSets": [{"name": "main", "count": count, "template": template}]}}
        if owner_rt is resources.STATEFULSETS:
            body["metadata"]["annotations"] = {
                "kueue.x-k8s.io/is-group-workload": "true",
                "kueue.x-k8s.io/job-owner-gvk": "apps/v1, Kind=StatefulSet",
                "kueue.x-k8s.io/job-owner-name": meta["name"]}
        try:
            created = self.api.create(self.workloads, meta["namespace"], body, trusted=True)
        except ApiError as exc:
            if exc.code in (403, 404, 409):  # the namespace goes, or it exists already
                return None
            raise
        self._event(owner_rt, owner, "CreatedWorkload",
                    f"Created Workload: {meta['namespace']}/{name}")
        return created

    def _finish(self, workload: dict, finished: dict) -> None:
        """The job ended: the Workload is Finished, its quota released (kueue_scheduler)."""
        if condition_true(workload, "Finished"):
            return
        success = finished["type"] == "Complete"
        set_metav1_condition(workload, "Finished", "True",
                             "Succeeded" if success else "Failed",
                             finished.get("message") or "")
        self._write(self.workloads, workload, subresource="status")

    def _finish_orphans(self, owners: set[str]) -> None:
        """FinishOrphanedWorkloads: a Workload whose Job or StatefulSet is gone (but which
        the garbage collector does not delete: orphaned) is finished, its quota released."""
        for workload in self.api.store.list(self.workloads.key):
            owner = (workload["metadata"].get("labels") or {}).get(JOB_UID_LABEL)
            if owner and owner not in owners and not condition_true(workload, "Finished") \
                    and not workload["metadata"].get("deletionTimestamp"):
                set_metav1_condition(workload, "Finished", "True", "OwnerNotFound",
                                     "The workload's owner no longer exists")
                self._write(self.workloads, workload, subresource="status")

    def _release(self) -> None:
        """Kueue's resource-in-use finalizer goes once the Workload is finished or deleted."""
        for workload in self.api.store.list(self.workloads.key):
            meta = workload["metadata"]
            if RESOURCE_IN_USE in (meta.get("finalizers") or []) and (
                    meta.get("deletionTimestamp") or condition(workload, "Finished")):
                meta["finalizers"] = [f for f in meta["finalizers"] if f != RESOURCE_IN_USE]
                self._write(self.workloads, workload)

    def _write(self, rt, obj: dict, *, subresource: str | None = None) -> None:
        try:
            self.api.update(rt, obj, subresource=subresource)
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone, or changed since read: next pass
                raise

    def _event(self, rt, obj: dict, reason: str, message: str) -> None:
        self.api.recorder.record(rt, obj, "Normal", reason, message, component=_COMPONENT)


def _gate(pod: dict) -> None:
    gates = pod["spec"].setdefault("schedulingGates", [])
    if not any(g.get("name") == ADMISSION_GATE for g in gates):
        gates.append({"name": ADMISSION_GATE})


def _ungate(pod: dict) -> bool:
    """Take Kueue's gate off the pod; whether it had it."""
    gates = pod["spec"].get("schedulingGates") or []
    kept = [g for g in gates if g.get("name") != ADMISSION_GATE]
    if len(kept) == len(gates):
        return False
    if kept:
        pod["spec"]["schedulingGates"] = kept
    else:
        del pod["spec"]["schedulingGates"]
    return True


def _pod_set_spec(spec: dict) -> dict:
    """A pod's spec as its pod set's template (what admission reads of it)."""
    spec = copy.deepcopy(spec)
    for key in ("nodeName", "schedulingGates", "hostname"):
        spec.pop(key, None)
    return spec


def _role_hash(spec: dict) -> str:
    """utilpod.GenerateRoleHash: pods of one role have the same containers, resources and
    placement (what admission reads), whatever their names or indexes."""
    shape = {key: spec.get(key) for key in ("initContainers", "nodeSelector", "tolerations",
                                            "affinity", "priorityClassName")}
    shape["containers"] = [{"name": c.get("name"), "image": c.get("image"),
                            "resources": c.get("resources")} for c in spec["containers"]]
    shape["initContainers"] = [{"name": c.get("name"), "resources": c.get("resources")}
                               for c in spec.get("initContainers") or []]
    return hashlib.sha256(repr(sorted(shape.items())).encode()).hexdigest()[:8]


def _clean(template: dict) -> dict:
    """The Job's pod template without the Job controller's labels (Kueue's cleanLabels)."""
    template = copy.deepcopy(template)
    labels = (template.get("metadata") or {}).get("labels")
    if labels:
        for key in _JOB_LABELS:
            labels.pop(key, None)
    return template
