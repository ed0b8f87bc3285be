"""The local backend's change feed: the moment a replica's runner ends, its job is announced
(``signals.replicas_changed``), so its sync runs then and nothing polls it meanwhile; and so
whichever worker is alive, not only the one that started it.

One thread per process (its *watch*) waits on a pidfd per runner it follows
(``os.pidfd_open``: readable once the process has ended, child or not, and never confused
with a later process given the same pid). The runner writes its exit file before it ends, so
the sync that follows the announcement finds how it ended.

**Who follows a runner.** Following a runner is holding its *follow lock*, an flock on
``run/NAME.ATTEMPT.follow`` in its job's private directory: taken by the process that starts
the runner before it starts it, and held until the runner's end has been announced (then the
file is removed). The kernel lets go of an flock when its holder dies, however it dies (kill
-9 too). So a runner is followed by one process at most, and its end announced once; one
whose follower died is followed by nobody until a process takes its lock — then it follows
the runner if it still runs, and announces it at once if it has ended meanwhile.

**Who notices a follower died.** Each process with a watch holds a lock of its own for as
long as it lives, on a file in ``var/exits/`` (a *follower*). Every ``CHECK_SECONDS`` each
watch tries the others' locks: one it can take is of a follower that died, and it then takes
every follow lock it can (``ExitWatch.adopt_all``). A worker does the same as it starts
(``backend.worker_start``: runners whose followers died while no worker ran). Trying the followers
costs one flock per worker process; trying every runner's lock each time would cost one per
running replica. What a follower that died leaves is found within ``CHECK_SECONDS``, so an
ended replica reaches its job within a second while any worker lives; the reconciler stays
the safety net (a runner started by an older portal, with no follow file, is taken when the
reconciler sees it run: ``ExitWatch.adopt``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from paddlecloud_core.processes import attempt_files, read_json, runner_alive

from ...signals import replicas_changed

logger = logging.getLogger(__name__)

CHECK_SECONDS = 0.5  # how often a watch looks for followers that died
FOLLOW_SUFFIX = ".follow"


def follow_file(run_dir: Path, name: str, attempt: int) -> Path:
    """The follow lock of attempt ``attempt`` of replica ``name`` (see above)."""
    return run_dir / f"{name}.{attempt}{FOLLOW_SUFFIX}"


def _lock_take(path: Path, *, create: bool) -> int | None:
    """A descriptor holding an exclusive flock on ``path``, or None when another holds it
    (in any process, this one too) or the file is gone (removed once its runner's end was
    announced: a lock taken on it as it went is let go)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o600)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            raise FileNotFoundError(path)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd


@dataclass
class Claim:
    """A follow lock held by this process: the runner's end is announced by it."""

    path: Path
    fd: int
    job_uid: str
    pid: int | None = None
    pidfd: int | None = None
    unannounced: bool = False  # its announcement failed (said once, tried again)


class ExitWatch:
    def __init__(self, jobs: Path, followers: Path):
        self.jobs, self.followers = jobs, followers
        self._lock = threading.Lock()
        self._claims: dict[Path, Claim] = {}  # by follow file
        self._by_pidfd: dict[int, Claim] = {}
        self._unannounced: list[Claim] = []  # ended, their announcement failed: tried again
        self._poll = select.poll()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._poll.register(self._wake_read, select.POLLIN)
        self._stopping = False
        self._alive_fd, self._alive = self._register()
        self._thread = threading.Thread(target=self._run, name="local-exits", daemon=True)
        self._thread.start()

    def _register(self) -> tuple[int, Path]:
        """This process as a follower: a file in ``followers`` locked while it lives, locked
        before it has its name (so no watch takes a new follower for one that died)."""
        self.followers.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        tmp = self.followers / f".{name}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(tmp, self.followers / name)
        return fd, self.followers / name

    # --- taking runners -------------------------------------------------------------------

    def claim(self, run_dir: Path, name: str, attempt: int, job_uid: str, *,
              create: bool = True) -> Claim | None:
        """Take the follow lock of the attempt (None: another process follows it, or this one
        does already). Its starter takes it before it starts the runner, then ``follow``s."""
        path = follow_file(run_dir, name, attempt)
        with self._lock:
            if path in self._claims or self._stopping:
                return None
        fd = _lock_take(path, create=create)
        if fd is None:
            return None
        claim = Claim(path=path, fd=fd, job_uid=job_uid)
        with self._lock:
            if path in self._claims or self._stopping:  # (a flock is per open file: never)
                os.close(fd)
                return None
            self._claims[path] = claim
        return claim

    def follow(self, claim: Claim, pid: int) -> None:
        """Follow the runner ``pid`` of ``claim``: announce its job when it ends (at once if it
        has)."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            pidfd = None
        with self._lock:
            claim.pid = pid
            watched = pidfd is not None and self._claims.get(claim.path) is claim
            if watched:
                claim.pidfd = pidfd
                self._by_pidfd[pidfd] = claim
                self._poll.register(pidfd, select.POLLIN)
        if watched:
            self._wake()
            return
        if pidfd is not None:
            os.close(pidfd)
        self._ended(claim)

    def drop(self, claim: Claim) -> None:
        """Let go of a claim whose runner did not start."""
        self._release(claim)

    def adopt(self, run_dir: Path, name: str, attempt: int, job_uid: str, *,
              create: bool = True) -> bool:
        """Follow the attempt if nobody does (its follower died; a runner of a portal that
        made no follow files), or announce it if it has ended. Whether it was taken."""
        claim = self.claim(run_dir, name, attempt, job_uid, create=create)
        if claim is None:
            return False
        pid_file, _ = attempt_files(run_dir, name)
        started = read_json(pid_file)
        if started and started.get("attempt") == attempt and runner_alive(started["pid"]):
            self.follow(claim, started["pid"])
        else:  # it ended meanwhile, or its starter died before it started or recorded it
            self._ended(claim)
        return True

    def adopt_all(self) -> int:
        """Take every follow lock nobody holds, under every job's ``run/``: how many."""
        taken = 0
        for path in self.jobs.glob(f"*/run/*{FOLLOW_SUFFIX}"):
            name, _, attempt = path.name.removesuffix(FOLLOW_SUFFIX).rpartition(".")
            if attempt.isdigit() and self.adopt(path.parent, name, int(attempt),
                                                path.parent.parent.name, create=False):
                taken += 1
        return taken

    def following(self) -> set[int]:
        with self._lock:
            return {claim.pid for claim in self._by_pidfd.values()}

    # --- ends ------------------------------------------------------------------------------

    def _ended(self, claim: Claim) -> None:
        """The claim's runner has ended: announce its job, then let the follow file go (a
        follower that dies in between leaves it to another, which announces it again)."""
        if _announce(claim.job_uid, say=not claim.unannounced):
            self._release(claim)
        else:
            claim.unannounced = True
            with self._lock:
                self._unannounced.append(claim)

    def _release(self, claim: Claim) -> None:
        """Remove the claim's follow file, then let go of its lock (the other way round,
        another could take it as it goes). Once."""
        with self._lock:
            if self._claims.get(claim.path) is not claim:
                return  # let go already (the watch stopped)
            del self._claims[claim.path]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(claim.path)
            os.close(claim.fd)

    def _followers_dead(self) -> bool:
        """Remove the files of the followers that died; whether there was one."""
        dead = False
        try:
            entries = list(os.scandir(self.followers))
        except FileNotFoundError:
            return False
        for entry in entries:
            path = Path(entry.path)
            registering = entry.name.startswith(".")
            if path == self._alive or (registering and _younger(path, 60)):
                continue  # one that registers now has yet to lock its file
            fd = _lock_take(path, create=False)
            if fd is None:
                continue  # it lives
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)
            dead = dead or not registering  # one that died registering followed nothing
        return dead

    def _run(self) -> None:
        checked = time.monotonic()
        while True:
            wait = max(0.0, checked + CHECK_SECONDS - time.monotonic())
            ready = self._poll.poll(wait * 1000)
            ended = []
            with self._lock:
                if self._stopping:
                    return
                for fd, _ in ready:
                    if fd == self._wake_read:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_read, 4096)
                        continue
                    claim = self._by_pidfd.pop(fd)
                    self._poll.unregister(fd)
                    os.close(fd)
                    claim.pidfd = None
                    ended.append(claim)
            for claim in ended:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(claim.pid, os.WNOHANG)  # our child: reaped, not left a zombie
                self._ended(claim)
            if time.monotonic() - checked >= CHECK_SECONDS:
                checked = time.monotonic()
                self._check()

    def _check(self) -> None:
        """Every ``CHECK_SECONDS``: announce again what could not be, and take the runners of
        the followers that died."""
        with self._lock:
            retried, self._unannounced = self._unannounced, []
        for claim in retried:
            self._ended(claim)
        try:
            if self._followers_dead():
                self.adopt_all()
        except Exception:  # a var/ gone, a disk full: the next check tries again
            logger.exception("the runners of a worker that died could not be taken")

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_write, b"x")

    def stop(self) -> None:
        """Stop following: the locks go, and another process takes the runners."""
        with self._lock:
            self._stopping = True
        self._wake()
        self._thread.join(5)
        with self._lock:
            for claim in self._claims.values():
                if claim.pidfd is not None:
                    os.close(claim.pidfd)
                os.close(claim.fd)
            self._claims.clear()
            self._by_pidfd.clear()
            self._unannounced.clear()
        os.close(self._wake_read)
        os.close(self._wake_write)
        os.close(self._alive_fd)  # its file stays: the others' next check sees it died

    def _fds(self) -> list[int]:
        return [self._wake_read, self._wake_write, self._alive_fd,
                *(fd for claim in self._claims.values() for fd in (claim.fd, claim.pidfd)
                  if fd is not None)]


def _younger(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime < seconds
    except FileNotFoundError:
        return True


def _announce(job_uid: str, say: bool = True) -> bool:
    """Announce the job (whether that worked; the watch tries again until it does)."""
    try:
        replicas_changed.send(ExitWatch, job_uid=job_uid)
    except Exception:  # a receiver that fails (the broker down) must not end the watch
        if say:
            logger.exception("job %s: its change could not be announced yet", job_uid)
        return False
    return True


_watch: ExitWatch | None = None
_watch_lock = threading.Lock()


def exits_watch(jobs: Path, followers: Path) -> ExitWatch:
    """This process's watch over the runners under ``jobs`` (``var/jobs``), its followers
    recorded in ``followers``: started by its first runner, or as a worker starts."""
    global _watch
    with _watch_lock:
        if _watch is not None and (_watch.jobs, _watch.followers) != (jobs, followers):
            _watch.stop()  # another portal's var/ (tests)
            _watch = None
        if _watch is None:
            _watch = ExitWatch(jobs, followers)
        return _watch


def exits_following() -> set[int]:
    """The pids this process follows."""
    with _watch_lock:
        return _watch.following() if _watch is not None else set()


def exits_stop() -> bool:
    """Stop this process's watch (tests; a worker shutting down). Whether one ran."""
    global _watch
    with _watch_lock:
        watch, _watch = _watch, None
    if watch is not None:
        watch.stop()
    return watch is not None


def _forget_in_child() -> None:
    """A forked process (a prefork worker's child) has none of its parent's threads: it
    starts its own watch when it needs one. Its copies of the parent's descriptors are closed
    (the locks stay the parent's)."""
    global _watch, _watch_lock
    if _watch is not None:
        for fd in _watch._fds():
            with contextlib.suppress(OSError):
                os.close(fd)
    _watch, _watch_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
