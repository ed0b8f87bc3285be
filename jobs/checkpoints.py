"""A job's checkpoints as the portal sees them (issue 37): read from its checkpoint directory
in its owner's PFS home (``jobs/<name>/checkpoints/``) through ``jobs.files.job_home`` — no
link followed, only regular files opened — and each checked as the SDK checks it
(``paddlecloud_core.checkpoints``, the one reading of the manifest).

A listing (the API, the job page, ``paddlectl get checkpoints``) checks every checkpoint's
manifest and its files' sizes: ``complete`` or, with ``problem`` saying why, not (the SDK
skips such a one). The checkpoint a new job is to start from (``-resume-from``) is read whole
and its digests checked too (``checkpoint_verified``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kernel.errors import NotFoundError, PaddleCloudError
from paddlecloud_core import checkpoints as manifests
from paddlecloud_core.checkpoints import RESUMED_METRIC, SKIPPED_METRIC
from paddlecloud_core.layout import checkpoint_dirname, checkpoints_rel
from pfs.storage import Rel
from pfs.storage.posix import PosixStorage

from .files import job_home
from .metrics import metrics_recent
from .models import Job, JobEvent, Replica, Usage
from .notify import job_changed

RECENT_LINES = 500  # of trainer 0's metrics read for its steps around a restart
LOOK_BACK = timedelta(minutes=1)  # ended runs resumes_note still looks at (4 reconciles)


@dataclass(frozen=True)
class Listed:
    """One checkpoint of a job, as its manifest says (``complete``), or why it is not."""

    step: int
    path: str  # as users write it: /pfs/<dc>/home/<user>/jobs/<name>/checkpoints/step-…
    complete: bool
    problem: str = ""  # why it is not complete (the SDK skips it)
    pass_: int | None = None
    time: float | None = None
    size: int | None = None  # bytes of its state

    def as_dict(self) -> dict:
        data = asdict(self)
        data["pass"] = data.pop("pass_")
        data["time"] = (None if self.time is None
                        else datetime.fromtimestamp(self.time, UTC).isoformat())
        return data


def _opener(home: PosixStorage, rel: Rel):
    """``paddlecloud_core.checkpoints``' way to open a checkpoint's file, through the home."""
    def open_file(name: str):
        try:
            return os.fdopen(home.open((*rel, name)), "rb")
        except NotFoundError:
            raise FileNotFoundError(name) from None
        except PaddleCloudError as exc:
            raise OSError(exc.message) from None
    return open_file


def _sizer(home: PosixStorage, rel: Rel):
    def size_of(name: str) -> int:
        try:
            entry = home.stat((*rel, name))
        except NotFoundError:
            raise FileNotFoundError(name) from None
        except PaddleCloudError as exc:
            raise OSError(exc.message) from None
        if entry.type != "file":
            raise OSError(f"{name} is not a regular file")
        return entry.size
    return size_of


def _listed(job, home: PosixStorage, step: int, *, whole: bool) -> Listed:
    rel = (*checkpoints_rel(job.name), checkpoint_dirname(step))
    path = home.display(rel)
    try:
        manifest = manifests.verify(step, _opener(home, rel),
                                    None if whole else _sizer(home, rel))
    except manifests.CheckpointError as exc:
        return Listed(step=step, path=path, complete=False, problem=str(exc))
    return Listed(step=step, path=path, complete=True, pass_=manifest.get("pass"),
                  time=manifest.get("time"), size=manifests.size(manifest))


def job_checkpoints(job) -> list[Listed]:
    """The job's checkpoints, newest first (none before it saved any, or where the portal
    cannot reach the PFS); an earlier run's of the name, which the portal could not set
    aside, is left out, as the SDK leaves it."""
    home = job_home(job)
    try:
        names = [entry.name for entry in home.listdir(checkpoints_rel(job.name))
                 if entry.type == "dir"]
    except PaddleCloudError:
        return []
    return [_listed(job, home, step, whole=False)
            for step, _ in manifests.newest_first(names) if _this_runs(job, home, step)]


def _this_runs(job, home: PosixStorage, step: int) -> bool:
    rel = (*checkpoints_rel(job.name), checkpoint_dirname(step))
    try:
        manifest = manifests.manifest_read(step, _opener(home, rel))
    except manifests.CheckpointError:
        return True
    return manifest.get("job_uid") in (None, str(job.uid))


def checkpoint_verified(job, step: int | None) -> Listed:
    """The job's checkpoint of ``step`` (its latest complete one when None), read whole:
    every file's digest checked. ``CheckpointError`` saying why there is none to start
    from."""
    listed = job_checkpoints(job)
    if step is None:
        latest = next((c for c in listed if c.complete), None)
        if latest is None:
            raise manifests.CheckpointError(
                f"job {job.name} has no complete checkpoint" if not listed else
                f"job {job.name} has no complete checkpoint ({len(listed)} corrupt or partial)")
        step = latest.step
    elif not any(c.step == step for c in listed):
        steps = ", ".join(str(c.step) for c in listed if c.complete) or "none"
        raise manifests.CheckpointError(f"job {job.name} has no checkpoint of step {step} "
                                        f"(its complete ones: {steps})")
    found = _listed(job, job_home(job), step, whole=True)
    if not found.complete:
        raise manifests.CheckpointError(f"the checkpoint of step {step} of job {job.name} "
                                        f"is corrupt or partial: {found.problem}")
    return found


def checkpoint_before(job, moment: datetime) -> Listed | None:
    """The job's latest complete checkpoint saved before ``moment`` (what a run that ended
    then could resume from); None without one."""
    cutoff = moment.timestamp()
    return next((c for c in job_checkpoints(job)
                 if c.complete and c.time is not None and c.time <= cutoff), None)


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
    is a restart (or started from another job's checkpoint) and has not said so yet; the
    reconciler calls it (a run that ended in the last LOOK_BACK is looked at too: a short one
    may end between two of its runs). Returns how many events it made."""
    made = 0
    recent = timezone.now() - LOOK_BACK
    runs = Usage.objects.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=recent),
                                role=Replica.Role.TRAINER, index=0,
                                resumed_from__isnull=True, attempt__gt=0)
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
        lost = "" if reported is None else f" (lost {max(0, reported - step)} steps)"
        with transaction.atomic():
            if Usage.objects.filter(pk=run.pk, resumed_from__isnull=True).update(
                    resumed_from=step):
                JobEvent.objects.create(job=job, replica=trainer, from_state=job.state,
                                        to_state=job.state,
                                        reason=f"run {run.attempt + 1} resumed from step "
                                               f"{step}{lost}")
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
        "checkpoints": [{**c.as_dict(), "resumed_by": [r.attempt + 1 for r in runs
                                                       if r.resumed_from == c.step]}
                        for c in listed],
        "runs": [{"run": r.attempt + 1, "started_at": _at(r.started_at),
                  "ended_at": _at(r.ended_at), "resumed_from": r.resumed_from,
                  "lost_steps": r.lost_steps, "lost_seconds": r.lost_seconds} for r in runs],
    }
