"""A job's master: its dataset cut into tasks, pass after pass, dispatched to its trainers
(docs/master.md has the protocol and what is exactly once).

The state is the ``Task`` rows: nothing lives in a process, so any portal process answers any
trainer, and a restarted portal or worker goes on where it was. Many trainers take tasks at
once without two getting the same: the next waiting task is taken with ``SELECT … FOR UPDATE
SKIP LOCKED`` (a task another call is taking is skipped, not waited for). A lease names its
holder (trainer index) and carries a random id; ``renew``, ``done`` and ``failed`` act only on
the lease they name, so a stale holder changes nothing.

A lease goes back to the queue when it expires, when its trainer asks for another task (it
was restarted), or when its trainer's replica has ended. A pass is over when each of its tasks
is done or set aside (failed ``TASK_FAILURES`` times); the next pass is then made, the same
tasks again; after the last, trainers are told there is nothing more.
"""

from __future__ import annotations

import fnmatch
import hmac
import secrets
import struct
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from paddlecloud.errors import ConflictError, NotFoundError, PaddleCloudError, ValidationError
from paddlecloud_core.contract import master_token as contract_master_token
from pfs.services import pfs_target

from .models import Job, JobEvent, Replica, Task
from .notify import job_changed
from .states import FINAL_REPLICA_STATES

TASK_FAILURES = 3  # a task failing this often is set aside
WAIT_SECONDS = 1.0  # what a trainer is told to wait while others hold the pass's last tasks
RECORDIO_MAGIC = b"\x04\x03\x02\x01"
CHUNK_HEADER = struct.Struct("<IIIII")  # magic, crc32, compressor, stored size, records
READ_BLOCK = 1 << 20


class LeaseLost(ConflictError):
    code = "lease_lost"


# --- who may call --------------------------------------------------------------------------------

def master_token(job) -> str:
    """The job's token for its task calls (``contract.master_token``): derived from the
    portal's secret and the job's uid, so it is never stored, and good for this job only."""
    return contract_master_token(settings.SECRET_KEY, job.uid)


def master_job(uid, token: str) -> Job:
    """The job whose master ``token`` is for; 404 for anything else (a wrong token does not
    tell whether the job exists)."""
    job = (Job.objects.filter(uid=uid).exclude(dataset="")
           .only("id", "uid", "name", "passes", "dataset", "dataset_unit", "task_records",
                 "owner_id", "datacenter_id").first())
    if job is None or not hmac.compare_digest(master_token(job), token or ""):
        raise NotFoundError("no such job master")
    return job


# --- the dataset ---------------------------------------------------------------------------------

def dataset_problem(user, datacenter, dataset: str) -> str | None:
    """Why ``dataset`` (a glob) cannot be the job's, or None: it must match files the user may
    read (their home or the public directory), with wildcards in its last part only."""
    try:
        return None if dataset_files(user, datacenter, dataset) else (
            f"{dataset} matches no file")
    except PaddleCloudError as exc:
        return exc.fields.get("dataset", [exc.message])[0]


def dataset_files(user, datacenter, dataset: str) -> list[tuple[str, object, tuple]]:
    """The files ``dataset`` matches, sorted: (their path as replicas see it, storage, rel)."""
    head, _, pattern = dataset.rpartition("/")
    if any(c in head for c in "*?["):
        raise ValidationError.for_field(
            "dataset", "only the last part of the path may hold *, ? or [...]: "
                       "/pfs/{dc}/home/{user}/data/part-*.recordio")
    target = pfs_target(user, datacenter, head or "/", field="dataset")
    storage = target.storage
    found = []
    for entry in storage.listdir(target.rel):
        if fnmatch.fnmatchcase(entry.name, pattern) and entry.type == "file":
            found.append((f"{str(target.path).rstrip('/')}/{entry.name}", storage,
                          (*target.rel, entry.name)))
    return sorted(found, key=lambda f: f[0])


def _read(storage, rel, start: int, end: int) -> bytes:
    return b"".join(storage.read(rel, start, end))


def _chunks(storage, rel) -> list[tuple[int, int]]:
    """A RecordIO file's chunks: (byte offset, records), from their headers alone."""
    chunks, offset = [], 0
    while True:
        header = _read(storage, rel, offset, offset + CHUNK_HEADER.size)
        if not header:
            return chunks
        if len(header) < CHUNK_HEADER.size or header[:4] != RECORDIO_MAGIC:
            raise ValidationError.for_field("dataset", f"not a RecordIO file: {rel[-1]} "
                                                       f"(at byte {offset})")
        _, _, _, size, records = CHUNK_HEADER.unpack(header)
        chunks.append((offset, records))
        offset += CHUNK_HEADER.size + size


def _lines(storage, rel) -> int:
    count, last = 0, b""
    for block in storage.read(rel):
        count += block.count(b"\n")
        last = block[-1:] or last
    return count + (1 if last and last != b"\n" else 0)


def _is_recordio(storage, rel) -> bool:
    return _read(storage, rel, 0, 4) == RECORDIO_MAGIC


def dataset_spans(job) -> list[list[dict]]:
    """The job's dataset cut into tasks (each a list of spans), as ``dataset_unit`` says."""
    tasks = []
    for path, storage, rel in dataset_files(job.owner, job.datacenter, job.dataset):
        if job.dataset_unit == "file":
            tasks.append([{"path": path, "kind": "file"}])
        elif job.dataset_unit == "chunk":
            tasks += [[{"path": path, "kind": "chunk", "offset": offset}]
                      for offset, _ in _chunks(storage, rel)]
        else:
            total = (sum(n for _, n in _chunks(storage, rel)) if _is_recordio(storage, rel)
                     else _lines(storage, rel))
            size = job.task_records
            tasks += [[{"path": path, "kind": "records", "start": start,
                        "count": min(size, total - start)}] for start in range(0, total, size)]
    return tasks


# --- passes --------------------------------------------------------------------------------------

def _pass_make(job, pass_no: int) -> None:
    """Make pass ``pass_no``'s tasks (once: the caller holds the job's row lock)."""
    if Task.objects.filter(job=job, pass_no=pass_no).exists():
        return
    if pass_no == 0:
        spans = dataset_spans(job)
    else:
        spans = list(Task.objects.filter(job=job, pass_no=0).order_by("index")
                     .values_list("spans", flat=True))
    Task.objects.bulk_create(Task(job=job, pass_no=pass_no, index=i, spans=s)
                             for i, s in enumerate(spans))
    _event(job, "pass", "started", f"pass {pass_no + 1} of {job.passes}: {len(spans)} tasks")


def _current_pass(job) -> int | None:
    """The pass with tasks not yet done or set aside — only the last pass made can have
    them — or None when every pass made is over (then the caller makes the next). Two index
    lookups, however many tasks the pass holds."""
    last = (Task.objects.filter(job=job).order_by("-pass_no")
            .values_list("pass_no", flat=True).first())
    if last is None or not Task.objects.filter(
            job=job, pass_no=last, state__in=(Task.State.WAITING, Task.State.LEASED)).exists():
        return None
    return last


# --- leases --------------------------------------------------------------------------------------

def _event(job, from_state: str, to_state: str, reason: str) -> None:
    JobEvent.objects.create(job=job, from_state=from_state, to_state=to_state, reason=reason)


def _release(job, tasks: list[Task], why: str) -> None:
    """Put leased tasks back in the queue, each with an event."""
    if not tasks:
        return
    Task.objects.filter(pk__in=[t.pk for t in tasks], state=Task.State.LEASED).update(
        state=Task.State.WAITING, lease="", lease_expires=None)
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state="leased", to_state="waiting", reason=(
            f"task {t.index} of pass {t.pass_no + 1} dispatched again: trainer-{t.trainer} "
            f"{why}")) for t in tasks)


def _reclaim(job, trainer: int) -> None:
    """Leases that are over: the asking trainer's own (it was restarted, or gave up), those of
    trainers whose replica has ended, and expired ones."""
    # Unordered (no join for Meta.ordering), and locking the tasks only: a lock on the job's
    # row (a pass being made) must not hide every task from SKIP LOCKED.
    leased = Task.objects.filter(job=job, state=Task.State.LEASED).order_by()

    def locked(rows):
        return list(rows.select_for_update(skip_locked=True, of=("self",)))

    _release(job, locked(leased.filter(trainer=trainer)),
             "asked for another task (it was restarted)")
    ended = list(Replica.objects.filter(job=job, role=Replica.Role.TRAINER,
                                        state__in=FINAL_REPLICA_STATES).order_by()
                 .values_list("index", flat=True))
    if ended:
        _release(job, locked(leased.filter(trainer__in=ended)), "has ended")
    _release(job, locked(leased.filter(lease_expires__lt=timezone.now())),
             "let its lease expire")


def _lease_seconds() -> int:
    return settings.PADDLECLOUD_MASTER_LEASE_SECONDS


def task_next(job, trainer: int) -> dict:
    """The trainer's next task, or ``{"wait": s}``, or ``{"done": True}`` (docs/master.md)."""
    for _ in range(job.passes + 1):
        with transaction.atomic():
            _reclaim(job, trainer)
            current = _current_pass(job)
            if current is not None:
                task = (Task.objects.select_for_update(skip_locked=True, of=("self",))
                        .filter(job=job, pass_no=current, state=Task.State.WAITING)
                        .order_by("index").first())
                if task is not None:
                    return _lease(job, task, trainer)
                return {"wait": WAIT_SECONDS}
            # Every pass made is over: make the next, once (under the job's lock).
            locked = Job.objects.select_for_update().get(pk=job.pk)
            made = Task.objects.filter(job=job).order_by("-pass_no").values_list(
                "pass_no", flat=True).first()
            following = 0 if made is None else made + 1
            if following >= locked.passes:
                return {"done": True}
            if _current_pass(job) is None:
                _pass_make(job, following)
        job_changed(job.pk)
    return {"wait": WAIT_SECONDS}


def _lease(job, task: Task, trainer: int) -> dict:
    task.state, task.trainer, task.lease = Task.State.LEASED, trainer, secrets.token_hex(8)
    task.lease_expires = timezone.now() + timedelta(seconds=_lease_seconds())
    task.attempts += 1
    task.save(update_fields=["state", "trainer", "lease", "lease_expires", "attempts",
                             "updated_at"])
    return {"task": {"id": task.pk, "pass": task.pass_no, "index": task.index,
                     "lease": task.lease, "lease_seconds": _lease_seconds(),
                     "spans": task.spans}}


def _held(job, task_id: int, trainer: int, lease: str):
    return Task.objects.filter(pk=task_id, job=job, state=Task.State.LEASED, trainer=trainer,
                               lease=lease or "-")


def _lost(task_id: int) -> LeaseLost:
    return LeaseLost(f"task {task_id} is no longer yours: its lease expired or it went to "
                     "another trainer; ask for the next task")


def task_renew(job, task_id: int, trainer: int, lease: str) -> dict:
    if not _held(job, task_id, trainer, lease).update(
            lease_expires=timezone.now() + timedelta(seconds=_lease_seconds())):
        raise _lost(task_id)
    return {"lease_seconds": _lease_seconds()}


def task_done(job, task_id: int, trainer: int, lease: str) -> dict:
    """Done, once. The lease stays on the task, so the same ``done`` sent again (its answer
    was lost) is answered the same, and any other is refused."""
    done_now = _held(job, task_id, trainer, lease).update(state=Task.State.DONE,
                                                           lease_expires=None)
    if not done_now and not Task.objects.filter(
            pk=task_id, job=job, state=Task.State.DONE, trainer=trainer,
            lease=lease or "-").exists():
        raise _lost(task_id)
    return {"done": True}


@transaction.atomic
def task_release(job, task_id: int, trainer: int, lease: str, reason: str) -> dict:
    """The trainer gives the task back unread or half read (it stopped early): dispatched
    again, not counted as a failure."""
    task = _held(job, task_id, trainer, lease).select_for_update().first()
    if task is None:
        raise _lost(task_id)
    _release(job, [task], f"gave it back ({(reason or 'no reason given').strip()[:500]})")
    return {"released": True}


@transaction.atomic
def task_failed(job, task_id: int, trainer: int, lease: str, reason: str) -> dict:
    task = _held(job, task_id, trainer, lease).select_for_update().first()
    if task is None:
        raise _lost(task_id)
    task.failures += 1
    task.lease, task.lease_expires = "", None
    why = (reason or "no reason given").strip()[:500]
    if task.failures >= TASK_FAILURES:
        task.state = Task.State.SET_ASIDE
        _event(job, "leased", "set_aside", (
            f"task {task.index} of pass {task.pass_no + 1} set aside: it failed "
            f"{task.failures} times, last on trainer-{trainer}: {why}"))
    else:
        task.state = Task.State.WAITING
        _event(job, "leased", "waiting", (
            f"task {task.index} of pass {task.pass_no + 1} failed on trainer-{trainer} "
            f"({why}); dispatched again"))
    task.save(update_fields=["state", "lease", "lease_expires", "failures", "updated_at"])
    return {"set_aside": True} if task.state == Task.State.SET_ASIDE else {"retried": True}


# --- what users see ------------------------------------------------------------------------------

def tasks_report(job) -> dict:
    """``tasks_progress`` and the tasks of the current pass (or the last, once over), with
    who holds them: what the API and the job's page show."""
    progress = tasks_progress(job)
    shown = progress["current_pass"]
    if shown is None and progress["passes"]:
        shown = progress["passes"][-1]["pass"]
    tasks = job.tasks.filter(pass_no=shown).order_by("index") if shown is not None else []
    progress["tasks"] = [
        {"id": t.pk, "pass": t.pass_no, "index": t.index, "state": t.state,
         "trainer": t.trainer, "attempts": t.attempts, "failures": t.failures,
         "lease_expires": t.lease_expires} for t in tasks]
    return progress


def tasks_progress(job) -> dict:
    """Each pass's tasks by state, and the current pass (None: not started, or over)."""
    counts = (Task.objects.filter(job=job).values("pass_no", "state")
              .annotate(n=Count("id")).order_by("pass_no"))
    passes: dict[int, dict] = {}
    for row in counts:
        entry = passes.setdefault(row["pass_no"], {"pass": row["pass_no"], **{
            state: 0 for state in Task.State.values}, "total": 0})
        entry[row["state"]] += row["n"]
        entry["total"] += row["n"]
    return {"passes": list(passes.values()), "current_pass": _current_pass(job),
            "total_passes": job.passes}
