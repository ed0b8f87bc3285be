"""What the runs of a job made of its checkpoints (issue 37): the step each resumed from, and
what each that ended by a restart lost — on its usage row, in its job's events, and shown
with the checkpoints (``jobs.checkpoints``) by the API, the job page and ``paddlectl get
checkpoints``.

Trainer 0's SDK reports, in its metrics (``paddlecloud_sdk.report``), the step of the checkpoint
``load()`` resumed from and each one it skipped as corrupt or partial; the reconciler looks at
a run's recent metrics until it has said so (``resumes_note``). A run that ends by a restart
is announced (``jobs.signals.runs_restarted``); ``runs_lost`` records what it lost.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from paddlecloud_core.checkpoints import RESUMED_METRIC, SKIPPED_METRIC
from paddlecloud_core.layout import checkpoints_rel

from .checkpoints import checkpoint_before, job_checkpoints
from .files import job_home
from .metrics import metrics_recent
from .models import Job, JobEvent, Replica, Usage
from .notify import job_changed
from .signals import run_resumed

RECENT_LINES = 500  # of trainer 0's metrics read for its steps around a restart
LOOK_BACK = timedelta(minutes=1)  # ended runs resumes_note still looks at (4 reconciles)


def step_reported_before(job, moment: datetime) -> int | None:
    """The highest step the job's trainer 0 reported before ``moment`` (among its recent
    metrics); None when it reported none."""
    trainer = job.replicas.filter(role=Replica.Role.TRAINER, index=0).first()
    if trainer is None:
        return None
    cutoff = moment.timestamp()
    steps = [record["step"] for record in metrics_recent(job, trainer, RECENT_LINES)
             if record["time"] is not None and record["time"] <= cutoff]
    return max(steps, default=None)


def runs_lost(sender=None, *, job_id: int, usage_ids: list[int], ended: datetime,
              **kwargs) -> None:
    """Record on the runs ``usage_ids``, which ended at ``ended`` by a restart
    (``jobs.signals.runs_restarted``), what they lost: the seconds each trained since the
    job's last complete checkpoint (its whole run without one, or when the checkpoint is
    older than the run), and the steps trainer 0 reported since. The one place
    ``Usage.lost_seconds`` and ``lost_steps`` are set."""
    job = Job.objects.select_related("datacenter", "owner").filter(pk=job_id).first()
    if job is None or not usage_ids:
        return
    checkpoint = checkpoint_before(job, ended)
    saved_at = (datetime.fromtimestamp(checkpoint.time, UTC)
                if checkpoint is not None and checkpoint.time is not None else None)
    reported = step_reported_before(job, ended)
    steps = None if reported is None else max(0, reported - (checkpoint.step if checkpoint
                                                             else 0))
    for pk, started in Usage.objects.filter(pk__in=usage_ids).values_list("pk", "started_at"):
        since = max(started, saved_at) if saved_at is not None else started
        Usage.objects.filter(pk=pk).update(
            lost_seconds=max(0.0, (ended - since).total_seconds()), lost_steps=steps)


# --- what trainer 0's SDK said of a run's start: events ------------------------------------------

def resumes_note() -> int:
    """Make the events of the runs that resumed from a checkpoint, or skipped one, as their
    trainer 0 reported it (``RESUMED_METRIC``, ``SKIPPED_METRIC``): "resumed from step N
    (lost M steps)", M the highest step the job reported before the run began; and record
    the step on the run (``Usage.resumed_from``). Looked for while trainer 0's current run
    is a restart (or its job starts from another job's checkpoint: "started from step N of
    job X") and has not said so yet; the reconciler calls it (a run that ended in the last
    LOOK_BACK is looked at too: a short one may end between two of its runs). Returns how
    many events it made."""
    made = 0
    recent = timezone.now() - LOOK_BACK
    runs = (Usage.objects.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=recent),
                                 role=Replica.Role.TRAINER, index=0, resumed_from__isnull=True)
            .filter(Q(attempt__gt=0) | Q(job_key__in=Job.objects.exclude(resume_from="")
                                         .values("pk"))))
    for run in runs:
        job = Job.objects.select_related("datacenter", "owner").filter(pk=run.job_key).first()
        trainer = Replica.objects.filter(pk=run.replica_key).first()
        if job is None or trainer is None:
            continue
        since = run.started_at.timestamp()
        records = [r for r in metrics_recent(job, trainer, RECENT_LINES)
                   if r["time"] is not None and r["time"] >= since]
        for record in records:
            if record["metrics"].get(SKIPPED_METRIC):
                made += _event_once(job, trainer, (
                    f"run {run.attempt + 1} skipped the checkpoint of step {record['step']}: "
                    "it is corrupt or partial (not loaded; its log says why)"))
        resumed = next((r for r in records if r["metrics"].get(RESUMED_METRIC)), None)
        if resumed is None:
            continue
        step = resumed["step"]
        reported = step_reported_before(job, run.started_at)
        if reported is not None:
            said = f"resumed from step {step} (lost {max(0, reported - step)} steps)"
        elif job.resume_from:  # nothing of its own before: the checkpoint it was given
            said = (f"started from step {step} of job "
                    f"{job.resume_from.rpartition(':')[0]} (resume_from)")
        else:
            said = f"resumed from step {step}"
        with transaction.atomic():
            if Usage.objects.filter(pk=run.pk, resumed_from__isnull=True).update(
                    resumed_from=step):
                said = f"run {run.attempt + 1} {said}"
                JobEvent.objects.create(job=job, replica=trainer, from_state=job.state,
                                        to_state=job.state, reason=said)
                run_resumed.send(Job, job_id=job.pk, owner_id=job.owner_id,
                                 datacenter_id=job.datacenter_id, said=said)
                made += 1
        job_changed(job.pk)
    return made


def _event_once(job, replica, reason: str) -> int:
    if JobEvent.objects.filter(job=job, reason=reason).exists():
        return 0
    JobEvent.objects.create(job=job, replica=replica, from_state=job.state,
                            to_state=job.state, reason=reason)
    job_changed(job.pk)
    return 1


# --- what the API, the job page and paddlectl show ----------------------------------------------

def _at(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def checkpoints_report(job) -> dict:
    """The job's checkpoints (newest first) and the runs of its trainer 0 (oldest first):
    which step each resumed from (marked on that checkpoint too: ``resumed_by``, the runs'
    numbers from 1) and what each that ended by a restart lost."""
    runs = list(Usage.objects.filter(job_key=job.pk, role=Replica.Role.TRAINER, index=0)
                .order_by("started_at", "pk"))
    listed = job_checkpoints(job)
    return {
        "job": job.name,
        "directory": job_home(job).display(checkpoints_rel(job.name)),
        "resume_from": job.resume_from,
        "checkpoints": [{**c.as_dict(), "resumed_by": [r.attempt + 1 for r in runs
                                                       if r.resumed_from == c.step]}
                        for c in listed],
        "runs": [{"run": r.attempt + 1, "started_at": _at(r.started_at),
                  "ended_at": _at(r.ended_at), "resumed_from": r.resumed_from,
                  "lost_steps": r.lost_steps, "lost_seconds": r.lost_seconds} for r in runs],
    }
