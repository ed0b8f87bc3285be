"""The Kubernetes backend: a job's replicas are pods, made by a StatefulSet (pservers) and an
Indexed Job (trainers) in the owner's namespace, all owned by one root ConfigMap.

- ``prepare`` makes the namespace (with its ResourceQuota and LimitRange), the pull secret of
  the job's registry credential, and every object of the job. Creation is idempotent: an
  object already there with this job's uid is taken as made.
- ``start`` creates nothing: the controllers start the pods. It names the replica's pods.
- ``observe`` reads the pods (``pods_watch``): phases, exit codes, and why a pod still waits
  (unschedulable, image pull failures, its peers, Kueue or Volcano) from its conditions and
  container states; a pod the cluster took away (``DisruptionTarget``, or gone before it
  ended) as a disruption; a pserver whose pod its StatefulSet replaced as lost; a pod the
  cluster refuses to create (``FailedCreate``) as a wait for its quota, else a refusal once
  it persists. A trainer's pods are told apart by attempt (``pod_attempt``).
- ``stop_for_restart`` deletes a collective job's trainers' Job, and ``start`` makes the one
  of the new attempt once the old is gone.
- An elastic job's trainers' Job is an elastic Indexed Job: it is made with MIN indexes, and
  ``start`` of a trainer past them grows ``completions`` and ``parallelism`` together to
  include its index (a lost trainer's index stays a failed one; its replacement is the next).
- ``stop``, ``release`` (the job ended) and ``cleanup`` delete the root: the garbage
  collector deletes the rest, the pods with the portal's grace period.
- Logs come from the pods while they exist, else from the copy each pod writes to the job's
  output in PFS (``jobs.files.log_file``).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import time
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max

from accounts.models import Datacenter
from accounts.selectors import quota_get
from jobs.models import Build, Replica, build_ended, replica_ended
from kernel.errors import PaddleCloudError, ValidationError
from paddlecloud_core.contract import (
    STOP_GRACE_SECONDS,
    Paths,
    Topology,
    job_namespace,
    trainers_elastic,
    trainers_restart_together,
)
from paddlecloud_core.processes import exit_reason
from registries.models import Registry
from registries.services import registry_password

from ...files import home_remove, output_prepare
from ..base import Backend, BackendError, Capacity, Observation, Status
from . import builder, manifests, pods
from .client import KubeError, kube_for
from .envs import env_prune, job_env_digest
from .names import (
    COMPONENT_LABEL,
    FIRST_ATTEMPT_LABEL,
    JOB_UID_LABEL,
    KUEUE_GATE,
    KUEUE_GROUP_LABEL,
    LOCAL_QUEUE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PSERVER,
    ROLE_LABEL,
    TRAINER,
    object_base,
    pserver_host,
    pserver_name,
    pull_secret_name,
    trainer_name,
)
from .nodes import nodes_capacity
from .pods_watch import pod_cache
from .settings import kube_settings
from .validation import validate_objects

logger = logging.getLogger(__name__)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POD_INDEX = "apps.kubernetes.io/pod-index"
# A pserver's handle once it ran: its pod's uid (before, its pod's name).
UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
LOG_RETRY_SECONDS = 0.5
LAST_LINES = 15  # of a failed builder's log kept for its reason (``_Tail.said``)
# How long ``prepare`` waits for the objects of an earlier start (a requeued job's) to go.
EARLIER_OBJECTS_SECONDS = 3 * STOP_GRACE_SECONDS
ROOTS = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}=job"
WAITING_REASONS = {  # container waiting reasons worth telling the user, with a lead-in
    "ErrImagePull": "cannot pull its image",
    "ImagePullBackOff": "cannot pull its image",
    "InvalidImageName": "its image name is invalid",
    "CreateContainerConfigError": "its container cannot be created",
    "CreateContainerError": "its container cannot be created",
    "CrashLoopBackOff": "it keeps crashing",
}


def _namespace(job) -> str:
    return job_namespace(job.datacenter, job.owner.username)


def _first_attempt(job) -> int:
    """The attempt the trainers' Job starts with: its trainers' (the engine keeps them the
    same whenever the Job is made anew); 0 for a job not saved (a dry run)."""
    if job.pk is None:
        return 0
    found = Replica.objects.filter(job_id=job.pk, role=TRAINER).aggregate(most=Max("attempt"))
    return found["most"] or 0


def pod_attempt(pod: dict) -> int:
    """Which attempt of its replica a trainer's pod is: its Job's first, plus the failures the
    Job counted or ignored for the index before it."""
    meta = pod["metadata"]
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    return sum(int(value) if str(value).isdigit() else 0 for value in (
        labels.get(FIRST_ATTEMPT_LABEL), notes.get(FAILURE_COUNT), notes.get(IGNORED_COUNT)))


class KubernetesBackend(Backend):

    # -- objects ----------------------------------------------------------------------------

    def objects(self, job, quota=None) -> list[dict]:
        """The namespace objects and the job's, as a dry run shows them; a job whose
        objects the Kubernetes schemas refuse is refused with the schema's message."""
        quota = quota or quota_get(job.owner, job.datacenter)
        try:
            objects = [*manifests.namespace_objects(job.datacenter, job.owner, quota),
                       *manifests.job_objects(job, namespace=_namespace(job))]
        except manifests.ManifestError as exc:
            raise ValidationError.for_field("datacenter", str(exc)) from None
        problems = validate_objects(objects)
        if problems:
            raise ValidationError("the job's Kubernetes objects would be refused: "
                                  + "; ".join(problems[:3]), fields={"job": problems},
                                  code="invalid_objects")
        return objects

    def datacenter_check(self, datacenter) -> str:
        return f"Kubernetes {kube_for(datacenter).version_check(fresh=True)}"

    def capacity(self, datacenter) -> Capacity:
        """The allocatable of the nodes that can take jobs (``nodes``), from one list."""
        nodes, _ = kube_for(datacenter).list("Node")
        settings_ = kube_settings(datacenter)
        return nodes_capacity(nodes, settings_.kube_gpu_tolerations,
                              settings_.kube_gpu_node_selector)

    def prepare(self, job) -> None:
        kube = kube_for(job.datacenter)
        kube.version_check()
        namespace = _namespace(job)
        if job.datacenter.pfs_root_path.is_dir():  # the portal's own mount of the PFS
            output_prepare(job)
            if job.build_id is None:  # a runtime image holds its environment
                self._environment(job)
        self._namespace_ensure(kube, job.datacenter, job.owner)
        if job.registry is not None:
            self._pull_secret_write(kube, job.registry)
        same = (JOB_UID_LABEL, str(job.uid))
        try:
            self._earlier_gone(kube, job, namespace)
            root = kube.create(manifests.job_root(job, namespace), same_if=same)
            for obj in manifests.job_children(job, namespace, root["metadata"]["uid"],
                                              _first_attempt(job)):
                kube.create(obj, same_if=same)
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from None
        except KubeError as exc:
            raise BackendError(f"the cluster refused the job's objects: {exc}") from None

    def _environment(self, job) -> None:
        """Record the digest of the job's environment (``envs``) before its pods exist, and
        keep the owner's environments within their bound."""
        digest = job_env_digest(job)
        if job.environment != digest:
            job.environment = digest
            type(job).objects.filter(pk=job.pk).update(environment=digest)
        if digest:
            env_prune(job, keep=digest)

    def _earlier_gone(self, kube, job, namespace: str) -> None:
        """Wait for the objects of the job's earlier start (it was requeued: its root is being
        deleted, its pods are ending) to be gone, so that this start makes its own."""
        deadline = time.monotonic() + EARLIER_OBJECTS_SECONDS
        while True:
            root = kube.get("ConfigMap", namespace, object_base(job))
            if root is None or not root["metadata"].get("deletionTimestamp"):
                return
            if time.monotonic() > deadline:
                raise KubeError(f"the objects of its earlier start are still being deleted "
                                f"after {EARLIER_OBJECTS_SECONDS} s")
            time.sleep(0.2)

    def _namespace_ensure(self, kube, datacenter, user) -> None:
        for obj in manifests.namespace_objects(datacenter, user, quota_get(user, datacenter)):
            kube.apply(obj)

    def paths(self, job) -> Paths:
        return pods.paths(job)

    def topology(self, job, replicas) -> Topology:
        topology = pods.topology(job, _namespace(job), trainers=max(
            (r.index + 1 for r in replicas if r.role == TRAINER), default=0))
        with transaction.atomic():
            for replica in replicas:
                endpoint = (topology.trainers if replica.role == TRAINER
                            else topology.pservers)[replica.index]
                if replica.endpoint != endpoint:
                    replica.endpoint = endpoint
                    replica.save(update_fields=["endpoint"])
        return topology

    def start(self, job, replica, env: dict[str, str]) -> str:
        # The Job and StatefulSet controllers start (and restart) the pods; the environment
        # is in their pod templates (built from the same contract). Only a collective job's
        # trainers, which restart together, need their Job made again for the attempt.
        if replica.role == TRAINER:
            if trainers_restart_together(job) and replica.attempt:
                self._trainers_ensure(job, replica.attempt)
            elif trainers_elastic(job):
                self._trainers_grow(job, replica.index + 1)
            return f"{trainer_name(job)}-{replica.index}"
        return pserver_host(job, replica.index)

    def _trainers_grow(self, job, count: int) -> None:
        """An elastic job's trainers' Job runs at least ``count`` indexes: its completions and
        parallelism grow together (an elastic Indexed Job), never shrink. It is replaced as
        read, with its resourceVersion: a change made meanwhile (another start, the Job
        controller's status) makes that conflict, and it is read again."""
        kube = kube_for(job.datacenter)
        namespace, name = _namespace(job), trainer_name(job)
        try:
            for _ in range(5):
                found = kube.get("Job", namespace, name)
                if found is None:
                    raise BackendError(f"its trainers' Job {name} is gone")
                if (found["spec"].get("completions") or 0) >= count:
                    return
                found["spec"].update(completions=count, parallelism=count)
                try:
                    kube.request("PUT", kube.path("Job", namespace, name), body=found)
                    return
                except KubeError as exc:
                    if exc.status != 409:
                        raise
        except KubeError as exc:
            raise BackendError(f"its trainers' Job could not grow to {count} trainers: "
                               f"{exc}") from None
        raise BackendError(f"its trainers' Job {name} keeps changing; it did not grow to "
                           f"{count} trainers")

    def trainer_first_attempt(self, job, trainers) -> int:
        """A trainer past the Job's first indexes is told apart by the Job's first attempt,
        as every index's first pod is (``pod_attempt``)."""
        try:
            found = kube_for(job.datacenter).get("Job", _namespace(job), trainer_name(job))
        except KubeError as exc:
            raise BackendError(f"cannot see its trainers' Job: {exc}") from None
        label = ((found or {}).get("metadata", {}).get("labels") or {}).get(FIRST_ATTEMPT_LABEL)
        if label is None or not str(label).isdigit():
            raise BackendError(f"its trainers' Job {trainer_name(job)} is gone")
        return int(label)

    def _trainers_ensure(self, job, attempt: int) -> dict | None:
        """The trainers' Job of ``attempt``: an earlier attempt's is deleted (its pods first:
        Foreground), and once it is gone the new one is made. None until then."""
        kube = kube_for(job.datacenter)
        namespace = _namespace(job)
        found = kube.get("Job", namespace, trainer_name(job))
        if found is not None:
            if found["metadata"].get("labels", {}).get(FIRST_ATTEMPT_LABEL) == str(attempt):
                return found
            if not found["metadata"].get("deletionTimestamp"):
                kube.delete("Job", namespace, trainer_name(job), propagation="Foreground")
            return None
        root = kube.get("ConfigMap", namespace, object_base(job))
        if root is None or root["metadata"].get("deletionTimestamp"):
            return None  # the job is ending
        try:
            made = manifests.trainers_job(job, namespace, manifests.owner_reference(
                job, root["metadata"]["uid"]), attempt)
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from None
        return kube.create(made, same_if=(FIRST_ATTEMPT_LABEL, str(attempt)))

    def stop_for_restart(self, job, replicas, grace: float) -> None:
        """A collective job's trainers restart together: their Job (failed at the first
        failure) goes, its pods with their grace; ``start`` makes the next."""
        kube = kube_for(job.datacenter)
        kube.delete("Job", _namespace(job), trainer_name(job), grace=grace,
                    propagation="Foreground")

    # -- observing --------------------------------------------------------------------------

    def _pods(self, job) -> list[dict]:
        kube = kube_for(job.datacenter)
        cache = pod_cache(kube)
        if cache.synced(timeout=2):
            return cache.job_pods(str(job.uid))
        found, _ = kube.list("Pod", _namespace(job), selector=f"{JOB_UID_LABEL}={job.uid}")
        return found

    def changes_watch(self, datacenter) -> None:
        pod_cache(kube_for(datacenter)).announce()

    def observe_all(self, datacenter, replicas) -> dict[int, Observation | None]:
        """From one list of the cluster's pods (the watch's, else one request): what each
        pod says, without the closer looks ``observe`` may take (None: no pod)."""
        kube = kube_for(datacenter)
        cache = pod_cache(kube)
        found = cache.pods() if cache.synced(timeout=2) else kube.list(
            "Pod", selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")[0]
        by_job: dict[str, list[dict]] = {}
        for pod in found:
            by_job.setdefault((pod["metadata"].get("labels") or {}).get(JOB_UID_LABEL),
                              []).append(pod)
        return {replica.pk: _pod_seen(replica, _replica_pods(
            by_job.get(str(replica.job.uid), []), replica)) for replica in replicas}

    def observe(self, job, replica) -> Observation:
        try:
            mine = _replica_pods(self._pods(job), replica)
        except KubeError as exc:
            return Observation(Status.WAITING, reason=f"cannot see its pod: {exc}")
        seen = _pod_seen(replica, mine)
        if seen is None:
            return self._no_pod(job, replica)
        if (seen.status in (Status.EXITED, Status.LOST) and seen.exit_code != 0
                and replica.role == TRAINER and trainers_restart_together(job)
                and not seen.disrupted and self._trainers_disrupted(job)):
            seen = Observation(seen.status, exit_code=seen.exit_code, host=seen.host,
                               ref=seen.ref, disrupted=True, reason=seen.reason)
        if seen.status == Status.WAITING \
                and kube_settings(job.datacenter).kube_scheduler == "volcano":
            return self._waiting_why(job, _current_pod(replica, mine), seen)
        if seen.status == Status.WAITING and pods.kueue_pod_group(job):
            pod = _current_pod(replica, mine)
            if any(gate.get("name") == KUEUE_GATE
                   for gate in (pod.get("spec") or {}).get("schedulingGates") or []):
                return self._group_queued(kube_for(job.datacenter), pod, seen)
        return seen

    def _trainers_disrupted(self, job) -> bool:
        """Whether a collective job's trainers' Job failed because the cluster took one of
        its pods away (its FailJob rule on DisruptionTarget), not for a trainer's fault."""
        found = kube_for(job.datacenter).get("Job", _namespace(job), trainer_name(job))
        for condition in ((found or {}).get("status") or {}).get("conditions") or []:
            if (condition.get("type") == "Failed" and condition.get("status") == "True"
                    and condition.get("reason") == "PodFailurePolicy"
                    and "DisruptionTarget" in (condition.get("message") or "")):
                return True
        return False

    def _waiting_why(self, job, pod: dict, seen: Observation) -> Observation:
        """A pending pod of a job whose gang scheduler holds it: what that scheduler says."""
        if kube_settings(job.datacenter).kube_scheduler != "volcano" or (pod.get("spec") or {}).get(
                "nodeName"):
            return seen
        try:
            group = kube_for(job.datacenter).get("PodGroup", _namespace(job), object_base(job))
        except KubeError:
            return seen
        status = (group or {}).get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
                # Pending: its Queue has not taken the group in (Inqueue: it has, and
                # only room on the nodes is missing).
                return Observation(Status.WAITING, host=seen.host,
                                   held=status.get("phase", "Pending") == "Pending", reason=(
                    f"waiting for Volcano to schedule all the job's pods at once "
                    f"({status.get('phase', 'Pending')}): {condition.get('message', '')}"
                ).rstrip(": "))
        return seen

    def _no_pod(self, job, replica) -> Observation:
        """Why there is no pod for the replica: not made yet, refused, held by a queue, or
        deleted."""
        kube = kube_for(job.datacenter)
        namespace = _namespace(job)
        kind, name = (("Job", trainer_name(job)) if replica.role == TRAINER
                      else ("StatefulSet", pserver_name(job)))
        try:
            if kind == "Job" and trainers_restart_together(job) and replica.attempt:
                owner = self._trainers_ensure(job, replica.attempt)
                if owner is None and kube.get("ConfigMap", namespace, object_base(job)):
                    return Observation(Status.WAITING, reason=(
                        "waiting for the trainers of its last attempt to stop"))
            else:
                owner = kube.get(kind, namespace, name)
            if owner is None:
                if kube.get("ConfigMap", namespace, object_base(job)) is None:
                    return Observation(Status.LOST, reason=(
                        f"its Kubernetes objects were deleted outside PaddleCloud ({kind} "
                        f"{name} in namespace {namespace} is gone)"))
                return Observation(Status.LOST, reason=f"its {kind} {name} was deleted "
                                                       "outside PaddleCloud")
            if replica.role == PSERVER and replica.state == "running":
                return Observation(Status.LOST, disrupted=True, reason=(
                    "its pod is gone (evicted, preempted or its node lost): the parameters it "
                    "held are gone"))
            refused = self._refusal(kube.events_for(namespace, owner["metadata"]["uid"]))
            if refused is not None:
                return refused
            if (owner.get("spec") or {}).get("suspend"):
                return self._queued(kube, owner)
        except KubeError as exc:
            return Observation(Status.WAITING, reason=f"cannot see its pod: {exc}")
        return Observation(Status.WAITING, reason="waiting for its pod to be created")

    def _refusal(self, events: list[dict]) -> Observation | None:
        """What the cluster said when it refused to create the pod (``FailedCreate``), if it
        did. A ResourceQuota's refusal is a wait: the pods of a job that just ended still
        count until they are gone. Any other (Pod Security, a LimitRange, a webhook) fails
        the replica once it has gone on for ``PADDLECLOUD_KUBE_REFUSED_SECONDS``."""
        made = max((e.get("lastTimestamp") or "" for e in events
                    if e.get("reason") == "SuccessfulCreate"), default="")
        # Only what came after the last pod it made (timestamps are to the second: a refusal
        # in the same second as a success is taken as over).
        refusals = [e for e in events if e.get("reason") == "FailedCreate"
                    and (e.get("lastTimestamp") or "") > made]
        if not refusals:
            return None
        last = max(refusals, key=lambda e: e.get("lastTimestamp") or "")
        message = last.get("message") or ""
        if "exceeded quota" in message:
            return Observation(Status.WAITING, reason=(
                "waiting for the namespace's quota (pods that are ending still count): "
                + message))
        # Each retry names a new pod, so each refusal may be an Event of its own: how long
        # they have gone on is from the first one's first time to the last one's last.
        others = [e for e in refusals if "exceeded quota" not in (e.get("message") or "")]
        lasted = _seconds_between(min(e.get("firstTimestamp") or "" for e in others),
                                  last.get("lastTimestamp"))
        if lasted >= settings.PADDLECLOUD_KUBE_REFUSED_SECONDS:
            return Observation(Status.REFUSED, reason=(
                "the cluster refused to create its pod: " + message))
        return Observation(Status.WAITING, reason=(
            "the cluster refuses to create its pod (retrying): " + message))

    def _queued(self, kube, owner: dict) -> Observation:
        """A suspended Job: Kueue has not admitted it. Its Workload says why."""
        meta = owner["metadata"]
        try:
            workloads, _ = kube.list("Workload", meta["namespace"],
                                     selector=f"kueue.x-k8s.io/job-uid={meta['uid']}")
        except KubeError as exc:
            return Observation(Status.WAITING, held=True,
                               reason=f"waiting for Kueue to admit it ({exc})")
        return self._kueue_holds(kube, meta["namespace"], workloads[0] if workloads else None,
                                 "is Kueue installed, and its LocalQueue there?")

    def _group_queued(self, kube, pod: dict, seen: Observation) -> Observation:
        """A pod Kueue gates: its pod group's Workload (named after the group) says why."""
        meta = pod["metadata"]
        try:
            workload = kube.get("Workload", meta["namespace"],
                                meta["labels"][KUEUE_GROUP_LABEL])
        except KubeError as exc:
            return Observation(Status.WAITING, host=seen.host, ref=seen.ref, held=True,
                               reason=f"waiting for Kueue to admit it ({exc})")
        held = self._kueue_holds(kube, meta["namespace"], workload,
                                 "it makes the job's Workload once all its pods exist")
        return dataclasses.replace(held, host=seen.host, ref=seen.ref)

    def _kueue_holds(self, kube, namespace: str, workload: dict | None, unseen: str
                     ) -> Observation:
        """Why Kueue holds a job: its Workload's QuotaReserved condition, and Kueue's
        visibility API where it stands in its ClusterQueue."""
        if workload is None:
            return Observation(Status.WAITING, held=True,
                               reason=f"waiting for Kueue to see it ({unseen})")
        why = ""
        for condition in (workload.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
                why = condition.get("message") or condition.get("reason") or ""
        position = kube.queue_position(namespace, LOCAL_QUEUE, workload["metadata"]["name"])
        where = "" if position is None else f", position {position + 1} in its ClusterQueue"
        return Observation(Status.WAITING, held=True, reason=(
            f"waiting for Kueue to admit it{where}" + (f": {why}" if why else "")))

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, job, replicas, grace: float) -> None:
        """Delete the job's root: the garbage collector deletes the rest, the pods with their
        terminationGracePeriodSeconds (the portal's ``STOP_GRACE_SECONDS``; the portal may
        not delete pods itself). Replicas that ended keep their logs in the output."""
        self._delete_job(job, grace)

    def release(self, job) -> None:
        """The job has ended: its objects go (a job whose trainers all succeeded had nothing
        to stop). Its logs are in its output, its events in the portal. A cluster that
        cannot be reached now leaves them to ``cleanup`` (the job's TTL, or its deletion)."""
        try:
            kube_for(job.datacenter).delete("ConfigMap", _namespace(job), object_base(job),
                                            propagation="Foreground")
        except KubeError as exc:
            logger.warning("job %s: its objects could not be deleted yet: %s", job.pk, exc)

    def cleanup(self, job) -> None:
        """Delete the job's objects, and the requirements its pods installed in PFS."""
        self._delete_job(job, 0)
        site = "/".join(pods.site_packages_rel(job))
        for leftover in (site, f"{site}.tmp", f"{site}.done", f"{site}.lock"):
            try:
                home_remove(job, leftover)
            except PaddleCloudError as exc:  # e.g. a link a job put on the way: left alone
                logger.warning("job %s: %s left in place: %s", job.pk, leftover, exc.message)

    def _delete_job(self, job, grace: float) -> None:
        kube = kube_for(job.datacenter)
        namespace = _namespace(job)
        # Foreground: the root stays until its children are gone, so a requeued job's next
        # start (``_earlier_gone``) knows when it may make them again.
        kube.delete("ConfigMap", namespace, object_base(job), grace=grace,
                    propagation="Foreground")
        # Children made before their root's uid was known (never, unless created by hand)
        # and pods terminating: delete by label too, so nothing of the job is left.
        for kind in ("Job", "StatefulSet", "Service"):
            found, _ = kube.list(kind, namespace, selector=f"{JOB_UID_LABEL}={job.uid}")
            for obj in found:
                kube.delete(kind, namespace, obj["metadata"]["name"], grace=grace)

    def orphans_stop(self, known, grace: float) -> int:
        """Delete the objects of jobs the database no longer knows, in every datacenter on
        this backend (their roots: the rest follows)."""
        found = 0
        for datacenter in Datacenter.objects.filter(backend=self.name):
            try:
                kube = kube_for(datacenter)
                roots, _ = kube.list("ConfigMap", selector=ROOTS)
            except KubeError as exc:
                logger.warning("orphans in %s: %s", datacenter.name, exc)
                continue
            kept = known({root["metadata"].get("labels", {}).get(JOB_UID_LABEL, "")
                          for root in roots})
            for root in roots:
                meta = root["metadata"]
                if meta.get("labels", {}).get(JOB_UID_LABEL) not in kept:
                    kube.delete("ConfigMap", meta["namespace"], meta["name"], grace=grace)
                    found += 1
        return found

    # -- logs -------------------------------------------------------------------------------

    def log_stream(self, job, replica, *, follow: bool, tail: int | None):
        """The current pod's log while it exists (following it), else None: the archive (and
        for a build: its log, which the worker fills from the builder's pod)."""
        if replica.role == "build":
            return None
        try:
            mine = _replica_pods(self._pods(job), replica)
        except KubeError:
            return None
        if not mine:
            return None
        pod = mine[-1]["metadata"]
        kube = kube_for(job.datacenter)

        def read(follow: bool):
            return kube.pod_log(pod["namespace"], pod["name"], container=replica.role,
                                follow=follow, tail_lines=tail)

        if not follow:  # streamed as it comes, never read whole
            chunks = read(False)
            try:
                first = next(chunks, b"")
            except KubeError as exc:
                if exc.status == 404:  # the pod went meanwhile: its log is in the archive
                    return None
                if exc.status != 400:  # 400: its container is still being created
                    raise
                return iter([b""])
            return itertools.chain([first], chunks)
        return self._follow(job, replica, read)

    def _follow(self, job, replica, read):
        """Follow the pod's log. Until its container has started (the log answers 400, or
        nothing while the pod is unscheduled), wait for it, unless the replica ends first."""
        while True:
            received = False
            try:
                for chunk in read(True):
                    received = received or bool(chunk)
                    yield chunk
            except KubeError as exc:
                if exc.status != 400:
                    raise
            if received:
                return
            ended = replica_ended(replica.pk)
            connection.close()  # this runs on a worker thread of a streaming response
            if ended:
                return
            time.sleep(LOG_RETRY_SECONDS)

    # -- registry credentials ---------------------------------------------------------------

    def pull_secret_apply(self, registry) -> None:
        self._pull_secret_write(kube_for(registry.datacenter), registry)

    # -- runtime images (jobs.builds) ---------------------------------------------------------

    runs_images = True

    def image_build(self, build, dockerfile: str, log: int, auth, *, insecure: bool) -> str:
        """A builder Job in the owner's namespace (``builder``); its log copied to ``log`` as
        it comes; the digest it pushed read from its pod's termination message."""
        kube = kube_for(build.datacenter)
        namespace = job_namespace(build.datacenter, build.owner.username)
        image = build.datacenter.builder_image or settings.PADDLECLOUD_BUILDER_IMAGE
        same = (builder.BUILD_LABEL, str(build.uid))
        try:
            kube.version_check()
            self._namespace_ensure(kube, build.datacenter, build.owner)
            if build.registry is not None:
                self._pull_secret_write(kube, build.registry)
            job = builder.builder_job(build, namespace, image, insecure=insecure,
                                      auth=build.registry is not None)
            if problems := validate_objects([job]):
                raise BackendError("; ".join(problems))
            created = kube.create(job, same_if=same)
            kube.create(builder.builder_dockerfile(build, namespace, dockerfile, created),
                        same_if=same)
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from None
        except KubeError as exc:
            raise BackendError(f"the cluster refused the builder's objects: {exc}") from None
        return self._build_follow(kube, build, namespace, image, log)

    def image_build_cancel(self, build) -> None:
        """Delete the builder Job (its pod and its Dockerfile go with it)."""
        namespace = job_namespace(build.datacenter, build.owner.username)
        try:
            kube_for(build.datacenter).delete("Job", namespace, builder.builder_name(build))
        except KubeError as exc:
            raise BackendError(f"could not delete the builder: {exc}") from None

    def _build_follow(self, kube, build, namespace: str, image: str, log: int) -> str:
        selector = f"{builder.BUILD_LABEL}={build.uid}"
        deadline = time.monotonic() + builder.BUILD_SECONDS + 60
        tail = _Tail(LAST_LINES)
        copied = False
        while time.monotonic() < deadline:
            if build_ended(build.pk):  # cancelled: its jobs were killed
                self.image_build_cancel(build)
                raise BackendError(Build.CANCELLED)
            try:
                found, _ = kube.list("Pod", namespace, selector=selector)
            except KubeError as exc:
                logger.warning("listing the builder pod of %s: %s", build.image, exc)
                found = []
            pod = found[-1] if found else None
            status = _container((pod or {}).get("status", {}).get("containerStatuses"),
                                builder.CONTAINER)
            state = status.get("state") or {}
            waiting = (state.get("waiting") or {})
            if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff",
                                         "InvalidImageName"):
                raise BackendError(f"the builder image {image} cannot be pulled: "
                                   f"{waiting.get('message') or waiting['reason']}")
            if pod is not None and not copied and ("running" in state or "terminated" in state):
                try:
                    for chunk in kube.pod_log(namespace, pod["metadata"]["name"],
                                              container=builder.CONTAINER, follow=True):
                        os.write(log, chunk)
                        tail.add(chunk)
                    copied = True
                except KubeError as exc:
                    if exc.status not in (400, 404):
                        raise BackendError(f"reading the builder's log: {exc}") from None
                continue
            if "terminated" in state:
                ended = state["terminated"]
                if ended.get("exitCode") == 0:
                    digest = builder.pushed_digest(ended.get("message", ""))
                    if digest is None:
                        raise BackendError("the builder ended without saying what it pushed")
                    return digest
                raise BackendError(f"the builder failed (exit {ended.get('exitCode')}): "
                                   f"{tail.said() or ended.get('reason', '')}")
            if pod is not None and pod["status"].get("phase") == "Failed":
                raise BackendError(f"the builder's pod failed: "
                                   f"{pod['status'].get('message') or pod['status'].get('reason')}")
            time.sleep(1)
        raise BackendError(f"the builder did not finish within {builder.BUILD_SECONDS} s")

    def _pull_secret_write(self, kube, registry) -> None:
        self._namespace_ensure(kube, registry.datacenter, registry.owner)
        namespace = job_namespace(registry.datacenter, registry.owner.username)
        kube.apply(manifests.pull_secret(namespace, registry, registry_password(registry)))

    def pull_secret_delete(self, datacenter, owner, name: str) -> None:
        namespace = job_namespace(datacenter, owner.username)
        kube_for(datacenter).delete("Secret", namespace,
                                    pull_secret_name(Registry(name=name)))


class _Tail:
    """The last lines of what a builder printed, for the reason of its failure."""

    def __init__(self, lines: int):
        self.lines, self.kept = lines, b""

    def add(self, chunk: bytes) -> None:
        self.kept = b"\n".join((self.kept + chunk).split(b"\n")[-self.lines - 1:])

    def said(self) -> str:
        """Its last lines as one: those saying what went wrong (pip's "ERROR: …", BuildKit's
        "error: …"), else the last three, joined by " / "."""
        lines = [line.strip() for line in self.kept.decode(errors="replace").splitlines()
                 if line.strip()]
        errors = [line for line in lines if "error" in line.lower()]
        return " / ".join((errors or lines)[-3:])


# -- a pod, as a replica's observation ---------------------------------------------------------

def _replica_pods(pods: list[dict], replica) -> list[dict]:
    """Those of a job's ``pods`` that are the replica's, oldest first: one per attempt for a
    trainer."""
    mine = []
    for pod in pods:
        meta = pod["metadata"]
        labels, notes = meta.get("labels", {}), meta.get("annotations", {})
        if labels.get(ROLE_LABEL) != replica.role:
            continue
        index = (notes.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)
                 if replica.role == TRAINER else labels.get(POD_INDEX))
        if index is None and replica.role == PSERVER:
            index = meta["name"].rsplit("-", 1)[-1]
        if str(index) == str(replica.index):
            mine.append(pod)
    return sorted(mine, key=lambda p: (p["metadata"].get("creationTimestamp", ""),
                                       p["metadata"]["name"]))


def _current_pod(replica, mine: list[dict]) -> dict | None:
    """The pod of the replica's current attempt (the Job controller makes a trainer a new pod
    per attempt), if it has one."""
    if replica.role == TRAINER:
        mine = [pod for pod in mine if pod_attempt(pod) == replica.attempt]
    return mine[-1] if mine else None


def _pod_seen(replica, mine: list[dict]) -> Observation | None:
    """What the replica's pods (``_replica_pods``) say of its current attempt; None when it
    has no pod."""
    pod = _current_pod(replica, mine)
    if pod is None and replica.role == TRAINER and any(
            pod_attempt(p) > replica.attempt for p in mine):
        # Its pod went before it was seen to end, and the Job made the next: a failed pod
        # stays, so this one was deleted (evicted, preempted, its node lost, or by someone),
        # which is not the job's fault.
        return Observation(Status.LOST, disrupted=True, reason=(
            "the cluster took its pod away (it was deleted before it ended: evicted, "
            "preempted or its node lost)"))
    if pod is None:
        return None
    seen = pod_observation(pod, replica.role)
    if (replica.role == PSERVER and replica.state == "running"
            and UID.match(replica.backend_ref)
            and replica.backend_ref != pod["metadata"].get("uid")):
        # Its StatefulSet made it a new pod (evicted, its node lost): a new, empty pserver.
        # The trainers would train on against it: the pserver has failed.
        return Observation(Status.LOST, host=seen.host, disrupted=True, reason=(
            "its pod was replaced (evicted, preempted or its node lost): the parameters it "
            "held are gone"))
    return seen


def _container(statuses: list[dict] | None, name: str) -> dict:
    return next((s for s in statuses or [] if s.get("name") == name), {})


def _disrupted(status: dict) -> bool:
    """The cluster took the pod away (evicted, preempted, its node lost): ``DisruptionTarget``."""
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def _setup_detail(message: str) -> str:
    """What of the setup container's last lines says why it failed: pip's error, if it is
    there (init.sh puts pip's last lines on its stderr), and where the whole of it is."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith("ERROR:")), "")
    return f"{said[:300]}; see output/requirements.log" if said else (
        "see output/requirements.log")


def pod_observation(pod: dict, role: str) -> Observation:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    host = (pod.get("spec") or {}).get("nodeName", "")
    # A trainer's handle is its pod's name; a pserver's, its pod's uid: its StatefulSet gives a
    # new pod the old one's name.
    ref = pod["metadata"].get("name", "") if role == TRAINER else pod["metadata"].get("uid", "")
    main = _container(status.get("containerStatuses"), role)
    terminated = (main.get("state") or {}).get("terminated")
    if phase == "Succeeded":
        return Observation(Status.EXITED, exit_code=0, host=host, ref=ref)
    if phase == "Failed" or (_disrupted(status) and pod["metadata"].get("deletionTimestamp")):
        disrupted = _disrupted(status)
        for init, what in (("setup", "preparing the workspace failed"),
                           ("peers", "its peers could not be reached")):
            ended = (_container(status.get("initContainerStatuses"), init).get("state")
                     or {}).get("terminated")
            if terminated is None and ended and ended.get("exitCode"):
                detail = ((ended.get("message") or "").strip() or "see the replica's log")
                if init == "setup":
                    detail = _setup_detail(detail)
                return Observation(Status.EXITED, exit_code=ended["exitCode"], host=host,
                                   ref=ref, disrupted=disrupted, reason=(
                                       f"{what} (exit {ended['exitCode']}): {detail}"))
        code = (terminated or {}).get("exitCode")
        reason = status.get("reason") or (terminated or {}).get("reason") or ""
        if disrupted:
            condition = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
            reason = (f"the cluster took its pod away ({condition.get('reason') or reason}: "
                      f"{condition.get('message') or status.get('message', '')})").strip()
        if code is None or disrupted:
            return Observation(Status.LOST, host=host, ref=ref, disrupted=disrupted,
                               exit_code=code, reason=reason if disrupted else (
                                   f"its pod failed: {reason or 'no exit status'} "
                                   f"{status.get('message', '')}").strip())
        return Observation(Status.EXITED, exit_code=code, host=host, ref=ref,
                           reason=_exit_reason(code, reason))
    if phase == "Running":
        last = (main.get("lastState") or {}).get("terminated")
        if role == PSERVER and (terminated or last):  # restarted in place by the kubelet
            ended = terminated or last
            return Observation(Status.EXITED, exit_code=ended.get("exitCode", 1), host=host,
                               ref=ref, reason=_exit_reason(ended.get("exitCode", 1),
                                                            ended.get("reason", "")))
        if terminated is not None:  # its container ended, the pod not yet
            return Observation(Status.EXITED, exit_code=terminated.get("exitCode", 1),
                               host=host, ref=ref,
                               reason=_exit_reason(terminated.get("exitCode", 1),
                                                   terminated.get("reason", "")))
        return Observation(Status.RUNNING, host=host, ref=ref)
    return Observation(Status.WAITING, host=host, ref=ref, reason=_pending_reason(status))


def _seconds_between(first: str | None, last: str | None) -> float:
    """Seconds from one RFC 3339 timestamp of an Event to another (0 if one is missing)."""
    if not first or not last:
        return 0.0
    try:
        return (datetime.fromisoformat(last.replace("Z", "+00:00"))
                - datetime.fromisoformat(first.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return 0.0


def _exit_reason(code: int, reason: str) -> str:
    if reason == "OOMKilled":
        return f"killed for using more memory than it asked for (OOMKilled, exit {code})"
    return "" if code == 0 else exit_reason(code)


def _pending_reason(status: dict) -> str:
    """Why a pending pod does not run, from its conditions and container states."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"cannot be scheduled: {condition.get('message') or condition.get('reason')}"
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            lead = WAITING_REASONS.get(waiting.get("reason", ""))
            if lead:
                return f"{lead}: {waiting.get('message') or waiting['reason']}"
    for container in status.get("initContainerStatuses") or []:
        if (container.get("state") or {}).get("running"):
            if container.get("name") == "peers":
                return ("waiting for its peers to have addresses and accept connections "
                        "(its log says which)")
            return "preparing its workspace (copying the package, installing requirements)"
    return "its pod is being created"
