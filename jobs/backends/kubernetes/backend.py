"""The Kubernetes backend: a job's replicas are pods, made by a StatefulSet (pservers) and an
Indexed Job (trainers) in the owner's namespace, all owned by one root ConfigMap.

- ``prepare`` makes the namespace (with its ResourceQuota and LimitRange), the pull secret of
  the job's registry credential, and every object of the job. Creation is idempotent: an
  object already there with this job's uid is taken as made.
- ``start`` creates nothing: the controllers start the pods. It names the replica's pods.
- ``observe`` reads the pods (``pods_watch``) and, where they do not say enough, their
  owners' Events, the trainers' Job, a Volcano PodGroup or a Kueue Workload; what those say
  of a replica is ``observe`` (the module: data in, an ``Observation`` out).
- ``stop_for_restart`` deletes a collective job's trainers' Job, and ``start`` makes the one
  of the new attempt once the old is gone.
- An elastic job's trainers' Job is an elastic Indexed Job: it is made with MIN indexes, and
  ``start`` of a trainer past them grows ``completions`` and ``parallelism`` together to
  include its index (a lost trainer's index stays a failed one; its replacement is the next).
- ``image_build`` makes a runtime image's builder (``builder``) and follows it to its end
  (``builder_follow``); with ``kube_builder`` portal it builds on the portal's machine
  instead (``jobs.backends.buildah``), and the cluster only pulls what was pushed.
- ``stop``, ``release`` (the job ended) and ``cleanup`` delete the root: the garbage
  collector deletes the rest, the pods with the portal's grace period.
- Logs come from the pods while they exist, else from the copy each pod writes to the job's
  output in PFS (``jobs.files.log_file``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import time

from django.conf import settings
from django.utils import timezone

from kernel.errors import PaddleCloudError, ValidationError
from paddlecloud_core.contract import (
    STOP_GRACE_SECONDS,
    Paths,
    Topology,
    job_namespace,
    trainers_elastic,
    trainers_restart_together,
)
from paddlecloud_core.logcursor import LogCursor

from ...files import home_remove
from ..base import (
    Backend,
    BackendError,
    Capacity,
    Observation,
    StartProgress,
    Status,
    records,
)
from ..buildah import buildah_problem, package_build
from . import builder, manifests, observe, pods
from .builder_follow import BuildCancelled, build_follow
from .client import Kube, KubeError, kube_for
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
from .pods_watch import pod_cache, pods_listed
from .settings import Builder, kube_settings
from .streams import KubeExec, KubePortStream
from .validation import validate_objects

logger = logging.getLogger(__name__)

LOG_RETRY_SECONDS = 0.5
# How long ``prepare`` waits for the objects of an earlier start (a requeued job's) to go.
EARLIER_OBJECTS_SECONDS = 3 * STOP_GRACE_SECONDS
ROOTS = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}=job"


def _namespace(job) -> str:
    return job_namespace(job.datacenter, job.owner.username)


def _owner_workload(kube, owner: dict) -> dict | None:
    """The Workload Kueue made for ``owner`` (a Job it queues), None before it has."""
    meta = owner["metadata"]
    found, _ = kube.list("Workload", meta["namespace"],
                         selector=f"kueue.x-k8s.io/job-uid={meta['uid']}")
    return found[0] if found else None


class KubernetesBackend(Backend):

    # -- objects ----------------------------------------------------------------------------

    def objects(self, job, quota=None) -> list[dict]:
        """The namespace objects and the job's, as a dry run shows them; a job whose
        objects the Kubernetes schemas refuse is refused with the schema's message."""
        quota = quota or records().quota(job.owner, job.datacenter)
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

    def pfs_mounted(self, datacenter) -> bool:
        # The pods mount the PFS; the portal may have it as a directory too.
        return datacenter.pfs_root_path.is_dir()

    def prepare(self, job, attempt: int = 0) -> None:
        kube = kube_for(job.datacenter)
        kube.version_check()
        namespace = _namespace(job)
        if job.build_id is None and self.pfs_mounted(job.datacenter):
            self._environment(job)  # (a runtime image holds its environment)
        self._namespace_ensure(kube, job.datacenter, job.owner)
        if job.registry is not None:
            self._pull_secret_write(kube, job.registry)
        same = (JOB_UID_LABEL, str(job.uid))
        try:
            self._earlier_gone(kube, job, namespace)
            root = kube.create(manifests.job_root(job, namespace), same_if=same)
            for obj in manifests.job_children(job, namespace, root["metadata"]["uid"],
                                              attempt):
                kube.create(obj, same_if=same)
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from None
        except KubeError as exc:
            raise BackendError(f"the cluster refused the job's objects: {exc}") from None

    def _environment(self, job) -> None:
        """Record the digest of the job's environment (``envs``) before its pods exist, and
        keep the owner's environments within their bound."""
        digest = job_env_digest(job)
        records().environment_use(job, digest)
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
        """The user's namespace, the RoleBinding that gives the portal its rights in it
        (deploy/rbac.yaml: none there before), then what the namespace holds."""
        namespace, *inside = manifests.namespace_objects(datacenter, user,
                                                          records().quota(user, datacenter))
        kube.apply(namespace)
        self._bound_apply(kube, namespace["metadata"]["name"], inside)

    def _bound_apply(self, kube, namespace: str, objects) -> None:
        """The RoleBinding that gives the portal its rights in ``namespace`` (deploy/
        rbac.yaml: none there before), then ``objects`` there, while the authorizer may
        not know the binding yet (``Kube.new_namespace_retry``)."""
        kube.apply(manifests.portal_binding(namespace, kube.username()))
        for obj in objects:
            kube.new_namespace_retry(namespace, lambda obj=obj: kube.apply(obj))

    def paths(self, job) -> Paths:
        return pods.paths(job)

    def topology(self, job, replicas) -> Topology:
        return pods.topology(job, _namespace(job), trainers=max(
            (r.index + 1 for r in replicas if r.role == TRAINER), default=0))

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
        as every index's first pod is (``observe.pod_attempt``)."""
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
        """The job's pods: the watch's, once it has read the job's namespace; until then
        (a namespace made a moment ago, one whose pods are not readable yet) listed now, so
        a pod the cache has not seen is never taken for one that is not there."""
        kube = kube_for(job.datacenter)
        cache = pod_cache(kube)
        if cache.synced(timeout=2) and cache.has_read(_namespace(job)):
            return cache.job_pods(str(job.uid))
        found, _ = kube.list("Pod", _namespace(job), selector=f"{JOB_UID_LABEL}={job.uid}")
        return found

    def changes_watch(self, datacenter) -> None:
        pod_cache(kube_for(datacenter)).announce()

    def observe_all(self, datacenter, replicas) -> dict[int, Observation | None]:
        """From one list of the cluster's pods (the watch's, else one per namespace): what
        each pod says, without the closer looks ``observe`` may take (None: no pod)."""
        kube = kube_for(datacenter)
        cache = pod_cache(kube)
        found = cache.pods() if cache.synced(timeout=2) else pods_listed(kube)
        by_job: dict[str, list[dict]] = {}
        for pod in found:
            by_job.setdefault((pod["metadata"].get("labels") or {}).get(JOB_UID_LABEL),
                              []).append(pod)
        return {replica.pk: observe.pod_seen(replica, observe.replica_pods(
            by_job.get(str(replica.job.uid), []), replica)) for replica in replicas}

    def observe(self, job, replica) -> Observation:
        try:
            mine = observe.replica_pods(self._pods(job), replica)
        except KubeError as exc:
            return Observation(Status.WAITING, reason=f"cannot see its pod: {exc}")
        seen = observe.pod_seen(replica, mine)
        if seen is None:
            return self._no_pod(job, replica)
        if (seen.status in (Status.EXITED, Status.LOST) and seen.exit_code != 0
                and replica.role == TRAINER and trainers_restart_together(job)
                and not seen.disrupted and observe.trainers_disrupted(kube_for(
                    job.datacenter).get("Job", _namespace(job), trainer_name(job)))):
            seen = dataclasses.replace(seen, disrupted=True)
        if seen.status == Status.WAITING \
                and kube_settings(job.datacenter).kube_scheduler == "volcano":
            return self._gang_held(job, observe.current_pod(replica, mine), seen)
        if seen.status == Status.WAITING and pods.kueue_pod_group(job):
            pod = observe.current_pod(replica, mine)
            if observe.kueue_gated(pod, KUEUE_GATE):
                return self._group_queued(kube_for(job.datacenter), pod, seen)
        return seen

    def _gang_held(self, job, pod: dict, seen: Observation) -> Observation:
        """A pending pod of a job whose gang scheduler holds it: what its PodGroup says."""
        if (pod.get("spec") or {}).get("nodeName"):
            return seen
        try:
            group = kube_for(job.datacenter).get("PodGroup", _namespace(job), object_base(job))
        except KubeError:
            return seen
        return observe.gang_held(group, seen)

    def _no_pod(self, job, replica) -> Observation:
        """Why there is no pod for the replica: not made yet, refused, held by a queue, or
        deleted."""
        kube = kube_for(job.datacenter)
        namespace = _namespace(job)
        kind, name = (("Job", trainer_name(job)) if replica.role == TRAINER
                      else ("StatefulSet", pserver_name(job)))
        try:
            if kind == "Job":
                self._stranded_remove(kube, job)
            if kind == "Job" and trainers_restart_together(job) and replica.attempt:
                owner = self._trainers_ensure(job, replica.attempt)
                if owner is None and kube.get("ConfigMap", namespace, object_base(job)):
                    return Observation(Status.WAITING, reason=(
                        "waiting for the trainers of its last attempt to stop"))
            else:
                owner = kube.get(kind, namespace, name)
            if owner is None:
                return observe.owner_gone(kind, name, namespace, root_exists=kube.get(
                    "ConfigMap", namespace, object_base(job)) is not None)
            if replica.role == PSERVER and replica.state == "running":
                return observe.PSERVER_POD_GONE
            refused = observe.refusal(kube.events_for(namespace, owner["metadata"]["uid"]),
                                      settings.PADDLECLOUD_KUBE_REFUSED_SECONDS)
            if refused is not None:
                return refused
            if (owner.get("spec") or {}).get("suspend"):
                return self._queued(kube, owner)
        except KubeError as exc:
            return Observation(Status.WAITING, reason=f"cannot see its pod: {exc}")
        return Observation(Status.WAITING, reason="waiting for its pod to be created")

    def _stranded_remove(self, kube, job) -> None:
        """Force-delete the job's trainer pods stranded on a lost node (``observe.stranded``),
        as an administrator would (``kubectl delete --force``): a trainer waiting for its next
        pod gets it, and resumes from its latest checkpoint, rather than wait for a node that
        may never come back. A pserver's is left: its parameters are gone with it anyway."""
        now = timezone.now()
        for pod in self._pods(job):
            meta = pod["metadata"]
            if (meta.get("labels") or {}).get(ROLE_LABEL) == TRAINER and observe.stranded(
                    pod, now):
                logger.warning("job %s: force-deleting pod %s, stranded on lost node %s",
                               job.pk, meta["name"], (pod.get("spec") or {}).get("nodeName"))
                kube.delete("Pod", _namespace(job), meta["name"], grace=0)

    def _queued(self, kube, owner: dict) -> Observation:
        """A suspended Job: Kueue has not admitted it. Its Workload says why."""
        try:
            workload = _owner_workload(kube, owner)
        except KubeError as exc:
            return observe.kueue_unasked(exc)
        return self._kueue_holds(kube, owner["metadata"]["namespace"], workload,
                                 "is Kueue installed, and its LocalQueue there?")

    def _group_queued(self, kube, pod: dict, seen: Observation) -> Observation:
        """A pod Kueue gates: its pod group's Workload (named after the group) says why."""
        meta = pod["metadata"]
        try:
            workload = kube.get("Workload", meta["namespace"],
                                meta["labels"][KUEUE_GROUP_LABEL])
        except KubeError as exc:
            held = observe.kueue_unasked(exc)
        else:
            held = self._kueue_holds(kube, meta["namespace"], workload,
                                     "it makes the job's Workload once all its pods exist")
        return dataclasses.replace(held, host=seen.host, ref=seen.ref)

    def _kueue_holds(self, kube, namespace: str, workload: dict | None, unseen: str
                     ) -> Observation:
        """Why Kueue holds a job (``observe.kueue_held``), with where Kueue's visibility API
        says it stands in its ClusterQueue."""
        if workload is None:
            return observe.kueue_unseen(unseen)
        return observe.kueue_held(workload, kube.queue_position(
            namespace, LOCAL_QUEUE, workload["metadata"]["name"]))

    def start_progress(self, job, replicas) -> StartProgress | None:
        """A pending pod of the job whose Events say its start is under way (its image being
        pulled, a node being added for it: ``observe.start_underway``), from now; else when
        the cluster's queue let the job go, which may be well after the portal last saw it
        held: on Kueue its Workload's Admitted condition, on Volcano its PodGroup's Scheduled
        one. A look taken at the start timeout only, not at every sync: an Event list per
        pending pod."""
        kube = kube_for(job.datacenter)
        namespace = _namespace(job)
        try:
            found = self._pods(job)
            now = timezone.now()
            for replica in replicas:
                pod = observe.current_pod(replica, observe.replica_pods(found, replica))
                if pod is None or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
                    continue
                why = observe.start_underway(
                    pod, kube.events_for(namespace, pod["metadata"]["uid"]), now)
                if why:
                    return StartProgress(now, f"{replica.name}: {why}; its start timeout "
                                              f"runs again from now")
            scheduler = kube_settings(job.datacenter).kube_scheduler
            if scheduler == "volcano":
                admitted = observe.gang_scheduled_at(
                    kube.get("PodGroup", namespace, object_base(job)))
            elif scheduler != "kueue":
                return None
            elif pods.kueue_pod_group(job):
                admitted = observe.kueue_admitted_at(
                    kube.get("Workload", namespace, object_base(job)))
            else:
                owner = kube.get("Job", namespace, trainer_name(job))
                admitted = observe.kueue_admitted_at(owner and _owner_workload(kube, owner))
        except KubeError as exc:
            raise BackendError(f"cannot see what its start waits for: {exc}") from exc
        return StartProgress(admitted, "") if admitted else None

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

    def orphans_stop(self, datacenters, known, grace: float) -> int:
        """Delete the objects of jobs the database no longer knows, in each datacenter's
        cluster (their roots: the rest follows)."""
        found = 0
        for datacenter in datacenters:
            try:
                kube = kube_for(datacenter)
                # Namespace by namespace: the portal may read ConfigMaps only in its own.
                namespaces, _ = kube.list("Namespace", selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
                roots = [root for namespace in namespaces for root in kube.list(
                    "ConfigMap", namespace["metadata"]["name"], selector=ROOTS)[0]]
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

    def log_stream(self, job, replica, *, follow: bool, tail: int | None, ended=None,
                   at: LogCursor | None = None):
        """The current pod's log while it exists (following it), from ``at`` when that names
        a run of one of the replica's pods, and where it begins (a ``LogCursor``: the byte of
        that pod's container run, None for a tail not followed); else None: the archive (and
        for a build: its log, which the worker fills from the builder's pod). A cursor naming
        a run the cluster no longer has answers None too; one of a file (no pod), None."""
        if replica.role == "build" or (at is not None and at.pod is None):
            return None
        try:
            mine = observe.replica_pods(self._pods(job), replica)
        except KubeError:
            return None
        previous = False
        if at is not None:  # that pod's run, to its end if it has ended since
            latest = bool(mine) and mine[-1]["metadata"].get("uid") == at.pod
            mine = [p for p in mine if p["metadata"].get("uid") == at.pod]
            runs = _restarts(mine[0], replica.role) - at.restarts if mine else -1
            if runs not in (0, 1):
                return None
            previous, follow = runs == 1, follow and runs == 0 and latest
        if not mine:
            return None
        pod = mine[-1]["metadata"]
        kube = kube_for(job.datacenter)
        restarts = at.restarts if at is not None else _restarts(mine[-1], replica.role)

        def read(follow: bool, tail_lines: int | None = None):
            return kube.pod_log(pod["namespace"], pod["name"], container=replica.role,
                                follow=follow, tail_lines=tail_lines, previous=previous)

        if at is None and tail is not None and not follow:
            return None, _read(lambda: read(False, tail)) or iter([])
        if at is not None:
            offset = at.offset
        elif tail is not None:  # followed: where its last lines begin, to go on from there
            offset = _tail_start(_read(lambda: read(False)) or iter([]), tail)
        else:
            offset = 0
        chunks = self._follow(read, ended or (lambda: True)) if follow else \
            _read(lambda: read(False))
        if chunks is None:  # the pod went meanwhile: its log is in the archive
            return None
        return LogCursor(offset, pod.get("uid"), restarts), _from_byte(chunks, offset)

    # --- a command in a pod, a port of a pod ------------------------------------------------

    def _running_pod(self, job, replica) -> tuple[Kube, dict]:
        """The API server and the replica's current pod, when it runs; else a BackendError."""
        mine = observe.replica_pods(self._pods(job), replica)
        if not mine or mine[-1].get("status", {}).get("phase") != "Running":
            phase = mine[-1].get("status", {}).get("phase", "gone") if mine else "not there"
            raise BackendError(f"worker {replica.name} is not running (its pod is "
                               f"{phase.lower()})")
        return kube_for(job.datacenter), mine[-1]["metadata"]

    async def exec_open(self, job, replica, argv, *, tty, size=None, term="xterm"):
        """Through the pod's ``exec`` subresource (``streams.py``): the container runs it as
        it runs its own command. The runtime sets TERM with a terminal (containerd: xterm)."""
        kube, pod = await asyncio.to_thread(self._running_pod, job, replica)
        query = [("container", replica.role), *(("command", word) for word in argv),
                 ("stdin", "true"), ("stdout", "true"), ("stderr", "false" if tty else "true"),
                 ("tty", "true" if tty else "false")]
        socket = await kube.channels(f"/api/v1/namespaces/{pod['namespace']}/pods/"
                                     f"{pod['name']}/exec", query)
        process = KubeExec(socket, tty=tty)
        if size:
            await process.resize(*size)
        return process

    async def port_open(self, job, replica, port: int):
        """Through the pod's ``portforward`` subresource (``streams.py``): the kubelet
        connects to the port on the pod's own network, from inside it."""
        kube, pod = await asyncio.to_thread(self._running_pod, job, replica)
        socket = await kube.channels(f"/api/v1/namespaces/{pod['namespace']}/pods/"
                                     f"{pod['name']}/portforward", [("ports", str(port))])
        return KubePortStream(socket, port)

    def _follow(self, read, ended):
        """Follow the pod's log. Until its container has started (the log answers 400, or
        nothing while the pod is unscheduled), wait for it, unless the replica ends first
        (``ended()``)."""
        while True:
            received = False
            try:
                for chunk in read(True):
                    received = received or bool(chunk)
                    yield chunk
            except KubeError as exc:
                if exc.status != 400:
                    raise
            if received or ended():
                return
            time.sleep(LOG_RETRY_SECONDS)

    # -- registry credentials ---------------------------------------------------------------

    def pull_secret_apply(self, registry) -> None:
        self._pull_secret_write(kube_for(registry.datacenter), registry)

    # -- runtime images (jobs.builds) ---------------------------------------------------------

    runs_images = True

    def image_build(self, build, dockerfile: str, log: int, auth, *, insecure: bool,
                    cancelled=lambda: "") -> str:
        """A builder Job in the owner's namespace (``builder``); its log copied to ``log`` as
        it comes; the digest it pushed read from its pod's termination message. With the
        portal builder: buildah in this worker, as a local datacenter builds."""
        if (problem := self.image_build_problem(build.datacenter)) is not None:
            raise BackendError(problem)
        if kube_settings(build.datacenter).kube_builder == Builder.PORTAL:
            return package_build(build, dockerfile, log, auth, insecure=insecure,
                                 cancelled=cancelled)
        kube = kube_for(build.datacenter)
        namespace = _builder_namespace(build)
        unconfined = kube_settings(build.datacenter).kube_builder == Builder.UNCONFINED
        image = build.datacenter.builder_image or settings.PADDLECLOUD_BUILDER_IMAGE
        same = (builder.BUILD_LABEL, str(build.uid))
        try:
            kube.version_check()
            self._namespace_ensure(kube, build.datacenter, build.owner)
            if build.registry is not None:
                self._pull_secret_write(kube, build.registry)
            if unconfined:  # the administrator's namespace: the portal's rights, the PFS
                self._bound_apply(kube, namespace, manifests.pfs_claim_objects(
                    build.datacenter, namespace, {MANAGED_BY_LABEL: MANAGED_BY,
                                                  COMPONENT_LABEL: "build"})
                    if "persistentVolume" in (kube_settings(build.datacenter).kube_volume or {})
                    else [])
            job = builder.builder_job(build, namespace, image, insecure=insecure,
                                      auth=build.registry is not None, unconfined=unconfined)
            if problems := validate_objects([job]):
                raise BackendError("; ".join(problems))
            created = kube.create(job, same_if=same)
            kube.create(builder.builder_dockerfile(build, namespace, dockerfile, created),
                        same_if=same)
            if unconfined and build.registry is not None:
                kube.create(builder.builder_push_secret(build, manifests.pull_secret(
                    namespace, build.registry, records().registry_password(build.registry)),
                    created), same_if=same)
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from None
        except KubeError as exc:
            raise BackendError(f"the cluster refused the builder's objects: {exc}") from None
        try:
            return build_follow(kube, build, namespace, image, log, cancelled=cancelled)
        except BuildCancelled as cancel:  # its jobs were killed
            self.image_build_cancel(build)
            raise BackendError(str(cancel)) from None

    def image_build_problem(self, datacenter) -> str | None:
        chosen = kube_settings(datacenter).kube_builder
        if chosen == Builder.OFF:
            return (f"datacenter {datacenter.name!r} builds no images (its administrator "
                    "turned the builder off: its cluster cannot run one): give an image "
                    "that has what the package needs")
        if chosen == Builder.PORTAL and (problem := buildah_problem()):
            return (f"datacenter {datacenter.name!r} builds images on the portal's machine "
                    f"(kube_builder portal), which cannot build: {problem}")
        return None

    def image_build_cancel(self, build) -> None:
        """Delete the builder Job (its pod, its Dockerfile and its credentials go with it).
        The portal builder's buildah stops by itself (``cancelled``)."""
        if kube_settings(build.datacenter).kube_builder == Builder.PORTAL:
            return
        try:
            kube_for(build.datacenter).delete("Job", _builder_namespace(build),
                                              builder.builder_name(build))
        except KubeError as exc:
            raise BackendError(f"could not delete the builder: {exc}") from None

    def _pull_secret_write(self, kube, registry) -> None:
        self._namespace_ensure(kube, registry.datacenter, registry.owner)
        namespace = job_namespace(registry.datacenter, registry.owner.username)
        kube.apply(manifests.pull_secret(namespace, registry,
                                        records().registry_password(registry)))

    def pull_secret_delete(self, datacenter, owner, name: str) -> None:
        namespace = job_namespace(datacenter, owner.username)
        kube_for(datacenter).delete("Secret", namespace, pull_secret_name(name))


def _builder_namespace(build) -> str:
    """Where ``build``'s builder runs: the owner's namespace, or the unconfined builders'."""
    settings_ = kube_settings(build.datacenter)
    if settings_.kube_builder == Builder.UNCONFINED:
        return settings_.kube_builder_namespace
    return job_namespace(build.datacenter, build.owner.username)


def _restarts(pod: dict, container: str) -> int:
    """How often the pod's ``container`` has restarted: which run of it its log is."""
    for entry in (pod.get("status") or {}).get("containerStatuses") or []:
        if entry.get("name") == container:
            return entry.get("restartCount") or 0
    return 0


def _from_byte(chunks, skip: int):
    """``chunks`` from byte ``skip`` on."""
    for chunk in chunks:
        if skip >= len(chunk):
            skip -= len(chunk)
            continue
        yield chunk[skip:]
        skip = 0


def _read(read):
    """A log read once, streamed as it comes (never read whole): empty while its container is
    being created; None once its pod is gone."""
    chunks = read()
    try:
        first = next(chunks, b"")
    except KubeError as exc:
        if exc.status == 404:
            return None
        if exc.status != 400:  # 400: its container is still being created
            raise
        return iter([b""])
    return itertools.chain([first], chunks)


def _tail_start(chunks, tail: int) -> int:
    """The byte where the last ``tail`` lines of ``chunks`` begin."""
    size, starts = 0, collections.deque([0], maxlen=tail + 1)
    for chunk in chunks:
        at = chunk.find(b"\n")
        while at >= 0:
            starts.append(size + at + 1)
            at = chunk.find(b"\n", at + 1)
        size += len(chunk)
    if starts and starts[-1] == size:
        starts.pop()  # no line begins at the end
    if tail == 0:
        return size
    return starts[-tail] if len(starts) >= tail else 0
