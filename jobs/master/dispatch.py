"""A job master's dispatch: its dataset's tasks (``dataset``), pass after pass, leased to its
trainers; who may call, and the calls (docs/master.md has the protocol and what is exactly
once).

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

import functools
import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from kernel.errors import ConflictError, NotFoundError, ValidationError
from paddlecloud_core.contract import master_token as contract_master_token
from paddlecloud_core.spec import MAX_REPLICAS

from ..models import Job, Replica, Task, event_repeatable
from ..notify import job_changed
from ..states import FINAL_REPLICA_STATES
from .dataset import dataset_spans

TASK_FAILURES = 3  # a task failing this often is set aside
WAIT_SECONDS = 1.0  # what a trainer is told to wait while others hold the pass's last tasks


class LeaseLost(ConflictError):
    code = "lease_lost"


# --- who may call --------------------------------------------------------------------------------

def master_token(job) -> str:
    """The job's token for its task calls (``contract.master_token``): derived from the
    portal's secret and the job's uid, so it is never stored, and good for this job only."""
    return contract_master_token(settings.SECRET_KEY, job.uid)


@dataclass(frozen=True)
class MasterJob:
    """What the master's calls need of a job; none of it ever changes."""

    pk: int
    uid: str
    passes: int


KNOWN_JOBS = 4096  # jobs a process remembers, the most recently called
_known: OrderedDict[str, MasterJob] = OrderedDict()
_known_lock = threading.Lock()


def master_job(uid, token: str) -> MasterJob:
    """The job whose master ``token`` is for; 404 for anything else (a wrong token does not
    tell whether the job exists). The token is checked before anything is read, and a job
    once found is remembered: a task call reads nothing but the tasks."""
    uid = str(uid)
    if not hmac.compare_digest(contract_master_token(settings.SECRET_KEY, uid), token or ""):
        raise NotFoundError("no such job master")
    with _known_lock:
        job = _known.get(uid)
        if job is not None:
            _known.move_to_end(uid)
            return job
    row = Job.objects.filter(uid=uid).exclude(dataset="").values_list("pk", "passes").first()
    if row is None:
        raise NotFoundError("no such job master")
    job = MasterJob(pk=row[0], uid=uid, passes=row[1])
    with _known_lock:
        _known[uid] = job
        while len(_known) > KNOWN_JOBS:
            _known.popitem(last=False)
    return job


def _forget(job) -> NotFoundError:
    """The job is gone (deleted while its trainers still call): forget it; the 404 to raise."""
    with _known_lock:
        _known.pop(str(job.uid), None)
    return NotFoundError("no such job master")


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header ("" without one)."""
    header = header or ""
    return header[7:].strip() if header.startswith("Bearer ") else ""


# --- the statements --------------------------------------------------------------------------
#
# A trainer's calls are the master's hot path: a ``next`` is one statement (two when a lease
# must come back first), a ``done`` or a ``renew`` one, on the tasks' indexes alone; written in
# SQL so that each is one round trip and costs no query building. ``{lock}`` marks where rows
# are locked: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (a row another call is taking is
# skipped, not waited for); nothing on SQLite, which runs one writer at a time.

TASKS, REPLICAS = Task._meta.db_table, Replica._meta.db_table
_FINAL = tuple(sorted(FINAL_REPLICA_STATES))

# The tasks of the pass being dispatched: only the last pass made can have tasks not yet done
# or set aside, because a pass is made only once every earlier one is over.
_LAST_PASS = f"(SELECT MAX(pass_no) FROM {TASKS} WHERE job_id = %s)"

# The leases that are over, with why each comes back: those the asking trainer still holds
# besides the one it was just given (it was restarted); with ``{sweep}``, expired ones and
# those of trainers whose replica has ended (every leased task of the job: once a second, or
# before a trainer is told to wait).
_OVER = (f"SELECT id, pass_no, \"index\", trainer, CASE WHEN trainer = %s THEN 'own' "
         f"WHEN lease_expires < %s THEN 'expired' ELSE 'ended' END FROM {TASKS} "
         f"WHERE job_id = %s AND state = 'leased' AND id <> %s AND (trainer = %s{{sweep}}) "
         f"{{lock}}")
_SWEEP = (f" OR lease_expires < %s OR trainer IN (SELECT \"index\" FROM {REPLICAS} "
          f"WHERE job_id = %s AND role = 'trainer' "
          f"AND state IN ({', '.join(['%s'] * len(_FINAL))}))")
SWEEP_SECONDS = 1.0
_GIVE_BACK = (f"UPDATE {TASKS} SET state = 'waiting', lease = '', lease_expires = NULL, "
              f"updated_at = %s WHERE state = 'leased' AND id IN ({{ids}})")
_TAKE = (f"UPDATE {TASKS} SET state = 'leased', trainer = %s, lease = %s, lease_expires = %s, "
         f"attempts = attempts + 1, updated_at = %s WHERE id = (SELECT id FROM {TASKS} "
         f"WHERE job_id = %s AND pass_no = {_LAST_PASS} AND state = 'waiting' "
         f"ORDER BY \"index\" LIMIT 1 {{lock}}) RETURNING id, pass_no, \"index\", spans, "
         f"trained, "
         # Whether the trainer holds another lease still (it was restarted): rarely.
         f"(SELECT COUNT(*) FROM {TASKS} AS held WHERE held.job_id = %s "
         f"AND held.state = 'leased' AND held.trainer = %s AND held.id <> {TASKS}.id)")
_PENDING = (f"SELECT 1 FROM {TASKS} WHERE job_id = %s AND pass_no = {_LAST_PASS} "
            f"AND state IN ('waiting', 'leased') LIMIT 1")
_WAITING = (f"SELECT 1 FROM {TASKS} WHERE job_id = %s AND pass_no = {_LAST_PASS} "
            f"AND state = 'waiting' LIMIT 1")
# The task as the trainer's lease names it, while it still holds it.
_HELD = ("id = %s AND job_id = %s AND state = 'leased' AND trainer = %s AND lease = %s")
_RENEW = f"UPDATE {TASKS} SET lease_expires = %s, updated_at = %s WHERE {_HELD}"
_DONE = f"UPDATE {TASKS} SET state = 'done', lease_expires = NULL, updated_at = %s WHERE {_HELD}"
_TRAINED = f"UPDATE {TASKS} SET trained = %s, updated_at = %s WHERE {_HELD}"
_DONE_BEFORE = (f"SELECT 1 FROM {TASKS} WHERE id = %s AND job_id = %s AND state = 'done' "
                f"AND trainer = %s AND lease = %s")


@functools.cache
def _for(vendor: str, statement: str, lock: str) -> str:
    return statement.replace("{lock}", lock if vendor == "postgresql" else "")


def _run(statement: str, params, *, lock: str = "FOR UPDATE SKIP LOCKED", rows: bool = True):
    """Run a statement of this module: its rows (``rows``) or how many rows it changed.

    On PostgreSQL it is a prepared statement (once per connection: the server parses and plans
    it once, not on every call), on a cursor of the connection's own: Django's bind the
    parameters on the client. Behind PgBouncer this needs its protocol-level prepared
    statements (``max_prepared_statements``, PgBouncer 1.21), as Django's
    ``server_side_binding`` does."""
    sql = _for(connection.vendor, statement, lock)
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if rows else cursor.rowcount
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall() if rows else cursor.rowcount


def _when(moment) -> object:
    return connection.ops.adapt_datetimefield_value(moment)


# --- passes --------------------------------------------------------------------------------------

def _pass_make(job, pass_no: int) -> int:
    """Make pass ``pass_no``'s tasks (once: the caller holds the job's row lock); how many."""
    if Task.objects.filter(job=job, pass_no=pass_no).exists():
        return -1
    if pass_no == 0:
        spans = dataset_spans(job)
    else:
        spans = list(Task.objects.filter(job=job, pass_no=0).order_by("index")
                     .values_list("spans", flat=True))
    Task.objects.bulk_create(Task(job=job, pass_no=pass_no, index=i, spans=s)
                             for i, s in enumerate(spans))
    event_repeatable(job.pk, "pass", "started",
                     f"pass {pass_no + 1} of {job.passes}: {len(spans)} tasks")
    return len(spans)


def _last_pass(job) -> int | None:
    """The last pass made (None before the first): an index lookup."""
    return _run(_LAST_PASS[1:-1], [job.pk])[0][0]


def _current_pass(job) -> int | None:
    """The pass with tasks not yet done or set aside, or None when every pass made is over
    (then the next is made). Two index lookups, however many tasks the pass holds."""
    if not _run(_PENDING, [job.pk, job.pk]):
        return None
    return _last_pass(job)


def _pass_next(job) -> bool:
    """Every pass made is over: make the next (under the job's row lock, so once), unless that
    was the last or the dataset has no task. Whether there is a pass to dispatch."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().select_related(
            "owner", "datacenter").filter(pk=job.pk).first()
        if locked is None:
            raise _forget(job)
        if _current_pass(job) is not None:
            return True  # another call made it meanwhile
        made = _last_pass(job)
        following = 0 if made is None else made + 1
        if following >= locked.passes or _pass_make(locked, following) == 0:
            return False
    job_changed(job.pk)
    return True


# --- leases --------------------------------------------------------------------------------------

WHY_BACK = {"own": "asked for another task (it was restarted)", "ended": "has ended",
            "expired": "let its lease expire"}


_swept: OrderedDict[int, float] = OrderedDict()  # job → when this process last swept it


def _sweep_due(job, *, claim: bool = True) -> bool:
    """Whether this process should sweep the job's leases now; ``claim``: and it will (the
    next to ask is told no for SWEEP_SECONDS)."""
    now = time.monotonic()
    with _known_lock:
        if now - _swept.get(job.pk, -SWEEP_SECONDS) < SWEEP_SECONDS:
            return False
        if not claim:
            return True
        _swept[job.pk] = now
        _swept.move_to_end(job.pk)
        while len(_swept) > KNOWN_JOBS:
            _swept.popitem(last=False)
    return True


def _reclaim(job, trainer: int, *, sweep: bool, keep: int = 0) -> int:
    """Put the leases that are over back in the queue, each with an event (``_OVER``), but
    the task ``keep``; how many. Looked for without a lock (usually there is none), taken
    back under one."""
    now = _when(timezone.now())
    params = [trainer, now, job.pk, keep, trainer]
    statement = _OVER.replace("{sweep}", _SWEEP if sweep else "")
    if sweep:
        params += [now, job.pk, *_FINAL]
    if not _run(statement, params, lock=""):
        return 0
    with transaction.atomic():
        over = _run(statement, params)
        if not over:
            return 0
        _run(_GIVE_BACK.replace("{ids}", ", ".join(["%s"] * len(over))),
             [now, *(row[0] for row in over)], rows=False)
        for _id, pass_no, index, holder, why in over:
            event_repeatable(job.pk, "leased", "waiting", (
                f"task {index} of pass {pass_no + 1} dispatched again: trainer-{holder} "
                f"{WHY_BACK[why]}"))
    return len(over)


def _lease_seconds() -> int:
    return settings.PADDLECLOUD_MASTER_LEASE_SECONDS


def _take(job, trainer: int) -> dict | None:
    """Lease the pass's next waiting task to ``trainer``, in one statement; what the trainer
    held before (it was restarted) goes back to the queue."""
    lease, params = _take_params(job, trainer)
    return _taken(job, trainer, lease, _run(_TAKE, params))


def _take_params(job, trainer: int) -> tuple[str, list]:
    """A new lease, and ``_TAKE``'s parameters to give it to ``trainer``."""
    now = timezone.now()
    lease = secrets.token_hex(8)
    expires = now + timedelta(seconds=_lease_seconds())
    return lease, [trainer, lease, _when(expires), _when(now), job.pk, job.pk, job.pk, trainer]


def _taken(job, trainer: int, lease: str, taken: list) -> dict | None:
    """``_TAKE``'s rows as the trainer's answer (None: no task was waiting)."""
    if not taken:
        return None
    task_id, pass_no, index, spans, trained, held_before = taken[0]
    if held_before:
        _reclaim(job, trainer, sweep=False, keep=task_id)
    task = {"id": task_id, "pass": pass_no, "index": index, "lease": lease,
            "lease_seconds": _lease_seconds(),
            "spans": json.loads(spans) if isinstance(spans, str | bytes) else spans}
    if trained:
        task["skip"] = trained  # trained before the job resumed from a checkpoint
    return {"task": task}


def task_next(job, trainer: int) -> dict:
    """The trainer's next task, or ``{"wait": s}``, or ``{"done": True}`` (docs/master.md)."""
    swept = _sweep_due(job)
    if swept:
        _reclaim(job, trainer, sweep=True)
    for _ in range(4):  # again once leases came back, or a pass was made
        leased = _take(job, trainer)
        if leased is not None:
            return leased
        if not swept:  # before the trainer is told to wait, leases that are over come back
            swept = True
            if _reclaim(job, trainer, sweep=True):
                continue
        if _current_pass(job) is not None:
            if _run(_WAITING, [job.pk, job.pk]):
                continue  # made, or given back, since the take: take again
            return {"wait": WAIT_SECONDS}  # the pass's last tasks are held by others
        if not _pass_next(job):
            return {"done": True}
    return {"wait": WAIT_SECONDS}


def _lost(task_id: int) -> LeaseLost:
    return LeaseLost(f"task {task_id} is no longer yours: its lease expired or it went to "
                     "another trainer; ask for the next task")


def _held(job, task_id: int, trainer: int, lease: str) -> list:
    return [task_id, job.pk, trainer, lease or "-"]


def task_renew(job, task_id: int, trainer: int, lease: str) -> dict:
    now = timezone.now()
    expires = now + timedelta(seconds=_lease_seconds())
    if not _run(_RENEW, [_when(expires), _when(now), *_held(job, task_id, trainer, lease)],
                rows=False):
        raise _lost(task_id)
    return {"lease_seconds": _lease_seconds()}


def task_done(job, task_id: int, trainer: int, lease: str) -> dict:
    """Done, once. The lease stays on the task, so the same ``done`` sent again (its answer
    was lost) is answered the same, and any other is refused."""
    return _done_after(job, task_id, trainer, lease, _run(
        _DONE, _done_params(job, task_id, trainer, lease), rows=False))


def _done_params(job, task_id: int, trainer: int, lease: str) -> list:
    return [_when(timezone.now()), *_held(job, task_id, trainer, lease)]


def _done_after(job, task_id: int, trainer: int, lease: str, changed: int) -> dict:
    """``done``'s answer once ``_DONE`` changed ``changed`` rows."""
    if not changed and not _run(_DONE_BEFORE, _held(job, task_id, trainer, lease)):
        raise _lost(task_id)
    return {"done": True}


def _held_locked(job, task_id: int, trainer: int, lease: str) -> Task:
    """The task the lease names, locked, or LeaseLost (inside a transaction)."""
    task = next(iter(Task.objects.raw(
        _for(connection.vendor, f"SELECT * FROM {TASKS} WHERE {_HELD} {{lock}}", "FOR UPDATE"),
        _held(job, task_id, trainer, lease))), None)
    if task is None:
        raise _lost(task_id)
    return task


@transaction.atomic
def task_release(job, task_id: int, trainer: int, lease: str, reason: str) -> dict:
    """The trainer gives the task back unread or half read (it stopped early): dispatched
    again, not counted as a failure."""
    task = _held_locked(job, task_id, trainer, lease)
    task.state, task.lease, task.lease_expires = Task.State.WAITING, "", None
    task.save(update_fields=["state", "lease", "lease_expires", "updated_at"])
    event_repeatable(job.pk, "leased", "waiting", (
        f"task {task.index} of pass {task.pass_no + 1} dispatched again: trainer-{trainer} "
        f"gave it back ({(reason or 'no reason given').strip()[:500]})"))
    return {"released": True}


@transaction.atomic
def task_failed(job, task_id: int, trainer: int, lease: str, reason: str) -> dict:
    task = _held_locked(job, task_id, trainer, lease)
    task.failures += 1
    task.lease, task.lease_expires = "", None
    why = (reason or "no reason given").strip()[:500]
    if task.failures >= TASK_FAILURES:
        task.state = Task.State.SET_ASIDE
        event_repeatable(job.pk, "leased", "set_aside", (
            f"task {task.index} of pass {task.pass_no + 1} set aside: it failed "
            f"{task.failures} times, last on trainer-{trainer}: {why}"))
    else:
        task.state = Task.State.WAITING
        event_repeatable(job.pk, "leased", "waiting", (
            f"task {task.index} of pass {task.pass_no + 1} failed on trainer-{trainer} "
            f"({why}); dispatched again"))
    task.save(update_fields=["state", "lease", "lease_expires", "failures", "updated_at"])
    return {"set_aside": True} if task.state == Task.State.SET_ASIDE else {"retried": True}


# --- checkpoints: the master's position, and a restarted job back at it ---------------------------
#
# A checkpoint (paddlecloud_sdk.checkpoint) keeps the pass's position as it was when its model
# was saved: which tasks were done, and how many records of each other one had been trained.
# A job restarted from it has the master put back there — the tasks done since go back to the
# queue, a task partly trained is handed out with ``skip`` — so that every record of the pass
# is trained once in the model that goes on.

def master_position(job, trainer: int, held: list[dict]) -> dict:
    """Note how many records of each task ``trainer`` holds it has trained (``held``: each
    ``{"task", "lease", "read"}``; a lease it no longer holds is passed over), then the
    position: ``{"pass", "done": [indexes], "read": {index: records}}`` of the last pass made
    (``pass`` None before the first)."""
    now = _when(timezone.now())
    for entry in held:
        _run(_TRAINED, [entry["read"], now, *_held(job, entry["task"], trainer,
                                                    entry["lease"])], rows=False)
    last = _last_pass(job)
    if last is None:
        return {"pass": None, "done": [], "read": {}}
    rows = Task.objects.filter(job_id=job.pk, pass_no=last).values_list("index", "state",
                                                                        "trained")
    return {"pass": last,
            "done": sorted(index for index, state, _ in rows if state == Task.State.DONE),
            "read": {str(index): trained for index, state, trained in rows
                     if state in (Task.State.WAITING, Task.State.LEASED) and trained}}


def master_resume(job, trainer: int, position: dict | None, step: int | None) -> dict:
    """Put the master back where ``position`` says (a checkpoint's, of ``step``), or at the
    start of the dataset (None): what a restarted job's trainer 0 asks before any trainer asks
    for a task. Every lease is over (the trainers that held them were restarted)."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().select_related(
            "owner", "datacenter").filter(pk=job.pk).first()
        if locked is None:
            raise _forget(job)
        tasks = Task.objects.filter(job_id=job.pk)
        if position is None:
            if tasks.exists():
                tasks.delete()
                event_repeatable(job.pk, "pass", "resumed", (
                    f"the master starts the dataset over: trainer-{trainer} restarted "
                    "without a checkpoint"))
            return {"resumed": True, "pass": None}
        pass_no, done, read = position["pass"], position["done"], position["read"]
        tasks.filter(pass_no__gt=pass_no).delete()
        if not tasks.filter(pass_no=pass_no).exists():
            _pass_make(locked, 0)  # nothing when made already
            _pass_make(locked, pass_no)
        current = tasks.filter(pass_no=pass_no).exclude(state=Task.State.SET_ASIDE)
        current.filter(index__in=done).update(state=Task.State.DONE, lease_expires=None,
                                              trained=0, updated_at=timezone.now())
        current.exclude(index__in=done).update(state=Task.State.WAITING, lease="",
                                               lease_expires=None, trained=0,
                                               updated_at=timezone.now())
        for index, records in read.items():
            current.filter(index=index).exclude(index__in=done).update(trained=records)
        total = current.count()
        event_repeatable(job.pk, "pass", "resumed", (
            f"the master resumes pass {pass_no + 1} as the checkpoint of step {step} left it: "
            f"{len(done)} of {total} tasks done, {len(read)} partly trained"))
    job_changed(job.pk)
    return {"resumed": True, "pass": pass_no}


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise ValidationError.for_field(what, "a whole number from 0")
    return value


def _held_of(data: dict) -> list[dict]:
    held = data.get("held", [])
    if not isinstance(held, list) or len(held) > MAX_REPLICAS or not all(
            isinstance(entry, dict) for entry in held):
        raise ValidationError.for_field("held", "a list of the tasks the trainer holds, each "
                                                '{"task", "lease", "read"}')
    return [{"task": _count(entry.get("task"), "held"), "lease": _lease_of(entry),
             "read": _count(entry.get("read"), "held")} for entry in held]


def _position_of(data: dict) -> dict | None:
    """A checkpoint's position as ``master_position`` gave it, checked; None: from the
    start."""
    position = data.get("position")
    if position is None or (isinstance(position, dict) and position.get("pass") is None):
        return None
    rule = ('{"pass": N, "done": [indexes], "read": {"index": records}}, as /position '
            "answered, or null")
    if not isinstance(position, dict) or not isinstance(position.get("done"), list) \
            or not isinstance(position.get("read"), dict):
        raise ValidationError.for_field("position", rule)
    try:
        return {"pass": _count(position["pass"], "position"),
                "done": [_count(index, "position") for index in position["done"]],
                "read": {_count(int(index), "position"): _count(records, "position")
                         for index, records in position["read"].items()}}
    except ValueError:
        raise ValidationError.for_field("position", rule) from None


# --- the calls, as both transports take them ----------------------------------------------

TASK_ACTIONS = ("renew", "done", "failed", "release")
JOB_ACTIONS = ("position", "resume")


def _trainer(data: dict) -> int:
    """The calling trainer's index: below MAX_REPLICAS, as every job's trainers are (and so
    within the tasks' ``trainer`` column)."""
    value = data.get("trainer")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_REPLICAS:
        raise ValidationError.for_field("trainer", "the caller's PADDLE_TRAINER_ID, a whole "
                                                   f"number from 0 to {MAX_REPLICAS - 1}")
    return value


def _lease_of(data: dict) -> str:
    value = data.get("lease")
    if not isinstance(value, str) or not value:
        raise ValidationError.for_field("lease", "the lease of the task, as /next gave it")
    return value


def master_call(uid, token: str, action: str, task_id: int | None, data) -> dict:
    """One call of docs/master.md: ``next``, or one of TASK_ACTIONS on ``task_id``, with its
    JSON body ``data``: what both the API view and the ASGI fast path (``app``) run."""
    if action != "next" and action not in TASK_ACTIONS + JOB_ACTIONS:
        raise NotFoundError(f"no such task call {action!r}: renew, done, failed or release")
    job = master_job(uid, token)
    data = data if isinstance(data, dict) else {}
    trainer = _trainer(data)
    if action == "next":
        return task_next(job, trainer)
    if action == "position":
        return master_position(job, trainer, _held_of(data))
    if action == "resume":
        step = data.get("step")
        return master_resume(job, trainer, _position_of(data),
                             None if step is None else _count(step, "step"))
    lease = _lease_of(data)
    if action in ("failed", "release"):
        reason = data.get("reason", "")
        report = task_failed if action == "failed" else task_release
        return report(job, task_id, trainer, lease, reason if isinstance(reason, str) else "")
    return (task_renew if action == "renew" else task_done)(job, task_id, trainer, lease)


# --- calls answered together: one commit for many -----------------------------------------------
#
# On PostgreSQL a commit waits for the WAL to reach the disk (~2 ms on a plain disk), longer
# than a call's statements take: with a commit per call, the master's few connections spend
# most of their time in fsync, and 64 trainers queue behind them. Calls that arrive together
# are run in one transaction instead, and answered once it is committed (never before: a lease
# or a done answered is on disk). Should the database refuse the batch (a deadlock, a lost
# connection), nothing of it was kept: each call is then run alone, as it always could be.

def master_calls(calls: list[tuple]) -> list[tuple[object, Exception | None]]:
    """Each of ``calls`` (``master_call``'s arguments) run, in one transaction when there are
    several; each one's ``(answer, None)`` or ``(None, error)``, in order, once committed."""
    if len(calls) > 1:
        try:
            with transaction.atomic():
                return _batch(calls)
        except (DatabaseError, _BatchBroken):
            pass  # rolled back, all of it: each alone below
    return [_outcome(master_call, args) for args in calls]


class _BatchBroken(Exception):
    """A call of a batch left its transaction unusable."""


def _outcome(function, args: tuple, *, batched: bool = False
             ) -> tuple[object, Exception | None]:
    try:
        answer = function(*args), None
    except DatabaseError as exc:
        if batched:
            raise  # the transaction is broken: the whole batch goes again, call by call
        return None, exc
    except Exception as exc:  # the caller's answer (an API error)
        answer = None, exc
    if batched and connection.needs_rollback:
        raise _BatchBroken
    return answer


def _batch(calls: list[tuple]) -> list[tuple[object, Exception | None]]:
    """The calls in the current transaction. On PostgreSQL the one statement that is all most
    calls need — a ``next``'s take (when no sweep is due), a ``done`` — is sent for all of
    them at once (one round trip, pipelined); then, in order, each call gets its answer from
    its statement's rows, or runs whole (``master_call``) when that was not enough (no task
    was waiting; the ``done`` changed nothing), or was not one of those."""
    firsts: dict[int, tuple] = {}
    outcomes: list = [None] * len(calls)
    if connection.vendor == "postgresql":
        for i, args in enumerate(calls):
            first = _outcome(_first, args, batched=True)
            if first[1] is not None:
                outcomes[i] = first  # refused before any statement: that is its answer
            elif first[0] is not None:
                firsts[i] = first[0]
        rows = _run_together([(statement, params, many) for
                              *_, statement, params, many in firsts.values()])
        firsts = {i: (*first, result) for (i, first), result in zip(firsts.items(), rows,
                                                                   strict=True)}
    for i, args in enumerate(calls):
        if outcomes[i] is not None:
            continue
        if i not in firsts:
            outcomes[i] = _outcome(master_call, args, batched=True)
            continue
        action, job, trainer, task_id, lease, _statement, _params, _many, result = firsts[i]
        if action == "next":
            outcomes[i] = _outcome(_taken, (job, trainer, lease, result), batched=True)
            if outcomes[i] == (None, None):  # no task was waiting: the whole call
                outcomes[i] = _outcome(master_call, args, batched=True)
        else:
            outcomes[i] = _outcome(_done_after, (job, task_id, trainer, lease, result),
                                   batched=True)
    return outcomes


def _first(uid, token: str, action: str, task_id: int | None, data) -> tuple | None:
    """For a ``next`` (no sweep due) or a ``done``: what it is, and its one statement;
    None for another call. Raises what ``master_call`` would before any statement."""
    if action not in ("next", "done"):
        return None
    job = master_job(uid, token)
    data = data if isinstance(data, dict) else {}
    trainer = _trainer(data)
    if action == "next":
        if _sweep_due(job, claim=False):
            return None
        lease, params = _take_params(job, trainer)
        return action, job, trainer, None, lease, _TAKE, params, True
    lease = _lease_of(data)
    return (action, job, trainer, task_id, lease, _DONE,
            _done_params(job, task_id, trainer, lease), False)


def _run_together(statements: list[tuple[str, list, bool]]) -> list:
    """``_run`` for each ``(statement, params, rows)``, sent together (PostgreSQL's pipeline
    mode: one round trip for all)."""
    if not psycopg.Pipeline.is_supported():  # libpq before 14: one after the other
        return [_run(statement, params, rows=rows) for statement, params, rows in statements]
    if not statements:
        return []
    connection.ensure_connection()
    cursors = []
    try:
        with connection.wrap_database_errors, connection.connection.pipeline():
            for statement, params, rows in statements:
                cursor = psycopg.Cursor(connection.connection)
                cursors.append((cursor, rows))
                cursor.execute(_for("postgresql", statement, "FOR UPDATE SKIP LOCKED"),
                               params, prepare=True)
        with connection.wrap_database_errors:
            return [cursor.fetchall() if rows else cursor.rowcount for cursor, rows in cursors]
    finally:
        for cursor, _rows in cursors:
            cursor.close()


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


def tasks_left(job) -> int:
    """How many tasks the master still has to hand out or hear back about: the open tasks of
    the current pass, and one more while a pass is still to come. 0 once every pass made is
    over and none is to come (or no trainer has asked yet)."""
    last = _last_pass(job)
    if last is None:
        return 0
    open_tasks = Task.objects.filter(job=job, pass_no=last, state__in=(
        Task.State.WAITING, Task.State.LEASED)).count()
    return open_tasks + (1 if last < job.passes - 1 else 0)
