"""Checkpoints a job saves and a restarted job resumes from (issue 37).

    from paddlecloud_sdk import checkpoint

    resumed = checkpoint.load()                  # None on a first start
    if resumed is not None:
        model.set_state_dict(resumed.state["model"])
        start = resumed.step
    for step in range(start + 1, steps + 1):
        train_one_step()
        if step % 100 == 0:
            checkpoint.save({"model": model.state_dict()}, step)

Where: the job's checkpoint directory, ``PADDLE_CHECKPOINT_DIR`` (``jobs/<name>/checkpoints/``
in its owner's PFS home, on every backend; ``./output/checkpoints`` outside a job). A job of
the same name submitted later starts with none (the portal keeps the earlier one's beside it;
where it cannot reach the PFS, the SDK takes and prunes only its own run's: ``job_uid``).

A job submitted with ``-resume-from JOB[:STEP]`` (``PaddleJob(resume_from=...)``) is given
that checkpoint of another of its owner's jobs (``PADDLE_RESUME_FROM``, checked whole by the
portal at submission): ``latest()``/``load()`` take it while the job has none of its own
(its job uid is the other job's: that is expected here), and nothing writes there.

What: each checkpoint is a directory ``step-<step, 12 digits>/`` (``paddlecloud_core.layout``)
holding the state's files and ``manifest.json`` (``MANIFEST_FORMAT``)::

    {"format": 1, "step": 120, "pass": 3, "time": 1764300000.5, "job": "fit",
     "job_uid": "6f1c…", "trainers": 2, "kind": "paddle",
     "files": {"state.pdparams": {"size": 5120, "sha256": "9f…"}},
     "master": {"pass": 0, "done": [0, 1, 4], "read": {"2": 12}}}

``state`` is a PaddlePaddle object (a state dict, or a dict of them) saved with
``paddle.save`` (kind ``paddle``, file ``state.pdparams``) when paddle is importable; ``bytes``
(kind ``bytes``, file ``state.bin``); or, for any framework, a dict of file names to ``bytes``
or paths of files to copy (kind ``files``, each file under its name). ``load()`` gives back
the same: the paddle object, the bytes, or the dict of names to bytes.

How: the directory is written under a hidden temporary name, every file and then the manifest
flushed to disk, and renamed into place: a checkpoint is there whole or not at all. After a
successful save the oldest are removed, so that ``PADDLE_KEEP_CHECKPOINTS`` (the job's
``keep_checkpoints``, 3 by default) remain. ``latest()`` is the newest checkpoint whose
manifest reads and whose files all have the size and digest it says; one that does not is
skipped (never loaded), with a line on stderr (the replica's log) and a
``checkpoint_skipped`` metric at its step (``paddlecloud_sdk.report``: the job's page). The
checkpoint ``load()`` resumes from is reported too (``checkpoint_resumed`` at its step): the
portal makes the job's events of both ("run 2 resumed from step 120 (lost 15 steps)").

Who: trainer 0 writes. In a collective job (trainers only, more than one) every trainer calls
``save`` at the same step and all of them wait for each other before and after (a barrier:
``paddle.distributed.barrier()`` once ``init_parallel_env`` has run, or the ``barrier``
given); other trainers write nothing. In a job with pservers only trainer 0's call does
anything.

The master's position (a job with a ``dataset``, docs/master.md): ``save`` asks the master,
after every trainer has told it how many records of its task it has trained, which tasks of
the pass are done and how far each other one was trained, and keeps it in the manifest.
``load`` gives it back: the master makes the pass as it was then — the tasks done since go
back to the queue, a task partly trained is handed out again without the records already
trained — so that, across a restart, every record of a pass is trained exactly once. A
trainer therefore calls ``load`` before it asks the master for tasks; on a collective job's
restart (all its trainers restart together) and a single trainer's. Without a checkpoint the
master starts the dataset over, as the model does. A job with pservers keeps the master as
it is (its pservers, not the checkpoint, hold the model).

After each save trainer 0 reports a ``checkpoint`` metric (``paddlecloud_sdk.report(step=N,
checkpoint=N)``): the portal reads when the job last saved, which is what stopping it would
lose. **Preemption** (a datacenter's ``preempt_after``) stops the running jobs that lose the
least work since their last checkpoint to start a job of a user below their fair share; a
stopped job goes back to the head of its queue and its next run resumes from its latest
checkpoint. It is warned first: its replicas get SIGTERM, then the grace period before
SIGKILL (10 s on the local backend; the datacenter's termination grace on Kubernetes). A job
that would rather save then asks for it::

    checkpoint.save_on_preempt(lambda: checkpoint.save(model.state_dict(), step))

``save_on_preempt(callback)`` installs a SIGTERM handler (call it from the main thread) that
calls ``callback`` once and exits with 143 (as SIGTERM would). The callback runs between two
steps of Python code, wherever the trainer was: give it the state of the last whole step (a
collective job's trainers all get the signal and all call ``save``, which waits for them at a
barrier, so they must pass the same step). Any stop sends the same signal (a kill, a budget
spent): the job saves then too.

Standard library only (and paddle when the state is paddle's): a trainer image needs nothing
else to import this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud_core.checkpoints import (
    BYTES_FILE,
    CHUNK,
    MANIFEST_FORMAT,
    PADDLE_FILE,
    RESUMED_METRIC,
    SAVED_METRIC,
    SKIPPED_METRIC,
    CheckpointError,
    described,
    file_name_check,
    newest_first,
    verify,
)
from paddlecloud_core.contract import (
    CHECKPOINT_DIR_VARIABLE,
    KEEP_CHECKPOINTS,
    KEEP_CHECKPOINTS_VARIABLE,
    RESUME_FROM_VARIABLE,
)
from paddlecloud_core.layout import (
    CHECKPOINT_MANIFEST,
    CHECKPOINT_PREFIX,
    CHECKPOINTS_DIR,
    checkpoint_dirname,
    checkpoint_step,
    checkpoint_tmpname,
    checkpoints_aside,
)

from . import env
from . import master as master_calls
from .metrics import report


@dataclass
class Checkpoint:
    """A complete checkpoint: where it is, what its manifest says, and (from ``load``) its
    state."""

    path: Path
    step: int
    pass_: int | None
    time: float
    files: dict[str, dict]
    kind: str
    master: dict | None = None
    manifest: dict = field(default_factory=dict, repr=False)
    state: Any = field(default=None, repr=False)


# --- where -------------------------------------------------------------------------------------

def directory() -> Path:
    """The job's checkpoint directory (``PADDLE_CHECKPOINT_DIR``; ``<output_dir>/checkpoints``
    outside a job). Not created."""
    value = os.environ.get(CHECKPOINT_DIR_VARIABLE, "").strip()
    return Path(value) if value else env.output_dir() / CHECKPOINTS_DIR


def keep() -> int:
    """How many checkpoints the job keeps (``PADDLE_KEEP_CHECKPOINTS``, else 3)."""
    value = os.environ.get(KEEP_CHECKPOINTS_VARIABLE, "").strip()
    if not value:
        return KEEP_CHECKPOINTS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{KEEP_CHECKPOINTS_VARIABLE}={value!r}: a whole number from 1")
    return int(value)


def resume_from() -> Path | None:
    """The checkpoint of another job this one was submitted to start from
    (``PADDLE_RESUME_FROM``, ``-resume-from JOB[:STEP]``); None without one. Read, never
    written."""
    value = os.environ.get(RESUME_FROM_VARIABLE, "").strip()
    return Path(value) if value else None


def _where(path: str | os.PathLike | None) -> Path:
    return Path(path) if path is not None else directory()


# --- who ----------------------------------------------------------------------------------------

def _collective() -> bool:
    """Trainers only, more than one: their state is the same on all, their steps in lockstep
    (``paddlecloud_core.contract.trainers_restart_together``, as the replica sees it)."""
    return env.trainer_count() > 1 and env.pserver_count() == 0


def _paddle_barrier() -> Callable[[], None] | None:
    """``paddle.distributed.barrier`` once the trainers' group is made (``init_parallel_env``,
    or ``paddle.distributed.launch``'s); None when paddle was not imported or has no group."""
    dist = sys.modules.get("paddle.distributed")
    if dist is None:
        return None
    with contextlib.suppress(Exception):
        if dist.is_initialized() and dist.get_world_size() > 1:
            return dist.barrier
    return None


def _barrier_of(barrier: Callable[[], None] | None) -> Callable[[], None]:
    if barrier is not None:
        return barrier
    if not _collective():
        return lambda: None
    found = _paddle_barrier()
    if found is None:
        raise RuntimeError(
            f"paddlecloud_sdk.checkpoint: this is one of {env.trainer_count()} trainers of a "
            "collective job, which must all agree on a checkpoint's step: call "
            "paddle.distributed.init_parallel_env() first, or pass barrier= (a function every "
            "trainer calls that returns once all have)")
    return found


def _master_in_use() -> bool:
    return bool(os.environ.get(master_calls.URL_VAR, "").strip())


# --- saving -------------------------------------------------------------------------------------

def save(state: Any, step: int, *, pass_: int | None = None,
         path: str | os.PathLike | None = None, keep_last: int | None = None,
         barrier: Callable[[], None] | None = None) -> Path | None:
    """Save ``state`` as the checkpoint of ``step`` (a whole number >= 0; ``pass_``: the pass
    it is in, if the trainer counts them), then remove the oldest beyond ``keep_last``
    (``PADDLE_KEEP_CHECKPOINTS``). Every trainer of a collective job calls it at the same step;
    trainer 0 writes. The checkpoint's directory (trainer 0), else None.

    ``path``: another checkpoint directory than the job's; ``barrier``: how the trainers wait
    for each other (default ``paddle.distributed.barrier`` in a collective job)."""
    step = _whole("step", step)
    if pass_ is not None:
        pass_ = _whole("pass_", pass_)
    keep_last = keep() if keep_last is None else _whole("keep_last", keep_last, least=1)
    wait = _barrier_of(barrier)
    writer = env.trainer_id() == 0
    if not writer and not _collective():
        return None  # a pserver job's other trainers: their state is the pservers'
    position = None
    with_master = _master_in_use()
    if with_master and not writer:
        master_calls.position_report()
    wait()  # every trainer has reached the step (and told the master how far it is)
    written = None
    try:
        if writer:
            if with_master:
                position = master_calls.position_report()
            written = _write(_where(path), state, step, pass_, position)
            _prune(_where(path), keep_last, written)
            with contextlib.suppress(Exception):  # saved all the same; only the portal's
                report(step=step, **{SAVED_METRIC: step})  # preemption reads when (its cost)
    finally:
        wait()  # nobody goes on (nor asks the master for more) before it is written
    return written


def _whole(name: str, value: Any, *, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number from {least}, not {value!r}")
    return value


def _write(root: Path, state: Any, step: int, pass_: int | None,
           position: dict | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / checkpoint_tmpname(step, secrets.token_hex(4))
    tmp.mkdir()
    try:
        kind = _state_write(tmp, state)
        files = {name: _described(tmp / name) for name in sorted(_names(tmp))}
        manifest = {"format": MANIFEST_FORMAT, "step": step, "pass": pass_,
                    "time": time.time(), "job": env.job_name(), "job_uid": env.job_uid(),
                    "trainers": env.trainer_count(), "kind": kind, "files": files,
                    "master": position}
        _write_synced(tmp / CHECKPOINT_MANIFEST, json.dumps(manifest, indent=1).encode())
        _fsync_dir(tmp)
        final = root / checkpoint_dirname(step)
        old = None
        if final.exists() and (other := _another_runs(final)):
            _set_aside(final, other)
        if final.exists():  # the same step saved again (after a resume): the new one wins
            old = root / checkpoint_tmpname(step, f"old-{secrets.token_hex(4)}")
            final.rename(old)
        tmp.rename(final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _state_write(tmp: Path, state: Any) -> str:
    if isinstance(state, bytes | bytearray | memoryview):
        _write_synced(tmp / BYTES_FILE, bytes(state))
        return "bytes"
    if isinstance(state, Mapping) and state and all(
            isinstance(v, bytes | bytearray | memoryview | os.PathLike) for v in state.values()):
        for name, value in state.items():
            file_name_check(name)
            if isinstance(value, os.PathLike):
                with open(value, "rb") as source, open(tmp / name, "xb") as out:
                    shutil.copyfileobj(source, out, CHUNK)
                    out.flush()
                    os.fsync(out.fileno())
            else:
                _write_synced(tmp / name, bytes(value))
        return "files"
    try:
        import paddle
    except ImportError:
        raise TypeError(
            "checkpoint.save: state must be bytes, a dict of file names to bytes or paths "
            "(any framework), or a PaddlePaddle object (paddle is not importable here), not "
            f"{type(state).__name__}") from None
    paddle.save(state, str(tmp / PADDLE_FILE))
    with open(tmp / PADDLE_FILE, "rb") as written:
        os.fsync(written.fileno())
    return "paddle"


def _names(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name != CHECKPOINT_MANIFEST]


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _described(path: Path) -> dict:
    with open(path, "rb") as source:
        return described(source)


def _prune(root: Path, keep_last: int, written: Path) -> None:
    """Keep the newest ``keep_last`` complete checkpoints (``written`` among them); remove
    the older ones, and what earlier writers left half written."""
    steps = sorted((step, p) for p in root.iterdir()
                   if (step := checkpoint_step(p.name)) is not None and not _another_runs(p))
    for _, old in steps[:-keep_last]:
        if old != written:
            shutil.rmtree(old, ignore_errors=True)
    for leftover in root.glob(f".{CHECKPOINT_PREFIX}*"):  # trainer 0 is the one writer
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)


# --- finding and loading ------------------------------------------------------------------------

_reported: set[tuple[str, str]] = set()


def _verified(path: str | os.PathLike | None) -> Iterator[Checkpoint]:
    """The complete checkpoints, newest first, each checked as it comes; one that fails is
    skipped and reported. The job's own first; then, when none of them verified, the one it
    was submitted to start from (``resume_from()``: another job's, whatever its job uid)."""
    root = _where(path)
    try:
        names = [p.name for p in root.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        names = []
    own = False
    for step, name in newest_first(names):
        if path is None and (other := _another_runs(root / name)):
            _skipped(root / name, step, f"it is another run's of the name (job uid {other}): "
                                        "a job submitted again starts from none of the "
                                        "earlier one's (load(path=...) takes one)", metric=False)
            continue
        try:
            found = verified(root / name)
        except CheckpointError as exc:
            _skipped(root / name, step, str(exc))
            continue
        own = True
        yield found
    given = resume_from() if path is None else None
    if given is not None and not own:
        try:
            yield verified(given)
        except CheckpointError as exc:
            _skipped(given, checkpoint_step(given.name) or 0, str(exc))


def checkpoints(path: str | os.PathLike | None = None) -> list[Checkpoint]:
    """Every complete checkpoint that verifies, newest first."""
    return list(_verified(path))


def latest(path: str | os.PathLike | None = None) -> Checkpoint | None:
    """The newest complete checkpoint whose manifest and files verify; None without one.
    A corrupt or partial one is skipped (and reported: a line on stderr, a
    ``checkpoint_skipped`` metric at its step), never loaded."""
    return next(_verified(path), None)


def verified(path: Path) -> Checkpoint:
    """The checkpoint at ``path``, its manifest read and every file's size and digest
    checked (``paddlecloud_core.checkpoints``); ``CheckpointError`` saying what is wrong."""
    manifest = verify(checkpoint_step(path.name),
                      lambda name: open(path / name, "rb"))  # noqa: SIM115 (verify closes it)
    return Checkpoint(path=path, step=manifest["step"], pass_=manifest.get("pass"),
                      time=manifest.get("time"), files=manifest["files"],
                      kind=manifest["kind"], master=manifest.get("master"), manifest=manifest)


def _skipped(path: Path, step: int, why: str, *, metric: bool = True) -> None:
    if (str(path), why) in _reported:
        return
    _reported.add((str(path), why))
    print(f"paddlecloud_sdk.checkpoint: skipped the checkpoint of step {step} ({path}): "
          f"{why}; it is not loaded", file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):  # the log line is the report that matters
        if metric and env.trainer_id() == 0:
            report(step=step, **{SKIPPED_METRIC: 1})


def _another_runs(checkpoint_dir: Path) -> str | None:
    """The job uid of an earlier run of the name whose checkpoint this is (None: this run's,
    or not known: outside a job, or a manifest that cannot be read, which ``verified``
    tells). The portal sets an earlier run's directory aside before a new run starts where
    it can reach the PFS; where it cannot (a cluster whose portal does not mount it), the
    new run's trainers must not take, nor prune, what the earlier one left."""
    mine = env.job_uid()
    if mine is None:
        return None
    try:
        theirs = json.loads((checkpoint_dir / CHECKPOINT_MANIFEST).read_bytes()).get("job_uid")
    except (OSError, ValueError, AttributeError):
        return None
    return str(theirs) if theirs != mine else None


def _set_aside(checkpoint_dir: Path, other: str) -> None:
    """An earlier run's (job uid ``other``) checkpoint, where this run saves the same step:
    kept, beside the job's directory (``checkpoints-<its uid>``, as the portal sets a whole
    directory aside)."""
    aside = checkpoint_dir.parent.parent / checkpoints_aside(other)
    aside.mkdir(parents=True, exist_ok=True)
    checkpoint_dir.rename(aside / checkpoint_dir.name)


def load(path: str | os.PathLike | None = None, *,
         barrier: Callable[[], None] | None = None) -> Checkpoint | None:
    """The latest complete checkpoint (``latest()``) with its ``state`` read; None when there
    is none. In a job with a master (and no pservers) the master is given the checkpoint's
    position back — the dataset from the start without a checkpoint — before any trainer
    asks it for a task: call ``load`` before ``master.tasks()``/``reader()``; every trainer
    of a collective job calls it (they wait for each other). Trainer 0 reports the step it
    resumes from (``RESUMED_METRIC``: the portal's event)."""
    wait = _barrier_of(barrier)
    found = latest(path)
    if found is not None:
        found.state = _state_read(found)
        if env.trainer_id() == 0:
            with contextlib.suppress(Exception):  # the portal's event; the resume goes on
                report(step=found.step, **{RESUMED_METRIC: 1})
    if _master_in_use() and env.pserver_count() == 0 and env.trainer_id() == 0:
        master_calls.resume(found.master if found is not None else None,
                            found.step if found is not None else None)
    wait()  # no trainer asks the master for a task before it is where the checkpoint was
    return found


def _state_read(found: Checkpoint) -> Any:
    if found.kind == "bytes":
        return (found.path / BYTES_FILE).read_bytes()
    if found.kind == "files":
        return {name: (found.path / name).read_bytes() for name in found.files}
    import paddle

    return paddle.load(str(found.path / PADDLE_FILE))


# --- when the job is stopped --------------------------------------------------------------------

PREEMPT_EXIT = 128 + signal.SIGTERM  # what SIGTERM's default would have made of it


def save_on_preempt(callback: Callable[[], Any]) -> None:
    """On SIGTERM (the portal's warning before it stops the job: a preemption, a kill), call
    ``callback`` (which saves a checkpoint) once, then exit with 143. From the main thread."""
    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends it at once
        try:
            callback()
        finally:
            sys.exit(PREEMPT_EXIT)

    signal.signal(signal.SIGTERM, handler)


__all__ = ["Checkpoint", "CheckpointError", "checkpoints", "directory", "keep", "latest",
           "load", "resume_from", "save", "save_on_preempt", "verified"]
