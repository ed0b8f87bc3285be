"""``paddlectl local train --image`` in a real Docker engine: the installed console script, as a
user runs it, against a dockerd of this module's own (``tests.images.docker_engine``) and an
image built in it from the base root filesystem (nothing can be pulled here). The trainer
package needs no PaddlePaddle: it reads its input, writes its output, prints its environment,
and with a pserver, each trainer talks to the pserver's endpoint over TCP."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.images import base_rootfs, docker_base_image, docker_engine, overlay_works
from tests.processes import processes_naming

from .conftest import VENV_BIN, paddlectl_path

pytestmark = [
    pytest.mark.skipif(shutil.which("dockerd") is None or shutil.which("docker") is None,
                       reason="Docker is not installed (./dev test installs docker.io)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="a private dockerd needs root"),
    pytest.mark.timeout(600),
]

IMAGE = "paddlecloud-test/trainer:1"
NOBODY = 65534

# A trainer without PaddlePaddle. Every replica prints the environment PaddleCloud gives it;
# the pserver answers each trainer that connects to its endpoint until it is stopped; a trainer
# sums the numbers of its input, talks to the pserver (if any) and writes its result.
# FAIL=trainer-N: that trainer fails (exit 3) once the others are up; SLEEP=1: trainers sleep,
# and say so when SIGTERM stops them.
TRAIN_PY = """\
import os, signal, socket, sys, time


def say(*parts, file=sys.stdout):
    # One write a line: PaddleCloud runs Python unbuffered (a print is a write a part), and
    # Docker keeps stdout and stderr in order only write by write.
    file.write(" ".join(str(part) for part in parts) + "\\n")
    file.flush()


role = os.environ["TRAINING_ROLE"]
for key in sorted(os.environ):
    if key.startswith(("PADDLE_", "TRAINING_", "TRAINER", "JOB_")) or key in (
            "NUM_PASS", "LR", "HOME", "PYTHONPATH"):
        say("env", key + "=" + os.environ[key])
with open("/etc/paddlecloud-test-image") as f:
    image = f.read().strip()
say("image", image, "uid", os.getuid(), "gid", os.getgid(), "cwd", os.getcwd())
if role == "PSERVER":
    name = "pserver-" + os.environ["PADDLE_PSERVER_ID"]
    host, port = os.environ["PADDLE_CURRENT_ENDPOINT"].rsplit(":", 1)
    server = socket.create_server((host, int(port)))
    say(name, "listening on", host + ":" + port)
    while True:
        conn, _ = server.accept()
        with conn:
            who = conn.makefile().readline().strip()
            conn.sendall(("ack " + who + " from " + name + "\\n").encode())
        say(name, "served", who)
name = "trainer-" + os.environ["PADDLE_TRAINER_ID"]
with open(os.path.join(os.environ["PADDLE_INPUT_DIR"], "data.txt")) as f:
    total = sum(int(x) for x in f.read().split())
out = os.environ["PADDLE_OUTPUT_DIR"]
if os.environ.get("FAIL") == name:
    deadline = time.monotonic() + 120
    while (len([n for n in os.listdir(out) if n.startswith("up-")]) + 1
           < int(os.environ["PADDLE_TRAINERS_NUM"]) and time.monotonic() < deadline):
        time.sleep(0.1)
    say(name + ": cannot train: record 2 of data.txt is bad", file=sys.stderr)
    sys.exit(3)
if os.environ.get("SLEEP") or os.environ.get("FAIL"):
    def stopped(signum, frame):
        say(name + " stopped by " + signal.Signals(signum).name)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, stopped)
    open(os.path.join(out, "up-" + name), "w").close()
    say(name, "sleeping")
    time.sleep(600)
replies = []
for endpoint in [e for e in os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",") if e]:
    host, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + 120  # the pserver's container may start later
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall((name + "\\n").encode())
                replies.append(conn.makefile().readline().strip())
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    say(name, "got", repr(replies[-1]), "from", endpoint)
with open(os.path.join(out, "result-" + name + ".txt"), "w") as f:
    f.write(name + " sum=" + str(total) + " NUM_PASS=" + os.environ.get("NUM_PASS", "")
            + " pservers=" + ";".join(replies) + "\\n")
say(name, "done")
"""


@pytest.fixture(scope="module")
def engine():
    # overlay2 where this kernel mounts it: vfs copies the whole image for every container.
    with docker_engine("overlay2" if overlay_works() else "vfs") as engine:
        yield engine


@pytest.fixture(autouse=True)
def no_container_left(request):
    """Each test starts with no container (a test that failed leaves none to the next)."""
    yield
    if "engine" in request.fixturenames:
        engine = request.getfixturevalue("engine")
        left = engine.run("ps", "--all", "--quiet").stdout.split()
        if left:
            engine.run("rm", "--force", *left)


@pytest.fixture(scope="module")
def image(engine, tmp_path_factory) -> str:
    """A trainer image built in the engine with ``docker build``, FROM the base image (as a
    user builds theirs FROM PaddlePaddle's); it says which image it is."""
    context = tmp_path_factory.mktemp("image")
    (context / "Dockerfile").write_text(f"FROM {docker_base_image(engine)}\n"
                                        "COPY marker /etc/paddlecloud-test-image\n")
    (context / "marker").write_text(f"{IMAGE}\n")
    engine.run("build", "-t", IMAGE, str(context),
               env={"DOCKER_BUILDKIT": "0"})  # the classic builder: this client has no buildx
    return IMAGE


def dirs_make(root: Path) -> SimpleNamespace:
    pkg = root / "demo"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAIN_PY)
    (root / "in").mkdir()
    (root / "in" / "data.txt").write_text("1 2 3\n4\n")
    return SimpleNamespace(root=root, pkg=pkg, input=root / "in", output=root / "out")


@pytest.fixture
def dirs(tmp_path) -> SimpleNamespace:
    return dirs_make(tmp_path)


def train_args(dirs, *extra: str, image: str = IMAGE, entry: str | None = "python train.py"):
    args = ["local", "train", "--package-path", str(dirs.pkg), "--input", str(dirs.input),
            "--output", str(dirs.output), "--image", image]
    if entry is not None:
        args += ["--entry", entry]
    return [*args, *extra]


def containers(engine) -> list[str]:
    """Every container of the engine, in any state."""
    return engine.run("ps", "--all", "--format", "{{.Names}} {{.Status}}").stdout.splitlines()


def lines_of(stdout: str, name: str) -> list[str]:
    prefix = f"{name} | "
    return [line.removeprefix(prefix).rstrip() for line in stdout.splitlines()
            if line.startswith(prefix)]


def env_printed(stdout: str, name: str) -> dict[str, str]:
    return dict(line.removeprefix("env ").split("=", 1) for line in lines_of(stdout, name)
                if line.startswith("env "))


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def default_signals() -> None:
    """In the child: default handlers for the signals a test sends it (a test run started in
    the background may ignore SIGINT, and the child would inherit that)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


# --- running ----------------------------------------------------------------------------------

def test_a_trainer_runs_in_the_image(cli, dirs, engine, image):
    """The seed's form (--module demo.train, -e NUM_PASS=4), in a container of the image."""
    started = time.monotonic()
    result = cli(*train_args(dirs, "--module", "demo.train", "-e", "NUM_PASS=4",
                             "--e=LR=0.1", entry=None), env=engine.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines()[0] == (
        f"Running demo in Docker containers of {IMAGE}: 0 pserver(s), 1 trainer(s); "
        f"output and logs (node_N/) in {dirs.output}")
    assert result.stdout.endswith("trainer-0 exited 0\nDone: every trainer exited 0\n")
    printed = lines_of(result.stdout, "trainer-0")
    assert f"image {IMAGE} uid 0 gid 0 cwd /train/package" in printed
    assert printed[-1] == "trainer-0 done"
    env = env_printed(result.stdout, "trainer-0")
    # The -e variables, and PaddleCloud's, with the paths as the container sees them.
    assert (env["NUM_PASS"], env["LR"]) == ("4", "0.1")
    assert (env["TRAINING_ROLE"], env["PADDLE_TRAINER_ID"], env["TRAINER_ID"],
            env["PADDLE_TRAINERS_NUM"], env["JOB_NAME"]) == ("TRAINER", "0", "0", "1", "demo")
    assert (env["PADDLE_OUTPUT_DIR"], env["PADDLE_INPUT_DIR"], env["PADDLE_PFS_HOME"],
            env["PYTHONPATH"]) == ("/train/output", "/train/input", "/train/input",
                                   "/train/package")
    assert env["PADDLE_CURRENT_ENDPOINT"].startswith("127.0.0.1:")
    assert env["PADDLE_MASTER"].startswith("127.0.0.1:")  # collective: no pserver
    assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == ""
    # The output on the host, and the log as on the portal.
    assert (dirs.output / "result-trainer-0.txt").read_text() == \
        "trainer-0 sum=10 NUM_PASS=4 pservers=\n"
    log = (dirs.output / "node_0" / "train.log").read_text()
    assert log.splitlines() == printed
    assert containers(engine) == []
    assert processes_naming(str(dirs.output)) == []
    print(f"one trainer in Docker: {time.monotonic() - started:.1f} s")


def test_trainers_talk_to_the_pserver(cli, dirs, engine, image):
    result = cli(*train_args(dirs, "--trainers", "2", "--pservers", "1", "-e", "NUM_PASS=2"),
                 env=engine.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 pserver(s), 2 trainer(s)" in result.stdout.splitlines()[0]
    pserver_env = env_printed(result.stdout, "pserver-0")
    endpoint = pserver_env["PADDLE_CURRENT_ENDPOINT"]
    assert endpoint.startswith("127.0.0.1:")
    assert pserver_env["TRAINING_ROLE"] == "PSERVER"
    assert pserver_env["PADDLE_PSERVERS_IP_PORT_LIST"] == endpoint
    assert f"pserver-0 listening on {endpoint}" in lines_of(result.stdout, "pserver-0")
    for index in (0, 1):
        name = f"trainer-{index}"
        env = env_printed(result.stdout, name)
        assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == endpoint
        assert env["PADDLE_TRAINER_ID"] == str(index)
        assert f"{name} got 'ack {name} from pserver-0' from {endpoint}" in \
            lines_of(result.stdout, name)
        assert f"pserver-0 served {name}" in lines_of(result.stdout, "pserver-0")
        assert (dirs.output / f"result-{name}.txt").read_text() == \
            f"{name} sum=10 NUM_PASS=2 pservers=ack {name} from pserver-0\n"
    assert "PADDLE_MASTER" not in pserver_env
    trainer_ports = {env_printed(result.stdout, f"trainer-{i}")["PADDLE_CURRENT_ENDPOINT"]
                     for i in (0, 1)}
    assert len(trainer_ports | {endpoint}) == 3
    assert (dirs.output / "node_0" / "server.log").read_text().startswith("env ")
    # The pserver was stopped once the trainers were done, and its container removed.
    assert result.stdout.endswith("Done: every trainer exited 0\n")
    assert containers(engine) == []
    assert processes_naming(str(dirs.output)) == []


def test_a_failing_trainer_stops_the_others(cli, dirs, engine, image):
    result = cli(*train_args(dirs, "--trainers", "2", "--pservers", "1", "-e",
                             "FAIL=trainer-1"), env=engine.env, timeout=300)
    assert result.returncode == 3, result.stdout + result.stderr
    log = dirs.output / "node_1" / "train.log"
    assert result.stderr == (f"paddlectl: trainer-1 failed: exited with code 3; stopped the "
                             f"other replicas (its log: {log})\n")
    # The reason, in the trainer's words; the other trainer got the SIGTERM that stops it.
    assert "trainer-1 | trainer-1: cannot train: record 2 of data.txt is bad\n" in result.stdout
    assert "trainer-1: cannot train: record 2 of data.txt is bad\n" in log.read_text()
    assert "trainer-0 | trainer-0 stopped by SIGTERM\n" in result.stdout, result.stdout
    assert not list(dirs.output.glob("result-*"))
    assert containers(engine) == []
    assert processes_naming(str(dirs.output)) == []


def test_ctrl_c_leaves_no_container(cli, dirs, engine, image):
    process = subprocess.Popen(
        [paddlectl_path(), *train_args(dirs, "--trainers", "2", "--pservers", "1",
                                       "-e", "SLEEP=1")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cli.cwd,
        env=cli.environ(engine.env), preexec_fn=default_signals)
    server_log = dirs.output / "node_0" / "server.log"
    try:
        deadline = time.monotonic() + 180
        while (len(list(dirs.output.glob("up-trainer-*"))) < 2
               or "pserver-0 listening" not in _text(server_log)):
            assert time.monotonic() < deadline, "the replicas did not start"
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        assert len(containers(engine)) == 3
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
        stopping = time.monotonic() - interrupted
    finally:
        if process.poll() is None:  # stopped as it should be, not killed: no container left
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
    assert process.returncode == 130, stdout + stderr
    assert stderr == "paddlectl: interrupted: stopping every replica\n"
    # Each trainer got SIGTERM through its `docker run` and the container's init: stopped at
    # once, not killed after the grace.
    for name in ("trainer-0", "trainer-1"):
        assert f"{name} | {name} stopped by SIGTERM\n" in stdout, stdout
    assert "Terminated" not in stdout  # nothing from the shell around the command
    assert containers(engine) == []
    assert processes_naming(str(dirs.output)) == []
    print(f"Ctrl-C to paddlectl's exit: {stopping:.1f} s")


# --- mistakes -----------------------------------------------------------------------------------

def test_an_image_not_in_the_engine_is_explained(cli, dirs, engine, image):
    result = cli(*train_args(dirs, image="paddlecloud-test/no-such-image:1"), env=engine.env,
                 timeout=120)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(
        "paddlectl: local train: --image paddlecloud-test/no-such-image:1: Error response "
        "from daemon: ")
    assert "No such image: paddlecloud-test/no-such-image:1" in result.stderr
    assert result.stderr.endswith(
        "; paddlectl runs the images of this Docker engine and never pulls one: build or "
        "load it here (docker build, docker load, docker import) or docker pull it, then "
        "check with docker image ls\n")
    assert len(result.stderr.splitlines()) == 1
    assert not dirs.output.exists()  # nothing was started
    assert containers(engine) == []


# --- as a user who is not root --------------------------------------------------------------------

def test_what_a_container_writes_is_the_users(engine, image):
    """paddlectl run by a user who is not root (here nobody, allowed to use the engine): the
    replicas run as that uid:gid, so the output they write is the user's own."""
    work = Path(tempfile.mkdtemp(prefix="pc-nobody-"))
    try:
        dirs = dirs_make(work)
        for path in [work, *work.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        os.chown(engine.socket, NOBODY, -1)
        env = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(work),
               "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "LANG": "C.UTF-8",
               "DOCKER_HOST": engine.env["DOCKER_HOST"],
               "DOCKER_CONFIG": str(work / ".docker")}
        # This checkout's interpreter is under /root (mode 0700): the user may search
        # directories (CAP_DAC_READ_SEARCH), and has no other privilege.
        result = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
             paddlectl_path(), *train_args(dirs, "--module", "train", entry=None)],
            capture_output=True, text=True, env=env, cwd=work, timeout=300)
    finally:
        os.chown(engine.socket, 0, -1)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"image {IMAGE} uid {NOBODY} gid {NOBODY} cwd /train/package" in \
            lines_of(result.stdout, "trainer-0")
        assert env_printed(result.stdout, "trainer-0")["HOME"] == "/tmp"
        for path in (dirs.output, dirs.output / "result-trainer-0.txt",
                     dirs.output / "node_0" / "train.log"):
            assert (path.stat().st_uid, path.stat().st_gid) == (NOBODY, NOBODY), path
        assert containers(engine) == []
    finally:
        shutil.rmtree(work)


# --- the engine itself ----------------------------------------------------------------------------

def test_a_private_engine_leaves_nothing_behind():
    """docker_engine's promise: whatever runs in it, nothing is left once it is closed: no
    process, container, mount or directory."""
    with docker_engine() as engine:
        root = engine.root
        engine.run("import", str(base_rootfs()), "rootfs:1")
        engine.run("run", "--detach", "--network", "host", "--name", "left-running",
                   "rootfs:1", "sleep", "1000")
        assert containers(engine) != []
        pid = engine.process.pid
    mounted = Path("/proc/self/mountinfo").read_text()
    assert str(root) not in mounted
    assert not root.exists()
    assert not Path(f"/proc/{pid}").exists()
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit()
                and str(root).encode() in _cmdline(p)]


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
