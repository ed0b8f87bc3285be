"""VisualDL for one job or several: what a VisualDL session runs inside its replica.

    python -m paddlecloud_sdk.sessions visualdl [--port PORT] JOB [JOB ...]

Each job is one run in VisualDL, named by the job. Its run holds what the job's replicas
reported with ``paddlecloud_sdk.report`` (``node_<i>/metrics.jsonl`` in its output directory):
trainer 0's metrics under their own names (``loss``), so that the same metric of several jobs
is one chart with a curve per job; the other replicas' under their worker's name
(``trainer-1/loss``, ``pserver-0/loss``). The metrics files are converted into a VisualDL log
of the session's own (in its private temporary directory) when the session starts, and again
as they grow, every ``--every`` seconds: every job has its curves there, also one that ended
before VisualDL was thought of, whatever its image held. A value the job reported as nan or
infinite (``null`` in the file) is a NaN in VisualDL.

A job that writes VisualDL logs itself (``visualdl.LogWriter`` into its output directory,
``PADDLE_OUTPUT_DIR``) is shown too: each directory of its output with a ``vdlrecords`` file
is one more run, ``JOB/output/<that directory>``, read where it is.

The jobs' directories are only read (``PADDLE_PFS_HOME``, the owner's home, as the replica
sees it; ``paddlecloud_core.layout`` says where in it). VisualDL listens on ``--host``
(127.0.0.1: the replica's own loopback) at ``session_port()``; the portal's proxy, which only
the owner passes, is the gate (``interactive``). VisualDL has no login of its own: where the
replica has a session token (``session_token``'s variable, as a session the portal starts
does) every request must carry it (``Authorization: token …``, which the proxy adds), so that
nothing else in the replica's network reaches it either. It needs ``visualdl`` (in the image,
or the environment the portal gives its local replicas); the rest of the SDK does not.
"""

from __future__ import annotations

import argparse
import hmac
import importlib.util
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from paddlecloud_core.contract import SESSION_TOKEN_VARIABLE
from paddlecloud_core.layout import (
    JOBS_DIR,
    METRICS_FILE,
    OUTPUT_DIR,
    PSERVER_METRICS_FILE,
    output_rel,
)
from paddlecloud_core.metrics import metric_record
from paddlecloud_core.spec import name_problem

from .. import env
from . import LaunchError, session_port

DEFAULT_EVERY = 2.0  # seconds between two looks at the jobs' files
# VisualDL reads the newest file whose name holds "vdlrecords" in each run's directory.
RECORDS_MARK = "vdlrecords"
RUN_FILE = "vdlrecords.paddlecloud.log"
CHUNK = 4 << 20  # bytes of a metrics file read at once
# The most bytes of records written at once: VisualDL reads its logs as they are appended to,
# and a write no longer than a page is not seen half done.
WRITE_MOST = 4096
DEPTH = 4  # how deep in a job's output VisualDL logs of its own are looked for
CACHE_SECONDS = 2  # how long VisualDL's server keeps an answer before it reads the logs again


def _worker(dirname: str, filename: str) -> str | None:
    """Which worker's metrics a file of the output is (``layout.metrics_relpath``'s names):
    ``trainer-<i>`` or ``pserver-<i>``, None for any other file."""
    index = dirname.removeprefix("node_")
    if index == dirname or not index.isdigit():
        return None
    if filename == METRICS_FILE:
        return f"trainer-{int(index)}"
    if filename == PSERVER_METRICS_FILE:
        return f"pserver-{int(index)}"
    return None


def metric_tag(worker: str, name: str) -> str:
    """A metric's tag in its job's run: trainer 0's by its name, another worker's under it."""
    return name if worker == "trainer-0" else f"{worker}/{name}"


@dataclass
class _Followed:
    """A metrics file read so far: up to ``offset`` (the end of a complete line), of the file
    that was ``inode``."""
    worker: str
    inode: int = 0
    offset: int = 0
    line: int = 0


class RecordsFile:
    """A VisualDL log of the session's own: VisualDL's records (its own protocol buffers and
    framing, as ``visualdl.LogWriter`` writes them), appended by ``flush`` in whole records.
    ``LogWriter`` opens the file again for every record, fifteen times slower: a job's
    hundred thousand steps would keep VisualDL waiting for seconds."""

    def __init__(self, path: Path, display_name: str):
        from visualdl.component.base_component import meta_data, scalar
        from visualdl.writer.record_writer import RecordWriter

        self._scalar = scalar
        self._pending: list[bytes] = []
        self._framer = RecordWriter(self)  # frames each record, then calls self.write
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags, 0o644)
        self._add(meta_data(tag="meta_data_tag", display_name=display_name, step=0,
                            walltime=round(time.time() * 1000)))

    def write(self, framed: bytes) -> None:
        self._pending.append(framed)

    def _add(self, record) -> None:
        self._framer.write(record.SerializeToString())

    def add_scalar(self, tag: str, value: float, step: int, walltime: int) -> None:
        self._add(self._scalar(tag=tag, value=value, step=step, walltime=walltime))

    def flush(self) -> None:
        """What was added, written: whole records, at most WRITE_MOST bytes a write (one
        record longer than that alone), so that VisualDL reading meanwhile finds none cut
        short."""
        batch: list[bytes] = []
        size = 0
        for framed in [*self._pending, b""]:
            if batch and (not framed or size + len(framed) > WRITE_MOST):
                data = b"".join(batch)
                written = 0
                while written < len(data):
                    written += os.write(self._fd, data[written:])
                batch, size = [], 0
            if framed:
                batch.append(framed)
                size += len(framed)
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


class JobRun:
    """One job's run: its metrics files converted into a VisualDL log under ``runs/<job>``,
    and its own VisualDL logs linked below it, each ``sync()`` adding what is new."""

    def __init__(self, job: str, home: Path, runs: Path):
        self.job = job
        self.output = home.joinpath(*output_rel(job))
        self.dir = runs / job
        self.dir.mkdir(parents=True, exist_ok=True)
        self._followed: dict[Path, _Followed] = {}
        self._writer = None
        self._linked: set[Path] = set()

    def sync(self) -> int:
        """Add what the job's files hold that the run has not yet; the number of scalars
        written."""
        written = 0
        for path, worker in self._metrics_files():
            followed = self._followed.setdefault(path, _Followed(worker))
            written += self._convert(path, followed)
        self._link_own_logs()
        if written:
            self._writer.flush()
        return written

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def _metrics_files(self) -> Iterator[tuple[Path, str]]:
        try:
            nodes = sorted(os.scandir(self.output), key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):  # no output yet, or none at all
            return
        for node in nodes:
            if not node.is_dir(follow_symlinks=False):
                continue
            for filename in (METRICS_FILE, PSERVER_METRICS_FILE):
                worker = _worker(node.name, filename)
                if worker is not None:
                    yield Path(node.path, filename), worker

    def _convert(self, path: Path, followed: _Followed) -> int:
        try:
            file = path.open("rb")
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            return 0
        written = 0
        with file:
            status = os.fstat(file.fileno())
            if status.st_ino != followed.inode or status.st_size < followed.offset:
                # Another file than the one read so far (the job's output made anew): from
                # its beginning.
                followed.inode, followed.offset, followed.line = status.st_ino, 0, 0
            file.seek(followed.offset)
            while True:
                chunk = file.read(CHUNK)
                end = chunk.rfind(b"\n") + 1  # a last line without its newline: not yet
                if not end:
                    break
                lines = chunk[:end].split(b"\n")[:-1]
                for line in lines:
                    record = metric_record(followed.line, line)
                    followed.line += 1
                    if record is not None:
                        written += self._write(followed.worker, record)
                followed.offset += end
                file.seek(followed.offset)
                if len(chunk) < CHUNK:
                    break
        return written

    def _write(self, worker: str, record: dict) -> int:
        if self._writer is None:
            self._writer = RecordsFile(self.dir / RUN_FILE, self.job)
        moment = record["time"] if record["time"] is not None else time.time()
        walltime = round(moment * 1000)
        for name, value in record["metrics"].items():
            self._writer.add_scalar(metric_tag(worker, name),
                                    math.nan if value is None else float(value),
                                    record["step"], walltime)
        return len(record["metrics"])

    def _link_own_logs(self) -> None:
        """Each VisualDL log the job wrote in its output (a regular file whose name holds
        ``vdlrecords``, at most DEPTH directories deep), linked at the same place below
        ``runs/<job>/output``: a run of its own, read where it is."""
        if not self.output.is_dir():
            return
        top = len(self.output.parts)
        for root, dirs, files in os.walk(self.output):  # symbolic links are not followed
            here = Path(root)
            if len(here.parts) - top >= DEPTH:
                dirs.clear()
            for filename in files:
                source = here / filename
                if RECORDS_MARK not in filename or source in self._linked:
                    continue
                if not source.is_file() or source.is_symlink():
                    continue
                link = self.dir / OUTPUT_DIR / source.relative_to(self.output)
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(source)
                self._linked.add(source)


class Runs:
    """The runs of a VisualDL session: one ``JobRun`` per job, in a directory of its own."""

    def __init__(self, jobs: list[str], home: Path, runs: Path):
        self.path = runs
        self.jobs = [JobRun(job, home, runs) for job in jobs]

    @property
    def logdirs(self) -> list[str]:
        """Where VisualDL reads, relative to ``path`` so that runs are named by their jobs."""
        return [run.job for run in self.jobs]

    def sync(self) -> int:
        return sum(run.sync() for run in self.jobs)

    def follow(self, every: float, stop: threading.Event) -> None:
        """``sync()`` every ``every`` seconds until ``stop`` is set; a failure is told on
        stderr and the next look tries again."""
        while not stop.wait(every):
            try:
                self.sync()
            except OSError as error:
                print(f"visualdl session: reading the jobs' files: {error}", file=sys.stderr,
                      flush=True)

    def close(self) -> None:
        for run in self.jobs:
            run.close()


def token_required(app, token: str):
    """``app`` answering only requests that carry ``Authorization: token <token>``; any
    other gets a 403."""
    expected = f"token {token}".encode()

    def checked(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"this VisualDL answers the portal's proxy only\n"]

    return checked


def scalars_first(app, scalars: str):
    """``app`` sending a browser that comes to ``/`` (where the portal's proxy lands it) to
    ``scalars``: VisualDL's own landing picks any of its tabs, the empty graph one among them."""

    def answered(environ, start_response):
        if environ.get("PATH_INFO", "") in ("", "/"):
            start_response("302 Found", [("Location", scalars), ("Content-Length", "0")])
            return [b""]
        return app(environ, start_response)

    return answered


def serialized_api(app, prefix: str):
    """``app`` answering the requests below ``prefix`` (VisualDL's API, whose log readers are
    not thread-safe: its own server answers one request at a time) one at a time, and its
    pages and scripts (a page asks for some two hundred) side by side."""
    lock = threading.Lock()

    def answered(environ, start_response):
        if not environ.get("PATH_INFO", "").startswith(prefix):
            return app(environ, start_response)
        with lock:  # the whole answer made while held (VisualDL's API answers are small)
            answer = app(environ, start_response)
            try:
                return [b"".join(answer)]
            finally:
                if hasattr(answer, "close"):
                    answer.close()

    return answered


def serve(runs: Runs, host: str, port: int, every: float, token: str = "") -> None:
    """VisualDL's own application on ``host:port`` (its pages and API, no telemetry), reading
    ``runs``, until SIGTERM or SIGINT; with ``token``, only for requests that carry it."""
    from visualdl.server.app import create_app
    from visualdl.server.args import ParseArgs
    from werkzeug.serving import make_server

    os.chdir(runs.path)  # the runs are named by their directories, relative to here
    args = ParseArgs(logdir=runs.logdirs, host=host, port=port, telemetry=False,
                     cache_timeout=CACHE_SECONDS, language="en")
    app = scalars_first(serialized_api(create_app(args), args.public_path + "/api/"),
                        args.public_path + "/scalar")
    wsgi = token_required(app, token) if token else app
    server = make_server(host, port, wsgi, threaded=True)
    server.daemon_threads = True
    stop = threading.Event()
    follower = threading.Thread(target=runs.follow, args=(every, stop), daemon=True,
                                name="visualdl-runs")

    def ended(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, ended)
    signal.signal(signal.SIGINT, ended)
    follower.start()
    print(f"VisualDL for {', '.join(runs.logdirs)} on http://{host}:{port}/", flush=True)
    try:
        server.serve_forever()
    finally:
        stop.set()
        follower.join()
        server.server_close()


def _job(text: str) -> str:
    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"job name {text!r}: {problem}")
    return text


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m paddlecloud_sdk.sessions visualdl",
        description="VisualDL for the given jobs of the owner of this replica's home: one run "
                    "per job, from what it reported and the VisualDL logs it wrote.")
    parser.add_argument("jobs", nargs="+", type=_job, metavar="JOB",
                        help="a job's name (its directory in the home: jobs/JOB)")
    parser.add_argument("--port", type=int, default=None,
                        help="the port VisualDL listens on (default: the session's, "
                             "PADDLECLOUD_SESSION_PORT)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address it listens on (default 127.0.0.1: the replica's "
                             "loopback, which the portal's proxy reaches)")
    parser.add_argument("--home", type=Path, default=None,
                        help="the jobs' owner's home as this replica sees it (default "
                             "PADDLE_PFS_HOME)")
    parser.add_argument("--every", type=float, default=DEFAULT_EVERY,
                        help="seconds between two looks at the jobs' files for what is new "
                             f"(default {DEFAULT_EVERY:g})")
    return parser


def main(args: list[str]) -> int:
    """Serve VisualDL for the jobs ``args`` name (``parser()``) until stopped; then the
    process ends (VisualDL's profiler reader leaves a thread behind that never ends, and is
    no daemon: once the runs are closed and their directory removed, nothing is left to do)."""
    options = parser().parse_args(args)
    port = session_port() if options.port is None else options.port
    if not 0 < port < 65536:
        parser().error(f"--port: a TCP port from 1 to 65535, got {port}")
    if not options.every > 0:
        parser().error(f"--every: a number of seconds > 0, got {options.every:g}")
    home = options.home or env.pfs_home()
    if home is None:
        parser().error("--home: no home given, and PADDLE_PFS_HOME is not set (outside a job)")
    if not (home / JOBS_DIR).is_dir():
        parser().error(f"--home: {home} has no {JOBS_DIR}/ directory: not a PaddleCloud home")
    if importlib.util.find_spec("visualdl") is None:
        raise LaunchError("VisualDL is not installed in this image: open VisualDL with an "
                          "image that has it (pip install 'visualdl>=2.5.3')")
    token = os.environ.get(SESSION_TOKEN_VARIABLE, "").strip()
    place = tempfile.mkdtemp(prefix="visualdl-runs-")
    runs = Runs(list(dict.fromkeys(options.jobs)), home, Path(place))
    status = 0
    try:
        runs.sync()
        serve(runs, options.host, port, options.every, token)
    except SystemExit:  # stopped (SIGTERM, SIGINT)
        pass
    except Exception:
        traceback.print_exc()
        status = 1
    finally:
        runs.close()
        shutil.rmtree(place, ignore_errors=True)
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)
