"""The usage ledger (``models.Usage``): a row per run of a replica — whose, where, what it held,
from when to when — appended as its process starts and closed as it ends or as its job is
removed. Budgets (``scheduling.budgets``) are summed from it, never from a job's history, which its
owner may delete (``DELETE``, ``paddlectl kill -rm``) or its TTL remove.

A run that ends by a restart (the replica restarts, or its job is requeued) lost what it
trained since its job's last complete checkpoint (issue 37): ``usage_record`` returns such
runs, ``transitions`` announces them (``runs_restarted``) and ``jobs.resumes.runs_lost``
records it on their rows."""

from __future__ import annotations

from datetime import datetime

from .models import Job, Replica, Usage
from .states import ReplicaState

RUNS = (ReplicaState.STARTING, ReplicaState.RUNNING)  # a replica's process holds its share


def held(role: str, cpu: int, pscpu: int, gpu: int) -> tuple[int, int]:
    """What a replica of ``role`` holds while it runs, of a job of ``cpu`` and ``gpu`` per
    trainer and ``pscpu`` per parameter server: (millicores, GPUs). A master is the portal's
    own work: it holds nothing counted."""
    if role == Replica.Role.TRAINER:
        return cpu, gpu
    if role == Replica.Role.PSERVER:
        return pscpu, 0
    return 0, 0


def usage_record(replica: Replica, job_id: int, before: str, target: str, *, restart: bool,
                 attempt: int, now: datetime) -> list[int]:
    """Record in the ledger what the replica's move from ``before`` to ``target`` means: a
    run ends as it leaves ``starting``/``running`` (or restarts), one begins as it enters
    them (or restarts). Called under the replica's row lock, in the move's transaction.
    Returns the runs it ended that will run again (a restart, a requeue: ``pending``)."""
    restarted: list[int] = []
    if before in RUNS and (target not in RUNS or restart):
        ending = Usage.objects.filter(job_key=job_id, replica_key=replica.pk,
                                      ended_at__isnull=True)
        if restart or target == ReplicaState.PENDING:
            restarted = list(ending.values_list("pk", flat=True))
        ending.update(ended_at=now)
    if target in RUNS and (before not in RUNS or restart):
        job = Job.objects.only("owner_id", "datacenter_id", "name", "cpu", "pscpu",
                               "gpu", "created_at").get(pk=job_id)
        cpu, gpu = held(replica.role, job.cpu, job.pscpu, job.gpu)
        Usage.objects.create(owner_id=job.owner_id, datacenter_id=job.datacenter_id,
                             job_key=job_id, job_name=job.name, replica_key=replica.pk,
                             role=replica.role, index=replica.index, attempt=attempt,
                             cpu=cpu, gpu=gpu, started_at=now, submitted_at=job.created_at)
    return restarted


def usage_close(job_id: int, now: datetime) -> None:
    """End the runs still open of a job being removed: its replicas go with it, so no later
    move could end them (a job killed and removed at once, before its stop ran)."""
    Usage.objects.filter(job_key=job_id, ended_at__isnull=True).update(ended_at=now)

