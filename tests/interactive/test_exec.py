"""``paddlectl exec`` into a running local job, through the portal's WebSocket: the command
runs in the replica's sandbox as the replica does (its owner's host uid, never root), with its
environment and working directory, gets the input it is given and a terminal with ``-t``, and
paddlectl exits with its status. Another user is told the job does not exist; every exec is in
the audit log."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import termios

import pytest
from websockets.exceptions import ConnectionClosed

from accounts.models import AuditEntry
from jobs.backends.local.backend import home_ids
from jobs.models import Job
from jobs.services import job_kill
from jobs.states import JobState, ReplicaState
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis,
              pytest.mark.package("import time; time.sleep(600)\n")]


def running(job: Job) -> Job:
    """The job once it and every worker of it run."""
    def ready():
        job.refresh_from_db()
        return (job.state == JobState.RUNNING
                and all(r.state == ReplicaState.RUNNING for r in job.replicas.all()))
    wait(ready, 60, lambda: f"job {job.name} is {job.state}: {job.state_reason}")
    return job


def in_terminal(argv: list[str], env: dict) -> tuple[int, bytes]:
    """``argv`` run in a terminal of its own (a pty of 100 columns and 30 rows): its exit
    status and what it showed."""
    pid, master = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        os.execve(argv[0], argv, env)  # noqa: S606
    shown = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, f"paddlectl showed nothing more: {shown!r}"
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: it has exited
                break
            if not data:
                break
            shown += data
    finally:
        os.close(master)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), shown


def test_exec_runs_in_the_worker_as_its_owner(live_portal, celery_worker, submit, make_user,
                                              paddlectl):
    job = running(submit("fit", trainers=2))
    uid, _ = home_ids(job.owner)

    who = paddlectl("exec", "fit", "--", "id", "-u")
    assert who.returncode == 0, who.stderr
    assert who.stdout.decode().strip() == str(uid) and uid != 0

    # The worker's environment and working directory, in the chosen worker.
    env = paddlectl("exec", "fit", "-w", "trainer-1", "--", "sh", "-c",
                    'echo "$PADDLE_TRAINER_ID $JOB_NAME $(pwd)"')
    assert env.returncode == 0, env.stderr
    assert env.stdout.decode().split() == ["1", "fit", "/workspace"]

    # Its exit status, and its stderr apart from its stdout.
    failed = paddlectl("exec", "fit", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert failed.returncode == 7
    assert (failed.stdout, failed.stderr) == (b"out\n", b"err\n")

    # What it is given on its input (-i), to its end.
    echoed = paddlectl("exec", "fit", "-i", "--", "sh", "-c", "wc -c; cat",
                       input=b"hello\n" * 1000)
    assert echoed.returncode == 0, echoed.stderr
    assert echoed.stdout == b"6000\n"

    missing = paddlectl("exec", "fit", "--", "no-such-program")
    assert missing.returncode == 127
    assert b"no-such-program: command not found" in missing.stderr

    # A terminal with -t: the command sees one, of this terminal's size.
    code, shown = in_terminal(
        paddlectl.argv("exec", "fit", "-it", "--", "sh", "-c",
                       "test -t 0 && test -t 1 && echo TTY-YES; tty; stty size"),
        paddlectl.cli("alice").environ())
    assert code == 0, shown
    assert b"TTY-YES" in shown
    assert b"/dev/pts/" in shown  # a terminal of the sandbox's own, which it can name
    assert b"30 100" in shown

    # Another user: as a job that does not exist, and nothing runs.
    make_user("bob")
    theirs = paddlectl("exec", "fit", "--", "touch", "/pfs/datacenter1/home/alice/bob-was-here",
                       user="bob")
    nothing = paddlectl("exec", "no-such-job", "--", "true", user="bob")
    assert theirs.returncode == nothing.returncode != 0
    assert theirs.stderr.decode().replace("'fit'", "'X'") == \
        nothing.stderr.decode().replace("'no-such-job'", "'X'")
    assert not (live_portal.home / "bob-was-here").exists()

    # Every exec is audited: who, whose job, which worker, the command.
    entries = AuditEntry.objects.filter(action=AuditEntry.Action.JOB_EXEC).order_by("time")
    assert [(e.actor_name, e.target, e.details["worker"], e.details["command"])
            for e in entries][:2] == [
        ("alice", "alice/fit", "trainer-0", "id -u"),
        ("alice", "alice/fit", "trainer-1", 'sh -c echo "$PADDLE_TRAINER_ID $JOB_NAME $(pwd)"')]
    assert entries.count() == 6  # bob's refusals are no exec


def socket_to(live_portal, user, query: str):
    """The exec WebSocket of alice's job fit, as ``user`` (with their token)."""
    from websockets.sync.client import connect

    return connect(f"ws://127.0.0.1:{live_portal.port}/ws/jobs/fit/exec/{query}",
                   additional_headers={"Authorization": f"Bearer {live_portal.token(user)}"})


def test_an_admin_may_exec_with_owner_and_bad_input_is_named(live_portal, celery_worker, submit,
                                                            make_user, paddlectl):
    job = running(submit("fit"))
    root = make_user("root", staff=True)

    with socket_to(live_portal, root, "?owner=alice") as socket:
        socket.send(json.dumps({"type": "start", "command": ["id", "-u"]}))
        assert json.loads(socket.recv()) == {"type": "started", "worker": "trainer-0"}
        assert socket.recv() == b"\x01" + f"{home_ids(job.owner)[0]}\n".encode()
        assert json.loads(socket.recv()) == {"type": "exit", "code": 0}
    entry = AuditEntry.objects.get(action=AuditEntry.Action.JOB_EXEC)
    assert (entry.actor_name, entry.subject, entry.target) == ("root", job.owner, "alice/fit")


    # A terminal's size follows its resizes; what is typed reaches the command.
    with socket_to(live_portal, job.owner, "") as socket:
        socket.send(json.dumps({"type": "start", "command": ["sh", "-c", "read x; stty size"],
                                "tty": True, "cols": 100, "rows": 30}))
        assert json.loads(socket.recv())["type"] == "started"
        socket.send(json.dumps({"type": "resize", "cols": 120, "rows": 40}))
        socket.send(b"go\r")
        shown = b""
        while isinstance(message := socket.recv(), bytes):
            assert message[:1] == b"\x01"  # a terminal's output is all stdout
            shown += message[1:]
        assert json.loads(message) == {"type": "exit", "code": 0}
        assert shown.split() == [b"go", b"40", b"120"]

    # Without ?owner= an admin's own jobs are meant; a user's ?owner= of another is nothing.
    bob = make_user("bob")
    for user, query in ((root, ""), (bob, "?owner=alice")):
        with socket_to(live_portal, user, query) as socket:
            refused = json.loads(socket.recv())
            assert refused["code"] == "not_found" and "no job named 'fit'" in refused["message"]

    with socket_to(live_portal, job.owner, "") as socket:
        socket.send(json.dumps({"type": "start", "command": "id -u"}))
        refused = json.loads(socket.recv())
        assert refused["message"] == 'command: a list of words, the program first (e.g. ["bash"])'
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv()
        assert closed.value.rcvd.code == 4400

    job_kill(job.owner, job.datacenter, "fit")
    ended = paddlectl("exec", "fit", "--", "true")
    assert ended.returncode != 0
    assert ended.stderr.decode().startswith("paddlectl: job 'fit' is killed: a command runs "
                                            "only in a running job")
    assert AuditEntry.objects.filter(action=AuditEntry.Action.JOB_EXEC).count() == 2
