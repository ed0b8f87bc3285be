"""Driving jobs on their backend: launch, observe and advance, stop, and clear away what is
left of a deleted job. Called by the Celery tasks (and by nothing that serves a request).
Every step is idempotent: it may run twice, or be cut off half way and run again, and each
replica attempt is still started exactly once.

An **elastic** job (``trainers`` MIN:MAX, docs/elastic.md) runs as many trainers as it holds
(``trainers_held``, which admission sets and grows): ``_trainers_place`` starts its trainers
that were never started, lowest index first, and past its MAX rows new ones with the next
index, so a Kubernetes Indexed Job only ever grows by its next indexes. Once it runs, a trainer
that ends for good (it failed beyond its restarts) is *lost*: the job goes on, gives back the
lost trainer's place (admission gives it to the job again when there is room, which replaces
it), and fails only when it loses more than ``trainers_lost_limit`` trainers or runs with
fewer than MIN for longer than ``trainers_below_min_seconds``. It succeeds once its master has
handed out everything and none of its trainers still runs. Losses count while it starts too;
a start that times out after a loss fails it rather than requeue it."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.db.models import F, Max, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from accounts.models import Datacenter
from kernel.queue import JOBS_ADMIT, task_later_once
from paddlecloud_core.contract import (
    STOP_GRACE_SECONDS,
    Topology,
    job_namespace,
    replica_env,
    trainers_elastic,
    trainers_least,
    trainers_restart_together,
)
from paddlecloud_core.processes import exit_reason
from paddlecloud_core.snapshots import image_id_digest
from paddlecloud_core.spec import trainers_shown

from .backends import backend_for
from .backends.base import BackendError, Observation, Status
from .files import output_prepare
from .master.dispatch import tasks_left
from .models import Build, Job, JobEvent, Replica
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
        return  # not admitted yet (scheduling.admission moves it to starting), or ended
    backend = backend_for(job.datacenter)
    try:
        backend.changes_watch(job.datacenter)  # from here on, what becomes of it is announced
        job_prepare(job, backend)
    except BackendError as exc:
        job_fail(job, str(exc))
        return
    except OSError as exc:  # disk full, permissions, a PFS mount gone
        job_fail(job, f"could not prepare the job's files: {exc}")
        return
    replicas = _replicas(job)
    topology = job_topology(job, backend, replicas)
    elastic = trainers_elastic(job)
    for replica in replicas:
        if not (elastic and replica.role == Replica.Role.TRAINER):
            _start(job, backend, replica, ReplicaState.PENDING, topology)
    if elastic:
        _trainers_place(job, backend)


def job_prepare(job, backend) -> None:
    """Make the job ready to start: its output directory, where the portal has the PFS
    (``output_prepare``; two starts of one job take turns), then what its backend makes for
    it, its trainers at their attempt (the same whenever the backend makes them anew)."""
    if backend.pfs_mounted(job.datacenter):
        with transaction.atomic():
            list(Job.objects.select_for_update().filter(pk=job.pk).values_list("pk"))
            output_prepare(job)
    attempt = Replica.objects.filter(job_id=job.pk, role=Replica.Role.TRAINER).aggregate(
        most=Max("attempt"))["most"]
    backend.prepare(job, attempt or 0)


def job_topology(job, backend, replicas) -> Topology:
    """Where the job's ``replicas`` listen (``Backend.topology``), saved on them (with their
    host, where the backend knows it before they start): the backend keeps what they hold,
    so every call says the same."""
    topology = backend.topology(job, replicas)
    by_role = {Replica.Role.TRAINER: topology.trainers, Replica.Role.PSERVER: topology.pservers}
    with transaction.atomic():
        for replica in replicas:
            endpoint = by_role[replica.role][replica.index]
            if replica.endpoint != endpoint:
                replica.endpoint = endpoint
                replica.host = backend.placed_host or replica.host
                replica.save(update_fields=["endpoint", "host"])
    return topology


def _start(job, backend, replica, expected: str, topology: Topology | None = None,
           reason: str = "process started") -> None:
    """Start the replica's current attempt if it is still in the ``expected`` state: pending
    (its first start), or starting (a restart). Under the replica's row lock, so two tasks
    cannot both start it."""
    topology = topology or job_topology(job, backend, _replicas(job))
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
            replica_transition(locked, ReplicaState.STARTING, reason, backend_ref=ref)
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
    if job.preempting:
        _preempt(job, backend, replicas)
        return True

    for replica in replicas:
        if replica.state in (ReplicaState.STARTING, ReplicaState.RUNNING) and _observe(
                job, backend, replica):  # all the trainers restarted: the rest is stale
            break
    replicas = _replicas(job)

    trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
    # An elastic job loses trainers rather than fail with them.
    elastic = trainers_elastic(job)
    failed = next((r for r in replicas if r.state == ReplicaState.FAILED
                   and not (elastic and r.role == Replica.Role.TRAINER)), None)
    if failed is not None:
        job_fail(job, f"{failed.name} failed: {failed.reason}")
        return False
    if elastic:
        ended = _elastic_sync(job, backend, replicas, trainers)
        if ended is not None:
            return ended
    elif trainers and all(r.state == ReplicaState.SUCCEEDED for r in trainers):
        _stop(job, replicas, "stopped: the trainers finished", final=ReplicaState.SUCCEEDED)
        job_transition(job, JobState.SUCCEEDED, "every trainer exited 0")
        return False
    if _passed(_deadline(job)):
        job_fail(job, f"ran past its deadline of {job.deadline_seconds} seconds")
        return False
    if job.state == JobState.STARTING and _runs(job, replicas):
        job_transition(job, JobState.RUNNING, "every replica is running"
                       if not trainers_elastic(job) else
                       f"its parameter servers and {_running(trainers)} trainers are running "
                       f"(at least {trainers_least(job)})")
    elif job.state == JobState.STARTING and _passed(_start_deadline(job)) \
            and not _start_goes_on(job, backend, replicas):
        _requeue(job, backend, replicas)
    return True


# --- when a job must be looked at ----------------------------------------------------------
# A job is synced when something of its replicas changes (``sync``), and at these moments,
# when time alone changes what becomes of it.

def _deadline(job) -> datetime | None:
    """When the job has run past its deadline (``deadline_seconds``)."""
    if not job.deadline_seconds:
        return None
    return (job.started_at or job.created_at) + timedelta(seconds=job.deadline_seconds)


def _start_deadline(job) -> datetime | None:
    """When a starting job's start has taken longer than its datacenter allows."""
    timeout = job.datacenter.start_timeout
    since = job.admitted_at or job.started_at
    if job.state != JobState.STARTING or not timeout or since is None:
        return None
    return since + timedelta(seconds=timeout)


def _short_deadline(job) -> datetime | None:
    """When an elastic job that runs short of its MIN trainers has done so for too long."""
    if job.trainers_short_since is None:
        return None
    return job.trainers_short_since + timedelta(seconds=job.trainers_below_min_seconds or 0)


def _passed(moment: datetime | None) -> bool:
    return moment is not None and timezone.now() > moment


def job_due(job) -> datetime | None:
    """The next moment the job must be looked at though none of its replicas changed (None:
    only when one does)."""
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return None
    moments = [m for m in (_deadline(job), _start_deadline(job), _short_deadline(job)) if m]
    return min(moments, default=None)


def replica_outdated(replica, seen: Observation | None) -> bool:
    """Whether a sync would change the replica, by what its backend saw of it cheaply
    (``observe_all``; None: it cannot tell without a closer look, which the sync takes). A
    pod that still waits changes nothing: only why it waits, which its next change brings."""
    if seen is None:
        return True
    if seen.status == Status.WAITING:
        return replica.state == ReplicaState.RUNNING
    if seen.status == Status.RUNNING:
        return replica.state == ReplicaState.STARTING
    return True


def _running(trainers) -> int:
    return sum(1 for r in trainers if r.state == ReplicaState.RUNNING)


def _runs(job, replicas) -> bool:
    """Whether a starting job now runs: its pservers and trainers do (at least MIN of an
    elastic job's trainers); one that already finished counts."""
    trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
    ran = (ReplicaState.RUNNING, ReplicaState.SUCCEEDED)
    return all(r.state in ran for r in replicas if r.role != Replica.Role.TRAINER) and sum(
        1 for r in trainers if r.state in ran) >= trainers_least(job)


# --- elastic trainers ------------------------------------------------------------------------

def _elastic_sync(job, backend, replicas, trainers) -> bool | None:
    """An elastic job's trainers: account for the lost ones, end it when it is done or has
    lost too much, watch its count against MIN once it runs (while it starts, its start
    timeout does), and start those it holds. Returns False once it has ended, else None."""
    if not _losses(job, trainers):
        return False
    live = [r for r in trainers if r.state in (ReplicaState.STARTING, ReplicaState.RUNNING)]
    finished = any(r.state == ReplicaState.SUCCEEDED for r in trainers)
    if finished and not any(r.state == ReplicaState.RUNNING for r in live):
        left = tasks_left(job)
        if not left:
            lost = job.trainers_lost
            _stop(job, replicas, "stopped: the trainers finished", final=ReplicaState.SUCCEEDED)
            job_transition(job, JobState.SUCCEEDED, (
                "its master handed out every task and its trainers exited 0"
                + (f" ({lost} trainer{'s' if lost != 1 else ''} lost on the way: their tasks "
                   "went to the others)" if lost else "")))
            return False
        if not live:
            job_fail(job, f"its trainers exited 0, but its master still has {left} task"
                          f"{'s' if left != 1 else ''} to hand out: trainers must read until "
                          "the master says there is nothing more")
            return False
    if not finished and job.state == JobState.RUNNING and not _short_check(job, trainers):
        return False
    if not finished and job.trainers_held > len(live):  # admission gave it more
        _trainers_place(job, backend)
    return None


def _losses(job, trainers) -> bool:
    """Account for the trainers lost since the last look (each failed for good): give back
    their places, say so, and ask admission for replacements; fail the job once it has lost
    more than ``trainers_lost_limit``. Returns False when the job failed."""
    lost = sorted((r for r in trainers if r.state == ReplicaState.FAILED),
                  key=lambda r: (r.finished_at or timezone.now(), r.index))
    new = len(lost) - job.trainers_lost
    if new <= 0:
        return True
    limit = job.trainers_lost_limit or 0
    if len(lost) > limit:
        last = lost[-1]
        job_fail(job, f"lost {len(lost)} trainer{'s' if len(lost) != 1 else ''}, more than "
                      f"its limit of {limit} "
                      f"(trainers_lost_limit); the last, {last.name}: {last.reason}")
        return False
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, trainers_lost=job.trainers_lost).update(
                trainers_lost=len(lost),
                trainers_held=Greatest(F("trainers_held") - new, 0)):
            return True  # another look accounted for them
        job.refresh_from_db(fields=["trainers_lost", "trainers_held"])
        running = _running(trainers)
        for number, replica in enumerate(lost[-new:], len(lost) - new + 1):
            JobEvent.objects.create(
                job=job, replica=replica, from_state=ReplicaState.FAILED, to_state="lost",
                reason=(f"{replica.name} lost ({replica.reason or 'failed'}); the job goes "
                        f"on with {running} running trainers of "
                        f"{trainers_shown(None, job.trainers_min, job.trainers)}; another "
                        f"replaces it when there is room (lost {number} of at most "
                        f"{limit})"))
        task_later_once(JOBS_ADMIT, job.owner_id, job.datacenter_id)
    job_changed(job.pk)
    return True


def _short_check(job, trainers) -> bool:
    """Watch how many trainers run against MIN: note when it falls below and when it is back;
    fail the job once it has been below for longer than ``trainers_below_min_seconds``.
    Returns False when the job failed."""
    running, least = _running(trainers), trainers_least(job)
    now = timezone.now()
    limit = job.trainers_below_min_seconds or 0
    if running >= least:
        if job.trainers_short_since is not None and Job.objects.filter(
                pk=job.pk, trainers_short_since__isnull=False).update(
                trainers_short_since=None):
            job.trainers_short_since = None
            JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=(
                f"{running} trainers run again (at least {least})"))
            job_changed(job.pk)
        return True
    if job.trainers_short_since is None:
        if Job.objects.filter(pk=job.pk, trainers_short_since__isnull=True).update(
                trainers_short_since=now):
            job.trainers_short_since = now
            JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=(
                f"fewer trainers run than its least: {running} of at least {least}; it fails "
                f"if that lasts {limit} s (trainers_below_min_seconds)"))
            job_changed(job.pk)
        return True
    if _passed(_short_deadline(job)):
        lost = [r for r in trainers if r.state == ReplicaState.FAILED]
        why = "; ".join(f"{r.name} lost: {r.reason}" for r in lost[-3:])
        job_fail(job, f"fewer than {least} trainers (trainers_min) ran for longer than "
                      f"{limit} s (trainers_below_min_seconds): {running} running"
                      + (f"; {why}" if why else ""))
        return False
    return True


def _trainers_place(job, backend) -> None:
    """Start trainers of an elastic job until as many are starting or running as it holds:
    those never started first, lowest index first, then new ones with the next indexes (past
    its MAX: replacements of lost trainers). None once a trainer has finished (the master
    has nothing more to hand out)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)  # one placer at a time
        if locked.state not in (JobState.STARTING, JobState.RUNNING):
            return
        trainers = list(Replica.objects.filter(job=job, role=Replica.Role.TRAINER)
                        .order_by("index"))
        if any(r.state == ReplicaState.SUCCEEDED for r in trainers):
            return
        live = sum(1 for r in trainers
                   if r.state in (ReplicaState.STARTING, ReplicaState.RUNNING))
        want = locked.trainers_held - live
        if want <= 0:
            return
        chosen = [r for r in trainers if r.state == ReplicaState.PENDING][:want]
        following = max((r.index for r in trainers), default=-1) + 1
        if len(chosen) < want:
            try:
                attempt = backend.trainer_first_attempt(job, trainers)
            except BackendError as exc:  # tried again at the next look
                logger.warning("job %s: no trainer can be added yet: %s", job.pk, exc)
                want = len(chosen)
        while len(chosen) < want:
            chosen.append(Replica.objects.create(job=job, role=Replica.Role.TRAINER,
                                                 index=following, attempt=attempt))
            following += 1
    job.trainers_held = locked.trainers_held
    if not chosen:
        return
    topology = job_topology(job, backend, _replicas(job))
    held = trainers_shown(locked.trainers_held, job.trainers_min, job.trainers)
    for replica in chosen:
        _start(job, backend, replica, ReplicaState.PENDING, topology,
               reason=f"{'added' if job.state == JobState.RUNNING else 'started'}: the job "
                      f"holds {held} trainers")


def _observe(job, backend, replica) -> bool:
    """Apply what became of the replica. True when that restarted all the trainers (the
    replicas the caller holds are stale)."""
    seen = backend.observe(job, replica)
    _image_record(job, seen)
    if seen.status == Status.RUNNING:
        if replica.state == ReplicaState.STARTING:
            # The reason says what the state does not (never "running running").
            replica_transition(replica, ReplicaState.RUNNING,
                               f"on {seen.host}" if seen.host else "",
                               **({"host": seen.host} if seen.host else {}),
                               **({"backend_ref": seen.ref} if seen.ref else {}))
        return False
    if seen.status == Status.WAITING:
        _waiting(job, replica, seen.reason)
        if seen.held:
            _held(job)
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


def _image_record(job, seen: Observation) -> None:
    """Keep the digest of the image the job runs, the first time a replica's is reported (a
    pod's ``imageID``): what ``paddlectl submit -from`` pins a re-run to."""
    digest = image_id_digest(seen.image_id)
    if digest and not job.image_digest:
        Job.objects.filter(pk=job.pk, image_digest="").update(image_digest=digest)
        job.image_digest = digest


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


def _requeue(job, backend, replicas) -> None:
    """The job's replicas did not all run within the start timeout (the cluster has no room
    for all of them: the pods that did start would hold their share while the rest wait,
    and two such jobs could wait on each other for ever). Stop it, release every pod, and put
    it back at the head of its queue; after ``start_tries`` such starts, fail it."""
    datacenter = job.datacenter
    stuck = [r for r in replicas if r.state not in (ReplicaState.RUNNING,
                                                    ReplicaState.SUCCEEDED)
             and not (r.role == Replica.Role.TRAINER and r.state == ReplicaState.PENDING
                      and trainers_elastic(job))]
    why = "; ".join(f"{r.name}: {r.reason or r.state}" for r in stuck[:3])
    tries = job.requeues + 1
    if job.trainers_lost:
        # Its lost trainers keep their indexes (a Kubernetes Job would run them again).
        job_fail(job, f"its replicas were not all running within {datacenter.start_timeout} s "
                      f"of its start, and it lost {job.trainers_lost} trainers meanwhile "
                      f"({why})")
        return
    if tries >= datacenter.start_tries:
        job_fail(job, f"its replicas were not all running within {datacenter.start_timeout} s "
                      f"of its start, {tries} times ({why})")
        return
    _queue_again(job, backend, replicas, (
        f"requeued at the head of its queue, start {tries + 1} of {datacenter.start_tries} "
        f"next: its replicas were not all running after {datacenter.start_timeout} s "
        f"({why}); every pod was released"), start_try=True)


def job_requeue(job, reason: str) -> None:
    """Stop a running (or starting) job the portal needs stopped for now, its owner's budget
    being spent, and put it back in its queue rather than end it: it starts again when it may
    (its trainers resume from their latest checkpoint, as after any restart) instead of
    losing what it trained. Not a start try of its own (``requeues``)."""
    job = Job.objects.select_related("datacenter", "owner").get(pk=job.pk)
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return
    _queue_again(job, backend_for(job.datacenter), _replicas(job), reason, start_try=False)


def _preempt(job, backend, replicas) -> None:
    """Stop the job to make room for another user's (``scheduling.preemption`` marked it,
    ``preempting`` saying why): its replicas are warned (SIGTERM) and stopped after the
    grace period — in which a trainer that asked for it saves a checkpoint
    (``paddlecloud_sdk.checkpoint.save_on_preempt``) — and it goes back to the head of its
    queue, not failed nor killed; its next run resumes from its latest checkpoint."""
    _queue_again(job, backend, replicas, job.preempting, start_try=False,
                 replica_reason="stopped: its job was preempted")


def _queue_again(job, backend, replicas, reason: str, *, start_try: bool,
                 replica_reason: str = "stopped: its job went back to its queue") -> None:
    """Stop the job's live replicas (SIGTERM, SIGKILL after the grace period), release what
    it held and put it back in its queue at its place (its submission time is kept),
    ``reason`` its event's; its replicas wait for its next start as a new attempt (so nothing
    of the stopped one is taken for it). ``start_try`` counts it against the datacenter's
    ``start_tries``."""
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
                replica_transition(replica, ReplicaState.PENDING, replica_reason,
                                   attempt=attempt)
            else:
                Replica.objects.filter(pk=replica.pk).update(attempt=attempt)
        Job.objects.filter(pk=job.pk).update(
            requeues=F("requeues") + int(start_try), trainers_held=0, budget_warned_at=None,
            preempting="")
        job_transition(job, JobState.QUEUED, reason)
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


def _held(job, since: datetime | None = None) -> None:
    """The cluster's own queue held the starting job until ``since`` (Kueue, Volcano; None:
    it still does), or its start made progress then: its start timeout runs from then, not
    from the portal's admission (never from earlier than it already did). A held job is
    looked at again when its start timeout would have passed."""
    since = since or timezone.now()
    if job.state == JobState.STARTING and (job.admitted_at is None or since > job.admitted_at):
        Job.objects.filter(Q(admitted_at__isnull=True) | Q(admitted_at__lt=since),
                           pk=job.pk, state=JobState.STARTING).update(admitted_at=since)
        job.admitted_at = since


def _start_goes_on(job, backend, replicas) -> bool:
    """Whether a start past its timeout by the portal's clock goes on: the cluster's queue
    admitted it after the portal last saw it held (Kueue's admission), or a pod of it makes
    progress a timeout must not cut short (an image being pulled, a node the autoscaler
    adds), which a stuck pod (unschedulable, nothing added for it) does not. Its start
    timeout then runs from that moment, the job's reason saying why."""
    waiting = [r for r in replicas if r.state == ReplicaState.STARTING]
    try:
        progress = backend.start_progress(job, waiting)
    except BackendError as exc:  # as stuck: the timeout is the job's way out
        logger.warning("job %s: what its start waits for cannot be seen: %s", job.pk, exc)
        return False
    if progress is None:
        return False
    _held(job, progress.since)
    if _passed(_start_deadline(job)):
        return False
    if progress.why:
        Job.objects.filter(pk=job.pk, state=JobState.STARTING).update(
            state_reason=progress.why)
        job_changed(job.pk)
    return True


def job_fail(job, reason: str) -> None:
    if job_transition(job, JobState.FAILED, reason) or job.state == JobState.FAILED:
        _stop(job, _replicas(job), f"stopped: the job failed ({reason})")


def job_halt(job_id: int) -> None:
    """Stop every replica of a job that has ended (a kill, a failure)."""
    job = Job.objects.select_related("datacenter", "owner", "build").get(pk=job_id)
    _stop(job, _replicas(job), f"stopped: the job was {job.state}")
    if job.build is not None and job.build.reason == Build.CANCELLED:
        try:  # its builder, which no job waits for any more
            backend_for(job.datacenter).image_build_cancel(job.build)
        except BackendError as exc:
            logger.warning("job %s: its builder could not be stopped: %s", job.pk, exc)


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
            # A replica that never started cannot have succeeded, nor a trainer that never
            # ran (an elastic job's, stopped once its master had nothing more).
            never_ran = replica.state == ReplicaState.PENDING or (
                replica.role == Replica.Role.TRAINER and replica.state == ReplicaState.STARTING)
            target = ReplicaState.KILLED if never_ran else final
            replica_transition(replica, target, reason)
    backend.release(job)
