"""Moving jobs and replicas between states: the one place transitions are applied.

Every change is checked against the tables in ``states``, made under a row lock (so a worker,
the reconciler and a kill racing for the same job see one order of events), and recorded as a
``JobEvent`` with its reason; a replica's runs are also kept in the usage ledger
(``usage``), which deleting the job does not reach.
"""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Datacenter
from kernel import metrics

from .models import Job, JobEvent, Replica
from .notify import job_changed, jobs_changed
from .signals import job_ended, job_moved, runs_restarted
from .states import (
    FINAL_JOB_STATES,
    FINAL_REPLICA_STATES,
    JOB_TRANSITIONS,
    REPLICA_TRANSITIONS,
    IllegalTransitionError,
    JobState,
    ReplicaState,
    transition_check,
)
from .usage import usage_record


@transaction.atomic
def job_transition(job: Job, target: str, reason: str = "") -> bool:
    """Move ``job`` to ``target``. Returns False (and records nothing) if it is there already,
    so a retried task can apply the same change twice; raises IllegalTransitionError if the
    change is not allowed."""
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if locked.state == target:
        job.state = locked.state
        return False
    _jobs_move([(job, locked)], target, {job.pk: reason})
    return True


@transaction.atomic
def jobs_transition(jobs: list[Job], target: str, reasons: dict[int, str]) -> list[Job]:
    """Move several jobs to ``target`` at once, each with its reason (by id), as
    ``job_transition`` moves one, in a number of queries that does not grow with the number
    of jobs (admission moves a whole queue). Jobs already there are left out (those gone
    too); returns the jobs moved."""
    locked = (Job.objects.select_for_update()
              .only("state", "created_at", "started_at", "admitted_at", "owner_id",
                    "datacenter_id")
              .in_bulk([job.pk for job in jobs]))
    moves = [(job, locked[job.pk]) for job in jobs
             if job.pk in locked and locked[job.pk].state != target]
    _jobs_move(moves, target, reasons)
    return [job for job, _ in moves]


def _jobs_move(moves: list[tuple[Job, Job]], target: str, reasons: dict[int, str]) -> None:
    """Apply moves (each job with its locked row): one UPDATE per distinct reason, one event
    per job (all in one INSERT), one message to the dashboards per job."""
    for _, current in moves:
        transition_check("job", JOB_TRANSITIONS, current.state, target)
    if not moves:
        return
    now = timezone.now()
    changes = {"state": target, "updated_at": now}
    if target in (JobState.STARTING, JobState.RUNNING):
        # its replicas are being started (kept from an earlier start if it had one)
        changes["started_at"] = Coalesce(F("started_at"), Value(now, DateTimeField()))
    if target == JobState.STARTING:
        changes["admitted_at"] = now
    if target in FINAL_JOB_STATES:
        changes["finished_at"] = now
    for reason in {reasons[job.pk] for job, _ in moves}:
        Job.objects.filter(pk__in=[job.pk for job, _ in moves if reasons[job.pk] == reason]
                           ).update(state_reason=reason, **changes)
    JobEvent.objects.bulk_create(
        JobEvent(job_id=job.pk, time=now, from_state=current.state, to_state=target,
                 reason=reasons[job.pk]) for job, current in moves)
    owners = {(current.owner_id, current.datacenter_id) for _, current in moves}
    for owner in owners:
        jobs_changed(*owner, [job.pk for job, current in moves
                              if (current.owner_id, current.datacenter_id) == owner])
    job_moved.send(Job, target=target, moves=[(job.pk, current.owner_id, current.datacenter_id)
                                              for job, current in moves])
    if target in FINAL_JOB_STATES:
        for owner_id, datacenter_id in owners:
            job_ended.send(Job, owner_id=owner_id, datacenter_id=datacenter_id,
                           job_ids=[job.pk for job, current in moves
                                    if (current.owner_id, current.datacenter_id)
                                    == (owner_id, datacenter_id)])
    _observe(moves, target, now)
    for job, current in moves:
        job.state, job.state_reason, job.updated_at = target, reasons[job.pk], now
        if "started_at" in changes:
            job.started_at = current.started_at or now
        if "admitted_at" in changes:
            job.admitted_at = now
        if "finished_at" in changes:
            job.finished_at = now


def _observe(moves: list[tuple[Job, Job]], target: str, now) -> None:
    """The latencies of these moves, for the portal's metrics once they are committed: a
    job's first admission (the wait since its submission), all its replicas running (the
    start since its admission)."""
    if target == JobState.STARTING:
        observed = [(current.datacenter_id, (now - current.created_at).total_seconds())
                    for _, current in moves if current.started_at is None]
        record = metrics.jobs_admitted
    elif target == JobState.RUNNING:
        observed = [(current.datacenter_id, (now - current.admitted_at).total_seconds())
                    for _, current in moves
                    if current.state == JobState.STARTING and current.admitted_at is not None]
        record = metrics.jobs_started
    else:
        return
    if observed:
        transaction.on_commit(partial(_record, record, observed), robust=True)


_datacenter_names: dict[int, str] = {}


def _record(record, observed: list[tuple[int, float]]) -> None:
    """``record`` the observations, each by its datacenter's name, asked once a process (a
    datacenter renamed in the admin keeps its old name here until the process restarts)."""
    missing = {pk for pk, _ in observed} - set(_datacenter_names)
    if missing:
        _datacenter_names.update(Datacenter.objects.filter(pk__in=missing)
                                 .values_list("pk", "name"))
    record([(_datacenter_names.get(pk, "unknown"), seconds) for pk, seconds in observed])


@transaction.atomic
def replica_transition(replica: Replica, target: str, reason: str = "", *,
                       restart: bool = False, counted: bool = True, attempt: int | None = None,
                       exit_code: int | None = None, **fields) -> bool:
    """Move ``replica`` to ``target``; ``restart=True`` marks a restart (recorded, and counted
    in ``restarts`` or, ``counted=False``, in ``disruptions``). A restart, and a return to
    ``pending`` (its job was requeued), begin a new attempt: ``attempt``, or the next.

    Without ``restart``, moving to the state it is already in changes nothing and returns
    False. ``fields`` (host, endpoint, backend_ref) are saved with the change.
    """
    locked = Replica.objects.select_for_update().get(pk=replica.pk)
    if locked.state == target and not restart:
        replica.state = locked.state
        return False
    if restart and target != ReplicaState.STARTING:
        raise ValueError("a restart goes to 'starting'")
    if restart and locked.state == ReplicaState.PENDING:
        raise IllegalTransitionError("a replica that has not started cannot restart")
    transition_check("replica", REPLICA_TRANSITIONS, locked.state, target)
    now = timezone.now()
    changes = {"state": target, "reason": reason, **fields}
    if restart or target == ReplicaState.PENDING:  # the next run gets times of its own
        changes.update(started_at=None, finished_at=None,
                       attempt=locked.attempt + 1 if attempt is None else attempt)
    if restart:
        counter = "restarts" if counted else "disruptions"
        changes[counter] = getattr(locked, counter) + 1
        transaction.on_commit(partial(metrics.replica_restarted, locked.role, counted=counted),
                              robust=True)
    if exit_code is not None:
        changes["exit_code"] = exit_code
    if target in (ReplicaState.STARTING, ReplicaState.RUNNING) and locked.started_at is None:
        changes["started_at"] = now  # its process is being started (it may end unseen running)
    if target in FINAL_REPLICA_STATES:
        changes["finished_at"] = now
    Replica.objects.filter(pk=replica.pk).update(**changes)
    restarted = usage_record(replica, locked.job_id, locked.state, target, restart=restart,
                             attempt=changes.get("attempt", locked.attempt), now=now)
    if restarted:  # what they lost since the job's last checkpoint (jobs.resumes)
        transaction.on_commit(partial(runs_restarted.send, Replica, job_id=locked.job_id,
                                      usage_ids=restarted, ended=now), robust=True)
    JobEvent.objects.create(job_id=locked.job_id, replica=replica, time=now,
                            from_state=locked.state, to_state=target, reason=reason)
    job_changed(locked.job_id)
    for field, value in changes.items():
        setattr(replica, field, value)
    return True
