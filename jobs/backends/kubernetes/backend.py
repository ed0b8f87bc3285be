"""The Kubernetes backend: a job's replicas are pods, made by a StatefulSet (pservers) and an
Indexed Job (trainers) in the owner's namespace, all owned by one root ConfigMap.

- ``prepare`` makes the namespace (with its ResourceQuota and LimitRange), the pull secret of
  the job's registry credential, and every object of the job. Creation is idempotent: an
  object already there with this job's uid is taken as made.
- ``start`` creates nothing: the controllers start the pods. It names the replica's pods.
- ``observe`` reads the pods (``pods_watch``): phases, exit codes, and why a pod still waits
  (unschedulable, image pull failures) from its conditions and container states; a pod the
  cluster refused to create (its ResourceQuota) from the controller's ``FailedCreate`` events.
- ``stop``, ``release`` (the job ended) and ``cleanup`` delete the root: the garbage
  collector deletes the rest, the pods with the portal's grace period.
- Logs come from the pods while they exist, else from the copy each pod writes to the job's
  output in PFS (``jobs.files.log_file``).
"""

from __future__ import annotations

import itertools
import logging
import time

from django.db import connection, transaction

from accounts.models import Datacenter
from accounts.selectors import quota_get
from jobs.models import replica_ended
from paddlecloud.errors import PaddleCloudError, ValidationError
from paddlecloud_core.contract import Paths, Topology, job_namespace
from paddlecloud_core.processes import exit_reason
from registries.models import Registry
from registries.services import registry_password

from ...files import home_remove, output_prepare
from ..base import Backend, BackendError, Observation, Status
from . import manifests, pods
from .client import KubeError, kube_for
from .names import (
    COMPONENT_LABEL,
    JOB_UID_LABEL,
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
from .pods_watch import pod_cache
from .validation import validate_objects

logger = logging.getLogger(__name__)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POD_INDEX = "apps.kubernetes.io/pod-index"
LOG_RETRY_SECONDS = 0.5
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


class KubernetesBackend(Backend):
    name = "kubernetes"

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

    def prepare(self, job) -> None:
        kube = kube_for(job.datacenter)
        kube.version_check()
        namespace = _namespace(job)
        if job.datacenter.pfs_root_path.is_dir():  # the portal's own mount of the PFS
            output_prepare(job)
        self._namespace_ensure(kube, job.datacenter, job.owner)
        if job.registry is not None:
            self._pull_secret_write(kube, job.registry)
        same = (JOB_UID_LABEL, str(job.uid))
        try:
            root = kube.create(manifests.job_root(job, namespace), same_if=same)
            for obj in manifests.job_children(job, namespace, root["metadata"]["uid"]):
                kube.create(obj, same_if=same)
        except manifests.ManifestError as exc:
            raise BackendError(str(exc)) from None
        except KubeError as exc:
            raise BackendError(f"the cluster refused the job's objects: {exc}") from None

    def _namespace_ensure(self, kube, datacenter, user) -> None:
        for obj in manifests.namespace_objects(datacenter, user, quota_get(user, datacenter)):
            kube.apply(obj)

    def paths(self, job) -> Paths:
        return pods.paths(job)

    def topology(self, job, replicas) -> Topology:
        topology = pods.topology(job, _namespace(job))
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
        # is in their pod templates (built from the same contract).
        if replica.role == TRAINER:
            return f"{trainer_name(job)}-{replica.index}"
        return pserver_host(job, replica.index)

    # -- observing --------------------------------------------------------------------------

    def _pods(self, job) -> list[dict]:
        kube = kube_for(job.datacenter)
        cache = pod_cache(kube)
        if cache.synced(timeout=2):
            return cache.job_pods(str(job.uid))
        found, _ = kube.list("Pod", _namespace(job), selector=f"{JOB_UID_LABEL}={job.uid}")
        return found

    def _replica_pods(self, job, replica) -> list[dict]:
        """The replica's pods, oldest first: one per attempt for a trainer."""
        mine = []
        for pod in self._pods(job):
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

    def observe(self, job, replica) -> Observation:
        try:
            mine = self._replica_pods(job, replica)
        except KubeError as exc:
            return Observation(Status.WAITING, reason=f"cannot see its pod: {exc}")
        if replica.role == TRAINER:  # the Job controller makes a new pod per attempt
            pod = mine[replica.restarts] if len(mine) > replica.restarts else None
        else:
            pod = mine[-1] if mine else None
        if pod is None:
            return self._no_pod(job, replica)
        return pod_observation(pod, replica.role)

    def _no_pod(self, job, replica) -> Observation:
        """Why there is no pod for the replica: not made yet, refused, or deleted."""
        kube = kube_for(job.datacenter)
        namespace = _namespace(job)
        kind, name = (("Job", trainer_name(job)) if replica.role == TRAINER
                      else ("StatefulSet", pserver_name(job)))
        try:
            owner = kube.get(kind, namespace, name)
            if owner is None:
                if kube.get("ConfigMap", namespace, object_base(job)) is None:
                    return Observation(Status.LOST, reason=(
                        f"its Kubernetes objects were deleted outside PaddleCloud ({kind} "
                        f"{name} in namespace {namespace} is gone)"))
                return Observation(Status.LOST, reason=f"its {kind} {name} was deleted "
                                                       "outside PaddleCloud")
            for event in kube.events_for(namespace, owner["metadata"]["uid"]):
                if event.get("reason") == "FailedCreate" and "exceeded quota" in (
                        event.get("message") or ""):
                    return Observation(Status.REFUSED, reason=(
                        "the cluster refused to create its pod: " + event["message"]))
        except KubeError as exc:
            return Observation(Status.WAITING, reason=f"cannot see its pod: {exc}")
        return Observation(Status.WAITING, reason="waiting for its pod to be created")

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
            kube_for(job.datacenter).delete("ConfigMap", _namespace(job), object_base(job))
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
        kube.delete("ConfigMap", namespace, object_base(job), grace=grace)
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
        """The current pod's log while it exists (following it), else None: the archive."""
        try:
            mine = self._replica_pods(job, replica)
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

    def _pull_secret_write(self, kube, registry) -> None:
        self._namespace_ensure(kube, registry.datacenter, registry.owner)
        namespace = job_namespace(registry.datacenter, registry.owner.username)
        kube.apply(manifests.pull_secret(namespace, registry, registry_password(registry)))

    def pull_secret_delete(self, datacenter, owner, name: str) -> None:
        namespace = job_namespace(datacenter, owner.username)
        kube_for(datacenter).delete("Secret", namespace,
                                    pull_secret_name(Registry(name=name)))


# -- a pod, as a replica's observation ---------------------------------------------------------

def _container(statuses: list[dict] | None, name: str) -> dict:
    return next((s for s in statuses or [] if s.get("name") == name), {})


def pod_observation(pod: dict, role: str) -> Observation:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    host = (pod.get("spec") or {}).get("nodeName", "")
    main = _container(status.get("containerStatuses"), role)
    terminated = (main.get("state") or {}).get("terminated")
    if phase == "Succeeded":
        return Observation(Status.EXITED, exit_code=0, host=host)
    if phase == "Failed":
        setup = (_container(status.get("initContainerStatuses"), "setup").get("state")
                 or {}).get("terminated")
        if terminated is None and setup and setup.get("exitCode"):
            return Observation(Status.EXITED, exit_code=setup["exitCode"], host=host, reason=(
                f"preparing the workspace failed (exit {setup['exitCode']}): see "
                "output/requirements.log"))
        code = (terminated or {}).get("exitCode")
        reason = status.get("reason") or (terminated or {}).get("reason") or ""
        if code is None:
            return Observation(Status.LOST, host=host, reason=(
                f"its pod failed: {reason or 'no exit status'} {status.get('message', '')}"
            ).strip())
        return Observation(Status.EXITED, exit_code=code, host=host,
                           reason=_exit_reason(code, reason))
    if phase == "Running":
        last = (main.get("lastState") or {}).get("terminated")
        if role == PSERVER and (terminated or last):  # restarted in place by the kubelet
            ended = terminated or last
            return Observation(Status.EXITED, exit_code=ended.get("exitCode", 1), host=host,
                               reason=_exit_reason(ended.get("exitCode", 1),
                                                   ended.get("reason", "")))
        if terminated is not None:  # its container ended, the pod not yet
            return Observation(Status.EXITED, exit_code=terminated.get("exitCode", 1),
                               host=host, reason=_exit_reason(terminated.get("exitCode", 1),
                                                              terminated.get("reason", "")))
        return Observation(Status.RUNNING, host=host)
    return Observation(Status.WAITING, host=host, reason=_pending_reason(status))


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
            return "preparing its workspace (copying the package, installing requirements)"
    return "its pod is being created"
