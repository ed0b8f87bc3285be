"""The example trainer packages in examples/, run for real the way the local backend runs them:
one process per replica, ``sh -c ENTRY`` in a copy of the package, with the environment
contract (paddlecloud_core/contract.py) on free 127.0.0.1 ports and nothing else of the test
run's own."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from paddlecloud_core.layout import checkpoints_rel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SHARD_LINE = re.compile(r"^trainer (\d+)/(\d+) reads \d+ shards: (.*)$", re.MULTILINE)


@dataclass
class Replica:
    role: str
    index: int
    process: subprocess.Popen
    log: Path

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Job:
    entry: str
    pkg: Path
    output: Path
    pfs_home: Path
    base_env: dict[str, str]
    unstarted: list[tuple[str, int, dict[str, str]]]  # (role, index, contract environment)
    replicas: list[Replica] = field(default_factory=list)

    def start(self, *roles: str) -> None:
        """Start the replicas of ``roles`` (all that are left when none is given) as the local
        backend does: ``sh -c ENTRY`` in the package copy, in a session of its own, output to
        ``node_INDEX/train.log`` or ``server.log`` in the output directory."""
        for role, index, env in list(self.unstarted):
            if roles and role not in roles:
                continue
            self.unstarted.remove((role, index, env))
            kind = "train" if role == "trainer" else "server"
            log = self.output / f"node_{index}" / f"{kind}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as out:
                process = subprocess.Popen(["sh", "-c", self.entry], cwd=self.pkg,
                                           env={**self.base_env, **env},
                                           stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
            self.replicas.append(Replica(role, index, process, log))

    def wait_for_output(self, replica: Replica, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in replica.output():
            if replica.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{replica.name} never printed {text!r}\n{self.logs()}")
            time.sleep(0.05)

    @property
    def trainers(self) -> list[Replica]:
        return [r for r in self.replicas if r.role == "trainer"]

    def logs(self) -> str:
        return "\n".join(f"===== {r.name} (exit {r.process.returncode}) =====\n"
                         f"{r.output()[-6000:]}" for r in self.replicas)

    def kill(self) -> None:
        for replica in self.replicas:
            if replica.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(replica.process.pid, signal.SIGKILL)
                replica.process.wait()

    def wait(self, timeout: float) -> None:
        """Until every replica exited; fails (after killing the rest) on timeout."""
        deadline = time.monotonic() + timeout
        for replica in self.replicas:
            try:
                replica.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"{replica.name} still ran after {timeout:.0f}s\n{self.logs()}")

    def assert_all_exited_0(self) -> None:
        codes = {r.name: r.process.returncode for r in self.replicas}
        assert all(code == 0 for code in codes.values()), f"exit codes {codes}\n{self.logs()}"

    def metrics(self, relpath: str = "metrics.jsonl") -> list[dict]:
        """The lines of a metrics file in the output: fit_a_line's trainer 0 reports into
        ``node_0/metrics.jsonl`` (paddlecloud_sdk.report), ps_numpy writes ``metrics.jsonl``;
        not those the SDK reports after each checkpoint (``checkpoint``: not the trainer's)."""
        path = self.output / relpath
        assert path.is_file(), f"no {path}\n{self.logs()}"
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [line for line in lines if "checkpoint" not in line]

    def shards_read(self) -> dict[int, list[str]]:
        """Trainer id -> the shard files it says it read."""
        read = {}
        for replica in self.trainers:
            found = SHARD_LINE.findall(replica.output())
            assert len(found) == 1, f"{replica.name} did not list its shards\n{self.logs()}"
            trainer_id, _, files = found[0]
            assert int(trainer_id) == replica.index
            read[replica.index] = files.split()
        return read


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def replica_envs(trainers: int, pservers: int, passes: int, output: Path, pfs_home: Path,
                 pfs_public: Path, job_name: str) -> list[tuple[str, int, dict[str, str]]]:
    """(role, index, environment) of every replica, pservers first, as the contract says."""
    ports = free_ports(trainers + pservers + (0 if pservers else 1))
    trainer_eps = [f"127.0.0.1:{p}" for p in ports[:trainers]]
    pserver_eps = [f"127.0.0.1:{p}" for p in ports[trainers:trainers + pservers]]
    master = None if pservers else f"127.0.0.1:{ports[-1]}"
    common = {
        "JOB_NAME": job_name,
        "JOB_NAMESPACE": "paddle-alice",
        "PADDLE_CLOUD_CURRENT_DATACENTER": "datacenter1",
        "TRAINERS": str(trainers),
        "PADDLE_TRAINERS_NUM": str(trainers),
        "PADDLE_INIT_NUM_GRADIENT_SERVERS": str(trainers),
        "PADDLE_NNODES": str(trainers),
        "PADDLE_INIT_NUM_PASSES": str(passes),
        "PADDLE_INIT_USE_GPU": "0",
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(pserver_eps),
        "PADDLE_INIT_PSERVERS": ",".join(e.rsplit(":", 1)[0] for e in pserver_eps),
        "PADDLE_INIT_PORTS_NUM": "1",
        "PADDLE_INIT_PORTS_NUM_FOR_SPARSE": "0",
        "PADDLE_TRAINER_ENDPOINTS": ",".join(trainer_eps),
        "PADDLE_OUTPUT_DIR": str(output),
        "PADDLE_PFS_HOME": str(pfs_home),
        "PADDLE_PFS_PUBLIC": str(pfs_public),
        "PADDLE_CHECKPOINT_DIR": "/".join((str(pfs_home), *checkpoints_rel(job_name))),
        "PADDLE_KEEP_CHECKPOINTS": "3",
        "PYTHONUNBUFFERED": "1",
        "PYTHONWARNINGS": "ignore:No ccache found:UserWarning",
        "GLOG_minloglevel": "1",
    }

    def own(endpoint: str) -> dict[str, str]:
        host, port = endpoint.rsplit(":", 1)
        init_port = pserver_eps[0].rsplit(":", 1)[1] if pserver_eps else port
        return {"PADDLE_CURRENT_ENDPOINT": endpoint, "POD_IP": host, "PADDLE_PORT": port,
                "PADDLE_INIT_PORT": init_port}

    envs = []
    for index, endpoint in enumerate(pserver_eps):
        envs.append(("pserver", index, {**common, **own(endpoint), "TRAINING_ROLE": "PSERVER",
                                        "PADDLE_PSERVER_ID": str(index)}))
    for index, endpoint in enumerate(trainer_eps):
        env = {**common, **own(endpoint), "TRAINING_ROLE": "TRAINER", "TRAINER_ID": str(index),
               "PADDLE_TRAINER_ID": str(index), "PADDLE_INIT_TRAINER_ID": str(index)}
        if master:
            env["PADDLE_MASTER"] = master
        envs.append(("trainer", index, env))
    return envs


def prepare(tmp_path: Path, example: str, entry: str, *, trainers: int, pservers: int = 0,
            passes: int = 3) -> Job:
    """A job running ``examples/EXAMPLE``, laid out as the local backend does it: a private
    copy of the package, the user's PFS home with the job's output directory in it, and for each
    replica a clean environment: the contract, plus PATH with this interpreter first, HOME,
    LANG and PYTHONPATH. Nothing of the test run's own environment."""
    pkg = tmp_path / "job" / "pkg"
    shutil.copytree(EXAMPLES / example, pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "output"))
    pfs_home = tmp_path / "pfs" / "home" / "alice"
    output = pfs_home / "jobs" / example / "output"
    output.mkdir(parents=True)
    public = tmp_path / "pfs" / "public"
    public.mkdir(parents=True)
    base = {
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(pfs_home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONPATH": str(pkg),
    }
    envs = replica_envs(trainers, pservers, passes, output, pfs_home, public,
                        job_name=example.replace("_", "-"))
    return Job(entry=entry, pkg=pkg, output=output, pfs_home=pfs_home, base_env=base,
               unstarted=envs)


@pytest.fixture
def jobs():
    """Every job a test launched is killed at the end, whatever happened."""
    started: list[Job] = []
    yield started
    for job in started:
        job.kill()


def require(*modules: str) -> None:
    """Fail, never skip, when the examples' own requirements are not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        names = ", ".join("paddlepaddle" if m == "paddle" else m for m in missing)
        pytest.fail(f"{names} not installed in this environment: the examples need "
                    "them. Install the examples extra: pip install -e '.[examples]' "
                    "(or: pip install paddlepaddle numpy)", pytrace=False)


def assert_shards_split(job: Job, trainers: int) -> None:
    read = job.shards_read()
    assert sorted(read) == list(range(trainers))
    everything = sorted(p.name for p in (job.pfs_home / "datasets").glob("*/part-*.npz"))
    assert everything, "no dataset was generated"
    all_read = [name for names in read.values() for name in names]
    assert len(all_read) == len(set(all_read)), f"trainers shared shards: {read}"
    assert sorted(all_read) == everything, f"the trainers did not cover all shards: {read}"
    for trainer_id, names in read.items():
        assert names == [n for i, n in enumerate(everything) if i % trainers == trainer_id]


def assert_loss_went_down(job: Job, relpath: str = "metrics.jsonl",
                          keys=("step", "loss", "trainer", "pass")) -> tuple[float, float]:
    metrics = job.metrics(relpath)
    assert metrics, f"{relpath} is empty\n{job.logs()}"
    for line in metrics:
        assert set(line) == set(keys), line
    steps = [m["step"] for m in metrics]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
    first, last = metrics[0]["loss"], metrics[-1]["loss"]
    assert last < first, f"the loss went from {first} to {last}\n{job.logs()}"
    return first, last


# fit_a_line's trainer 0 reports with paddlecloud_sdk.report, beside its log.
REPORTED = ("node_0/metrics.jsonl", ("step", "time", "loss"))
FINISHED = re.compile(r"^trainer 0 finished (\d+) passes, (\d+) steps", re.MULTILINE)


def assert_reported_every_step(job: Job, passes: int) -> None:
    """One line per step, steps 1, 2, … counting on across passes, at increasing times; only
    trainer 0 reports."""
    [trainer_0] = [r for r in job.trainers if r.index == 0]
    [(done, steps)] = FINISHED.findall(trainer_0.output())
    assert int(done) == passes
    metrics = job.metrics(REPORTED[0])
    assert [m["step"] for m in metrics] == list(range(1, int(steps) + 1))
    times = [m["time"] for m in metrics]
    assert times == sorted(times) and time.time() - 300 < times[0]
    reported = sorted(p.relative_to(job.output).as_posix() for p in job.output.rglob("*")
                      if "metrics" in p.name)
    assert reported == ["node_0/metrics.jsonl"], reported


@pytest.mark.timeout(120)
def test_fit_a_line_two_trainers(tmp_path, jobs):
    require("paddle", "numpy")
    job = prepare(tmp_path, "fit_a_line", "python train.py", trainers=2, passes=3)
    jobs.append(job)
    job.start()
    job.wait(timeout=90)
    job.assert_all_exited_0()
    first, last = assert_loss_went_down(job, *REPORTED)
    assert last < first / 10
    assert_reported_every_step(job, passes=3)
    assert_shards_split(job, trainers=2)
    model = job.output / "model"
    for name in ("fit_a_line.pdparams", "inference.json", "inference.pdiparams",
                 "summary.json"):
        assert (model / name).is_file(), f"no model/{name}\n{job.logs()}"
    summary = json.loads((model / "summary.json").read_text())
    assert summary["test_loss"] < 0.1


@pytest.mark.timeout(120)
def test_fit_a_line_one_trainer(tmp_path, jobs):
    require("paddle", "numpy")
    job = prepare(tmp_path, "fit_a_line", "python train.py", trainers=1, passes=2)
    jobs.append(job)
    job.start()
    job.wait(timeout=90)
    job.assert_all_exited_0()
    assert_loss_went_down(job, *REPORTED)
    assert_reported_every_step(job, passes=2)
    assert_shards_split(job, trainers=1)
    assert (job.output / "model" / "fit_a_line.pdparams").is_file()


@pytest.mark.timeout(120)
def test_ps_numpy_two_pservers_two_trainers(tmp_path, jobs):
    require("numpy")
    job = prepare(tmp_path, "ps_numpy", "python main.py", trainers=2, pservers=2, passes=3)
    jobs.append(job)
    # The trainers start first: they must wait for the pservers.
    job.start("trainer")
    for trainer in job.trainers:
        job.wait_for_output(trainer, "waiting for pserver")
    job.start("pserver")
    job.wait(timeout=90)
    job.assert_all_exited_0()
    first, last = assert_loss_went_down(job)
    assert last < first / 10
    assert_shards_split(job, trainers=2)
    model = job.output / "model"
    assert (model / "params.npy").is_file(), job.logs()
    summary = json.loads((model / "summary.json").read_text())
    assert summary["test_loss"] < 0.1
    for replica in job.replicas:
        if replica.role == "pserver":
            assert "trainers done: [0, 1]" in replica.output()


@pytest.mark.timeout(60)
def test_ps_numpy_pserver_exits_0_on_sigterm(tmp_path, jobs):
    require("numpy")
    # Only the pserver: no trainer will ever say done, so only the signal can end it.
    job = prepare(tmp_path, "ps_numpy", "python main.py", trainers=1, pservers=1)
    jobs.append(job)
    job.start("pserver")
    [pserver] = job.replicas
    job.wait_for_output(pserver, "listens on")
    # dash forks python rather than exec it: signal python itself (what Kubernetes does to a
    # container's process), so that sh's exit code is python's.
    sh = pserver.process.pid
    children = Path(f"/proc/{sh}/task/{sh}/children").read_text().split()
    os.kill(int(children[0]) if children else sh, signal.SIGTERM)
    job.wait(timeout=20)
    assert pserver.process.returncode == 0, pserver.output()
    assert "stopping" in pserver.output()
    assert "pserver 0 exits after 0 rounds" in pserver.output()


def test_ps_numpy_a_trainer_restarted_between_its_pushes_goes_on_with_its_pservers(
        monkeypatch):
    """A trainer killed after pushing a step to one pserver and before the other is restarted
    (its pservers kept): the pserver that applied that round answers its push again at once,
    the other takes the new push in place of nothing (or of its old run's) and ends the round;
    neither waits for a round the other trainer will never push (they did, deadlocked)."""
    require("numpy")
    import threading

    import numpy as np

    monkeypatch.syspath_prepend(str(EXAMPLES / "ps_numpy"))
    monkeypatch.delitem(sys.modules, "pserver", raising=False)
    import pserver

    def push(shard, trainer: int, value: float, round_: int) -> dict:
        answer = {}
        thread = threading.Thread(target=lambda: answer.update(shard.handle(
            {"op": "push", "trainer": trainer, "round": round_}, np.full(1, value))[0]),
            daemon=True)
        thread.start()
        return {"thread": thread, "answer": answer}

    stop = threading.Event()
    first, second = (pserver.Shard(1, 2, stop) for _ in range(2))
    try:
        # Round 0: both trainers pushed to the first pserver; trainer 0 died before the second.
        done = [push(first, 0, 1.0, 0), push(first, 1, 3.0, 0)]
        waiting = push(second, 1, 3.0, 0)
        for each in done:
            each["thread"].join(5)
            assert each["answer"] == {"ok": True, "round": 1}
        assert first.params.tolist() == [-pserver.LEARNING_RATE * 2.0]
        # Its next run pushes round 0 again to both.
        again = push(first, 0, 5.0, 0)
        again["thread"].join(5)
        assert again["answer"] == {"ok": True, "round": 1}  # applied already: not again
        assert first.params.tolist() == [-pserver.LEARNING_RATE * 2.0]
        completes = push(second, 0, 5.0, 0)
        for each in (completes, waiting):
            each["thread"].join(5)
            assert each["answer"] == {"ok": True, "round": 1}
        assert second.params.tolist() == [-pserver.LEARNING_RATE * 4.0]
        # A push ahead of the pserver is refused, saying so.
        reply, _ = first.handle({"op": "push", "trainer": 1, "round": 3}, np.full(1, 1.0))
        assert reply == {"ok": False, "error": "trainer 1 pushed for round 4 but this pserver "
                                               "is at round 1"}
    finally:
        stop.set()


def test_the_helper_builds_the_portals_environment(tmp_path):
    """The environment these tests give the examples is the one paddlecloud_core/contract.py gives
    replicas, so the examples rely on nothing the portal does not set."""
    from paddlecloud_core.contract import Paths, Topology, replica_env

    envs = replica_envs(2, 2, 3, tmp_path / "out", tmp_path / "home", tmp_path / "public",
                        job_name="ps-numpy")
    by_role = {(role, index): env for role, index, env in envs}
    topology = Topology(
        pservers=tuple(by_role["pserver", i]["PADDLE_CURRENT_ENDPOINT"] for i in range(2)),
        trainers=tuple(by_role["trainer", i]["PADDLE_CURRENT_ENDPOINT"] for i in range(2)),
        master=None)
    paths = Paths(output=str(tmp_path / "out"), pfs_home=str(tmp_path / "home"),
                  pfs_public=str(tmp_path / "public"),
                  checkpoints=str(tmp_path / "home" / "jobs" / "ps-numpy" / "checkpoints"))
    job = SimpleNamespace(env={}, name="ps-numpy", trainers=2, passes=3, gpu=0,
                          keep_checkpoints=3, uid="", resume_from="",  # as replica_envs builds them
                          datacenter=SimpleNamespace(name="datacenter1"))
    for (role, index), env in by_role.items():
        assert env == replica_env(job, role, index, topology, paths, "paddle-alice")

    envs = replica_envs(2, 0, 3, tmp_path / "out", tmp_path / "home", tmp_path / "public",
                        job_name="fit-a-line")
    trainers = tuple(env["PADDLE_CURRENT_ENDPOINT"] for _, _, env in envs)
    master = envs[0][2]["PADDLE_MASTER"]
    assert master not in trainers
    job.name = "fit-a-line"
    paths = dataclasses.replace(paths, checkpoints=str(
        tmp_path / "home" / "jobs" / "fit-a-line" / "checkpoints"))
    for role, index, env in envs:
        assert env == replica_env(job, role, index,
                                  Topology(pservers=(), trainers=trainers, master=master),
                                  paths, "paddle-alice")
