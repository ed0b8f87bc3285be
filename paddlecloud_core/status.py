"""What a backend can say about one attempt of a replica: the words the engine, the local
backend, the Kubernetes backend and ``paddlectl local train`` share; and which of the states
the API shows for a job or a replica are final."""

from __future__ import annotations

import enum
from dataclasses import dataclass

# A job or a replica in one of these has ended for good (``jobs.states`` has the others).
FINAL_STATES = ("succeeded", "failed", "killed")


class Status(enum.Enum):
    NOT_STARTED = "not started"  # nothing was ever started for this attempt
    WAITING = "waiting"  # started, not running yet (a pod pending: ``reason`` says why)
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"  # was started, is gone, and left no exit status
    REFUSED = "refused"  # can never run as asked (the cluster refused it): no restart


@dataclass(frozen=True)
class Observation:
    status: Status
    exit_code: int | None = None
    reason: str = ""  # why it waits, is lost or was refused, in words for the user
    host: str = ""  # where it runs, when the backend knows
    ref: str = ""  # the backend's name for what it saw (a pod), kept on the replica
    # It ended because the cluster took it away (evicted, preempted, its node lost), not for
    # anything it did: its restart is not counted against the job's limit.
    disrupted: bool = False
    # It waits in the cluster's own queue (Kueue has not admitted it, Volcano's queue has not
    # taken its group in): its start has not begun, so the start timeout does not run yet.
    held: bool = False
    # The image it runs, as the cluster names it by digest (a pod's ``imageID``), when the
    # backend knows: the job records it (``paddlecloud_core.snapshots.image_id_digest``).
    image_id: str = ""
