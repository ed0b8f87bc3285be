"""A sandboxed local replica's environment is on no command line: every user of the host can
read every process's (``ps``, ``/proc/PID/cmdline``), and a replica's environment holds
secrets — its job master's token (``PADDLECLOUD_MASTER_TOKEN``), whatever its job's ``env``
gives. Real replicas of a real job run under the real runner and bwrap while every command
line on the machine is watched; the replicas still get every variable exactly, and what starts
the sandbox from outside (the runner, bwrap) does not have it in its own environment either
(there ``LD_PRELOAD`` or ``PYTHONPATH`` would act outside the sandbox)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from jobs import engine
from jobs.backends.base import Status
from jobs.backends.local import backend as local
from jobs.backends.local.backend import LocalBackend, job_dir
from jobs.files import output_dir
from jobs.master import dispatch
from jobs.models import Job, Replica
from paddlecloud_core.contract import MASTER_TOKEN_VARIABLE, job_namespace, replica_env
from tests.factories import HOME, PACKAGE, package_write

pytestmark = pytest.mark.django_db

DATASET = f"{HOME}/data/part-*.txt"

# Says it is ready, waits to be told to go (the test watches the machine meanwhile), then
# writes a digest of each of its variables (never a value: the test's files stay clean).
REPLICA = """\
import hashlib, json, os, time
out = os.environ["PADDLE_OUTPUT_DIR"]
me = os.environ["PADDLE_TRAINER_ID"]
open(os.path.join(out, f"ready-{me}"), "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(out, "go")) and time.monotonic() < deadline:
    time.sleep(0.05)
with open(os.path.join(out, f"seen-{me}.json"), "w") as f:
    json.dump({name: hashlib.sha256(os.fsencode(value)).hexdigest()
               for name, value in os.environ.items()}, f)
"""


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Watch(threading.Thread):
    """Reads the command line of every process on the machine, again and again until
    stopped: which held a secret (pid, its command line's start), and whether it saw the
    job's runner with its ``--stdin-fd`` and the job's bwrap with its ``--args 0`` (what it
    must have seen to prove anything)."""

    def __init__(self, secrets: list[bytes], private: Path):
        super().__init__(daemon=True)
        self.secrets, self.private = secrets, str(private).encode()
        self.stopping = threading.Event()
        self.found: list[tuple[int, bytes]] = []
        self.runner = self.bwrap = False
        self.rounds = 0

    def run(self):
        while not self.stopping.is_set():
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if any(secret in cmdline for secret in self.secrets):
                    self.found.append((int(entry.name), cmdline[:200]))
                if self.private not in cmdline:
                    continue
                if b"replica_runner.py\0" in cmdline and b"\0--stdin-fd\0" in cmdline:
                    self.runner = True
                program = cmdline.split(b"\0", 1)[0]
                if program.endswith(b"/bwrap") and b"\0--args\x000\0" in cmdline:
                    self.bwrap = True
            self.rounds += 1

    def stop(self):
        self.stopping.set()
        self.join(30)


def outside_the_sandbox(pgid: int) -> list[int]:
    """The processes of a runner's group that are in our pid namespace: the runner, bwrap's
    outer process (those inside have a namespace of their own)."""
    ours = os.stat("/proc/self/ns/pid").st_ino
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and os.getpgid(int(entry.name)) == pgid
                    and os.stat(entry / "ns" / "pid").st_ino == ours):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def wait_for(check, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


@pytest.fixture
def job(alice, datacenter, pfs_home):
    """A job with a dataset (its replicas get its master's token) and awkward secret values
    in its env, two trainers, prepared on the local backend; stopped and cleaned up at the
    end, leaving no process or network behind."""
    assert local.sandboxing() is None, "this machine must make sandboxes (./dev installs bwrap)"
    package_write(pfs_home, REPLICA)
    (pfs_home / "data").mkdir()
    (pfs_home / "data" / "part-0.txt").write_text("a\nb\n")
    marker = uuid.uuid4().hex
    env = {"API_KEY": f"key {marker}-1 with spaces",
           "MULTILINE": f"line one\n{marker}-2\nline=three\n",
           "EQUALS": f"a={marker}-3==b",
           "UNICODE": f"clé ☃ 雪 {marker}-4",
           "DASHES": f"--setenv X {marker}-5",
           "EMPTY": ""}
    made = Job.objects.create(
        owner=alice, datacenter=datacenter, name="secrets", package=PACKAGE,
        entry="python train.py", image="img", trainers=2, pservers=0, dataset=DATASET,
        dataset_unit="file", env=env)
    for index in range(2):
        Replica.objects.create(job=made, role="trainer", index=index)
    backend = LocalBackend()
    engine.job_prepare(made, backend)
    yield made
    backend.stop(made, list(made.replicas.all()), grace=1)
    backend.cleanup(made)
    assert not job_dir(made).exists()


def test_a_replicas_secrets_are_on_no_command_line_and_it_gets_them_exactly(job):
    backend = LocalBackend()
    replicas = list(job.replicas.order_by("index"))
    topology = engine.job_topology(job, backend, replicas)
    envs = {r.name: replica_env(job, r.role, r.index, topology, backend.paths(job),
                                job_namespace(job.datacenter, job.owner.username))
            for r in replicas}
    token = dispatch.master_token(job)
    assert all(env[MASTER_TOKEN_VARIABLE] == token for env in envs.values())
    secrets = [token.encode()] + [value.encode() for name, value in job.env.items() if value]
    # Their unique parts too: a value cut up or quoted would still show those.
    secrets += [part.encode() for value in job.env.values() for part in value.split()
                if len(part) >= 32]
    out = output_dir(job)

    watch = Watch(secrets, job_dir(job))
    watch.start()
    try:
        started = [int(backend.start(job, r, envs[r.name]).split(":")[1]) for r in replicas]
        for replica in replicas:
            wait_for(lambda r=replica: (out / f"ready-{r.index}").exists()
                     or backend.observe(job, r).status != Status.RUNNING,
                     f"{replica.name} to start")
            assert backend.observe(job, replica).status == Status.RUNNING
        # The environments of what runs outside the sandbox: nothing of the replica's.
        for pgid in started:
            outside = outside_the_sandbox(pgid)
            assert pgid in outside and len(outside) >= 2, outside  # the runner, bwrap
            for pid in outside:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                assert not [s for s in secrets if s in environ], pid
                assert b"PYTHONPATH=" not in environ and b"PADDLE_" not in environ, pid
        rounds = watch.rounds
        wait_for(lambda: watch.rounds >= rounds + 2, "two more rounds of the watch")
    finally:
        watch.stop()
    assert watch.found == []
    assert watch.runner and watch.bwrap and watch.rounds >= 2  # it saw them, and read them

    (out / "go").touch()
    for replica in replicas:
        wait_for(lambda r=replica: backend.observe(job, r).status == Status.EXITED,
                 f"{replica.name} to end")
        assert backend.observe(job, replica).exit_code == 0
        seen = json.loads((out / f"seen-{replica.index}.json").read_text())
        expected = envs[replica.name]
        assert {name: seen.get(name) for name in expected} == {
            name: digest(value) for name, value in expected.items()}
    # Nor in any file the job or the backend wrote (its logs, the runners' logs).
    for path in [*out.rglob("*"), *(job_dir(job) / "run").rglob("*")]:
        if path.is_file():
            assert not [s for s in secrets if s in path.read_bytes()], path
