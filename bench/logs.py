"""Benchmark: N WebSocket followers of one worker's log while it is written at 1 000 lines/s.

    .venv/bin/python bench/logs.py [--followers 10,100,500] [--seconds 10] [--rate 1000]
                                   [--redis [--portals 1,2]] [--json FILE] [--port P] [--keep]

It starts the portal (``manage.py migrate``, ``adddatacenter``, ``adduser``, then ``manage.py
runportal --no-worker``: nothing here needs Celery) in a fresh temporary PADDLECLOUD_VAR_DIR,
on the embedded default (SQLite, the in-process channel layer and cache) or, with --redis,
with REDIS_URL (channels-redis, the Redis cache) and DATABASE_URL kept from the environment.
A ``manage.py shell`` creates one job per round, with one trainer replica in state running
(no process runs it), an empty log file where the portal looks for it, and a session for the
user, since the WebSockets authenticate by the session cookie.

Each round: N followers in this process (one event loop, the ``websockets`` client) open
``/ws/jobs/<job>/logs/?worker=trainer-0``, connecting in waves. Once all are connected, 10
warm-up lines are written; once every follower has them (its consumer is open and following),
a thread appends ``--rate`` lines/s to the log for ``--seconds`` (10 lines every 10 ms, paced
by the monotonic clock), taking the time of each line just before it is written. Then the
replica is marked succeeded, and every follower must get ``{"type": "end"}`` with every line.
Each follower checks the numbering of every batch (a gap is lost lines, a repeat duplicated
ones) and takes each line's latency: the time its batch was received minus the time the line
was written (both this process's monotonic clock).

With ``--portals 1,2`` (needs --redis) the same rounds run first with every follower on one
portal process, then spread over two (follower i on process i mod P, as a load balancer
would), two ``runportal --no-worker`` processes on two ports sharing the database, Redis and
the var directory. Each round then also gives the lines delivered per second by each portal
process (to its followers), and the summary the ratio of 2 processes' total to 1's.

The targets (the dashboard issue, then issue 21): log lines reach the browser within a second
of being written, the ratio printed is p99 / 1000 ms; 500 followers on two processes with p99
<= 1 s and nothing lost or duplicated; two processes deliver >= 1.7x what one does. Lost or
duplicated lines, a follower without its ``end``, or an error exit 1. The clients share the
machine with the portal, so the latency includes the clients' own processing. See
bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # portal.py, when this script is not run as bench/logs.py
    sys.path.insert(0, str(BENCH))
from portal import (  # noqa: E402
    HOST,
    BenchError,
    Portal,
    Stopped,
    cell,
    free_port,
    handle_signals,
    log,
    percent,
)

DATACENTER = "datacenter1"
USERNAME = "benchlogs"
JOB_PREFIX = "benchlogs-"
WORKER = "trainer-0"
KEPT_WITH_REDIS = ("DATABASE_URL", "REDIS_URL")
# The first line of a record in the portal's log: uvicorn's, or paddlecloud/settings.py's format.
LOG_RECORD = re.compile(r"([A-Z]+):\s|\d{4}-\d\d-\d\d [\d:,.]+ ([A-Z]+) ")

LINE_BYTES = 80  # with its newline
CHUNK_SECONDS = 0.010  # the writer appends every 10 ms
TARGET_MS = 1000.0  # "within a second of being written"
CONNECT_TIMEOUT = 60.0  # one follower's handshake
WARMUP_LINES = 10  # written first; the timed lines start once every follower has them
WARMUP_TIMEOUT = 120.0
SCALE_TARGET = 1.7  # 2 portal processes deliver at least this many times what 1 does
DELIVERED_ALL = 0.95  # a round that delivered this share of what was written kept up
TRACED = 3  # followers per round whose every message --trace records
PORTAL_LOG_SECONDS = 1.0  # after a round, before reading what the portal logged


# --- the portal --------------------------------------------------------------------------------


class LogsPortal(Portal):
    """The portal without its Celery worker (the job is made in the database, and the
    reconciler would fail a replica that has no process), with a user, a datacenter and one
    running job per round, made by ``manage.py shell``."""

    serve_args = ("--no-worker",)

    def __init__(self, port: int, *, keep: bool, redis: bool, rounds: int):
        super().__init__(port, keep=keep, prefix="paddlecloud-bench-logs-")
        self.redis = redis
        self.kept_vars = KEPT_WITH_REDIS if redis else ()
        self.rounds = rounds
        self.session = ""
        self.jobs: list[dict] = []  # per round: name, path (the log), replica (its pk)
        self.password = os.urandom(12).hex()  # the user's; nobody logs in with it

    def setup(self) -> None:
        if self.redis:
            used = [k for k in KEPT_WITH_REDIS if os.environ.get(k)]
            log(f"--redis: keeping {', '.join(used) or 'nothing (neither is set)'}")
            if not os.environ.get("REDIS_URL"):
                raise BenchError("--redis needs REDIS_URL (channels-redis) in the environment")
        super().setup()
        self.manage("adddatacenter", DATACENTER, "--description", "bench/logs.py")
        self.manage("adduser", USERNAME, "--password-env", "BENCH_PASSWORD",
                    "--datacenter", DATACENTER)
        answer = self.django(SETUP_CODE, user=USERNAME, datacenter=DATACENTER,
                             prefix=JOB_PREFIX, names=[f"{JOB_PREFIX}{i}"
                                                       for i in range(self.rounds)])
        self.session, self.jobs = answer["session"], answer["jobs"]

    def extra_env(self) -> dict[str, str]:
        return {"BENCH_PASSWORD": self.password}

    def end_replica(self, job: dict) -> None:
        self.django(END_CODE, replica=job["replica"])

    _log_offset = 0

    def new_errors(self) -> list[str]:
        """The errors the portal logged since the last call: for each, its first line and
        the last line of its traceback (the exception)."""
        try:
            with self.log_path.open("rb") as out:
                out.seek(self._log_offset)
                text = out.read()
        except OSError:
            return []
        text = text[:text.rfind(b"\n") + 1]  # whole lines only
        self._log_offset += len(text)
        errors, current = [], None
        for line in text.decode(errors="replace").splitlines():
            record = LOG_RECORD.match(line)
            if record:  # a record starts: uvicorn's "LEVEL:  ...", or the portal's format
                if current:
                    errors.append(" / ".join(current))
                error = (record.group(1) or record.group(2)) in ("ERROR", "CRITICAL")
                current = [line.strip()] if error else None
            elif current is not None and line and not line[0].isspace() and \
                    not line.startswith(("Traceback", "During handling", "The above")):
                current[1:] = [line.strip()]  # the exception, at the end of a traceback
        if current:
            errors.append(" / ".join(current))
        return errors


class MorePortal(LogsPortal):
    """One more portal process beside ``first``: the same var directory, database, Redis and
    environment; its own port and log. The first one sets up and cleans up."""

    def __init__(self, first: LogsPortal, port: int):
        super().__init__(port, keep=True, redis=first.redis, rounds=first.rounds)
        self.tmp.rmdir()  # made by Portal.__init__; this one uses the first one's
        self.tmp, self.var, self.first = first.tmp, first.var, first
        self.log_path = first.tmp / f"portal-{port}.log"
        self.session, self.jobs = first.session, first.jobs

    def setup(self) -> None:
        pass

    def extra_env(self) -> dict[str, str]:
        return self.first.extra_env()

    def cleanup(self) -> None:
        pass


# The set-up, in the portal's own environment (SQLite or PostgreSQL alike).
SETUP_CODE = """
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from accounts.models import Datacenter
from jobs.files import home_dir, output_dir, output_prepare
from paddlecloud_core.layout import log_relpath
from jobs.models import Job, Replica

user = get_user_model().objects.get(username=P["user"])
dc = Datacenter.objects.get(name=P["datacenter"])
Job.objects.filter(owner=user, name__startswith=P["prefix"]).delete()  # an earlier run's
now = timezone.now()
jobs = []
for name in P["names"]:
    job = Job.objects.create(owner=user, datacenter=dc, name=name, state="running",
                             package=f"/pfs/{dc.name}/home/{user.username}/bench",
                             entry="bench/logs.py writes the log", image=dc.image,
                             trainers=1, started_at=now)
    replica = Replica.objects.create(job=job, role="trainer", index=0, state="running",
                                     started_at=now, backend_ref="bench")
    home_dir(job).mkdir(parents=True, exist_ok=True)  # as a user's first upload would
    output_prepare(job)
    path = output_dir(job) / log_relpath("trainer", 0)  # the bench writes it as a trainer
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    jobs.append({"name": name, "path": str(path), "replica": replica.pk})
client = Client()
client.force_login(user)
answer({"session": client.cookies["sessionid"].value, "jobs": jobs})
"""

END_CODE = """
from django.utils import timezone
from jobs.models import Replica

done = Replica.objects.filter(pk=P["replica"]).update(state="succeeded", exit_code=0,
                                                      finished_at=timezone.now())
answer({"updated": done})
"""


# --- the portal process: memory and CPU --------------------------------------------------------


class CpuLimit:
    """A cgroup that holds a portal process to ``cores`` of CPU time while a round's lines are
    written and followed (cgroup v2's ``cpu.max``, else v1's CFS quota; the followers connect
    without it): each process as it would run with that share of a larger machine's cores, so
    that 1 and 2 saturated processes can be compared on a machine too small to give each a
    core and the followers theirs."""

    PERIOD_US = 100_000

    def __init__(self, name: str, cores: float):
        self.quota = max(1000, int(cores * self.PERIOD_US))
        unified = Path("/sys/fs/cgroup")
        self.v2 = (unified / "cgroup.controllers").exists()
        self.path = unified / name if self.v2 else unified / "cpu" / name
        try:
            self.path.mkdir()
            if not self.v2:
                (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            self.release()
        except OSError as exc:
            raise BenchError(f"--portal-cpu: cannot make a cgroup with a CPU limit "
                             f"({exc}); it needs root and the cpu controller") from None

    def hold(self) -> None:
        self._set(self.quota)

    def release(self) -> None:
        self._set(None)

    def _set(self, quota: int | None) -> None:
        if self.v2:
            (self.path / "cpu.max").write_text(f"{quota or 'max'} {self.PERIOD_US}")
        else:
            (self.path / "cpu.cfs_quota_us").write_text(str(quota or -1))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Its processes (if any are left) back to the parent, then the cgroup."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (self.path.parent / "cgroup.procs").write_text(pid)
            self.path.rmdir()


class ProcessStats:
    """The portal's peak RSS (VmHWM, reset per round through clear_refs where allowed) and
    CPU time (utime + stime from /proc/<pid>/stat)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.per_round = True
        self.ticks = os.sysconf("SC_CLK_TCK")

    def reset_peak(self) -> None:
        if not self.per_round:
            return
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as clear:
                clear.write("5")
        except OSError as exc:
            log(f"cannot reset the portal's VmHWM ({exc}): lifetime peaks from here on")
            self.per_round = False

    def peak_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        raise BenchError(f"no VmHWM in /proc/{self.pid}/status")

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.ticks  # utime, stime


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def cpu_stalled_seconds() -> float | None:
    """How long, in all, some runnable task waited for a CPU (/proc/pressure/cpu, "some"):
    over a round, how much others (or we) were short of cores. None without PSI."""
    try:
        with open("/proc/pressure/cpu") as pressure:
            some = pressure.readline().split()
        return int(dict(part.split("=") for part in some[1:])["total"]) / 1e6
    except (OSError, KeyError, ValueError):
        return None


# --- the writer --------------------------------------------------------------------------------


class Writer(threading.Thread):
    """Appends ``total`` numbered lines of LINE_BYTES to ``path``: the first ``warmup`` at once
    (``warm_up()``), the rest at ``rate`` lines/s, in chunks every CHUNK_SECONDS (the thread),
    recording in ``times[i]`` (monotonic) when line i was written (just before the write: the
    latency measured includes the write)."""

    def __init__(self, path: Path, *, rate: int, total: int, warmup: int):
        super().__init__(name="writer", daemon=True)
        self.path, self.rate, self.total, self.warmup = path, rate, total, warmup
        self.times = np.full(total, np.nan)
        self.per_chunk = max(1, round(rate * CHUNK_SECONDS))
        width = max(6, len(str(total - 1)))
        self.data = [self.line(i, width) for i in range(total)]
        self.stop = threading.Event()
        self.started_at = self.ended_at = 0.0
        self.max_behind = 0.0  # how late the writer was against its schedule, at most
        self.error: BaseException | None = None

    @staticmethod
    def line(number: int, width: int) -> bytes:
        """``line 000123 `` and then what a trainer prints (numbers that vary, so the
        line compresses about as well as a real log: permessage-deflate costs what it would),
        cut or padded to LINE_BYTES."""
        x = (number * 2654435761) % 2**32  # a fixed scramble of the line number
        text = (f"line {number:0{width}d} pass {number // 5000} batch {number % 5000:4d} "
                f"cost {x % 100000 / 1000:7.3f} acc {x % 9973 / 9973:.4f} "
                f"lr {1 + x % 97 / 10:.2f}e-3 {x:08x}")
        return (text[:LINE_BYTES - 1].ljust(LINE_BYTES - 1) + "\n").encode()

    def warm_up(self) -> None:
        self.times[:self.warmup] = time.monotonic()
        with open(self.path, "ab") as out:
            out.write(b"".join(self.data[:self.warmup]))

    def run(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                self.write_all(fd)
            finally:
                os.close(fd)
        except BaseException as exc:  # reported by the round
            self.error = exc

    def write_all(self, fd: int) -> None:
        interval = self.per_chunk / self.rate
        self.started_at = start = time.monotonic()
        for k, first in enumerate(range(self.warmup, self.total, self.per_chunk)):
            if self.stop.is_set():
                return
            due = start + k * interval
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
                now = time.monotonic()
            self.max_behind = max(self.max_behind, now - due)
            end = min(first + self.per_chunk, self.total)
            self.times[first:end] = now
            chunk = b"".join(self.data[first:end])
            while chunk:  # a regular file takes it all at once; to be sure
                chunk = chunk[os.write(fd, chunk):]
        self.ended_at = time.monotonic()


# --- the followers -----------------------------------------------------------------------------


@dataclass
class Follower:
    """One WebSocket's account of what it received."""

    index: int
    expected: int = 0  # the next line number it should get
    lost: int = 0
    duplicated: int = 0
    unwritten: int = 0  # lines received before they were written, or past the end (bugs)
    wrong_text: int = 0  # batches whose first or last line is not the line of its number
    messages: int = 0
    last_received: float = 0.0
    connected: bool = False
    end_next: int | None = None  # from {"type": "end"}
    close_code: int | None = None
    error: str | None = None
    latencies: list[np.ndarray] = field(default_factory=list, repr=False)
    trace: list[tuple[float, int, int]] | None = field(default=None, repr=False)

    def batch(self, received: float, message: dict, times: np.ndarray, width: int,
              warmup: int) -> None:
        """Account for one ``lines`` message; the latency of lines from ``warmup`` on."""
        first, nxt, lines = message["first"], message["next"], message["lines"]
        self.messages += 1
        self.last_received = received
        if self.trace is not None:
            self.trace.append((received, first, nxt))
        if nxt != first + len(lines):
            self.error = self.error or f"a batch with first={first}, next={nxt} has " \
                                       f"{len(lines)} lines"
        if lines and (not lines[0].startswith(f"line {first:0{width}d} ") or
                      not lines[-1].startswith(f"line {first + len(lines) - 1:0{width}d} ")):
            self.wrong_text += 1
        if first > self.expected:
            self.lost += first - self.expected
        elif first < self.expected:
            self.duplicated += min(nxt, self.expected) - first
        start = max(first, self.expected)
        if nxt > start:
            if nxt > len(times):
                self.unwritten += nxt - max(start, len(times))
            written = times[start:min(nxt, len(times))]
            if np.isnan(written).any():
                self.unwritten += int(np.isnan(written).sum())
            timed = times[max(start, warmup):min(nxt, len(times))]
            timed = timed[~np.isnan(timed)]
            if timed.size:
                self.latencies.append(received - timed)
            self.expected = nxt


class Round:
    """N followers of one job's log while the writer writes it."""

    def __init__(self, portals: list[LogsPortal], job: dict, followers: int, *, rate: int,
                 seconds: float, wave: int, compression: bool, end_timeout: float,
                 stats: list[ProcessStats], traced: int = 0,
                 limits: list[CpuLimit] | None = None):
        self.portals, self.job, self.n = portals, job, followers
        self.portal = portals[0]  # sets up, ends the replica
        self.warmup = WARMUP_LINES
        self.rate, self.total = rate, WARMUP_LINES + int(rate * seconds)
        self.timed = self.total - self.warmup  # the lines whose latency counts
        self.wave, self.compression, self.end_timeout = wave, compression, end_timeout
        self.stats = stats
        self.limits = limits or []  # held while the lines are written and followed
        self.writer = Writer(Path(job["path"]), rate=rate, total=self.total,
                             warmup=self.warmup)
        self.width = max(6, len(str(self.total - 1)))
        traced_ones = {round(k * (followers - 1) / max(1, traced - 1)) for k in range(traced)}
        self.followers = [Follower(i, trace=[] if i in traced_ones else None)
                          for i in range(followers)]
        self.path = f"/ws/jobs/{job['name']}/logs/?worker={WORKER}&datacenter={DATACENTER}"
        self.all_connected = asyncio.Event()
        self.portal_errors: list[str] = []
        self.connecting = 0

    def portal_of(self, f: Follower) -> LogsPortal:
        """Follower i is served by portal i mod P (a load balancer's round robin)."""
        return self.portals[f.index % len(self.portals)]

    async def follow(self, f: Follower, gate: asyncio.Semaphore) -> None:
        headers = {"Cookie": f"sessionid={self.portal.session}"}
        portal = self.portal_of(f)
        try:
            async with gate:
                ws = await connect(f"ws://{HOST}:{portal.port}{self.path}", origin=portal.base,
                                   additional_headers=headers,
                                   compression="deflate" if self.compression else None,
                                   open_timeout=CONNECT_TIMEOUT, max_size=None, proxy=None)
            f.connected = True
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            detail = f"{exc.response.status_code}" if isinstance(exc, InvalidStatus) else ""
            f.error = f"connect failed: {type(exc).__name__} {detail}{exc}"
            return
        finally:
            self.connecting -= 1
            if self.connecting == 0:
                self.all_connected.set()
        times = self.writer.times
        try:
            async with ws:
                while True:
                    try:
                        raw = await ws.recv()
                    except ConnectionClosed as exc:
                        f.close_code = exc.rcvd.code if exc.rcvd else None
                        return
                    received = time.monotonic()
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == "lines":
                        f.batch(received, message, times, self.width, self.warmup)
                    elif kind == "end":
                        f.end_next = message["next"]
                    else:
                        f.error = f.error or f"unexpected message: {str(message)[:200]}"
        except (OSError, ConnectionClosed) as exc:
            f.error = f.error or f"{type(exc).__name__}: {exc}"

    async def warm_up(self) -> None:
        """Write the first lines and wait until every follower has them: its consumer is open
        (accepting the handshake comes before the job is looked up) and following."""
        self.writer.warm_up()
        began = time.monotonic()
        while time.monotonic() - began < WARMUP_TIMEOUT:
            waiting = [f for f in self.followers
                       if f.connected and f.expected < self.warmup and f.error is None
                       and f.close_code is None]
            if not waiting:
                log(f"  every follower had the {self.warmup} warm-up lines "
                    f"{time.monotonic() - began:.2f} s after they were written")
                return
            await asyncio.sleep(0.05)
        log(f"  {len(waiting)} followers still lack the warm-up lines after "
            f"{WARMUP_TIMEOUT:.0f} s: writing anyway")

    async def run(self) -> dict:
        log(f"{self.n} followers of {self.job['name']}: connecting, {self.wave} at a time")
        gate = asyncio.Semaphore(self.wave)
        self.connecting = self.n
        tasks = [asyncio.create_task(self.follow(f, gate)) for f in self.followers]
        began = time.monotonic()
        await self.all_connected.wait()
        connect_s = time.monotonic() - began
        failed = [f for f in self.followers if not f.connected]
        log(f"  connected {self.n - len(failed)} in {connect_s:.2f} s"
            + (f"; {len(failed)} failed, e.g. {failed[0].error}" if failed else ""))
        await self.warm_up()
        for stats in self.stats:
            stats.reset_peak()
        cpu0 = [stats.cpu_seconds() for stats in self.stats]
        own0, wall0 = own_cpu_seconds(), time.monotonic()
        stalled0, load = cpu_stalled_seconds(), os.getloadavg()[0]
        for limit in self.limits:
            limit.hold()
        self.writer.start()
        try:
            while self.writer.is_alive():
                await asyncio.sleep(0.05)
            cpu1 = [stats.cpu_seconds() for stats in self.stats]
            own1, wall1 = own_cpu_seconds(), time.monotonic()
            stalled1 = cpu_stalled_seconds()
            if self.writer.error is not None:
                raise BenchError(f"the writer failed: {self.writer.error!r}")
            written_s = self.writer.ended_at - self.writer.started_at
            log(f"  wrote {self.timed} lines in {written_s:.2f} s (at most "
                f"{self.writer.max_behind * 1000:.0f} ms behind schedule); marking "
                f"{WORKER} succeeded")
            await asyncio.to_thread(self.portal.end_replica, self.job)
            ended_at = time.monotonic()
            _, pending = await asyncio.wait(tasks, timeout=self.end_timeout)
            end_s = time.monotonic() - ended_at
        finally:
            for limit in self.limits:
                limit.release()
            self.writer.stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        log(f"  {self.n - len(pending)} of {self.n} followers ended within {end_s:.1f} s of "
            f"the replica's end" + (f" ({len(pending)} still open)" if pending else ""))
        await asyncio.sleep(PORTAL_LOG_SECONDS)  # the portal's disconnect handlers run
        self.portal_errors = [e for portal in self.portals
                              for e in await asyncio.to_thread(portal.new_errors)]
        if self.portal_errors:
            log(f"  the portal logged {len(self.portal_errors)} error(s), e.g. "
                f"{self.portal_errors[0]}")
        wall = wall1 - wall0
        return self.result(connect_s=connect_s, written_s=written_s,
                           portal_cpu=[(b - a) / wall for a, b in zip(cpu0, cpu1, strict=True)],
                           bench_cpu=(own1 - own0) / wall,
                           cpu_pressure=None if stalled0 is None or stalled1 is None
                           else (stalled1 - stalled0) / wall, load=load)

    def trace(self) -> list[dict]:
        """What the traced followers received: per message, when (seconds from the first
        line written), its line numbers, and the latency of its first and last line."""
        t0, times = self.writer.started_at, self.writer.times
        return [{"followers": self.n, "follower": f.index, "messages": [
                    [round(received - t0, 4), first, nxt,
                     _round((received - times[first]) * 1000 if first < len(times) else None, 1),
                     _round((received - times[nxt - 1]) * 1000 if 0 < nxt <= len(times)
                            else None, 1)]
                    for received, first, nxt in f.trace]}
                for f in self.followers if f.trace is not None]

    def delivered_per_s(self, fs: list[Follower]) -> int | None:
        """The timed lines ``fs`` received per second, from the first timed line written to
        the last message they received."""
        last = max((f.last_received for f in fs if f.last_received), default=None)
        if last is None:
            return None
        count = sum(a.size for f in fs for a in f.latencies)
        return round(count / (last - self.writer.started_at))

    def result(self, *, connect_s: float, written_s: float, portal_cpu: list[float],
               bench_cpu: float, cpu_pressure: float | None, load: float) -> dict:
        fs = self.followers
        arrays = [a for f in fs for a in f.latencies]
        latencies = np.concatenate(arrays) * 1000 if arrays else np.array([])
        no_end = sum(1 for f in fs if f.end_next is None)
        short = sum(1 for f in fs if f.end_next is not None and
                    (f.end_next != self.total or f.expected != self.total))
        # lines never received by a follower that did end are counted as lost
        lost = sum(f.lost for f in fs) + sum(max(0, self.total - f.expected) for f in fs
                                             if f.end_next is not None)
        errors = [f"follower {f.index}: {f.error}" for f in fs if f.error]
        bad_close = sum(1 for f in fs if f.end_next is not None and f.close_code != 1000)
        p50, p95, p99 = (np.percentile(latencies, [50, 95, 99]) if latencies.size
                         else (None, None, None))
        result = {
            "bench": "logs", "layer": "redis" if self.portal.redis else "in-process",
            "followers": self.n, "portals": len(self.portals),
            "lines": self.timed, "warmup_lines": self.warmup,
            "lines_per_s": round(self.timed / written_s, 1) if written_s else None,
            "delivered": int(latencies.size),
            "delivered_per_s": self.delivered_per_s(fs),  # until the last line arrived
            "delivered_per_s_by_portal": [  # to the followers of each portal process
                self.delivered_per_s([f for f in fs if self.portal_of(f) is portal])
                for portal in self.portals],
            "p50_ms": _round(p50, 1), "p95_ms": _round(p95, 1), "p99_ms": _round(p99, 1),
            "max_ms": _round(latencies.max() if latencies.size else None, 1),
            "ratio_p99": _round(None if p99 is None else p99 / TARGET_MS, 3),
            "lost": lost, "duplicated": sum(f.duplicated for f in fs),
            "no_end": no_end, "short_end": short, "bad_close": bad_close,
            "unwritten": sum(f.unwritten for f in fs),
            "wrong_text": sum(f.wrong_text for f in fs),
            "messages": sum(f.messages for f in fs),
            "connect_s": round(connect_s, 2),
            "portal_peak_rss_mib": round(max(stats.peak_mib() for stats in self.stats), 1),
            "portal_cpu": round(sum(portal_cpu), 2),
            "portal_cpu_by_portal": [round(c, 2) for c in portal_cpu],
            # what a core of portal would deliver: lines/s over the portals' CPU share
            "delivered_per_cpu_s": None if not sum(portal_cpu) or
            self.delivered_per_s(fs) is None else round(self.delivered_per_s(fs)
                                                        / sum(portal_cpu)),
            "bench_cpu": round(bench_cpu, 2),
            "cpu_pressure": _round(cpu_pressure, 2), "load_1min": round(load, 2),
            "errors": errors[:5], "error_count": len(errors),
            "portal_errors": len(self.portal_errors),
            "portal_error_kinds": sorted({e.rsplit(" / ", 1)[-1] for e in self.portal_errors}),
        }
        problems = [k for k in ("lost", "duplicated", "no_end", "short_end", "bad_close",
                                "unwritten", "wrong_text", "error_count") if result[k]]
        if result["delivered"] != self.n * self.timed:
            problems.append("delivered")
        result["ok"] = not problems
        result["target_met"] = None if p99 is None else bool(p99 <= TARGET_MS)
        result["problems"] = problems
        return result


def _round(value, digits):
    return None if value is None else round(float(value), digits)


# --- the whole run -----------------------------------------------------------------------------


def per_portal(values: list) -> str:
    """Lines/s per portal process: ``251.2k`` or ``125.9k+125.6k``."""
    return "+".join("-" if v is None else f"{v / 1000:.1f}k" for v in values)


def table(results: list[dict]) -> str:
    lines = [f"{'layer':<10}  {'followers':>9}  {'portals':>7}  {'lines/s':>7}  "
             f"{'delivered':>9}  {'delivered/s per portal':>22}  "
             f"{'p50 ms':>7}  {'p95 ms':>7}  {'p99 ms':>7}  {'max ms':>7}  {'lost':>4}  "
             f"{'dup':>4}  {'no end':>6}  {'p99/1s':>6}  {'RSS MiB':>7}  {'portal cpu':>10}  "
             f"{'bench cpu':>9}  {'cpu wait':>8}  {'connect s':>9}  result"]
    for r in results:
        outcome = "ok" if r["ok"] else "FAILED: " + ", ".join(r["problems"])
        if r["ratio_p99"] is not None and r["ratio_p99"] > 1:
            outcome += ", target MISSED"
        if r["portal_errors"]:
            outcome += f" ({r['portal_errors']} portal errors)"
        lines.append(
            f"{r['layer']:<10}  {r['followers']:>9}  {r['portals']:>7}  "
            f"{cell(r['lines_per_s'], 0):>7}  {r['delivered']:>9}  "
            f"{per_portal(r['delivered_per_s_by_portal']):>22}  {cell(r['p50_ms']):>7}  "
            f"{cell(r['p95_ms']):>7}  {cell(r['p99_ms']):>7}  {cell(r['max_ms']):>7}  "
            f"{r['lost']:>4}  "
            f"{r['duplicated']:>4}  {r['no_end']:>6}  {cell(r['ratio_p99'], 2):>6}  "
            f"{cell(r['portal_peak_rss_mib']):>7}  {r['portal_cpu'] * 100:>9.0f}%  "
            f"{r['bench_cpu'] * 100:>8.0f}%  {percent(r['cpu_pressure']):>8}  "
            f"{r['connect_s']:>9.2f}  {outcome}")
    return "\n".join(lines)


def scale_out(results: list[dict]) -> str:
    """The same followers on 1, then 2 portal processes: the delivery ratio beside its target
    (>= 1.7x), and the 2-process rounds' p99, lost and duplicated beside theirs."""
    lines = []
    by = {(r["followers"], r["portals"]): r for r in results}
    for (n, portals), r in sorted(by.items()):
        if portals != 2:
            continue
        lines.append(f"{n} followers on 2 portal processes: p99 {cell(r['p99_ms'])} ms "
                     f"(target <= {TARGET_MS:.0f} ms: "
                     f"{'met' if r['target_met'] else 'MISSED'}), lost {r['lost']}, "
                     f"duplicated {r['duplicated']} (target 0 and 0)")
        one = by.get((n, 1))
        if one is None or not one["delivered_per_s"] or not r["delivered_per_s"]:
            continue
        ratio = r["delivered_per_s"] / one["delivered_per_s"]
        written = n * one["lines_per_s"]
        lines.append(
            f"{n} followers, delivered lines/s: 1 process {one['delivered_per_s']}, "
            f"2 processes {r['delivered_per_s']} "
            f"({' + '.join(str(v) for v in r['delivered_per_s_by_portal'])}): "
            f"{ratio:.2f}x (target >= {SCALE_TARGET}x: "
            f"{'met' if ratio >= SCALE_TARGET else 'MISSED'})")
        lines.append(f"  per portal CPU-second (all lines delivered / the processes' CPU "
                     f"time): 1 process {cell(one['delivered_per_cpu_s'], 0)}, 2 processes "
                     f"{cell(r['delivered_per_cpu_s'], 0)}")
        if one["delivered_per_s"] >= DELIVERED_ALL * written:
            lines.append(f"  (1 process already delivered {one['delivered_per_s'] / written:.0%} "
                         f"of the {written:.0f} lines/s written: the ratio is bounded by the "
                         f"load, not by the portals; raise --rate or --followers to saturate "
                         f"one process)")
    return "\n".join(lines)


def counts_of(what: str, top: int):
    """An argparse type: comma-separated counts of ``what``, each from 1 to ``top``."""

    def parse(text: str) -> list[int]:
        try:
            counts = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers") \
                from None
        if not counts or any(not 1 <= n <= top for n in counts):
            raise argparse.ArgumentTypeError(f"{text!r}: {what} counts from 1 to {top}")
        return counts

    return parse


def rounds_of(args) -> list[tuple[int, int]]:
    """(portal processes, followers) per round: every follower count on 1 process, then on
    2, ... as --portals lists them."""
    return [(p, n) for p in args.portals for n in args.followers]


async def run_rounds(portals: list[LogsPortal], args, results: list[dict],
                     traces: list[dict], limits: list[CpuLimit]) -> None:
    stats = [ProcessStats(portal.pid) for portal in portals]
    for job, (p, n) in zip(portals[0].jobs, rounds_of(args), strict=True):
        r = Round(portals[:p], job, n, rate=args.rate, seconds=args.seconds, wave=args.wave,
                  compression=not args.no_compression, end_timeout=args.end_timeout,
                  stats=stats[:p], traced=TRACED if args.trace else 0, limits=limits[:p])
        result = await r.run()
        traces.extend(r.trace())
        results.append(result)
        print(json.dumps(result), flush=True)
        if not result["ok"]:
            log(f"round of {n} on {p} portal(s) failed: {', '.join(result['problems'])}"
                + "".join(f"\n  {e}" for e in result["errors"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="N WebSocket followers of a log written at 1 000 lines/s: delivery "
                    "latency, lost and duplicated lines.")
    parser.add_argument("--followers", type=counts_of("follower", 5000), default=[10, 100, 500],
                        help="follower counts, one round each (default 10,100,500)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="how long the writer writes, per round (default 10)")
    parser.add_argument("--rate", type=int, default=1000, help="lines/s (default 1000)")
    parser.add_argument("--wave", type=int, default=50,
                        help="followers connecting at once (default 50)")
    parser.add_argument("--end-timeout", type=float, default=60.0,
                        help="seconds the followers may take to end after the replica has "
                             "(default 60)")
    parser.add_argument("--no-compression", action="store_true",
                        help="do not offer permessage-deflate (browsers do; the default does)")
    parser.add_argument("--port", type=int, default=0, help="portal port (default: a free one)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary var dir and the portal log")
    parser.add_argument("--redis", action="store_true",
                        help="keep REDIS_URL / DATABASE_URL from the environment "
                             "(channels-redis)")
    parser.add_argument("--portals", type=counts_of("portal process", 8), default=[1],
                        help="portal processes, a round of each follower count on each: "
                             "1,2 serves the same followers by 1, then by 2 processes "
                             "(needs --redis; default 1)")
    parser.add_argument("--portal-cpu", type=float, metavar="CORES",
                        help="hold each portal process to CORES of CPU time (a cgroup; root): "
                             "0.1 saturates one process with 500 followers at 1 000 lines/s, "
                             "so 1 and 2 processes show what each can deliver")
    parser.add_argument("--json", metavar="FILE", type=Path,
                        help="also write the rounds' figures to FILE as a JSON list")
    parser.add_argument("--trace", metavar="FILE", type=Path,
                        help=f"write every message {TRACED} followers per round (the first, "
                             f"the middle and the last to connect) received to FILE (JSON): "
                             f"when, which lines, their latency")
    args = parser.parse_args(argv)
    if args.rate < 1 or args.seconds <= 0 or args.rate * args.seconds < 1:
        parser.error("--rate and --seconds must give at least one line")
    if args.portal_cpu is not None and not 0 < args.portal_cpu <= (os.cpu_count() or 1):
        parser.error("--portal-cpu: a share of the machine's cores, more than 0")
    if max(args.portals) > 1 and not args.redis:
        parser.error("--portals above 1 needs --redis: processes share followers through "
                     "channels-redis and the Redis cache")

    handle_signals()
    began = time.monotonic()
    results: list[dict] = []
    traces: list[dict] = []
    portal = LogsPortal(args.port or free_port(), keep=args.keep, redis=args.redis,
                        rounds=len(rounds_of(args)))
    portals = [portal]
    limits: list[CpuLimit] = []
    code = 0
    try:
        portal.start()
        for _ in range(1, max(args.portals)):
            portals.append(MorePortal(portal, free_port()))
            portals[-1].start()
        if args.portal_cpu is not None:
            for each in portals:
                limits.append(CpuLimit(f"paddlecloud-bench-logs-{each.pid}", args.portal_cpu))
                limits[-1].add(each.pid)
            log(f"each portal process held to {args.portal_cpu:g} of a core")
        log(f"{os.cpu_count()} cores, shared by the portal(s), the writer and the followers")
        try:
            import uvloop
        except ImportError:
            asyncio.run(run_rounds(portals, args, results, traces, limits))
        else:
            uvloop.run(run_rounds(portals, args, results, traces, limits))
    except BenchError as exc:
        log(f"failed: {exc}\nportal log:\n{portal.log_tail()}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        code = 130
    finally:
        for more in portals[1:]:
            more.shut_down()
        portal.shut_down()
        for limit in limits:
            limit.remove()
    for each in portals:
        if each.process is not None and each.process.returncode not in (0, None):
            log(f"warning: the portal on port {each.port} exited {each.process.returncode} "
                f"(it had to be killed: see bench/README.md)")
    if results:
        print(f"# {os.cpu_count()} cores shared by the portal and the clients: the latency "
              f"includes the clients' own processing; target p99 <= {TARGET_MS:.0f} ms",
              flush=True)
        print(table(results), flush=True)
        if max(args.portals) > 1:
            if args.portal_cpu is not None:
                print(f"# each portal process held to {args.portal_cpu:g} of a core (cgroup)",
                      flush=True)
            print(scale_out(results), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.trace:
        args.trace.write_text(json.dumps(traces) + "\n")
    if code == 0 and (len(results) < len(rounds_of(args)) or not all(r["ok"] for r in results)):
        code = 1
    log(f"run time {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
