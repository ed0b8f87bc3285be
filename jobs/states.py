"""The states of jobs and replicas and the transitions between them (the one table of rules).

  building ─▶ pending ─▶ queued ─▶ starting ─▶ running ─▶ succeeded
      │          │          │          │           │
      └──────────┴──────────┴──────────┴───────────┴────▶ failed | killed

A job whose runtime image is built from its package (``jobs.builds``) is ``building`` first,
and ``pending`` once the image is in its registry.

A job waits in ``queued`` while its quota is in use; ``starting`` while its replicas are being
created; it is ``running`` once they all run. ``succeeded``, ``failed`` and ``killed`` are final.
A replica that fails and may restart goes back from ``running`` (or ``starting``) to
``starting``. A start that times out (the replicas are not all running within the datacenter's
start timeout: the cluster has no room for all of them) puts the job back from ``starting`` to
``queued``, at the head of its queue, and its replicas back to ``pending``; so does a stop the
portal makes for a while (its owner's budget spent), from ``running`` too: it starts again
when it may, its trainers from their latest checkpoint.
"""

from __future__ import annotations

from django.db import models

from kernel.errors import ConflictError
from paddlecloud_core.status import FINAL_STATES


class JobState(models.TextChoices):
    BUILDING = "building"
    PENDING = "pending"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"


class ReplicaState(models.TextChoices):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"


FINAL_JOB_STATES = frozenset(JobState(state) for state in FINAL_STATES)
FINAL_REPLICA_STATES = frozenset(ReplicaState(state) for state in FINAL_STATES)
LIVE_REPLICA_STATES = frozenset(ReplicaState) - FINAL_REPLICA_STATES  # may have a process
ACTIVE_STATES = (JobState.STARTING, JobState.RUNNING)  # admitted: holding their request
WAITING_STATES = (JobState.PENDING, JobState.QUEUED)  # in their owner's queue

_ENDINGS = {JobState.FAILED, JobState.KILLED}

JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.BUILDING: frozenset({JobState.PENDING, *_ENDINGS}),
    JobState.PENDING: frozenset({JobState.QUEUED, JobState.STARTING, *_ENDINGS}),
    JobState.QUEUED: frozenset({JobState.STARTING, *_ENDINGS}),
    # A short job can end before it is ever seen running.
    # A start that timed out puts it back in its queue.
    JobState.STARTING: frozenset({JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED,
                                  *_ENDINGS}),
    # Stopped for a while (its owner's budget spent, or preempted to make room for another
    # user's job), it goes back to its queue.
    JobState.RUNNING: frozenset({JobState.QUEUED, JobState.SUCCEEDED, *_ENDINGS}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.KILLED: frozenset(),
}

REPLICA_TRANSITIONS: dict[str, frozenset[str]] = {
    ReplicaState.PENDING: frozenset({ReplicaState.STARTING, ReplicaState.FAILED,
                                     ReplicaState.KILLED}),
    # starting -> starting and running -> starting are restarts.
    # starting -> pending and running -> pending: its job went back to its queue.
    ReplicaState.STARTING: frozenset({ReplicaState.PENDING, ReplicaState.STARTING,
                                      ReplicaState.RUNNING,
                                      ReplicaState.SUCCEEDED, ReplicaState.FAILED,
                                      ReplicaState.KILLED}),
    ReplicaState.RUNNING: frozenset({ReplicaState.PENDING, ReplicaState.STARTING,
                                     ReplicaState.SUCCEEDED,
                                     ReplicaState.FAILED, ReplicaState.KILLED}),
    ReplicaState.SUCCEEDED: frozenset(),
    ReplicaState.FAILED: frozenset(),
    ReplicaState.KILLED: frozenset(),
}


class IllegalTransitionError(ConflictError):
    code = "illegal_transition"


def transition_check(kind: str, table: dict[str, frozenset[str]], current: str,
                     target: str) -> None:
    """Refuse a transition the table does not allow, saying what is allowed."""
    if target not in table:
        raise ValueError(f"unknown {kind} state {target!r}")
    if target not in table[current]:
        allowed = ", ".join(sorted(table[current])) or "nothing: it has ended"
        raise IllegalTransitionError(
            f"a {kind} cannot go from {current} to {target} (from {current}: {allowed})"
        )
