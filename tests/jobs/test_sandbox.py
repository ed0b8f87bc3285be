"""The sandbox of local replicas (jobs/backends/local/sandbox.py), with the real bwrap and real
processes: what a replica sandbox can reach and what it cannot, its network, and how it
behaves under the runner's process-group handling (exit codes, SIGTERM, leftovers)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from jobs.backends.local.sandbox import (
    SETUP_FAILED,
    Bind,
    Sandbox,
    SandboxCommand,
    client_dirs,
    sandbox_command,
    sandbox_problem,
)
from jobs.backends.netns import (
    Netns,
    SandboxError,
    netns_alive,
    netns_read,
    netns_start,
    netns_stop,
)

VENV_BIN = str(Path(sys.executable).parent)
ROOTED = os.geteuid() == 0
# Whom alice's replicas run as on the host when the portal is root: her home's owner.
ALICE_IDS = (1100000007, 1100000007)
OUTSIDE_ENV = {"PATH": "/usr/bin:/bin"}  # what the runner gives the argv: nothing of ours


@pytest.fixture
def tree(tmp_path):
    """A portal's files in small: var/ with a secret and a job's private directory (package
    copy, site-packages, run/), PFS homes of alice (the owner) and bob, the public
    directory, and a secret beside them all."""
    var = tmp_path / "var"
    job = var / "jobs" / "1"
    for path in (job / "pkg", job / "site-packages", job / "run"):
        path.mkdir(parents=True)
    (var / "secret_key").write_text("portal secret key")
    (job / "pkg" / "train.py").write_text("print('training')\n")
    pfs = tmp_path / "pfs" / "datacenter1"
    alice, bob, public = pfs / "home" / "alice", pfs / "home" / "bob", pfs / "public"
    for path in (alice, bob, public):
        path.mkdir(parents=True)
    if ROOTED:  # as the local backend gives a home to its owner's host uid
        os.chown(alice, *ALICE_IDS)
    (bob / "secret.txt").write_text("bob's data")
    (public / "data.txt").write_text("public data")
    (tmp_path / "secret.txt").write_text("beside the binds")
    return {"root": tmp_path, "var": var, "job": job, "pkg": job / "pkg",
            "site": job / "site-packages", "run": job / "run", "alice": alice, "bob": bob,
            "public": public}


def replica(tree, network, **env) -> Sandbox:
    """A sandbox built as the local backend builds a replica's."""
    pythonpath = [str(tree["site"]), str(tree["pkg"]),
                  *dict.fromkeys(str(d.parent) for d in client_dirs())]
    return Sandbox(
        binds=[Bind(str(tree["pkg"])), Bind(str(tree["site"])),
               Bind(str(tree["alice"]), writable=True), Bind(str(tree["public"]))],
        env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tree["alice"]),
             "PYTHONPATH": os.pathsep.join(pythonpath), "TRAINER_ID": "0", **env},
        cwd=str(tree["pkg"]), network=network, hostname="trainer-0", ids=ALICE_IDS)


@pytest.fixture
def netns(tree):
    """The job's network; its holder is stopped and gone at the end, whatever the outcome."""
    pid_file = tree["run"] / "netns.pid"
    held = netns_start(pid_file, "test")
    yield held
    netns_stop(pid_file)
    assert not netns_alive(held)
    assert not pid_file.exists()


@pytest.fixture
def spawned():
    """Sandboxes (a ``SandboxCommand``, fed its arguments) or other commands (an argv, stdin
    ``/dev/null`` unless given) started in a process group of their own, as the runner's;
    killed at the end."""
    processes: list[subprocess.Popen] = []

    def spawn(command, env=OUTSIDE_ENV, **kwargs) -> subprocess.Popen:
        if isinstance(command, SandboxCommand):
            process = command.popen(start_new_session=True, env=env, **kwargs)
        else:
            kwargs.setdefault("stdin", subprocess.DEVNULL)
            process = subprocess.Popen(command, start_new_session=True, env=env, **kwargs)
        processes.append(process)
        return process

    yield spawn
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def run(sandbox: Sandbox, command: list[str]) -> subprocess.CompletedProcess:
    return sandbox_command(sandbox, command).run(env=OUTSIDE_ENV, capture_output=True,
                                                 text=True, timeout=60)


def python(sandbox: Sandbox, code: str) -> subprocess.CompletedProcess:
    return run(sandbox, ["python", "-c", textwrap.dedent(code)])


PROBE = """
import json, sys
results = {}
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            results[path] = f.read()
    except OSError as exc:
        results[path] = exc.__class__.__name__
print(json.dumps(results))
"""


def probe(sandbox: Sandbox, paths: list[str]) -> dict[str, str]:
    result = run(sandbox, ["python", "-c", PROBE, *paths])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_sandboxes_work_on_this_machine():
    assert sandbox_problem() is None


# --- what it sees --------------------------------------------------------------------------

def test_a_replica_reads_its_package_home_and_public_but_no_secret(tree, netns):
    (tree["alice"] / "mine.txt").write_text("alice's data")
    repo = Path(__file__).resolve().parents[2]
    secrets = [tree["root"] / "secret.txt", tree["bob"] / "secret.txt",
               tree["var"] / "secret_key", repo / "pyproject.toml", Path("/etc/shadow"),
               Path("/etc/gshadow")]
    assert all(path.is_file() for path in secrets)  # there, outside
    seen = probe(replica(tree, netns), [
        str(tree["pkg"] / "train.py"), str(tree["alice"] / "mine.txt"),
        str(tree["public"] / "data.txt"), *map(str, secrets)])
    assert seen == {
        str(tree["pkg"] / "train.py"): "print('training')\n",
        str(tree["alice"] / "mine.txt"): "alice's data",
        str(tree["public"] / "data.txt"): "public data",
        str(tree["root"] / "secret.txt"): "FileNotFoundError",
        str(tree["bob"] / "secret.txt"): "FileNotFoundError",
        str(tree["var"] / "secret_key"): "FileNotFoundError",
        str(repo / "pyproject.toml"): "FileNotFoundError",
        "/etc/shadow": "FileNotFoundError",
        "/etc/gshadow": "FileNotFoundError",
    }


def test_a_replica_lists_no_other_home_and_nothing_of_var(tree, netns):
    result = python(replica(tree, netns), f"""
        import os
        print(sorted(os.listdir({str(tree["alice"].parent)!r})))
        print(sorted(os.listdir({str(tree["var"] / "jobs" / "1")!r})))
        print(sorted(os.listdir({str(tree["root"])!r})))
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['alice']", "['pkg', 'site-packages']",
                                          "['pfs', 'var']"]


def test_a_replica_sees_only_its_own_processes(tree, netns, spawned):
    marker = f"portal-secret-{uuid.uuid4().hex}"
    portal = spawned(["sleep", "60"], env={**OUTSIDE_ENV, "SECRET_KEY": marker})
    deadline = time.monotonic() + 10  # readable outside, once it has exec'd
    while marker.encode() not in Path(f"/proc/{portal.pid}/environ").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    result = python(replica(tree, netns), f"""
        import os
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        found = []
        for p in pids:
            try:
                if {marker!r}.encode() in open(f"/proc/{{p}}/environ", "rb").read():
                    found.append(p)
            except OSError:
                pass
        print(pids, os.getpid(), found)
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[1, 2] 2 []"


# Values as a job may give them; each must arrive as it is. BIG is more than a pipe holds:
# the arguments bwrap reads on its stdin never wait on a writer.
AWKWARD = {"EXTRA": "x y", "LINES": "one\ntwo\n", "EQUALS": "a=b==c", "UNICODE": "é ☃ 雪",
           "EMPTY": "", "DASHES": "--setenv", "SPACES": "  ", "BIG": "b" * 100_000}


def test_the_environment_is_exactly_what_was_given(tree, netns, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "the portal's")
    sandbox = replica(tree, netns, **AWKWARD)
    result = sandbox_command(sandbox, ["/usr/bin/env", "-0"]).run(  # all of ours
        env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    seen = dict(line.split("=", 1) for line in result.stdout.split("\0") if line)
    assert seen == {**sandbox.env, "PWD": sandbox.cwd}  # bwrap sets PWD to the cwd


def test_the_environment_is_on_no_command_line(tree, netns):
    """Any user of the host reads every command line (``ps``): the environment (secrets
    included) goes in on bwrap's stdin, not in ``argv``, and is shown in no repr."""
    secret = f"secret-{uuid.uuid4().hex}"
    sandbox = replica(tree, netns, TOKEN=f"a {secret}\n")
    command = sandbox_command(sandbox, ["true"])
    assert not [arg for arg in command.argv if secret in arg or arg == "--setenv"]
    assert command.argv[command.argv.index("--args") + 1] == "0"
    assert secret not in repr(command) and secret not in repr(sandbox)
    assert secret.encode() in command.args  # given apart


def test_the_command_reads_dev_null_on_its_stdin(tree, netns):
    """bwrap reads its arguments to their end and closes its stdin: the command gets
    /dev/null there, as outside, and nothing waits."""
    result = run(replica(tree, netns, TOKEN="secret"), ["sh", "-c", """
        readlink /proc/self/fd/0; cat; echo "read $?"; python -c 'import sys; print(sys.stdin)'
        """])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["/dev/null", "read 0"]
    assert "name='<stdin>'" in lines[2]


def test_writes_to_the_home_land_on_the_host_and_the_rest_is_read_only(tree, netns):
    name = f"written-{uuid.uuid4().hex}"
    refused = [tree["pkg"], tree["site"], tree["public"], Path("/usr"), Path(sys.prefix),
               *client_dirs()]
    targets = [tree["alice"] / name] + [path / name for path in refused]
    try:
        result = python(replica(tree, netns), f"""
            import errno
            for path in {[str(t) for t in targets]!r}:
                try:
                    with open(path, "x") as f:
                        f.write("written")
                    print("ok")
                except OSError as exc:
                    print(errno.errorcode[exc.errno])
            """)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["ok"] + ["EROFS"] * len(refused)
        assert (tree["alice"] / name).read_text() == "written"
        # The owner's host uid when the portal is root, else the portal's own.
        assert (tree["alice"] / name).stat().st_uid == (ALICE_IDS[0] if ROOTED else os.getuid())
        assert [t for t in targets[1:] if t.exists()] == []
    finally:  # were the sandbox broken, leave nothing in /usr, the venv or the source tree
        for target in targets[1:]:
            target.unlink(missing_ok=True)


def test_the_venv_python_runs_and_imports_the_sdk(tree, netns):
    """All of it: ``PaddleJob`` too, which a trainer using ``dist_train`` imports."""
    result = python(replica(tree, netns), """
        import sys, paddlecloud_sdk
        from paddlecloud_sdk import PaddleJob, env
        print(sys.prefix, paddlecloud_sdk.__file__, env.trainer_id())
        """)
    assert result.returncode == 0, result.stderr
    sdk = next(d for d in client_dirs() if d.name == "paddlecloud_sdk")
    assert result.stdout.split() == [sys.prefix, str(sdk / "__init__.py"), "0"]


# --- network -------------------------------------------------------------------------------

@pytest.mark.parametrize("network", ["job", "none", "host"])
def test_its_hostname_resolves_to_its_loopback(tree, netns, network):
    """As gloo (paddle.distributed) needs: it looks its own hostname up and listens there."""
    result = python(replica(tree, netns if network == "job" else network), """
        import socket
        print(socket.gethostname(), socket.gethostbyname(socket.gethostname()))
        """)
    assert result.stdout.split() == ["trainer-0", "127.0.0.1"], result.stderr


@pytest.fixture
def host_listener():
    """A server on the host's loopback, like PostgreSQL, Redis or the portal."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


CONNECT = """
import errno, socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("connected")
except OSError as exc:
    print(errno.errorcode.get(exc.errno, exc))
"""


@pytest.mark.parametrize("network", ["job", "none"])
def test_the_hosts_loopback_is_out_of_reach(tree, netns, host_listener, network):
    sandbox = replica(tree, netns if network == "job" else "none")
    result = run(sandbox, ["python", "-c", CONNECT, str(host_listener)])
    assert result.stdout.strip() == "ECONNREFUSED", result.stderr
    # The same listener from a sandbox on the host's network (pip download's):
    result = run(replica(tree, "host"), ["python", "-c", CONNECT, str(host_listener)])
    assert result.stdout.strip() == "connected", result.stderr


SERVE = """
import socket, sys
with socket.socket() as server:
    server.bind(("127.0.0.1", int(sys.argv[1])))
    server.listen()
    print("listening", flush=True)
    conn, _ = server.accept()
    conn.sendall(b"hello from " + socket.gethostname().encode())
    conn.close()
"""

GREET = """
import socket, sys, time
for _ in range(100):
    try:
        with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as conn:
            print(conn.recv(100).decode())
            break
    except ConnectionRefusedError:
        time.sleep(0.05)
"""


def test_replicas_of_a_job_talk_over_its_loopback(tree, netns, host_listener, spawned):
    # The first replica listens on the very port the host's server has: another loopback.
    trainer = replica(tree, netns)
    server = spawned(sandbox_command(dataclasses.replace(trainer, hostname="pserver-0"),
                                     ["python", "-c", SERVE, str(host_listener)]),
                     stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "listening"
    result = run(trainer, ["python", "-c", GREET, str(host_listener)])
    assert result.stdout.strip() == "hello from pserver-0", result.stderr
    assert server.wait(timeout=10) == 0


def test_a_sandbox_refuses_to_run_in_another_network(tree, netns):
    command = sandbox_command(replica(tree, netns), ["sh", "-c", "echo ran"])
    argv = list(command.argv)
    argv[argv.index(str(netns.inode))] = "1"  # as if the holder's pid now named another
    result = dataclasses.replace(command, argv=tuple(argv)).run(
        env=OUTSIDE_ENV, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (SETUP_FAILED, "")
    assert "not in the job's network namespace" in result.stderr


def test_the_holder_is_shared_runs_in_its_own_session_and_stops(tree):
    pid_file = tree["run"] / "netns.pid"
    held = netns_start(pid_file, "job-1")
    try:
        assert netns_start(pid_file) == held == netns_read(pid_file)
        assert os.getsid(held.pid) != os.getsid(0)  # a session of its own: outlives ours
        assert os.getpgid(held.pid) != os.getpgrp()
        assert b"paddlecloud-netns\0job-1" in Path(f"/proc/{held.pid}/cmdline").read_bytes()
        assert not netns_alive(Netns(held.pid, held.start + 1, held.inode))  # a reused pid
    finally:
        netns_stop(pid_file)
    assert not netns_alive(held) and netns_read(pid_file) is None and not pid_file.exists()
    with pytest.raises(SandboxError, match="the job's network is gone"):
        sandbox_command(replica(tree, held), ["true"])
    netns_stop(pid_file)  # again: nothing to do


# --- as a process under the runner -----------------------------------------------------------

@pytest.mark.parametrize(("command", "code"), [
    ("exit 0", 0), ("exit 3", 3),
    ("kill -KILL $$", 128 + signal.SIGKILL), ("kill -TERM $$", 128 + signal.SIGTERM)])
def test_the_commands_exit_code_comes_back(tree, netns, command, code):
    assert run(replica(tree, netns), ["sh", "-c", command]).returncode == code


def test_a_sandbox_that_cannot_be_set_up_exits_1_and_says_why(tree, netns):
    result = run(dataclasses.replace(replica(tree, netns), cwd="/nowhere"), ["true"])
    assert result.returncode == 1
    assert "bwrap: Can't chdir to /nowhere" in result.stderr


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_sigterm_to_the_group_reaches_a_command_that_traps_it(tree, netns, spawned):
    home = tree["alice"]
    process = spawned(sandbox_command(replica(tree, netns), ["sh", "-c", """
        trap 'sleep 0.3; echo cleaned up > "$HOME/trapped"; exit 7' TERM
        touch "$HOME/ready"
        while :; do sleep 0.05; done"""]))
    wait_for(home / "ready")
    os.killpg(process.pid, signal.SIGTERM)  # as groups_stop does
    assert process.wait(timeout=10) == 7  # the command's own code, after its clean-up
    assert (home / "trapped").read_text() == "cleaned up\n"


def test_sigterm_to_the_group_ends_a_command_that_does_not_trap_it(tree, netns, spawned):
    process = spawned(sandbox_command(replica(tree, netns), ["sh", "-c", """
        touch "$HOME/ready"; exec python -c 'import time; time.sleep(60)'"""]))
    wait_for(tree["alice"] / "ready")
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=10) == 128 + signal.SIGTERM


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_nothing_the_command_started_survives_it(tree, netns):
    marker = f"leftover-{uuid.uuid4().hex}"
    sleeper = f"python -c 'import time; time.sleep(60)' {marker}"
    result = run(replica(tree, netns), ["sh", "-c", f"""
        {sleeper} &
        setsid {sleeper} &
        nohup {sleeper} > /dev/null 2>&1 &
        sleep 0.3; exit 4"""])  # they run by then
    assert result.returncode == 4, result.stderr
    deadline = time.monotonic() + 5
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


def test_the_sandbox_ends_when_its_runner_is_killed(tree, netns, spawned):
    marker = f"orphan-{uuid.uuid4().hex}"
    command = sandbox_command(replica(tree, netns), ["sh", "-c", f"""
        touch "$HOME/ready"; exec python -c 'import time; time.sleep(60)' {marker}"""])
    with command.stdin() as stdin:  # the runner's stdin, which its child inherits
        runner = spawned([sys.executable, "-c",
                          "import subprocess, sys; subprocess.run(sys.argv[1:])",
                          *command.argv], stdin=stdin)
    wait_for(tree["alice"] / "ready")
    assert host_processes_with(marker)
    os.kill(runner.pid, signal.SIGKILL)  # the runner alone, not its group
    deadline = time.monotonic() + 5
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


# --- what the caller may ask -----------------------------------------------------------------

def test_binds_that_would_undo_the_sandbox_are_refused(tree, netns):
    link = tree["root"] / "link"
    link.symlink_to(tree["var"])
    for binds, why in [
        ([Bind(str(link))], "not there, or a link"),
        ([Bind(str(tree["root"] / "missing"))], "not there, or a link"),
        ([Bind(str(tree["alice"]), writable=True), Bind(str(tree["var"]),
                                                        str(tree["alice"] / "var"))],
         "inside a writable bind"),
        ([Bind("relative/path")], "absolute, normal path"),
        ([Bind(str(tree["pkg"]) + "/../../..")], "absolute, normal path"),
    ]:
        with pytest.raises(SandboxError, match=why):
            sandbox_command(Sandbox(binds=binds, network=netns), ["true"])
    assert list(tree["alice"].iterdir()) == []  # no mount point made in the home
    with pytest.raises(SandboxError, match="not a valid name"):
        sandbox_command(Sandbox(env={"A=B": "1"}), ["true"])
    with pytest.raises(SandboxError, match="not a valid name or value"):
        sandbox_command(Sandbox(env={"A": "1\0--setenv"}), ["true"])
    with pytest.raises(SandboxError, match="network"):
        sandbox_command(Sandbox(network="bridge"), ["true"])
    with pytest.raises(SandboxError, match="hostname"):
        sandbox_command(Sandbox(hostname="a\n1.2.3.4 pypi.org"), ["true"])


def test_the_command_writes_its_own_tmp_and_shared_memory(tree, netns):
    """/tmp and /dev/shm are the sandbox's own and anyone's there (sticky), as on a host: the
    command is not their owner when the portal is root (tempfile, a DataLoader's workers)."""
    result = python(replica(tree, netns), """
        import multiprocessing.shared_memory as shm, os, tempfile
        fd, name = tempfile.mkstemp()
        os.close(fd)
        block = shm.SharedMemory(create=True, size=16)
        block.close()
        block.unlink()
        print(os.path.dirname(name), oct(os.stat("/tmp").st_mode & 0o7777),
              oct(os.stat("/dev/shm").st_mode & 0o7777))
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/tmp", "0o1777", "0o1777"]
