"""The local backend's change feed: the moment a replica's runner ends, its job is announced
(``signals.replicas_changed``), so its sync runs then and nothing polls it meanwhile.

One thread per process waits on a pidfd per runner (``os.pidfd_open``: readable once the
process has ended, child or not, and never confused with a later process given the same pid).
A runner is followed by the process that starts it, and by any that sees it run (the
reconciler, after a worker restart lost the one that started it). The runner writes its exit
file before it ends, so the sync that follows the announcement finds how it ended.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading

from ...signals import replicas_changed

logger = logging.getLogger(__name__)


class ExitWatch:
    def __init__(self):
        self._lock = threading.Lock()
        self._followed: dict[int, tuple[int, str]] = {}  # pidfd -> (pid, job uid)
        self._pids: set[int] = set()
        self._poll = select.poll()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._poll.register(self._wake_read, select.POLLIN)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="local-exits", daemon=True)
        self._thread.start()

    def follow(self, pid: int, job_uid: str) -> None:
        """Announce ``job_uid`` when process ``pid`` ends (at once if it has)."""
        with self._lock:
            if pid in self._pids or self._stopping:
                return
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                fd = None
            else:
                self._followed[fd] = (pid, job_uid)
                self._pids.add(pid)
                self._poll.register(fd, select.POLLIN)
        if fd is None:
            _announce(job_uid)
        else:
            self._wake()

    def following(self) -> set[int]:
        with self._lock:
            return set(self._pids)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
        self._wake()
        self._thread.join(5)
        with self._lock:
            for fd in self._followed:
                os.close(fd)
            self._followed.clear()
            self._pids.clear()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_write, b"x")

    def _run(self) -> None:
        while True:
            ready = self._poll.poll()
            ended = []
            with self._lock:
                if self._stopping:
                    return
                for fd, _ in ready:
                    if fd == self._wake_read:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_read, 4096)
                        continue
                    pid, job_uid = self._followed.pop(fd)
                    self._pids.discard(pid)
                    self._poll.unregister(fd)
                    os.close(fd)
                    ended.append((pid, job_uid))
            for pid, job_uid in ended:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # our child: reaped, not left a zombie
                _announce(job_uid)


def _announce(job_uid: str) -> None:
    try:
        replicas_changed.send(ExitWatch, job_uid=job_uid)
    except Exception:  # a receiver that fails (the broker down) must not end the watch
        logger.exception("job %s: its change could not be announced", job_uid)


_watch: ExitWatch | None = None
_watch_lock = threading.Lock()


def exits_follow(pid: int, job_uid: str) -> None:
    """Announce the job when the runner ``pid`` ends (the process's watch starts with its
    first runner)."""
    global _watch
    with _watch_lock:
        if _watch is None:
            _watch = ExitWatch()
        watch = _watch
    watch.follow(pid, job_uid)


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
    starts its own watch when it needs one."""
    global _watch, _watch_lock
    if _watch is not None:
        for fd in (*_watch._followed, _watch._wake_read, _watch._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)
    _watch, _watch_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
