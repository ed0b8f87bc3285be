"""What the jobs' lower layers announce, so they never call up into the layers that react.

``job_ended`` — jobs of one owner in one datacenter reached a final state (``succeeded``,
``failed``, ``killed``): sent by ``transitions`` inside the transaction that ended them, with
``owner_id``, ``datacenter_id`` and ``job_ids``. Admission (``scheduling.admission``, connected
in ``scheduling.apps``) listens: what they held (or their places in the queue) is free, so
the owner's waiting jobs may start.

``job_requeued`` — a job's start timed out and it went back to its queue (``engine``), with the
same arguments: its place, and what it held, are free again.

``job_built`` — jobs' runtime images are ready (``builds``): they went from ``building`` to
``pending``, with the same arguments, and the owner's queue may admit them.

``job_moved`` — jobs reached a state (any), with ``target`` and ``moves``, a (job id, owner id,
datacenter id) per job: sent by ``transitions`` inside the transaction that moved them, so a
receiver's rows commit (or roll back) with the move. The notifications' outbox listens.

``replicas_changed`` — something became of a job's replicas where they run (a pod changed, a
local process ended), with ``job_uid``: sent by a backend's change feed, from its own thread,
with nothing read from the database. ``sync`` listens: the job's sync runs soon.

``runs_restarted`` — runs of a job's replicas ended because they restart (or their job went
back to its queue), with ``job_id``, ``usage_ids`` (their rows in the usage ledger) and
``ended``: sent by ``transitions`` once the move is committed. ``resumes`` listens (connected in
``jobs.apps``): it records on the rows what they lost since the job's last checkpoint.

``run_resumed`` — a run of a job resumed from a checkpoint (its trainer 0's SDK said so), with
``job_id``, ``owner_id``, ``datacenter_id`` and ``said`` (the event's words, "run 2 resumed from
step 120 (lost 15 steps)"): sent by ``resumes`` inside the transaction of its event. The
notifications' outbox listens.
"""

from django.dispatch import Signal

job_ended = Signal()
job_requeued = Signal()
job_built = Signal()
job_moved = Signal()
replicas_changed = Signal()
runs_restarted = Signal()
run_resumed = Signal()
