"""Moving jobs and replicas between states: the one place transitions are applied.

Every change is checked against the tables in ``states``, made under a row lock (so a worker,
the reconciler and a kill racing for the same job see one order of events), and recorded as a
``JobEvent`` with its reason.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from .live import job_changed
from .models import Job, JobEvent, Replica
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


@transaction.atomic
def job_transition(job: Job, target: str, reason: str = "") -> bool:
    """Move ``job`` to ``target``. Returns False (and records nothing) if it is there already,
    so a retried task can apply the same change twice; raises IllegalTransitionError if the
    change is not allowed."""
    locked = Job.objects.select_for_update().get(pk=job.pk)
    if locked.state == target:
        job.state = locked.state
        return False
    transition_check("job", JOB_TRANSITIONS, locked.state, target)
    now = timezone.now()
    changes = {"state": target, "state_reason": reason, "updated_at": now}
    if target in (JobState.STARTING, JobState.RUNNING) and locked.started_at is None:
        changes["started_at"] = now  # its replicas are being started
    if target in FINAL_JOB_STATES:
        changes["finished_at"] = now
    Job.objects.filter(pk=job.pk).update(**changes)
    JobEvent.objects.create(job=job, time=now, from_state=locked.state, to_state=target,
                            reason=reason)
    job_changed(job.pk)
    if target in FINAL_JOB_STATES:
        # What it held (or the place in the queue it kept) is free: admit who waits.
        from .admission import admission_later

        admission_later(locked.owner_id, locked.datacenter_id)
    for field, value in changes.items():
        setattr(job, field, value)
    return True


@transaction.atomic
def replica_transition(replica: Replica, target: str, reason: str = "", *,
                       restart: bool = False, exit_code: int | None = None, **fields) -> bool:
    """Move ``replica`` to ``target``; ``restart=True`` marks a restart (counted, recorded).

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
    if restart:  # the next run gets times of its own
        changes.update(restarts=locked.restarts + 1, started_at=None, finished_at=None)
    if exit_code is not None:
        changes["exit_code"] = exit_code
    if target in (ReplicaState.STARTING, ReplicaState.RUNNING) and locked.started_at is None:
        changes["started_at"] = now  # its process is being started (it may end unseen running)
    if target in FINAL_REPLICA_STATES:
        changes["finished_at"] = now
    Replica.objects.filter(pk=replica.pk).update(**changes)
    JobEvent.objects.create(job_id=locked.job_id, replica=replica, time=now,
                            from_state=locked.state, to_state=target, reason=reason)
    job_changed(locked.job_id)
    for field, value in changes.items():
        setattr(replica, field, value)
    return True
