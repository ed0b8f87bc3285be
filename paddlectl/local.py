"""``paddlectl local train``: a training on this machine, without a portal.

With a Docker engine, each replica is a ``docker run`` as the seed shows, of an image that must
be in that engine already (nothing is pulled), on the host's network (the endpoints on
127.0.0.1 reach each other as local processes do), as the user running paddlectl (so that what
a container writes to the output directory is theirs), its container removed whatever
happens. Without one, each is a local process started, watched and stopped as the portal's
local backend does it (``paddlecloud_core.processes``: the same runner, process groups, log
files and exit records). Either way with the same environment
(``paddlecloud_core.contract.replica_env``). Nothing here needs Django, a database or a config
file.

Built in two steps: ``plan_build`` checks the arguments and says what will run (pure, but for
looking at the directories it names); ``plan_run`` runs it, streams every replica's output
prefixed with its name and returns the exit status.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from paddlecloud_client.errors import PaddlectlError, UsageError
from paddlecloud_core.contract import (
    ENV_NAME_RE,
    JOB_NAME_MAX,
    KEEP_CHECKPOINTS,
    RESERVED_ENV,
    STOP_GRACE_SECONDS,
    Paths,
    Topology,
    replica_env,
)
from paddlecloud_core.layout import CHECKPOINTS_DIR, log_relpath
from paddlecloud_core.processes import (
    attempt_observe,
    attempt_start,
    entry_argv,
    exit_reason,
    free_endpoints,
    group_live,
    groups_stop,
    process_env,
)
from paddlecloud_core.spec import DEFAULT_IMAGE, name_problem
from paddlecloud_core.status import Status

DATACENTER = "local"  # PADDLE_CLOUD_CURRENT_DATACENTER and JOB_NAMESPACE of a local training
INPUT_VARIABLE = "PADDLE_INPUT_DIR"  # --input, as the replicas see it (local trainings only)
RESERVED = RESERVED_ENV | {INPUT_VARIABLE}
POLL_SECONDS = 0.1
MAX_REPLICAS = 256

# Where the seed's ``docker run`` mounts the three directories.
IN_CONTAINER = {"input": "/train/input", "output": "/train/output",
                "package": "/train/package"}

# How a replica's command runs in its container (``sh -c SCRIPT replica COMMAND...``): in a process
# group of its own, which gets the SIGTERM that stops the replica (``docker run`` forwards it to
# the container's init, the init to this shell), as a local replica's group does; once stopped,
# the shell waits until the whole group has ended, so that a trainer under ``sh -c`` still saves
# its work (``docker run`` is killed, and its container removed, after the grace). The
# replica's exit status is the command's (and the shell keeps quiet about how it ended).
IN_CONTAINER_SCRIPT = (
    'trap \'stopping=1; kill -s TERM -- "-$entry" 2>/dev/null '
    '|| kill -s TERM "$entry" 2>/dev/null\' TERM; '
    'if command -v setsid >/dev/null; then setsid "$@" & else "$@" & fi; entry=$!; '
    'while :; do wait "$entry" 2>/dev/null; code=$?; kill -s 0 "$entry" 2>/dev/null || break; '
    'done; '
    'while [ -n "$stopping" ] && kill -s 0 -- "-$entry" 2>/dev/null; do sleep 0.1; done; '
    'exit "$code"')

RUN_LABEL = "paddlectl.run"  # every container of a run carries it (``run_label``)
DOCKER_REMOVE_SECONDS = 30  # at most, to remove a run's containers once their clients ended
DOCKER_START_SECONDS = 120  # at most, for a ``docker run`` being stopped to start its container

MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class TrainingFailed(PaddlectlError):
    """A replica failed: the message names it; the exit status is its own."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


# --- what to run ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalDatacenter:
    name: str = DATACENTER


@dataclass(frozen=True)
class LocalJob:
    """What ``replica_env`` reads of a job."""

    name: str
    trainers: int
    pservers: int = 0
    passes: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    gpu: int = 0
    keep_checkpoints: int = KEEP_CHECKPOINTS
    datacenter: LocalDatacenter = LocalDatacenter()
    uid: str = ""  # no runs of a name here: the output directory is the user's
    resume_from: str = ""  # nor other jobs' checkpoints


@dataclass(frozen=True)
class Plan:
    job: LocalJob
    package: Path  # absolute
    input: Path  # absolute
    output: Path  # absolute
    module: str | None  # as given (``demo.train``)
    entry: str | None  # a shell command
    image: str

    def python_module(self) -> str | None:
        return module_resolve(self.package, self.module) if self.module else None

    def command(self, python: str = "python") -> list[str]:
        """The replica's command: ``python -m MOD``, or the entry through ``/bin/sh -c``."""
        module = self.python_module()
        return [python, "-m", module] if module else entry_argv(self.entry or "")

    def replicas(self) -> list[tuple[str, int]]:
        """(role, index) of every replica, pservers first (as the portal starts them)."""
        return ([("pserver", i) for i in range(self.job.pservers)]
                + [("trainer", i) for i in range(self.job.trainers)])


def module_resolve(package: Path, module: str) -> str:
    """The module to run with the package directory on the path. As in the seeds, a module
    may be named with the package's own name first (``--package-path ./demo --module
    demo.train`` runs ``demo/train.py``); a name found inside the package is taken as is."""
    first, _, rest = module.partition(".")
    inside = (package / f"{first}.py").exists() or (package / first).is_dir()
    if rest and not inside and first == package.name:
        return rest
    return module


def _job_name(package: Path) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", package.name.lower()).strip("-")[:JOB_NAME_MAX].strip("-")
    return name or "local"


def env_parse(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"local train: -e {pair}: give NAME=VALUE, e.g. -e NUM_PASS=4")
        if not ENV_NAME_RE.match(name):
            raise UsageError(f"local train: -e {pair}: {name!r} is not a valid variable name "
                             "(letters, digits and '_', not starting with a digit)")
        if name in RESERVED:
            raise UsageError(f"local train: -e {pair}: {name} is reserved: paddlectl sets it "
                             "for every replica (the environment contract)")
        env[name] = value
    return env


def _directory(flag: str, given: str | None, *, create: bool = False) -> Path:
    if not given:
        raise UsageError(f"local train: {flag} DIR is required")
    path = Path(given).expanduser().resolve()
    if path.is_dir():
        return path
    if path.exists():
        raise UsageError(f"local train: {flag} {given}: not a directory")
    if not create:
        raise UsageError(f"local train: {flag} {given}: no such directory")
    return path


def plan_build(*, package: str | None, module: str | None, entry: str | None,
               input_dir: str | None, output_dir: str | None, image: str | None = None,
               env: list[str] | None = None, trainers: int = 1, pservers: int = 0,
               passes: int = 1, jobname: str | None = None) -> Plan:
    """Check everything before anything starts; each mistake is one UsageError (exit 1).
    Creates nothing: ``--output`` is made by ``plan_run``."""
    pkg = _directory("--package-path", package)
    if (module is None) == (entry is None):
        raise UsageError("local train: give exactly one of --module MOD (runs python -m MOD) "
                         "and --entry CMD (a shell command)")
    if module is not None and not MODULE_RE.match(module):
        raise UsageError(f"local train: --module {module}: not a Python module name "
                         "like demo.train")
    if entry is not None and not entry.strip():
        raise UsageError("local train: --entry is empty: give the command that starts a "
                         "trainer, e.g. --entry 'python train.py'")
    input_path = _directory("--input", input_dir)
    output_path = _directory("--output", output_dir, create=True)
    if trainers < 1:
        raise UsageError(f"local train: --trainers {trainers}: at least 1")
    if pservers < 0:
        raise UsageError(f"local train: --pservers {pservers}: 0 or more")
    if trainers + pservers > MAX_REPLICAS:
        raise UsageError(f"local train: at most {MAX_REPLICAS} replicas on one machine")
    if passes < 1:
        raise UsageError(f"local train: --passes {passes}: at least 1")
    if jobname is not None and (problem := name_problem(jobname)) is not None:
        raise UsageError(f"local train: --jobname {jobname}: {problem}")
    job = LocalJob(name=jobname or _job_name(pkg), trainers=trainers, pservers=pservers,
                   passes=passes, env=env_parse(env or []))
    return Plan(job=job, package=pkg, input=input_path, output=output_path, module=module,
                entry=entry, image=image or DEFAULT_IMAGE)


def topology_new(plan: Plan) -> Topology:
    """Free ports on 127.0.0.1, all different; a collective job's master gets its own."""
    count = plan.job.pservers + plan.job.trainers + (0 if plan.job.pservers else 1)
    endpoints = free_endpoints(count)
    pservers = tuple(endpoints[:plan.job.pservers])
    trainers = tuple(endpoints[plan.job.pservers:plan.job.pservers + plan.job.trainers])
    master = None if plan.job.pservers else endpoints[-1]
    # No portal here, so no job master (a dataset is the portal's): no PADDLECLOUD_MASTER_*.
    return Topology(pservers=pservers, trainers=trainers, master=master, task_master=None)


def local_env(plan: Plan, role: str, index: int, topology: Topology, *,
              input_dir: str, output_dir: str) -> dict[str, str]:
    """The contract's environment of one replica, and the input directory. There is no PFS
    on this machine: the user's files are the input directory, so PADDLE_PFS_HOME and
    PADDLE_PFS_PUBLIC name it too; checkpoints are kept in the output directory."""
    paths = Paths(output=output_dir, pfs_home=input_dir, pfs_public=input_dir,
                  checkpoints=f"{output_dir.rstrip('/')}/{CHECKPOINTS_DIR}")
    env = replica_env(plan.job, role, index, topology, paths, DATACENTER)
    env[INPUT_VARIABLE] = input_dir
    return env


def replica_name(role: str, index: int) -> str:
    return f"{role}-{index}"


# --- Docker ---------------------------------------------------------------------------------------

def docker_problem(docker: str | None) -> str | None:
    """Why the Docker client ``docker`` (None: none on PATH) cannot run replicas here, in a
    few words for the user; None when ``docker info`` reaches an engine."""
    if not docker:
        return "no docker command on PATH"
    try:
        info = subprocess.run(  # noqa: S603 - the docker client found on PATH
            [docker, "info", "--format", "{{.ServerVersion}}"], stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    except OSError as exc:
        return f"{docker}: {exc.strerror or exc}"
    if info.returncode == 0:
        return None
    said = next((line.strip() for line in info.stderr.splitlines() if line.strip()), "")
    return f"`docker info` failed: {said}" if said else \
        f"`docker info` exited {info.returncode}"


def container_name(plan: Plan, role: str, index: int, run_id: str) -> str:
    return f"paddlectl-{plan.job.name}-{run_id}-{replica_name(role, index)}"


def run_label(plan: Plan, run_id: str) -> str:
    """The label every container of one run carries, by which they are found and removed."""
    return f"{RUN_LABEL}={plan.job.name}-{run_id}"


def docker_user() -> str | None:
    """``--user`` of the containers: the user running paddlectl, unless root (the image's own
    user then), so that what a replica writes to the output directory is theirs."""
    uid = os.getuid()
    return None if uid == 0 else f"{uid}:{os.getgid()}"


def docker_argv(plan: Plan, role: str, index: int, topology: Topology, name: str,
                docker: str = "docker", *, label: str | None = None,
                user: str | None = None) -> list[str]:
    """One replica as the seed's ``docker run``: the three directories mounted under
    /train, the environment as ``-e`` (the user's first, then the contract's, with the paths
    as the container sees them), the package as working directory and on PYTHONPATH. Also:
    the host's network, so that the endpoints on 127.0.0.1 reach each other (and an engine
    without a bridge network runs it); an init as PID 1 and the command in a process group
    of its own (``IN_CONTAINER_SCRIPT``), so that the replica gets the SIGTERM that stops it;
    never a pull (the image was checked: ``image_check``); the run's label;
    and with ``user``, that uid:gid, with HOME=/tmp (a uid the image does not know has /)
    unless -e sets HOME."""
    env = local_env(plan, role, index, topology, input_dir=IN_CONTAINER["input"],
                    output_dir=IN_CONTAINER["output"])
    env["PYTHONPATH"] = IN_CONTAINER["package"]
    argv = [docker, "run", "--rm",
            "-v", f"{plan.input}:{IN_CONTAINER['input']}",
            "-v", f"{plan.output}:{IN_CONTAINER['output']}",
            "-v", f"{plan.package}:{IN_CONTAINER['package']}",
            "--network", "host", "--init", "--pull", "never",
            "-w", IN_CONTAINER["package"], "--name", name]
    if label:
        argv += ["--label", label]
    if user:
        argv += ["--user", user]
        if "HOME" not in env:
            env["HOME"] = "/tmp"  # noqa: S108 - the container's own /tmp
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    return [*argv, plan.image, "/bin/sh", "-c", IN_CONTAINER_SCRIPT, "replica",
            *plan.command()]


def _docker(docker: str, *args: str, env: Mapping[str, str],
            timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([docker, *args], stdin=subprocess.DEVNULL,  # noqa: S603
                          capture_output=True, text=True, env=dict(env), timeout=timeout,
                          check=False)


def image_check(docker: str, image: str, env: Mapping[str, str]) -> None:
    """The image is in the engine: nothing is pulled (``--pull never``), and a missing image
    is said once, before anything starts, in Docker's words and with what to do."""
    try:
        found = _docker(docker, "image", "inspect", "--format", "{{.Id}}", image, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PaddlectlError(f"local train: --image {image}: cannot ask the Docker engine: "
                             f"{exc}") from None
    if found.returncode == 0:
        return
    said = " ".join(found.stderr.split()) or f"docker image inspect exited {found.returncode}"
    if "no such image" in said.lower():
        hint = ("paddlectl runs the images of this Docker engine and never pulls one: "
                "build or load it here (docker build, docker load, docker import) or "
                "docker pull it, then check with docker image ls")
    else:
        hint = "check the Docker engine (docker info)"
    raise PaddlectlError(f"local train: --image {image}: {said}; {hint}")


def _docker_started(docker: str, label: str, env: Mapping[str, str],
                    starting: Mapping[str, int]) -> None:
    """Wait until the container of each ``docker run`` (``starting``: its container's name and
    its process group) has started, or its client has ended. A client stopped while the
    engine creates its container would leave a container made after the run had cleaned up;
    one stopped before its container started would not pass the SIGTERM on."""
    deadline = time.monotonic() + DOCKER_START_SECONDS
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        while time.monotonic() < deadline:
            listed = _docker(docker, "ps", "--all", "--filter", f"label={label}",
                             "--format", "{{.Names}} {{.State}}", env=env)
            if listed.returncode != 0:
                return
            started = {line.split()[0] for line in listed.stdout.splitlines()
                       if len(line.split()) == 2 and line.split()[1] != "created"}
            if all(name in started or not group_live(pgid) for name, pgid in starting.items()):
                return
            time.sleep(POLL_SECONDS)


def _docker_remove(docker: str, label: str, env: Mapping[str, str]) -> None:
    """Remove every container of the run, and wait until they are gone. A ``docker run``
    that was killed leaves its container running; one whose client exited may still be being
    removed (``--rm``); one being created as its client was killed appears a moment later."""
    deadline = time.monotonic() + DOCKER_REMOVE_SECONDS
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        while True:
            listed = _docker(docker, "ps", "--all", "--quiet", "--filter", f"label={label}",
                             env=env)
            ids = listed.stdout.split()
            if listed.returncode != 0 or not ids or time.monotonic() > deadline:
                return
            _docker(docker, "rm", "--force", *ids, env=env)
            time.sleep(POLL_SECONDS)


# --- running --------------------------------------------------------------------------------------

def _python(path: str) -> str:
    """``python`` on the replicas' PATH, else ``python3``, else the one running paddlectl."""
    return shutil.which("python", path=path) or shutil.which("python3", path=path) \
        or sys.executable


@dataclass
class Replica:
    role: str
    index: int
    log: Path
    container: str | None = None
    pid: int | None = None
    code: int | None = None
    ended: bool = False
    stopped: bool = False
    offset: int = 0
    partial: bytes = b""

    @property
    def name(self) -> str:
        return replica_name(self.role, self.index)


class _Output:
    """Every replica's log as it grows, line by line, prefixed with the replica's name."""

    def __init__(self, replicas: list[Replica], stream: TextIO):
        self.replicas = replicas
        self.stream = stream
        self.width = max(len(r.name) for r in replicas)

    def pump(self, final: bool = False) -> None:
        for replica in self.replicas:
            try:
                with replica.log.open("rb") as log:
                    log.seek(replica.offset)
                    data = log.read()
            except OSError:
                continue
            replica.offset += len(data)
            lines = (replica.partial + data).split(b"\n")
            replica.partial = lines.pop()
            if (final and replica.partial) or len(replica.partial) > 65536:
                lines.append(replica.partial)
                replica.partial = b""
            prefix = f"{replica.name:<{self.width}} | "
            for line in lines:
                self.stream.write(prefix + line.decode("utf-8", "replace").rstrip("\r") + "\n")
        self.stream.flush()


def _failure(replica: Replica, docker: bool, alone: bool) -> TrainingFailed:
    code = replica.code
    if not replica.ended or code is None:
        reason, status = "vanished without an exit status", 1
    elif docker and code == 125:
        reason, status = "docker run itself failed (exit 125): check the image and Docker", 125
    else:
        reason = exit_reason(code)
        status = 128 - code if code < 0 else code if code < 256 else 1
    stopped = "" if alone else "; stopped the other replicas"
    return TrainingFailed(f"{replica.name} failed: {reason}{stopped} (its log: {replica.log})",
                          status)


@dataclass(frozen=True)
class DockerRun:
    """The containers of one run: the client that starts them, its environment, their label."""

    client: str
    env: Mapping[str, str]
    label: str


def _stop(replicas: list[Replica], docker: DockerRun | None) -> None:
    """Stop the replicas still running, and wait until every process group is empty (the
    runner of one that has ended may still be clearing its group). In Docker, once their
    containers exist, the SIGTERM to a ``docker run`` reaches its container's process (the
    client forwards it to the init); then every container of the run is removed, whatever
    state it is in."""
    live = [r for r in replicas if r.pid is not None and not r.ended and not r.stopped]
    for replica in live:
        replica.stopped = True
    if docker and live:
        _docker_started(docker.client, docker.label, docker.env,
                        {r.container: r.pid for r in live if r.container and r.pid})
    groups_stop([r.pid for r in replicas if r.pid is not None], STOP_GRACE_SECONDS)
    if docker and any(r.pid is not None for r in replicas):
        _docker_remove(docker.client, docker.label, docker.env)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def plan_run(plan: Plan, *, docker: str | None, stdout: TextIO, stderr: TextIO,
             info: Callable[[str], None], environ: Mapping[str, str] | None = None) -> int:
    """Start every replica (with ``docker``, the client's path: in containers), stream their
    output, wait for the trainers; 0 when every trainer exited 0. A failed replica raises
    TrainingFailed after the others are stopped; Ctrl-C (or SIGTERM, SIGHUP) stops them all
    and raises KeyboardInterrupt."""
    environ = dict(os.environ if environ is None else environ)
    # The user's environment, without what the contract sets; then the contract's.
    base = {k: v for k, v in environ.items() if k not in RESERVED}
    path = environ.get("PATH") or "/usr/bin:/bin"
    run_id = secrets.token_hex(3)
    engine = None
    if docker:
        engine = DockerRun(docker, {**base, "PATH": path}, run_label(plan, run_id))
        image_check(docker, plan.image, engine.env)  # before anything starts
    plan.output.mkdir(parents=True, exist_ok=True)
    topology = topology_new(plan)
    replicas = [Replica(role, index, plan.output / log_relpath(role, index))
                for role, index in plan.replicas()]
    output = _Output(replicas, stdout)
    pythonpath = [str(plan.package), *environ.get("PYTHONPATH", "").split(os.pathsep)]
    python = _python(path)
    run_dir = Path(tempfile.mkdtemp(prefix="paddlectl-local-"))
    handlers = {sig: signal.signal(sig, _raise_interrupt)
                for sig in (signal.SIGTERM, signal.SIGHUP)}
    handlers[signal.SIGINT] = signal.getsignal(signal.SIGINT)
    how = f"in Docker containers of {plan.image}" if docker else "as local processes"
    info(f"Running {plan.job.name} {how}: {plan.job.pservers} pserver(s), "
         f"{plan.job.trainers} trainer(s); output and logs (node_N/) in {plan.output}")
    try:
        try:
            for replica in replicas:
                replica.log.parent.mkdir(parents=True, exist_ok=True)
                if engine:
                    replica.container = container_name(plan, replica.role, replica.index,
                                                       run_id)
                    command = docker_argv(plan, replica.role, replica.index, topology,
                                          replica.container, engine.client,
                                          label=engine.label, user=docker_user())
                    env = dict(engine.env)
                else:
                    command = plan.command(python)
                    env = process_env(
                        local_env(plan, replica.role, replica.index, topology,
                                  input_dir=str(plan.input), output_dir=str(plan.output)),
                        path=path, home=environ.get("HOME") or str(Path.home()),
                        pythonpath=pythonpath, base=base)
                with replica.log.open("wb") as log:  # this run's log, not an earlier run's
                    replica.pid = attempt_start(run_dir, replica.name, 0, log.fileno(),
                                                command, cwd=plan.package, env=env)
            return _watch(replicas, run_dir, output, engine, info)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C waits for this
            stderr.write("paddlectl: interrupted: stopping every replica\n")
            stderr.flush()
            _stop(replicas, engine)
            output.pump(final=True)
            raise
    finally:
        _stop(replicas, engine)  # nothing is left behind, whatever happened
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        shutil.rmtree(run_dir, ignore_errors=True)


def _watch(replicas: list[Replica], run_dir: Path, output: _Output,
           docker: DockerRun | None, info: Callable[[str], None]) -> int:
    trainers = [r for r in replicas if r.role == "trainer"]
    while True:
        output.pump()
        for replica in replicas:
            if replica.ended or replica.stopped:
                continue
            seen = attempt_observe(run_dir, replica.name, 0)
            if seen.status == Status.EXITED:
                replica.ended, replica.code = True, seen.exit_code
            elif seen.status == Status.LOST:
                replica.ended, replica.code = True, None
            else:
                continue
            output.pump()
            if replica.code == 0:
                info(f"{replica.name} exited 0")
        failed = next((r for r in replicas if r.ended and r.code != 0), None)
        if failed is not None:
            _stop(replicas, docker)
            output.pump(final=True)
            raise _failure(failed, bool(docker), alone=len(replicas) == 1)
        if all(r.ended for r in trainers):
            _stop(replicas, docker)  # the pservers
            output.pump(final=True)
            info("Done: every trainer exited 0")
            return 0
        time.sleep(POLL_SECONDS)
