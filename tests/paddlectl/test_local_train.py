"""``paddlectl local train`` as users run it: the installed console script in a subprocess,
without any config file or portal. The replicas are real local processes (no Docker engine:
a fake ``docker`` whose ``info`` fails is first on PATH); the Docker mode is tested here as the
command lines it builds, and end to end against a fake ``docker`` client that records them;
test_local_train_docker.py runs it in a real Docker engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from paddlecloud_core.contract import RESERVED_ENV, Paths, Topology, replica_env
from paddlectl.local import IN_CONTAINER_SCRIPT, docker_argv, module_resolve, plan_build
from tests.processes import processes_naming

from .conftest import paddlectl_path

# Writes what it was given to the output dir, then: fails or waits as FAIL/HANG say.
TRAINER = """\
import json, os, signal, sys, time
out = os.environ["PADDLE_OUTPUT_DIR"]
role = os.environ["TRAINING_ROLE"]
index = os.environ["PADDLE_TRAINER_ID" if role == "TRAINER" else "PADDLE_PSERVER_ID"]
name = ("trainer-" if role == "TRAINER" else "pserver-") + index
with open(os.path.join(out, "env-" + name + ".json.tmp"), "w") as f:
    json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv,
               "pid": os.getpid(), "pgid": os.getpgrp()}, f)
os.replace(os.path.join(out, "env-" + name + ".json.tmp"),
           os.path.join(out, "env-" + name + ".json"))
print("hello from", name, flush=True)
print(name, "to stderr", file=sys.stderr, flush=True)
fail = os.environ.get("FAIL")
if fail == name:
    count = (int(os.environ["PADDLE_TRAINERS_NUM"])
             + len([e for e in os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",") if e]))
    deadline = time.monotonic() + 30
    while (len([n for n in os.listdir(out) if n.endswith(".json")]) < count
           and time.monotonic() < deadline):
        time.sleep(0.05)
    if os.environ.get("CODE") == "KILL":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(int(os.environ["CODE"]))
if fail or role == "PSERVER" or os.environ.get("HANG"):
    signal.pause()  # until stopped
with open(os.path.join(out, "model-" + index + ".txt"), "w") as f:
    f.write("trained by " + name)
"""

FAKE_DOCKER = """\
#!{python}
# A docker client without an engine behind it: `info` answers as $FAKE_DOCKER_INFO says; `run`
# records its arguments, prints a line, and exits $FAKE_DOCKER_CODE (a pserver waits to be
# stopped); `ps` and `rm` see the containers of the `run`s that did not end by themselves (a
# killed client leaves its container behind) and record their arguments, as `image` does.
import json, os, signal, sys, time
args = sys.argv[1:]
record = os.environ.get("FAKE_DOCKER_RECORD")
containers = (record or "/nonexistent") + ".containers"
if record and args[:1] != ["info"]:
    with open(record, "a") as f:
        f.write(json.dumps(sys.argv) + "\\n")
if args[:1] == ["info"]:
    if os.environ.get("FAKE_DOCKER_INFO", "1") != "0":  # as Docker's client says it
        print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the "
              "docker daemon running?", file=sys.stderr)
    sys.exit(int(os.environ.get("FAKE_DOCKER_INFO", "1")))
if args[:1] == ["ps"] and os.path.isdir(containers):
    label = args[args.index("--filter") + 1].removeprefix("label=")
    state = " running" if "State" in " ".join(args) else ""
    for name in sorted(os.listdir(containers)):
        with open(os.path.join(containers, name)) as f:
            if f.read() == label:
                print(name + state)
if args[:1] == ["rm"] and os.path.isdir(containers):
    for name in args[1:]:
        if os.path.exists(os.path.join(containers, name)):
            os.unlink(os.path.join(containers, name))
if args[:1] == ["run"]:
    env = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-e")
    container = None
    if record:
        os.makedirs(containers, exist_ok=True)
        container = os.path.join(containers, args[args.index("--name") + 1])
        with open(container, "w") as f:
            f.write(args[args.index("--label") + 1])
    ready = (record or "/nonexistent") + ".pserver-up"
    if env["TRAINING_ROLE"] == "TRAINER" and record and env.get("PADDLE_PSERVERS_IP_PORT_LIST"):
        for _ in range(500):  # like a real trainer, wait for the pserver to be up
            if os.path.exists(ready):
                break
            time.sleep(0.02)
    print("container of", env["TRAINING_ROLE"], flush=True)
    if env["TRAINING_ROLE"] == "PSERVER":
        if record:
            open(ready, "w").close()
        signal.pause()
    if container:
        os.unlink(container)  # --rm
    sys.exit(int(os.environ.get("FAKE_DOCKER_CODE", "0")))
"""


@pytest.fixture
def dirs(tmp_path) -> SimpleNamespace:
    pkg = tmp_path / "demo"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAINER)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "data.txt").write_text("1 2 3\n")
    return SimpleNamespace(pkg=pkg, input=tmp_path / "in", output=tmp_path / "out",
                           root=tmp_path)


def fake_docker(directory: Path) -> Path:
    bin_dir = directory / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable))
    docker.chmod(0o755)
    return docker


@pytest.fixture
def no_engine(dirs) -> dict:
    """A docker client on PATH whose ``docker info`` fails, as on this machine."""
    docker = fake_docker(dirs.root)
    return {"PATH": f"{docker.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_DOCKER_INFO": "1", "FAKE_DOCKER_RECORD": str(dirs.root / "docker.jsonl")}


def train(cli, dirs, *extra: str, env: dict | None = None, entry="python train.py",
          timeout: float = 60) -> subprocess.CompletedProcess:
    args = ["local", "train", "--package-path", str(dirs.pkg), "--input", str(dirs.input),
            "--output", str(dirs.output)]
    if entry is not None:
        args += ["--entry", entry]
    return cli(*args, *extra, env=env, timeout=timeout)


def seen(dirs, name: str) -> dict:
    return json.loads((dirs.output / f"env-{name}.json").read_text())


def contract_env(role: str, index: int, env: dict, dirs, trainers: int, pservers: int,
                 extra: dict, name: str = "demo") -> dict:
    """What paddlecloud_core.contract gives the replica for the topology it was given."""
    topology = Topology(
        pservers=tuple(e for e in env["PADDLE_PSERVERS_IP_PORT_LIST"].split(",") if e),
        trainers=tuple(env["PADDLE_TRAINER_ENDPOINTS"].split(",")),
        master=env.get("PADDLE_MASTER") if not pservers else None)
    job = SimpleNamespace(name=name, env=extra, datacenter=SimpleNamespace(name="local"),
                          trainers=trainers, passes=1, gpu=0, keep_checkpoints=3, uid="",
                          resume_from="")
    paths = Paths(output=str(dirs.output), pfs_home=str(dirs.input),
                  pfs_public=str(dirs.input), checkpoints=f"{dirs.output}/checkpoints")
    return replica_env(job, role, index, topology, paths, "local")


def env_of(argv: list[str]) -> dict:
    """The -e variables of a docker command line."""
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")


def gone(pid: int) -> bool:
    """The process has ended and was reaped (or is a zombie about to be)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def group_empty(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("module", ["demo.train", "train"])
def test_module_form_of_a_collective_job(cli, dirs, no_engine, module):
    """--module demo.train with --package-path ./demo runs demo/train.py, as the seed shows;
    without pservers the job is collective, with PADDLE_MASTER."""
    result = train(cli, dirs, "--module", module, env=no_engine, entry=None)
    assert result.returncode == 0, result.stderr
    got = seen(dirs, "trainer-0")
    assert got["argv"][0] == str(dirs.pkg / "train.py")
    env = got["env"]
    want = contract_env("trainer", 0, env, dirs, 1, 0, {})
    assert {k: env.get(k) for k in want} == want
    assert {k for k in env if k in RESERVED_ENV} == {k for k in want if k in RESERVED_ENV}
    assert env["PADDLE_MASTER"].startswith("127.0.0.1:")
    assert env["PADDLE_MASTER"] != env["PADDLE_CURRENT_ENDPOINT"]
    assert "trainer-0 | hello from trainer-0\n" in result.stdout

    # A second run into the same output replaces its logs.
    assert train(cli, dirs, "--module", module, env=no_engine, entry=None).returncode == 0
    assert (dirs.output / "node_0" / "train.log").read_text() == \
        "hello from trainer-0\ntrainer-0 to stderr\n"


def test_a_failing_trainer_stops_the_others(cli, dirs, no_engine):
    result = train(cli, dirs, "--trainers", "2", "--pservers", "1", "-e", "FAIL=trainer-1",
                   "-e", "CODE=3", env=no_engine)
    assert result.returncode == 3
    log = dirs.output / "node_1" / "train.log"
    assert result.stderr == (f"paddlectl: trainer-1 failed: exited with code 3; stopped the "
                             f"other replicas (its log: {log})\n")
    assert "trainer-1 | hello from trainer-1\n" in result.stdout
    for name in ("pserver-0", "trainer-0", "trainer-1"):
        got = seen(dirs, name)
        assert gone(got["pid"]), name
        assert group_empty(got["pgid"]), name
    assert processes_naming("replica_runner.py", str(dirs.output)) == []
    assert not (dirs.output / "model-0.txt").exists()


def test_a_killed_trainer_is_explained(cli, dirs, no_engine):
    # (through /bin/sh -c: the shell reports 128+9)
    result = train(cli, dirs, "--trainers", "2", "-e", "FAIL=trainer-0", "-e", "CODE=KILL",
                   env=no_engine)
    assert result.returncode == 128 + signal.SIGKILL
    assert result.stderr.startswith("paddlectl: trainer-0 failed: killed (SIGKILL, exit 137): "
                                    "often the out-of-memory killer")
    assert gone(seen(dirs, "trainer-1")["pid"])
    assert processes_naming("replica_runner.py", str(dirs.output)) == []


def test_command_not_found_is_explained(cli, dirs, no_engine):
    result = train(cli, dirs, env=no_engine, entry="no-such-trainer-command")
    assert result.returncode == 127
    log = dirs.output / "node_0" / "train.log"
    assert result.stderr == ("paddlectl: trainer-0 failed: command not found (exit 127): check "
                             f"the job's entry command (its log: {log})\n")
    assert "no-such-trainer-command" in (dirs.output / "node_0" / "train.log").read_text()


def test_ctrl_c_stops_every_replica(cli, dirs, no_engine):
    args = [paddlectl_path(), "local", "train", "--package-path", str(dirs.pkg), "--entry",
            "python train.py", "--input", str(dirs.input), "--output", str(dirs.output),
            "--trainers", "2", "--pservers", "1", "-e", "HANG=1"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=cli.environ(no_engine), cwd=cli.cwd)
    try:
        deadline = time.monotonic() + 30
        while len(list(dirs.output.glob("env-*.json"))) < 3:
            assert time.monotonic() < deadline, "the replicas did not start"
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert stderr == "paddlectl: interrupted: stopping every replica\n"
    for name in ("pserver-0", "trainer-0", "trainer-1"):
        got = seen(dirs, name)
        assert gone(got["pid"]), name
        assert group_empty(got["pgid"]), name
    assert processes_naming("replica_runner.py", str(dirs.output)) == []


# --- mistakes -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--package-path", "{root}/nope", "--module", "train"],
     "local train: --package-path {root}/nope: no such directory"),
    (["--package-path", "{pkg}/train.py", "--module", "train"],
     "local train: --package-path {pkg}/train.py: not a directory"),
    (["--package-path", "{pkg}", "--module", "train", "--entry", "python train.py"],
     "local train: give exactly one of --module MOD (runs python -m MOD) and --entry CMD "
     "(a shell command)"),
    (["--package-path", "{pkg}"],
     "local train: give exactly one of --module MOD (runs python -m MOD) and --entry CMD "
     "(a shell command)"),
    (["--package-path", "{pkg}", "--module", "demo/train.py"],
     "local train: --module demo/train.py: not a Python module name like demo.train"),
    (["--package-path", "{pkg}", "--entry", " "],
     "local train: --entry is empty: give the command that starts a trainer, e.g. "
     "--entry 'python train.py'"),
    (["--module", "train"], "local train: --package-path DIR is required"),
    (["--package-path", "{pkg}", "--module", "train", "--input", "{root}/nope"],
     "local train: --input {root}/nope: no such directory"),
    (["--package-path", "{pkg}", "--module", "train", "--input", ""],
     "local train: --input DIR is required"),
    (["--package-path", "{pkg}", "--module", "train", "--output", "{pkg}/train.py"],
     "local train: --output {pkg}/train.py: not a directory"),
    (["--package-path", "{pkg}", "--module", "train", "--trainers", "0"],
     "local train: --trainers 0: at least 1"),
    (["--package-path", "{pkg}", "--module", "train", "--pservers", "-1"],
     "local train: --pservers -1: 0 or more"),
    (["--package-path", "{pkg}", "--module", "train", "-e", "NUM_PASS"],
     "local train: -e NUM_PASS: give NAME=VALUE, e.g. -e NUM_PASS=4"),
    (["--package-path", "{pkg}", "--module", "train", "-e", "1PASS=4"],
     "local train: -e 1PASS=4: '1PASS' is not a valid variable name (letters, digits and "
     "'_', not starting with a digit)"),
    (["--package-path", "{pkg}", "--module", "train", "-e", "PADDLE_TRAINER_ID=5"],
     "local train: -e PADDLE_TRAINER_ID=5: PADDLE_TRAINER_ID is reserved: paddlectl sets it "
     "for every replica (the environment contract)"),
    (["--package-path", "{pkg}", "--module", "train", "--env", "PADDLE_INPUT_DIR=/x"],
     "local train: -e PADDLE_INPUT_DIR=/x: PADDLE_INPUT_DIR is reserved: paddlectl sets it "
     "for every replica (the environment contract)"),
    (["--package-path", "{pkg}", "--module", "train", "--trainers", "two"],
     "local: argument --trainers/-trainers: invalid int value: 'two' "
     "(see `paddlectl help local`)"),
    (["--package-path", "{pkg}", "--module", "train", "--jobname", "Big_Job"],
     "local train: --jobname Big_Job: '_' is not allowed (Kubernetes object names cannot "
     "contain it); use '-'"),
])
def test_mistakes_are_one_line_and_start_nothing(cli, dirs, no_engine, args, message):
    where = {"root": dirs.root, "pkg": dirs.pkg}
    full = [a.format(**where) for a in args]
    if "--input" not in full:
        full += ["--input", str(dirs.input)]
    if "--output" not in full:
        full += ["--output", str(dirs.output)]
    result = cli("local", "train", *full, env=no_engine)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"paddlectl: {message.format(**where)}\n"
    assert not dirs.output.exists()


def test_the_action_is_required(cli):
    result = cli("local")
    assert result.returncode == 1
    assert result.stderr == ("paddlectl: local: the following arguments are required: ACTION "
                             "(see `paddlectl help local`)\n")
    result = cli("local", "run")
    assert result.returncode == 1 and "invalid choice: 'run'" in result.stderr


def test_help_shows_the_usage(cli):
    result = cli("help", "local")
    assert result.returncode == 0
    assert result.stdout.startswith(
        "usage: paddlectl local train --package-path DIR (--module MOD | --entry CMD)\n"
        "       --input DIR --output DIR [--image IMG] [-e K=V]... [--trainers N]\n")
    assert "docker run --rm -v INPUT:/train/input -v OUTPUT:/train/output" in result.stdout
    assert "--network host --init --pull never" in result.stdout
    assert "Nothing is\npulled" in result.stdout
    assert "--output DIR" in result.stdout and "--no-docker" in result.stdout
    assert cli("local", "train", "--help").stdout == result.stdout


def test_paddlectl_needs_no_django():
    code = ("import sys, paddlectl.cli, paddlectl.commands.local, paddlectl.local\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'rest_framework', 'celery') or m in ('jobs.models', 'jobs.engine')))")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, check=True)
    assert result.stdout == "[]\n"


# --- Docker -------------------------------------------------------------------------------------

def test_docker_command_line_of_a_trainer(dirs):
    """As the seed: docker run --rm -v <input>:/train/input -v <output>:/train/output
    -v <package>:/train/package -e NUM_PASS=4 <image> python ..."""
    dirs.output.mkdir()
    plan = plan_build(package=str(dirs.pkg), module="demo.train", entry=None,
                      input_dir=str(dirs.input), output_dir=str(dirs.output),
                      image="paddlepaddle/paddle:2.6.1", env=["NUM_PASS=4"], trainers=2,
                      pservers=1)
    topology = Topology(pservers=("127.0.0.1:7000",),
                        trainers=("127.0.0.1:7001", "127.0.0.1:7002"), master=None)
    assert docker_argv(plan, "trainer", 1, topology, "paddlectl-demo-abc-trainer-1") == [
        "docker", "run", "--rm",
        "-v", f"{dirs.input}:/train/input",
        "-v", f"{dirs.output}:/train/output",
        "-v", f"{dirs.pkg}:/train/package",
        "--network", "host", "--init", "--pull", "never", "-w", "/train/package",
        "--name", "paddlectl-demo-abc-trainer-1",
        "-e", "NUM_PASS=4",
        "-e", "JOB_NAME=demo",
        "-e", "JOB_NAMESPACE=local",
        "-e", "PADDLE_CLOUD_CURRENT_DATACENTER=local",
        "-e", "TRAINERS=2",
        "-e", "PADDLE_TRAINERS_NUM=2",
        "-e", "PADDLE_INIT_NUM_GRADIENT_SERVERS=2",
        "-e", "PADDLE_NNODES=2",
        "-e", "PADDLE_INIT_NUM_PASSES=1",
        "-e", "PADDLE_INIT_USE_GPU=0",
        "-e", "PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:7000",
        "-e", "PADDLE_INIT_PSERVERS=127.0.0.1",
        "-e", "PADDLE_INIT_PORT=7000",
        "-e", "PADDLE_INIT_PORTS_NUM=1",
        "-e", "PADDLE_INIT_PORTS_NUM_FOR_SPARSE=0",
        "-e", "PADDLE_TRAINER_ENDPOINTS=127.0.0.1:7001,127.0.0.1:7002",
        "-e", "PADDLE_CURRENT_ENDPOINT=127.0.0.1:7002",
        "-e", "POD_IP=127.0.0.1",
        "-e", "PADDLE_PORT=7002",
        "-e", "PADDLE_OUTPUT_DIR=/train/output",
        "-e", "PADDLE_PFS_HOME=/train/input",
        "-e", "PADDLE_PFS_PUBLIC=/train/input",
        "-e", "PADDLE_CHECKPOINT_DIR=/train/output/checkpoints",
        "-e", "PADDLE_KEEP_CHECKPOINTS=3",
        "-e", "PYTHONUNBUFFERED=1",
        "-e", "PYTHONWARNINGS=ignore:No ccache found:UserWarning",
        "-e", "GLOG_minloglevel=1",
        "-e", "TRAINING_ROLE=TRAINER",
        "-e", "TRAINER_ID=1",
        "-e", "PADDLE_TRAINER_ID=1",
        "-e", "PADDLE_INIT_TRAINER_ID=1",
        "-e", "PADDLE_INPUT_DIR=/train/input",
        "-e", "PYTHONPATH=/train/package",
        "paddlepaddle/paddle:2.6.1", "/bin/sh", "-c", IN_CONTAINER_SCRIPT, "replica",
        "python", "-m", "train",
    ]


def test_docker_command_line_of_a_pserver_and_of_an_entry(dirs):
    dirs.output.mkdir()
    plan = plan_build(package=str(dirs.pkg), module=None, entry="python train.py --lr 0.1",
                      input_dir=str(dirs.input), output_dir=str(dirs.output), trainers=1,
                      pservers=1, jobname="fit")
    topology = Topology(pservers=("127.0.0.1:7000",), trainers=("127.0.0.1:7001",),
                        master=None)
    argv = docker_argv(plan, "pserver", 0, topology, "c0", docker="/usr/bin/docker")
    assert argv[:3] == ["/usr/bin/docker", "run", "--rm"]
    assert argv[-8:] == ["paddlepaddle/paddle:2.6.1", "/bin/sh", "-c", IN_CONTAINER_SCRIPT,
                         "replica", "/bin/sh", "-c", "python train.py --lr 0.1"]
    assert "--user" not in argv and "--label" not in argv
    env = env_of(argv)
    assert (env["TRAINING_ROLE"], env["PADDLE_PSERVER_ID"], env["PADDLE_CURRENT_ENDPOINT"],
            env["JOB_NAME"]) == ("PSERVER", "0", "127.0.0.1:7000", "fit")
    assert "PADDLE_TRAINER_ID" not in env and "PADDLE_MASTER" not in env
    # Collective: trainer 0's PADDLE_MASTER, as paddlecloud_core.contract gives it.
    plan = plan_build(package=str(dirs.pkg), module="train", entry=None,
                      input_dir=str(dirs.input), output_dir=str(dirs.output))
    topology = Topology(pservers=(), trainers=("127.0.0.1:7001",), master="127.0.0.1:7009")
    argv = docker_argv(plan, "trainer", 0, topology, "c1")
    assert "PADDLE_MASTER=127.0.0.1:7009" in argv and argv[-3:] == ["python", "-m", "train"]


def test_docker_command_line_as_a_user_who_is_not_root(dirs):
    """paddlectl run by a user who is not root runs its containers as that uid:gid, so that
    what they write is the user's; such a uid has no home in the image: HOME=/tmp, unless -e
    gives one."""
    dirs.output.mkdir()
    topology = Topology(pservers=(), trainers=("127.0.0.1:7001",), master="127.0.0.1:7009")
    for given, home in (([], "/tmp"), (["HOME=/work"], "/work")):
        plan = plan_build(package=str(dirs.pkg), module="train", entry=None,
                          input_dir=str(dirs.input), output_dir=str(dirs.output), env=given)
        argv = docker_argv(plan, "trainer", 0, topology, "c1", label="paddlectl.run=demo-1",
                           user="1000:1001")
        name_at = argv.index("--name")
        assert argv[name_at:name_at + 6] == ["--name", "c1", "--label", "paddlectl.run=demo-1",
                                             "--user", "1000:1001"]
        assert env_of(argv)["HOME"] == home


def test_with_a_docker_engine_each_replica_is_a_docker_run(cli, dirs):
    docker = fake_docker(dirs.root)
    record = dirs.root / "docker.jsonl"
    env = {"PATH": f"{docker.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "FAKE_DOCKER_INFO": "0", "FAKE_DOCKER_RECORD": str(record)}
    result = train(cli, dirs, "--module", "demo.train", "--pservers", "1", "--image", "img:1",
                   "-e", "NUM_PASS=4", env=env, entry=None)
    assert result.returncode == 0, result.stderr
    assert "in Docker containers" in result.stdout.splitlines()[0]
    assert "trainer-0 | container of TRAINER\n" in result.stdout
    assert "pserver-0 | container of PSERVER\n" in result.stdout
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    runs = {call[call.index("--name") + 1]: call for call in calls if call[1] == "run"}
    assert len(runs) == 2
    for name, call in runs.items():
        role = "trainer" if name.endswith("trainer-0") else "pserver"
        assert call[:9] == [str(docker), "run", "--rm", "-v", f"{dirs.input}:/train/input",
                            "-v", f"{dirs.output}:/train/output",
                            "-v", f"{dirs.pkg}:/train/package"]
        assert call[-4:] == ["replica", "python", "-m", "train"]
        given = env_of(call)
        topology = Topology(pservers=(given["PADDLE_PSERVERS_IP_PORT_LIST"],),
                            trainers=(given["PADDLE_TRAINER_ENDPOINTS"],), master=None)
        plan = plan_build(package=str(dirs.pkg), module="demo.train", entry=None,
                          input_dir=str(dirs.input), output_dir=str(dirs.output),
                          image="img:1", env=["NUM_PASS=4"], pservers=1)
        label = call[call.index("--label") + 1]
        assert label.startswith("paddlectl.run=demo-")
        assert call == docker_argv(plan, role, 0, topology, name, docker=str(docker),
                                   label=label)
    assert len({call[call.index("--label") + 1] for call in runs.values()}) == 1
    # The image was looked for before anything started.
    assert calls[0] == [str(docker), "image", "inspect", "--format", "{{.Id}}", "img:1"]
    # The pserver's `docker run` was stopped when the trainer was done, and its container
    # (which this fake client leaves behind) removed.
    pserver = next(name for name in runs if name.endswith("pserver-0"))
    assert [str(docker), "rm", "--force", pserver] in calls
    assert not list((dirs.root / "docker.jsonl.containers").iterdir())
    assert (dirs.output / "node_0" / "train.log").read_text() == "container of TRAINER\n"


def test_docker_run_failing_is_explained(cli, dirs):
    docker = fake_docker(dirs.root)
    env = {"PATH": f"{docker.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "FAKE_DOCKER_INFO": "0", "FAKE_DOCKER_CODE": "125"}
    result = train(cli, dirs, env=env)
    assert result.returncode == 125
    assert result.stderr.startswith("paddlectl: trainer-0 failed: docker run itself failed "
                                    "(exit 125): check the image and Docker")


def test_no_docker_and_an_unreachable_engine(cli, dirs, no_engine):
    why = ("`docker info` failed: Cannot connect to the Docker daemon at "
           "unix:///var/run/docker.sock. Is the docker daemon running?")
    result = train(cli, dirs, "--image", "img:1", env=no_engine)
    assert result.returncode == 0
    assert result.stderr == (f"paddlectl: warning: no Docker engine here ({why}): running "
                             "local processes; --image is not used\n")
    assert (dirs.output / "model-0.txt").exists()
    # No image asked for: still told why it runs processes, not containers (not with -q).
    result = train(cli, dirs, env=no_engine)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("running the replicas as local processes, not in "
                                    f"containers: no Docker engine here ({why})\n")
    assert "no Docker engine" not in train(cli, dirs, "-q", env=no_engine).stdout
    # --no-docker: local processes even though an engine answers.
    result = train(cli, dirs, "--no-docker", env={**no_engine, "FAKE_DOCKER_INFO": "0"})
    assert result.returncode == 0 and "as local processes" in result.stdout
    assert not (dirs.root / "docker.jsonl").exists()


def test_module_names_as_in_the_seeds(tmp_path):
    demo = tmp_path / "demo"
    demo.mkdir()
    assert module_resolve(demo, "demo.train") == "train"  # the seeds' form
    assert module_resolve(demo, "train") == "train"
    assert module_resolve(demo, "other.train") == "other.train"
    (demo / "demo").mkdir()  # a package of the same name inside: taken as is
    assert module_resolve(demo, "demo.train") == "demo.train"
