"""A job's checkpoints as the portal sees them (issue 37): read from its checkpoint directory
in its owner's PFS home (``jobs/<name>/checkpoints/``) through ``jobs.files.job_home`` — no
link followed, only regular files opened — and each checked as the SDK checks it
(``paddlecloud_core.checkpoints``, the one reading of the manifest).

A listing (the API, the job page, ``paddlectl get checkpoints``) checks every checkpoint's
manifest and its files' sizes: ``complete`` or, with ``problem`` saying why, not (the SDK
skips such a one). The checkpoint a new job is to start from (``-resume-from``) is read whole
and its digests checked too (``checkpoint_verified``). What the runs of a job made of its
checkpoints — the events, the steps lost — is ``jobs.resumes``'.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from kernel.errors import NotFoundError, PaddleCloudError
from paddlecloud_core import checkpoints as manifests
from paddlecloud_core.layout import checkpoint_dirname, checkpoints_rel
from paddlecloud_core.spec import resume_from_parse
from pfs.storage import Rel
from pfs.storage.posix import PosixStorage

from .files import job_home
from .models import Job


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


def resume_from_check(user, datacenter, text: str) -> str:
    """A submission's ``resume_from`` (``JOB`` or ``JOB:STEP``, its form checked by the
    core) as ``JOB:STEP``: one of the user's jobs in the datacenter, and a checkpoint of it
    that is complete and reads as its manifest says (its latest complete one without a step).
    ValueError saying what is wrong; another user's job is no job of theirs, as everywhere
    in the API."""
    name, step = resume_from_parse(text)
    job = Job.objects.select_related("datacenter", "owner").filter(
        owner=user, datacenter=datacenter, name=name).first()
    if job is None:
        raise ValueError(f"you have no job named {name!r} in datacenter {datacenter.name!r} "
                         "(a job starts only from a checkpoint of one of your own jobs)")
    try:
        found = checkpoint_verified(job, step)
    except manifests.CheckpointError as exc:
        raise ValueError(str(exc)) from None
    return f"{name}:{found.step}"
