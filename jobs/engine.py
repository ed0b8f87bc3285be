"""Driving jobs on their backend: launch, observe and advance, stop, and clear away what is
left of a deleted job. Called by the Celery tasks (and by nothing that serves a request).
Every step is idempotent: it may run twice, or be cut off half way and run again, and each
replica attempt is still started exactly once."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Datacenter
from paddlecloud_core.contract import (
    STOP_GRACE_SECONDS,
    Topology,
    job_namespace,
    replica_env,
    trainers_restart_together,
)
from paddlecloud_core.processes import exit_reason

from .backends import backend_for
from .backends.base import BackendError, Status
from .models import Job, Replica
from .notify import job_changed
from .signals import job_requeued
from .states import FINAL_JOB_STATES, FINAL_REPLICA_STATES, JobState, ReplicaState
from .transitions import job_transition, replica_transition

logger = logging.getLogger(__name__)


def _replicas(job) -> list[Replica]:
    return list(job.replicas.order_by("role", "index"))


def job_launch(job_id: int) -> None:
    """Start every replica of an admitted (``starting``) job, or those a cut-off start left."""
    job = Job.objects.select_related("datacenter", "owner").get(pk=job_id)
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return  # not admitted yet (jobs.admission moves it to starting), or ended
    backend = backend_for(job.datacenter)
    try:
        backend.prepare(job)
    except BackendError as exc:
        job_fail(job, str(exc))
        return
    except OSError as exc:  # disk full, permissions, a PFS mount gone
        job_fail(job, f"could not prepare the job's files: {exc}")
        return
    replicas = _replicas(job)
    topology = backend.topology(job, replicas)
    for replica in replicas:
        _start(job, backend, replica, ReplicaState.PENDING, topology)


def _start(job, backend, replica, expected: str, topology: Topology | None = None) -> None:
    """Start the replica's current attempt if it is still in the ``expected`` state: pending
    (its first start), or starting (a restart). Under the replica's row lock, so two tasks
    cannot both start it."""
    topology = topology or backend.topology(job, _replicas(job))
    env = replica_env(job, replica.role, replica.index, topology, backend.paths(job),
                      job_namespace(job.datacenter, job.owner.username))
    with transaction.atomic():
        locked = Replica.objects.select_for_update().get(pk=replica.pk)
        if locked.state != expected:
            return
        try:
            ref = backend.start(job, locked, env)
        except BackendError as exc:
            replica_transition(locked, ReplicaState.FAILED, str(exc))
            return
        if expected == ReplicaState.PENDING:
            replica_transition(locked, ReplicaState.STARTING, "process started",
                               backend_ref=ref)
        else:
            Replica.objects.filter(pk=replica.pk).update(backend_ref=ref)


def job_sync(job_id: int) -> bool:
    """Observe the job's replicas and apply what happened. Returns True while the job runs."""
    job = Job.objects.select_related("datacenter", "owner").get(pk=job_id)
    backend = backend_for(job.datacenter)
    replicas = _replicas(job)
    if job.state in FINAL_JOB_STATES:
        _stop(job, replicas, f"the job {job.state}")
        return False
    if job.state in (JobState.PENDING, JobState.QUEUED):
        return True  # job_launch has not run yet

    for replica in replicas:
        if replica.state in (ReplicaState.STARTING, ReplicaState.RUNNING) and _observe(
                job, backend, replica):  # all the trainers restarted: the rest is stale
            break
    replicas = _replicas(job)

    trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
    failed = next((r for r in replicas if r.state == ReplicaState.FAILED), None)
    if failed is not None:
        job_fail(job, f"{failed.name} failed: {failed.reason}")
        return False
    if trainers and all(r.state == ReplicaState.SUCCEEDED for r in trainers):
        _stop(job, replicas, "stopped: the trainers finished", final=ReplicaState.SUCCEEDED)
        job_transition(job, JobState.SUCCEEDED, "every trainer exited 0")
        return False
    if job.deadline_seconds:
        since = job.started_at or job.created_at
        if timezone.now() - since > timedelta(seconds=job.deadline_seconds):
            job_fail(job, f"ran past its deadline of {job.deadline_seconds} seconds")
            return False
    if job.state == JobState.STARTING and all(
            r.state in (ReplicaState.RUNNING, ReplicaState.SUCCEEDED) for r in replicas):
        job_transition(job, JobState.RUNNING, "every replica is running")
    elif job.state == JobState.STARTING and _start_timed_out(job):
        _requeue(job, backend, replicas)
    return True


def _observe(job, backend, replica) -> bool:
    """Apply what became of the replica. True when that restarted all the trainers (the
    replicas the caller holds are stale)."""
    seen = backend.observe(job, replica)
    if seen.status == Status.RUNNING:
        if replica.state == ReplicaState.STARTING:
            replica_transition(replica, ReplicaState.RUNNING, "running",
                               **({"host": seen.host} if seen.host else {}),
                               **({"backend_ref": seen.ref} if seen.ref else {}))
        return False
    if seen.status == Status.WAITING:
        _waiting(job, replica, seen.reason)
        return False
    if seen.status == Status.NOT_STARTED:
        # A restart was recorded but its start was cut off: start it now.
        _start(job, backend, replica, ReplicaState.STARTING)
        return False
    if seen.status == Status.REFUSED:
        replica_transition(replica, ReplicaState.FAILED, seen.reason)
        return False
    if seen.status == Status.EXITED and seen.exit_code == 0:
        replica_transition(replica, ReplicaState.SUCCEEDED, "exited 0", exit_code=0)
        return False
    reason = seen.reason or (
        exit_reason(seen.exit_code) if seen.status == Status.EXITED else
        "the process vanished without an exit status (was the machine restarted?)")
    if replica.role != Replica.Role.TRAINER:
        # A pserver is never restarted: a new one would hold none of the parameters, and
        # the trainers would train on against it.
        replica_transition(replica, ReplicaState.FAILED, reason, exit_code=seen.exit_code)
        return False
    if trainers_restart_together(job):
        return _restart_together(job, backend, replica, seen, reason)
    if seen.disrupted:
        note = f"{reason}; restarted (not counted against its restart limit)"
    elif replica.restarts < job.restart_limit:
        note = f"{reason}; restart {replica.restarts + 1} of {job.restart_limit}"
    else:
        replica_transition(replica, ReplicaState.FAILED, reason, exit_code=seen.exit_code)
        return False
    # The restart is recorded first; if what follows is cut off, the next sync starts it.
    replica_transition(replica, ReplicaState.STARTING, note, restart=True,
                       counted=not seen.disrupted, exit_code=seen.exit_code)
    _start(job, backend, replica, ReplicaState.STARTING)
    return False


def _restart_together(job, backend, failed, seen, reason: str) -> bool:
    """A collective job's trainer ended: all its trainers restart, in a new attempt (a
    communicator cannot take back one rank), counted against the restart limit unless the
    cluster took the pod away. Returns True once they have."""
    if not seen.disrupted and failed.restarts >= job.restart_limit:
        replica_transition(failed, ReplicaState.FAILED, reason, exit_code=seen.exit_code)
        return False
    trainers = [r for r in _replicas(job) if r.role == Replica.Role.TRAINER
                and r.state in (ReplicaState.STARTING, ReplicaState.RUNNING)]
    try:
        backend.stop_for_restart(job, [r for r in trainers if r.pk != failed.pk],
                                 STOP_GRACE_SECONDS)
    except BackendError as exc:  # tried again at the next sync
        logger.warning("job %s: its trainers could not be stopped to restart: %s", job.pk, exc)
        return False
    if seen.disrupted:
        note = f"{failed.name} {reason}; all trainers restart (not counted)"
    else:
        note = (f"{failed.name} {reason}; all trainers restart "
                f"({failed.restarts + 1} of {job.restart_limit})")
    attempt = max(r.attempt for r in trainers) + 1
    with transaction.atomic():
        for trainer in trainers:
            replica_transition(trainer, ReplicaState.STARTING, note, restart=True,
                               counted=not seen.disrupted, attempt=attempt,
                               exit_code=seen.exit_code if trainer.pk == failed.pk else None)
    for trainer in trainers:
        _start(job, backend, trainer, ReplicaState.STARTING)
    return True


def _start_timed_out(job) -> bool:
    """Whether the job has been starting for longer than its datacenter allows."""
    timeout = job.datacenter.start_timeout
    since = job.admitted_at or job.started_at
    return bool(timeout) and since is not None and (
        timezone.now() - since > timedelta(seconds=timeout))


def _requeue(job, backend, replicas) -> None:
    """The job's replicas did not all run within the start timeout (the cluster has no room
    for all of them: the pods that did start would hold their share while the rest wait,
    and two such jobs could wait on each other for ever). Stop it, release every pod, and put
    it back at the head of its queue; after ``start_tries`` such starts, fail it."""
    datacenter = job.datacenter
    stuck = [r for r in replicas if r.state not in (ReplicaState.RUNNING,
                                                    ReplicaState.SUCCEEDED)]
    why = "; ".join(f"{r.name}: {r.reason or r.state}" for r in stuck[:3])
    tries = job.requeues + 1
    if tries >= datacenter.start_tries:
        job_fail(job, f"its replicas were not all running within {datacenter.start_timeout} s "
                      f"of its start, {tries} times ({why})")
        return
    live = [r for r in replicas if r.state not in FINAL_REPLICA_STATES]
    try:
        backend.stop(job, live, STOP_GRACE_SECONDS)
    except BackendError as exc:  # tried again at the next sync
        logger.warning("job %s: its replicas could not be stopped to requeue: %s", job.pk, exc)
        return
    backend.release(job)
    attempt = max((r.attempt for r in replicas), default=0) + 1
    with transaction.atomic():
        for replica in live:
            if replica.state != ReplicaState.PENDING:
                replica_transition(replica, ReplicaState.PENDING,
                                   "stopped: its job went back to its queue", attempt=attempt)
            else:
                Replica.objects.filter(pk=replica.pk).update(attempt=attempt)
        Job.objects.filter(pk=job.pk).update(requeues=F("requeues") + 1)
        job_transition(job, JobState.QUEUED, (
            f"requeued at the head of its queue, start {tries + 1} of {datacenter.start_tries} "
            f"next: its replicas were not all running after {datacenter.start_timeout} s "
            f"({why}); every pod was released"))
        job_requeued.send(Job, owner_id=job.owner_id, datacenter_id=job.datacenter_id,
                          job_ids=[job.pk])


def _waiting(job, replica, reason: str) -> None:
    """Show why a started replica does not run yet (unschedulable, pulling its image …) on
    the replica and, while the job starts, on the job. Not a state change: no event."""
    if reason and replica.reason != reason:
        Replica.objects.filter(pk=replica.pk).update(reason=reason)
        replica.reason = reason
        if job.state == JobState.STARTING:
            Job.objects.filter(pk=job.pk, state=JobState.STARTING).update(
                state_reason=f"{replica.name}: {reason}")
        job_changed(job.pk)


def job_fail(job, reason: str) -> None:
    if job_transition(job, JobState.FAILED, reason) or job.state == JobState.FAILED:
        _stop(job, _replicas(job), f"stopped: the job failed ({reason})")


def job_halt(job_id: int) -> None:
    """Stop every replica of a job that has ended (a kill, a failure)."""
    job = Job.objects.select_related("datacenter", "owner").get(pk=job_id)
    _stop(job, _replicas(job), f"stopped: the job was {job.state}")


def job_remains(job) -> dict:
    """What a worker needs to stop and clear away a job once its records are deleted (a task's
    argument, so JSON): which job it was, and those of its replicas that may still run."""
    return {"id": job.pk, "uid": str(job.uid), "name": job.name,
            "datacenter_id": job.datacenter_id, "owner_id": job.owner_id,
            "replicas": [[r.role, r.index] for r in _replicas(job)
                         if r.state not in FINAL_REPLICA_STATES]}


def job_remains_remove(remains: dict) -> None:
    """Stop the replicas of a deleted job that may still run (it was killed, and its stop has
    not run yet) and remove what its backend keeps for it privately; its output stays. The
    records are gone, so the job is rebuilt from ``job_remains``, never saved. May run twice;
    what it cannot do (a cluster that is down) the reconciler's sweep of orphans does."""
    try:
        datacenter = Datacenter.objects.get(pk=remains["datacenter_id"])
        owner = get_user_model().objects.get(pk=remains["owner_id"])
    except ObjectDoesNotExist:  # deleted since: the reconciler's sweep ends what still ran
        logger.info("deleted job %s: its owner or datacenter is gone too", remains["id"])
        return
    job = Job(pk=remains["id"], uid=uuid.UUID(remains["uid"]), name=remains["name"],
              datacenter=datacenter, owner=owner)
    backend = backend_for(datacenter)
    replicas = [Replica(job=job, role=role, index=index) for role, index in remains["replicas"]]
    if replicas:
        try:
            backend.stop(job, replicas, STOP_GRACE_SECONDS)
        except BackendError as exc:
            logger.warning("deleted job %s: its replicas could not be stopped yet: %s",
                           job.pk, exc)
    backend.cleanup(job)


def _stop(job, replicas, reason: str, final: str = ReplicaState.KILLED) -> None:
    """The job has ended: stop those of ``replicas`` that have not, record why, and let the
    backend release what the job held while it ran."""
    backend = backend_for(job.datacenter)
    replicas = [r for r in replicas if r.state not in FINAL_REPLICA_STATES]
    if replicas:
        try:
            backend.stop(job, replicas, STOP_GRACE_SECONDS)
        except BackendError as exc:
            # They may still run: left as they are, so the reconciler stops them once it can.
            logger.warning("job %s: its replicas could not be stopped yet: %s", job.pk, exc)
            return
        for replica in replicas:
            # A replica that never started cannot have succeeded.
            target = ReplicaState.KILLED if replica.state == ReplicaState.PENDING else final
            replica_transition(replica, target, reason)
    backend.release(job)
