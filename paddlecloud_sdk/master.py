"""Reading a job's dataset through its master (docs/master.md): the tasks the portal hands this
trainer, pass after pass, until every pass is over.

    from paddlecloud_sdk import master

    for record in master.reader(decode=pickle.loads):   # every record of every task it gets
        train(record)

    with master.reader() as records:                     # an exception in the loop is reported
        for record in records:                           # with the task it happened in
            train(record)

    for task in master.tasks():                          # the same, task by task
        for record in task:
            train(record)
        checkpoint(task["pass"], task["index"])

A job submitted with a ``dataset`` gives its replicas ``PADDLECLOUD_MASTER_URL`` and
``PADDLECLOUD_MASTER_TOKEN``; ``reader()`` and ``tasks()`` take them (and the trainer's index,
``PADDLE_TRAINER_ID``) from the environment unless given. What they do with a task:

- its spans are read lazily, a record at a time, as the caller asks: a whole file (RecordIO,
  or the lines of a text file — told apart by the RecordIO magic number at its start), a
  RecordIO chunk, or a range of records (of a RecordIO file) or lines (of a text file); lines
  come as bytes without their newline (``\\n`` or ``\\r\\n``), ``decode`` turns each record
  into what the caller wants;
- while the caller reads it, a daemon thread renews the lease every third of its length;
- ``done`` is reported once every record of it was read, when the caller asks for what comes
  next: the record after the task's last (``reader()``), or the next task (``tasks()``: so
  after what the loop's body does once a task is read, e.g. a checkpoint). A trainer that dies
  before has the task read again by another: its work is done at least once, so make what it
  commits for a task idempotent (keyed by ``task["pass"]``, ``task["index"]``).
  ``tasks(auto_done=False)``: done when the caller calls ``task.done()``, which is False when
  the lease was lost;
- the task goes back to the master (which hands it to a trainer again) when:

  - an exception is raised in the caller's loop *and* the reader learns of it: in a ``with``
    block, or through ``throw()``: reported ``failed``, with the exception's text (a task
    failing 3 times is set aside);
  - the reader is closed before the end of the task: ``close()``, a ``break`` out of the loop,
    or an exception the reader does not see (a plain ``for`` loop: the generator is closed as
    the loop is left, and cannot tell a ``break`` from an exception): *released*, not counted
    as a failure, the reason saying "given back". A trainer that stops early thus never leaves
    a task half-read behind: another trainer reads it whole (records are delivered at least
    once; a task is done once). With ``tasks()``, a task not done is given back when the
    next task is asked for, or when the iterator of tasks is closed (its lease is renewed
    until then: keep the iterator while reading a task);
  - its spans cannot be read (a missing or damaged file): the exception is raised after the
    report, or with ``on_error="skip"`` logged as a warning, the reader going on with the next
    task;

- a lease the master took back (409 ``lease_lost``: the trainer stalled past its lease, and the
  task went to another trainer) is logged as a warning (``logging``, to stderr unless logging
  is configured), and the reader goes on with the next task without reading the rest;
- ``{"wait": s}``: it sleeps ``s`` seconds and asks again (``tasks(block=False)``: it yields
  ``None`` at once instead, for a trainer that must keep stepping with the others while it has
  no task, as collective training does: ``examples/fit_a_line``); ``{"done": true}`` ends it.

Connections refused or lost, timeouts and 429/502/503/504 answers are retried with backoff for
up to a minute (``retry_seconds``), then ``MasterUnavailable`` is raised; a lease renewal that
fails so is raised at the next record. Any other refusal is a ``MasterError`` with the
portal's message.

Standard library only (as ``env``, ``dataset`` and ``recordio``): a trainer image needs nothing
else to import this module.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import logging
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from paddlecloud_core.errors import causes

from . import env, recordio

URL_VAR = "PADDLECLOUD_MASTER_URL"
TOKEN_VAR = "PADDLECLOUD_MASTER_TOKEN"  # noqa: S105 - the variable's name
TRAINER_VAR = "PADDLE_TRAINER_ID"

RETRY_SECONDS = 60.0  # how long transient failures are retried before giving up
RETRY_FIRST = 0.5  # the first pause between tries, doubled each time …
RETRY_MAX = 8.0  # … up to this
RETRY_STATUSES = frozenset({429, 502, 503, 504})
REQUEST_TIMEOUT = 30.0  # seconds for one request
GIVE_BACK_SECONDS = 10.0  # retrying a give-back: the lease expiring is the backstop
MAX_WAIT = 60.0  # the longest "wait" obeyed at once
REASON_MAX = 500  # characters of a failure's reason (the master keeps as many)
ON_ERROR = ("raise", "skip")

log = logging.getLogger(__name__)


class MasterError(RuntimeError):
    """The master refused a call, or cannot be used (no master for this job)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code


class NoMasterError(MasterError):
    """Nothing tells where the master is: the job has no dataset, or this is no job."""


class MasterUnavailable(MasterError):
    """The master did not answer (connections refused, 502/503 …) for ``retry_seconds``."""


class LeaseLost(MasterError):
    """409 ``lease_lost``: the task is no longer this trainer's (another has it now)."""


class SpanError(ValueError):
    """A span the master sent that cannot be read as it says (unknown kind, a file shorter
    than the span, not RecordIO where a chunk is asked for)."""


_END = object()


class _Stopped(Exception):
    """A renewal's retries were stopped: the task ended meanwhile."""


# --- the protocol --------------------------------------------------------------------------------

def _setting(value: Any, var: str, what: str) -> str:
    if value is None:
        value = os.environ.get(var, "").strip()
        if not value:
            raise NoMasterError(
                f"{var} is not set: this job has no master (submit it with a dataset: "
                f"paddlectl submit --dataset '/pfs/.../part-*', or PaddleJob(dataset=...)), "
                f"or this is not a job's replica; pass {what}= to name a master")
    elif not isinstance(value, str) or not value.strip():
        raise NoMasterError(f"{what} must be a non-empty string, not {value!r}")
    return value.strip()


class Master:
    """One trainer's calls to a job's master: ``next``, ``renew``, ``done`` and ``failed``,
    each a JSON ``POST`` with the job's master token, transient failures retried."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 trainer: int | None = None, *, retry_seconds: float = RETRY_SECONDS,
                 timeout: float = REQUEST_TIMEOUT):
        url = _setting(url, URL_VAR, "url")
        if not url.startswith(("http://", "https://")):
            raise NoMasterError(f"{URL_VAR}={url!r} is not an http:// or https:// URL")
        self.url = url.rstrip("/")
        self._token = _setting(token, TOKEN_VAR, "token")
        if trainer is None:
            trainer = env.trainer_id()  # PADDLE_TRAINER_ID (or the seeds' names); 0 outside
        if isinstance(trainer, bool) or not isinstance(trainer, int) or trainer < 0:
            raise ValueError(f"trainer must be a whole number from 0 (the trainer's "
                             f"{TRAINER_VAR}), not {trainer!r}")
        self.trainer = trainer
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        self._opener = urllib.request.build_opener()

    def __repr__(self) -> str:
        return f"<Master {self.url} trainer {self.trainer}>"

    # -- the calls --

    def next(self) -> dict:
        """``{"task": …}``, ``{"wait": s}`` or ``{"done": true}``."""
        return self.post("/next", {"trainer": self.trainer})

    def renew(self, task_id: int, lease: str, *, stop: threading.Event | None = None) -> dict:
        return self.post(f"/tasks/{task_id}/renew", {"trainer": self.trainer, "lease": lease},
                         stop=stop)

    def done(self, task_id: int, lease: str) -> dict:
        return self.post(f"/tasks/{task_id}/done", {"trainer": self.trainer, "lease": lease})

    def position(self, held: list[dict]) -> dict:
        """Tell the master how many records of each task this trainer holds it has trained
        (``held``: ``{"task", "lease", "read"}``); the pass's position as it is now."""
        return self.post("/position", {"trainer": self.trainer, "held": held})

    def resume(self, position: dict | None, step: int | None) -> dict:
        """Have the master make the pass as ``position`` (a checkpoint's, of ``step``) says;
        None: the dataset from its start."""
        return self.post("/resume", {"trainer": self.trainer, "position": position,
                                     "step": step})

    def failed(self, task_id: int, lease: str, reason: str, *,
               retry_seconds: float | None = None, counted: bool = True) -> dict:
        """Report the task failed (counted: set aside after 3), or (``counted=False``) give
        it back unread or half read."""
        action = "failed" if counted else "release"
        return self.post(f"/tasks/{task_id}/{action}", {
            "trainer": self.trainer, "lease": lease, "reason": reason[:REASON_MAX]},
            retry_seconds=retry_seconds)

    # -- HTTP --

    def post(self, path: str, body: dict, *, retry_seconds: float | None = None,
             stop: threading.Event | None = None) -> dict:
        """The JSON answer of ``POST url+path``; transient failures retried with backoff for
        ``retry_seconds`` (``stop`` set: ``_Stopped`` instead of the next try)."""
        budget = self.retry_seconds if retry_seconds is None else retry_seconds
        deadline = time.monotonic() + budget
        pause = RETRY_FIRST
        data = json.dumps(body).encode()
        while True:
            request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
                self.url + path, data=data, method="POST", headers={
                    "Content-Type": "application/json", "Accept": "application/json",
                    "Authorization": f"Bearer {self._token}",
                    "User-Agent": "paddlecloud-sdk-master"})
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    payload = response.read()
            except urllib.error.HTTPError as exc:
                why = self._refusal(path, exc)  # raises what is not worth another try
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                why = _network_reason(exc)
            else:
                return _answer(f"POST {self.url}{path}", payload)
            left = deadline - time.monotonic()
            if left <= 0:
                raise MasterUnavailable(
                    f"POST {self.url}{path}: the master did not answer for "
                    f"{budget:g} s: {why}")
            wait = min(pause, left)
            log.debug("master %s%s: %s; trying again in %.1f s", self.url, path, why, wait)
            if stop is not None:
                if stop.wait(wait):
                    raise _Stopped
            else:
                time.sleep(wait)
            pause = min(pause * 2, RETRY_MAX)

    def _refusal(self, path: str, exc: urllib.error.HTTPError) -> str:
        """Why a non-2xx answer is worth another try; raises the others as errors."""
        try:
            payload = json.loads(exc.read() or b"null")
        except (ValueError, OSError, http.client.HTTPException):
            payload = None
        finally:
            exc.close()
        code = payload.get("code") if isinstance(payload, dict) else None
        message = payload.get("message") if isinstance(payload, dict) else None
        if exc.code in RETRY_STATUSES:
            return f"{exc.code} {exc.reason}"
        where = f"POST {self.url}{path}"
        if exc.code == 409 and code == "lease_lost":
            raise LeaseLost(message or f"{where}: lease lost", status=409, code=code)
        if exc.code == 404:
            raise MasterError(
                f"{where}: 404: no master for this job with this token (the job was deleted, "
                f"has no dataset, or {TOKEN_VAR} is another job's)", status=404, code=code)
        raise MasterError(f"{where}: {exc.code} {message or exc.reason}", status=exc.code,
                          code=code)


def _answer(where: str, payload: bytes) -> dict:
    try:
        answer = json.loads(payload) if payload else {}
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise MasterError(f"{where}: the master answered {payload[:200]!r}, not a JSON object")
    return answer


def _network_reason(exc: BaseException) -> str:
    """A few words on why a request got no answer."""
    for cause in causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "unknown host"
        if isinstance(cause, ConnectionResetError | http.client.RemoteDisconnected):
            return "connection lost"
        if isinstance(cause, TimeoutError | socket.timeout):
            return "no answer in time"
    return str(exc) or type(exc).__name__


# --- reading spans -------------------------------------------------------------------------------

class _LineIndex:
    """Where every ``STEP``-th line starts, in the text files read lately: a task of lines
    further down a file is found without reading it from the start again."""

    STEP = 4096
    FILES = 16

    def __init__(self):
        self._files: collections.OrderedDict[str, tuple[tuple, dict[int, int]]] = \
            collections.OrderedDict()
        self._lock = threading.Lock()

    def nearest(self, path: str, version: tuple, line: int) -> tuple[int, int]:
        """(line, byte offset) of the known line start at or before ``line``."""
        with self._lock:
            known = self._files.get(path)
            if known is None or known[0] != version:
                return 0, 0
            self._files.move_to_end(path)
            best = line // self.STEP * self.STEP
            while best > 0 and best not in known[1]:
                best -= self.STEP
            return best, known[1].get(best, 0)

    def note(self, path: str, version: tuple, line: int, offset: int) -> None:
        with self._lock:
            known = self._files.get(path)
            if known is None or known[0] != version:
                known = self._files[path] = (version, {})
            known[1][line] = offset
            self._files.move_to_end(path)
            while len(self._files) > self.FILES:
                self._files.popitem(last=False)


_LINES = _LineIndex()


def _line(data: bytes) -> bytes:
    if data.endswith(b"\n"):
        data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
    return data


def _text_lines(path: str, start: int = 0, count: int | None = None) -> Iterator[bytes]:
    """Lines ``start`` … ``start+count-1`` (from 0) of a file, as bytes without their newline;
    a ``SpanError`` when the file has fewer."""
    with open(path, "rb") as file:
        stat = os.fstat(file.fileno())
        version = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        line, offset = _LINES.nearest(path, version, start)
        file.seek(offset)
        while line < start:
            if not file.readline():
                raise SpanError(f"{path} has {line} lines: no line {start}")
            line += 1
            if line % _LINES.STEP == 0:
                _LINES.note(path, version, line, file.tell())
        left = count
        while left is None or left > 0:
            data = file.readline()
            if not data:
                if left is not None:
                    raise SpanError(f"{path} has {line} lines: lines {start} to "
                                    f"{start + count - 1} were asked for")
                return
            yield _line(data)
            line += 1
            if line % _LINES.STEP == 0:
                _LINES.note(path, version, line, file.tell())
            if left is not None:
                left -= 1


def _recordio_records(path: str, start: int, count: int) -> Iterator[bytes]:
    got = 0
    with recordio.Reader(path, start=start, count=count) as records:
        for record in records:
            got += 1
            yield record
    if got < count:
        raise SpanError(f"{path} has {start + got} records: records {start} to "
                        f"{start + count - 1} were asked for")


def _whole(value: Any, span: dict, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpanError(f"span {span!r}: {key} must be a whole number from 0")
    return value


def read_span(span: dict) -> Iterator[bytes]:
    """The records of one span (docs/master.md), as bytes: ``file`` (every record of a
    RecordIO file, or every line of another file), ``chunk`` (the records of the RecordIO chunk
    at ``offset``), ``records`` (records ``start`` … ``start+count-1`` of a RecordIO file, or
    those lines of another). ``/pfs/…`` paths are found where this replica sees PFS
    (``env.pfs_path``)."""
    if not isinstance(span, dict) or not isinstance(span.get("path"), str):
        raise SpanError(f"a span names a path and a kind, not {span!r}")
    kind = span.get("kind")
    path = os.fspath(env.pfs_path(span["path"]))
    if kind == "file":
        if recordio.is_recordio(path):
            with recordio.Reader(path) as records:
                yield from records
        else:
            yield from _text_lines(path)
    elif kind == "chunk":
        offset = _whole(span.get("offset"), span, "offset")
        if not recordio.is_recordio(path):
            raise SpanError(f"{path} is not a RecordIO file: it has no chunk at byte {offset}")
        yield from recordio.read_chunk(path, offset)
    elif kind == "records":
        start = _whole(span.get("start"), span, "start")
        count = _whole(span.get("count"), span, "count")
        if recordio.is_recordio(path):
            yield from _recordio_records(path, start, count)
        else:
            yield from _text_lines(path, start, count)
    else:
        raise SpanError(f"span of {span['path']}: unknown kind {kind!r} (this reader knows "
                        "file, chunk and records: a newer SDK may be needed)")


def read_spans(spans: Iterable[dict], decode: Callable[[bytes], Any] | None = None) -> Iterator:
    """The records of every span in turn, each ``decode``-d when given."""
    for span in spans:
        for record in read_span(span):
            yield record if decode is None else decode(record)


# --- a task --------------------------------------------------------------------------------------

class _Lease:
    """Renews a task's lease from a daemon thread every third of its length until stopped;
    notes a lost lease, or the error that stopped it."""

    def __init__(self, master: Master, task_id: int, lease: str, seconds: float):
        self._master, self._task_id, self._lease = master, task_id, lease
        self.seconds = seconds
        self.lost = False
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"paddlecloud-master-lease-{task_id}")

    def start(self) -> None:
        self._thread.start()

    @property
    def renewing(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(max(self.seconds / 3, 0.05)):
            try:
                answer = self._master.renew(self._task_id, self._lease, stop=self._stop)
            except _Stopped:
                return
            except LeaseLost:
                self.lost = True
                return
            except BaseException as exc:  # raised to the reader at its next record
                self.error = exc
                return
            seconds = answer.get("lease_seconds")
            if isinstance(seconds, int | float) and not isinstance(seconds, bool) \
                    and math.isfinite(seconds) and seconds > 0:
                self.seconds = seconds

    def stop(self) -> None:
        """Stop renewing, and wait until the thread has (a renewal under way ends first)."""
        self._stop.set()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join()


# The tasks this process holds, for a checkpoint to tell the master how far each is trained.
_holding: weakref.WeakSet[Task] = weakref.WeakSet()


def position_report(master: Master | None = None) -> dict:
    """Tell the job's master how many records of each task this trainer holds have been read
    (handed to the trainer: trained, at a checkpoint) — ``paddlecloud_sdk.checkpoint`` does,
    at every save — and return the master's position: ``{"pass", "done", "read"}``."""
    master = master or Master()
    held = [{"task": task.id, "lease": task.info["lease"], "read": task.records_read}
            for task in list(_holding)
            if task.state == "held" and task._master.url == master.url]
    return master.position(held)


def resume(position: dict | None, step: int | None, master: Master | None = None) -> dict:
    """Have the job's master go back to ``position`` (a checkpoint's, of ``step``; None: the
    start of the dataset): ``paddlecloud_sdk.checkpoint.load`` does, before any trainer asks
    for a task."""
    return (master or Master()).resume(position, step)


class Task:
    """A task the master gave this trainer: ``task["id"]``, ``["pass"]``, ``["index"]``,
    ``["spans"]``, ``["lease_seconds"]`` (and as attributes ``id``, ``pass_no``, ``index``,
    ``spans``); iterate over it for its records. Its lease is renewed from when it is given
    until it ends: ``done`` when the next task is asked for after its records have all been
    read (or ``done()``, for a trainer that reads ``spans`` itself), ``failed(reason)``,
    given back, or lost.

    ``state``: ``held``, ``done``, ``failed`` (given back included) or ``lost``.
    """

    def __init__(self, master: Master, info: dict, decode: Callable[[bytes], Any] | None = None,
                 on_error: str = "raise", auto_done: bool = True):
        if not isinstance(info, dict) or not isinstance(info.get("id"), int) \
                or not isinstance(info.get("lease"), str) \
                or not isinstance(info.get("spans"), list):
            raise MasterError(f"the master gave a task this reader does not understand: {info!r}")
        self.info = info
        self._master, self._decode, self._on_error = master, decode, on_error
        self._auto_done = auto_done
        seconds = info.get("lease_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            seconds = 30
        self._lease = _Lease(master, info["id"], info["lease"], seconds)
        self.state = "held"
        # Records of it trained before a restart (the master says, from a checkpoint): not
        # read again, but counted as read.
        skip = info.get("skip", 0)
        self.skip = skip if isinstance(skip, int) and not isinstance(skip, bool) \
            and skip > 0 else 0
        self.records_read = self.skip
        self._reading = False
        self._read_all = False

    # -- what it is --

    id = property(lambda self: self.info["id"])
    pass_no = property(lambda self: self.info.get("pass"))
    index = property(lambda self: self.info.get("index"))
    spans = property(lambda self: self.info["spans"])

    def __getitem__(self, key: str) -> Any:
        return self.info[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.info.get(key, default)

    def __repr__(self) -> str:
        return (f"<Task {self.id} pass {self.pass_no + 1} index {self.index} {self.state}, "
                f"{len(self.spans)} span{'s' if len(self.spans) != 1 else ''}>")

    def _where(self) -> str:
        return f"task {self.id} (pass {self.pass_no + 1}, index {self.index})"

    # -- reading --

    def __iter__(self) -> Iterator:
        return self.records()

    def records(self) -> Iterator:
        """Its records (``decode``-d), once. Once they have all been read, the task is reported
        done when the next task is asked for (unless it came from ``tasks(auto_done=False)``:
        then ``done()`` says it)."""
        if self.state != "held":
            raise RuntimeError(f"{self._where()} is {self.state}: it is no longer this "
                               "trainer's to read")
        if self._reading:
            raise RuntimeError(f"{self._where()}: its records are read once")
        self._reading = True
        return self._records()

    def _records(self) -> Iterator:
        source = read_spans(self.spans, self._decode)
        try:
            for _ in range(self.skip):  # trained before the job was restarted
                if next(source, _END) is _END:
                    self._read_all = True
                    return
            while True:
                if self._lease.lost:
                    self._end_lost("its renewal was refused")
                    return
                if self._lease.error is not None:
                    self._lease.stop()
                    self.state = "failed"
                    raise self._lease.error
                try:
                    record = next(source)
                except StopIteration:
                    self._read_all = True
                    break
                except BaseException as exc:  # the spans cannot be read (or decoded)
                    self._report_failed(_reason(exc), GIVE_BACK_SECONDS)
                    if self._on_error == "raise" or not isinstance(exc, Exception):
                        raise
                    log.warning("paddlecloud_sdk.master: %s failed: %s; going on with the "
                                "next task", self._where(), _reason(exc))
                    return
                self.records_read += 1
                try:
                    yield record
                except GeneratorExit:
                    # A break, close(), or an exception in a loop that does not tell: the
                    # iterator that gave the task gives it back when it moves on or ends.
                    raise
                except BaseException as exc:  # thrown in: the caller's loop failed
                    self._report_failed(_reason(exc), GIVE_BACK_SECONDS)
                    raise
        finally:
            source.close()

    # -- ending --

    def done(self) -> bool:
        """Report it done; False when the lease was lost (a warning says so)."""
        if self.state != "held":
            return self.state == "done"
        self._lease.stop()
        if self._lease.lost:
            self._end_lost("its renewal was refused")
            return False
        try:
            self._master.done(self.id, self.info["lease"])
        except LeaseLost:
            self._end_lost("done was refused")
            return False
        except BaseException:
            self.state = "failed"
            raise
        self.state = "done"
        return True

    def failed(self, reason: str) -> dict | None:
        """Give it back as failed: the master dispatches it again, or sets it aside once it
        has failed 3 times. The master's answer (``{"retried": true}`` or ``{"set_aside":
        true}``), None when the lease was lost already."""
        return self._report_failed(str(reason), None)

    def _report_failed(self, reason: str, retry_seconds: float | None, *,
                       counted: bool = True) -> dict | None:
        if self.state != "held":
            return None
        self._lease.stop()
        self.state = "failed"
        if self._lease.lost:
            self._end_lost("its renewal was refused")
            return None
        try:
            answer = self._master.failed(self.id, self.info["lease"], reason,
                                         retry_seconds=retry_seconds, counted=counted)
        except LeaseLost:
            self._end_lost("failed was refused")
            return None
        except Exception as exc:
            if retry_seconds is None:
                raise
            # Best effort: the lease runs out on its own and the task goes to another trainer.
            log.warning("paddlecloud_sdk.master: %s could not be given back (%s): it goes to "
                        "another trainer once its lease runs out", self._where(), exc)
            return None
        if answer.get("set_aside"):
            log.warning("paddlecloud_sdk.master: %s failed too often: the master set it "
                        "aside (%s)", self._where(), reason)
        return answer

    def _end_lost(self, how: str) -> None:
        self._lease.stop()
        self.state = "lost"
        log.warning("paddlecloud_sdk.master: %s: lease lost (%s): the master gave the task to "
                    "another trainer; going on with the next task", self._where(), how)

    def _start(self) -> None:
        _holding.add(self)
        self._lease.start()

    def _release(self, exc: BaseException | None) -> None:
        """The iterator that gave it moves on (``exc`` None) or ends (``exc``): a task still
        held is done when it moves on after every record was read (``auto_done``), else given
        back."""
        if self.state != "held":
            return
        if exc is None and self._read_all and self._auto_done:
            self.done()
            return
        read = (f"{'all ' if self._read_all else ''}{self.records_read} "
                f"record{'' if self.records_read == 1 else 's'}")
        if exc is None:
            reason = (f"given back: the trainer asked for the next task after reading {read} "
                      "of this one, without reporting it done")
        elif isinstance(exc, GeneratorExit) and self._read_all:
            reason = (f"given back: the trainer stopped after reading {read} of the task, "
                      "without reporting it done (the reader was closed)")
        elif isinstance(exc, GeneratorExit):
            reason = (f"given back: the trainer stopped reading after {read} of the task (the "
                      "reader was closed)")
        else:
            self._report_failed(_reason(exc), GIVE_BACK_SECONDS)
            return
        # Stopped early, not failed: given back without counting against the task.
        self._report_failed(reason, GIVE_BACK_SECONDS, counted=False)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- the iterators -------------------------------------------------------------------------------

def _dispatched(master: Master, decode, on_error: str, auto_done: bool = True,
                block: bool = True) -> Iterator[Task | None]:
    """Every task the master gives, until it says done; where it says wait: a pause, or
    (``block`` False) ``None``."""
    while True:
        answer = master.next()
        if answer.get("done"):
            return
        if "task" in answer:
            task = Task(master, answer["task"], decode, on_error, auto_done)
            task._start()
            try:
                yield task
            except BaseException as exc:  # closed, or an exception thrown in
                task._release(exc)
                raise
            task._release(None)
            continue
        wait = answer.get("wait")
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
            raise MasterError(f"the master answered {answer!r}: neither a task, a wait nor "
                              "done")
        if not block:
            yield None  # nothing for now: the caller asks again when it likes
            continue
        time.sleep(min(float(wait), MAX_WAIT))


def _records(tasks: Iterator[Task]) -> Iterator:
    with contextlib.closing(tasks):
        for task in tasks:
            yield from task.records()


class _Reading:
    """An iterator over a generator that is also a context manager: an exception leaving the
    ``with`` block is thrown into the generator (the task is reported failed with its text);
    the block's end closes it (a task still held is given back)."""

    def __init__(self, master: Master, generator: Iterator):
        self.master = master
        self._generator = generator

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._generator)

    def throw(self, exc: BaseException):
        return self._generator.throw(exc)

    def close(self) -> None:
        self._generator.close()

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback) -> bool:
        if exc is None or isinstance(exc, GeneratorExit):
            self.close()
            return False
        try:
            self._generator.throw(exc)
        except BaseException as raised:
            if raised is not exc:
                raise
        finally:
            self.close()
        return False


class Reader(_Reading):
    """What ``reader()`` returns: an iterator of records, and a context manager."""

    def __repr__(self) -> str:
        return f"<master.Reader {self.master.url} trainer {self.master.trainer}>"


class Tasks(_Reading):
    """What ``tasks()`` returns: an iterator of ``Task`` (and, ``block=False``, of ``None``
    while there is none to have), and a context manager."""

    def __repr__(self) -> str:
        return f"<master.Tasks {self.master.url} trainer {self.master.trainer}>"


def _check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, not {on_error!r}")


def reader(url: str | None = None, token: str | None = None, trainer: int | None = None, *,
           decode: Callable[[bytes], Any] | None = None, on_error: str = "raise",
           retry_seconds: float = RETRY_SECONDS) -> Reader:
    """Every record of every task the master gives this trainer, pass after pass, until it
    says done (see the module's documentation for what is reported when).

    ``url``, ``token``, ``trainer``: default ``$PADDLECLOUD_MASTER_URL``,
    ``$PADDLECLOUD_MASTER_TOKEN``, ``$PADDLE_TRAINER_ID`` (a ``NoMasterError`` naming the
    variable when one is missing). ``decode``: applied to each record (``bytes``).
    ``on_error="skip"``: a task whose spans cannot be read is reported failed and skipped
    instead of raising.
    """
    _check_on_error(on_error)
    master = Master(url, token, trainer, retry_seconds=retry_seconds)
    return Reader(master, _records(_dispatched(master, decode, on_error)))


def tasks(url: str | None = None, token: str | None = None, trainer: int | None = None, *,
          decode: Callable[[bytes], Any] | None = None, on_error: str = "raise",
          auto_done: bool = True, block: bool = True,
          retry_seconds: float = RETRY_SECONDS) -> Tasks:
    """``reader()`` task by task: each ``Task`` yields its records (read lazily); once they are
    all read it is reported done when the next task is asked for; one not read to its end then
    (or when the iterator is closed) is given back (failed). A trainer that reads a task's
    ``spans`` itself, or passes ``auto_done=False`` to decide when its work on a task is
    safe, calls ``task.done()`` (False when the lease was lost).

    ``block=False``: when the master says to wait (every task of the pass is held by another
    trainer; the next pass starts once they are done), ``None`` is yielded at once instead of
    sleeping, and the master is asked again only when the caller asks for the next item (the
    master suggests waiting a second or so between tries). For trainers that must keep in
    step with the others while they have no task, as in collective (all-reduce) training."""
    _check_on_error(on_error)
    master = Master(url, token, trainer, retry_seconds=retry_seconds)
    return Tasks(master, _dispatched(master, decode, on_error, auto_done, block))


__all__ = ["LeaseLost", "Master", "MasterError", "MasterUnavailable", "NoMasterError",
           "Reader", "SpanError", "Task", "Tasks", "position_report", "read_span",
           "read_spans", "reader", "resume", "tasks"]
