"""What the benchmarks share: the portal in a subprocess, and how a run is stopped.

    from portal import Portal, BenchError, Stopped, log, free_port, handle_signals

``Portal`` runs the embedded portal as ``manage.py runportal`` in a fresh temporary directory
(its ``PADDLECLOUD_VAR_DIR`` is ``tmp/var``), without the configuration a user's shell might
carry, and stops it with SIGTERM (SIGKILL after STOP_TIMEOUT). A benchmark subclasses it for
its own set-up: ``setup()`` runs the ``manage.py`` commands before the portal serves (the base
one migrates), ``extra_env()`` adds to the portal's environment, and ``serve_args`` to the
``runportal`` command (``--no-worker``). See bench/README.md.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project: manage.py
HOST = "127.0.0.1"
# The configuration a user's shell might carry: the benchmarks run the embedded default.
CONFIG_VARS = ("DATABASE_URL", "REDIS_URL", "PADDLECLOUD_BACKEND", "SECRET_KEY", "DEBUG",
               "ALLOWED_HOSTS", "PADDLECLOUD_PFS_ROOT", "PADDLECLOUD_VAR_DIR",
               "DJANGO_SETTINGS_MODULE")

COMMAND_TIMEOUT = 180.0  # one manage.py command (migrate, demo, adddatacenter, adduser)
STARTUP_TIMEOUT = 60.0  # until /healthz answers
STOP_TIMEOUT = 30.0  # after SIGTERM, before SIGKILL
HEALTHZ_TIMEOUT = 5.0  # one GET /healthz while the portal starts
MARKER = "BENCH-JSON "  # the line of a manage.py shell's output that carries its answer


class BenchError(Exception):
    """The set-up or a measurement failed; the message says how."""


class Stopped(BaseException):  # like KeyboardInterrupt: not an error
    """SIGTERM arrived: unwind and clean up."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cell(value, digits: int = 1) -> str:
    """A figure of a benchmark's table: ``digits`` decimals, or "-" when there is none."""
    return "-" if value is None else f"{value:.{digits}f}"


def percent(value) -> str:
    """A share (1.0 = 100 %) for a benchmark's table, or "-"."""
    return "-" if value is None else f"{value * 100:.0f}%"


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def database_url(server: str, name: str) -> str:
    """The URL of the database ``name`` on the PostgreSQL ``server`` (a URL)."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def database_admin(server: str, statement: str) -> None:
    """Run ``statement`` on the PostgreSQL ``server`` as its admin (CREATE, DROP DATABASE)."""
    import psycopg

    with psycopg.connect(database_url(server, "postgres"), autocommit=True) as conn:
        conn.execute(statement)


def in_process_options(parser, *, redis_db: int,
                       database_url: str = "postgres://postgres@127.0.0.1:5432/postgres") -> None:
    """The options of a benchmark that runs Django in its own process: where it makes its
    database, its Redis database, and whether it keeps them."""
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_DATABASE_URL", database_url),
                        help="a PostgreSQL server where the bench may create a database")
    parser.add_argument("--redis-url", default=os.environ.get(
        "BENCH_REDIS_URL", f"redis://127.0.0.1:6379/{redis_db}"),
                        help="a Redis database of the bench's own (emptied)")
    parser.add_argument("--keep", action="store_true", help="keep the database and files")


def in_process_scratch_remove(server: str, database: str, tmp: Path, *, keep: bool) -> None:
    """What a benchmark that runs Django in its own process made: its Redis database emptied,
    its connections closed, then (unless ``keep``) its database dropped and ``tmp`` removed."""
    with contextlib.suppress(Exception):
        from django.core.cache import cache
        from django.db import connections

        cache.clear()
        connections.close_all()
    if keep:
        log(f"kept database {database} and {tmp}")
        return
    database_admin(server, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    shutil.rmtree(tmp, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def run_checked(command: list[str], *, timeout: float, name: str, full_name: str | None = None,
                separator: str = "\n", stderr_max: int | None = None,
                **options) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (text, output captured); BenchError if it takes more than
    ``timeout`` seconds (``name took more than ...``) or exits non-zero (``full_name exited
    N:``, ``separator``, then its standard error, cut to ``stderr_max`` characters)."""
    try:
        result = subprocess.run(command, capture_output=True, text=True,  # noqa: S603
                                timeout=timeout, check=False, **options)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{name} took more than {timeout:.0f} s") from None
    if result.returncode != 0:
        raise BenchError(f"{full_name or name} exited {result.returncode}:{separator}"
                         f"{result.stderr.strip()[:stderr_max]}")
    return result


def handle_signals() -> None:
    """SIGTERM raises Stopped, and Ctrl-C KeyboardInterrupt, even when started in the
    background from a script (which ignores SIGINT)."""

    def on_sigterm(signum, frame):
        raise Stopped

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)


class KeepAlive:
    """One keep-alive HTTP connection (one per thread): a request that meets a connection the
    server closed while idle is sent once more on a new one."""

    def __init__(self, host: str, port: int, timeout: float):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn: http.client.HTTPConnection | None = None

    def send(self, method: str, path: str, data: bytes | None, headers: dict,
             limit: int | None = None) -> tuple[int, object]:
        """The answer's status and its JSON (or its text, cut at ``limit``)."""
        for attempt in (1, 2):
            reused = self.conn is not None
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                raw = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if reused and attempt == 1:
                    continue  # the server closed an idle keep-alive connection: once more
                raise
            except BaseException:
                self.close()
                raise
            if response.will_close:
                self.close()
            try:
                return response.status, json.loads(raw) if raw else None
            except ValueError:
                return response.status, raw.decode(errors="replace")[:limit]
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Portal:
    """The portal in a subprocess, with its own temporary var directory in ``tmp``."""

    config_vars: tuple[str, ...] = CONFIG_VARS  # left out of the portal's environment
    kept_vars: tuple[str, ...] = ()  # ... except these
    serve_args: tuple[str, ...] = ()  # added to ``manage.py runportal`` (e.g. --no-worker)

    def __init__(self, port: int, *, keep: bool, prefix: str = "paddlecloud-bench-"):
        self.port = port
        self.keep = keep
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self.var = self.tmp / "var"
        self.log_path = self.tmp / "portal.log"
        self.process: subprocess.Popen | None = None
        self.base = f"http://{HOST}:{port}"

    # --- what a benchmark changes

    def extra_env(self) -> dict[str, str]:
        """Added to the portal's environment (and its manage.py commands')."""
        return {}

    def setup(self) -> None:
        """The manage.py commands before the portal serves."""
        self.manage("migrate", "--no-input", "-v", "0")

    # --- the rest

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in self.config_vars or k in self.kept_vars}
        env.update(DJANGO_SETTINGS_MODULE="paddlecloud.settings",
                   PADDLECLOUD_VAR_DIR=str(self.var))
        env.update(self.extra_env())
        return env

    def manage(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> str:
        return run_checked([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env(),
                           timeout=timeout, name=f"manage.py {args[0]}",
                           full_name=f"manage.py {' '.join(args)}").stdout

    def django(self, code: str, timeout: float = COMMAND_TIMEOUT, **params) -> object:
        """Run ``code`` in ``manage.py shell`` (the portal's environment); ``P`` holds
        ``params`` (through JSON), and ``answer(value)`` returns ``value``. The output is not
        shown on failure (it may hold a token)."""
        prelude = (f"import json\nP = json.loads({json.dumps(params)!r})\n"
                   f"def answer(value):\n    print({MARKER!r} + json.dumps(value), flush=True)\n")
        output = self.manage("shell", "--no-startup", "--no-imports", "-c", prelude + code,
                             timeout=timeout)
        for line in output.splitlines():
            if line.startswith(MARKER):
                return json.loads(line[len(MARKER):])
        raise BenchError("manage.py shell gave no answer")

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError("the portal has not been started")
        return self.process.pid

    def start(self) -> None:
        """Set up, serve, and wait until /healthz answers."""
        log(f"var dir {self.var}")
        self.setup()
        with self.log_path.open("w") as out:
            self.process = subprocess.Popen(  # noqa: S603 - our own manage.py
                [sys.executable, "manage.py", "runportal", "--host", HOST,
                 "--port", str(self.port), *self.serve_args],
                cwd=ROOT, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)  # we stop it, not Ctrl-C
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"the portal exited {self.process.returncode} at start:\n"
                                 f"{self.log_tail()}")
            if self.healthy():
                log(f"portal up on {self.base} (pid {self.process.pid})")
                return
            time.sleep(0.2)
        raise BenchError(f"/healthz did not answer 200 within {STARTUP_TIMEOUT:.0f} s:\n"
                         f"{self.log_tail()}")

    def healthy(self) -> bool:
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(HOST, self.port, timeout=HEALTHZ_TIMEOUT)
            try:
                conn.request("GET", "/healthz")
                return conn.getresponse().status == 200
            finally:
                conn.close()
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no portal log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log(f"the portal did not stop within {STOP_TIMEOUT:.0f} s of SIGTERM: SIGKILL")
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT)
        if self.process is not None:
            log(f"portal stopped (exit {self.process.returncode})")
        self.stop_leftover_replicas()

    def stop_leftover_replicas(self) -> None:
        """Replicas run in their own sessions and outlive the portal: end those our portal
        started and that still run (by the pids in their runners' pid files)."""
        for pid_file in self.var.glob("jobs/*/run/*.pid"):
            try:
                pid = int(json.loads(pid_file.read_text())["pid"])
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if b"replica_runner.py" in cmdline and str(self.var).encode() in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def cleanup(self) -> None:
        if self.keep:
            log(f"kept {self.tmp} (portal log: {self.log_path})")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def shut_down(self, first: Callable[[], None] | None = None) -> None:
        """Call ``first`` (closing a client), stop the portal and remove the temporary
        directory (unless keep). A second Ctrl-C, or a SIGTERM, must not cut this short."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if first is not None:
                first()
            self.stop()
        finally:
            self.cleanup()
