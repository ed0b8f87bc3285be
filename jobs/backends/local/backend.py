"""The local backend: each replica is a child process on the portal's machine.

Per job, privately under ``var/jobs/<uid>/`` (the job's uid, never its database id, which a
new database gives out again): a copy of the trainer package (``pkg/``) and the runners' pid
and exit files (``run/``). The packages of its ``requirements.txt`` are an environment shared
by the jobs that need the same (``envs.py``: ``var/envs/<datacenter>/<digest>/``).
In the owner's PFS home: ``jobs/<name>/output/``, with each replica's log in
``node_<index>/train.log`` (trainers) or ``node_<index>/server.log`` (pservers), as the seeds
show; the portal opens each log (``jobs.files.output_open``) and hands the runner the
descriptor.
Replicas run with the portal's Python first on PATH. CPU and memory requests are not
enforced on this backend. Starting, observing and stopping the processes is
``processes.py``, which ``paddlectl local train`` uses too; ``exits.py`` announces each
runner's end the moment it comes, so a job is synced when its replicas change, whichever
worker is alive (a runner whose worker died is taken by another within half a second).

A job with a dataset has a master, the portal's (docs/master.md): its replicas reach it at
``PADDLECLOUD_PORTAL_URL``, or, in a sandbox, through the job's relay (``relay.py``): a process
that listens on 127.0.0.1:80 in the job's network and forwards to the portal, started with the
job's first sandboxed replica and gone with the job's network. A session (a notebook:
``Job.session``, ``interactive.sessions``) gets the relay too: code in it submits jobs to the
portal as its owner (``Topology.session``).

Each replica runs in a sandbox (``sandbox.py``, bubblewrap) when the machine can make one
(``PADDLECLOUD_LOCAL_SANDBOX``: ``auto``, the default; ``bwrap`` to refuse to run without;
``off``): it sees the system and the portal's Python read-only, its package and requirements
read-only, its owner's home read-write and the public directory read-only — no ``var/``, no
other home, no portal environment, no other process — and a network of its job's own, where
its job's replicas reach each other on 127.0.0.1 and nothing else. ``requirements.txt`` is
installed from wheels only, by uv in a sandbox on the machine's network (no code of the
user's runs there), into its environment, which replicas see read-only. Without a sandbox every
replica runs as the portal's user and can read everything the portal can: for mutually
trusting users only, as the portal says when it starts.

A sandboxed replica never runs as root on the host. A portal that is root runs each user's
replicas as that user's own host uid and gid, ``HOME_IDS + the user's id`` (ids no account
uses: local builds' are ``buildah.BUILD_IDS``, below them), and gives the user's home to them
before the first job (``home_give``; only its owner may enter it): what a job writes there is
the user's, never root's, and a set-uid file a job leaves gives nobody root.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from paddlecloud_core.contract import (
    Paths,
    TaskMaster,
    Topology,
    master_token,
    master_url,
    pfs_paths,
    session_access,
)
from paddlecloud_core.layout import WORKSPACE, log_relpath, pfs_home, pfs_public
from paddlecloud_core.processes import (
    RUNNER,
    attempt_files,
    attempt_observe,
    attempt_start,
    entry_argv,
    free_endpoints,
    groups_stop,
    process_env,
    read_json,
)

from ...files import (
    checkpoints_dir,
    home_dir,
    home_give,
    output_dir,
    output_open,
    package_copy,
    tree_give,
)
from ..base import Backend, BackendError, Observation, Status
from ..buildah import package_build
from ..netns import (
    SandboxError,
    dir_locked,
    holder_kill,
    holders,
    netns_read,
    netns_start,
    netns_stop,
    process_argvs,
)
from .enter import exec_start
from .envs import env_ensure, env_path
from .exits import ExitWatch, exits_watch
from .ports import PortError, port_dial, socket_stream
from .relay import RELAY_PORT, RelayError, relay_start, relay_stop
from .sandbox import (
    SYSTEM_PATH,
    Bind,
    Sandbox,
    client_dirs,
    probe_dirs_left,
    probe_left,
    sandbox_command,
    sandbox_problem,
    stoppable,
)

HOME_IDS = 1_100_000_000


def home_ids(user) -> tuple[int, int]:
    """The host uid and gid of ``user``'s sandboxed replicas when the portal runs as root (and
    the owner of their homes)."""
    return HOME_IDS + user.pk, HOME_IDS + user.pk


def _as_owner() -> bool:
    """Whether replicas run as their owner's host uid (a portal that is root, sandboxing)."""
    return os.geteuid() == 0 and _sandboxed()


def job_dir(job) -> Path:
    return jobs_root() / str(job.uid)


def jobs_root() -> Path:
    return settings.VAR_DIR / "jobs"


def netns_file(private: Path) -> Path:
    """Where a job's network holder is recorded, in its private directory."""
    return private / "run" / "netns.pid"


def exits() -> ExitWatch:
    """This process's watch over the runners' exits (``exits.py``), its followers recorded
    in ``var/exits/``."""
    return exits_watch(jobs_root(), settings.VAR_DIR / "exits")


def relay_file(private: Path) -> Path:
    """Where the relay from a job's network to the portal is recorded."""
    return private / "run" / "relay.pid"


def portal_address() -> tuple[str, int]:
    """The portal's host and port on this machine (``PADDLECLOUD_PORTAL_URL``), where the
    relays forward to."""
    url = urlsplit(settings.PADDLECLOUD_PORTAL_URL)
    return url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80)


def _sandboxed() -> bool:
    """Whether replicas start in a sandbox (where one is required and cannot be made, they
    do not start at all: as if they did)."""
    try:
        return sandboxing() is None
    except BackendError:
        return True


def _relayed(job) -> bool:
    """Whether the job's replicas reach the portal: a job with a master (a dataset), and a
    session (whose code submits jobs as its owner)."""
    return bool(job.dataset or getattr(job, "session", ""))


def _portal_seen() -> str:
    """The portal as the job's replicas reach it: its own URL, or in a sandbox the job's
    relay, at the same path."""
    portal = settings.PADDLECLOUD_PORTAL_URL
    if _sandboxed():
        url = urlsplit(portal)
        portal = f"{url.scheme}://127.0.0.1:{RELAY_PORT}{url.path}"
    return portal


def master_access(job) -> TaskMaster | None:
    """Where the job's replicas reach its master (``_portal_seen``); None for a job without a
    dataset."""
    if not job.dataset:
        return None
    return TaskMaster(url=master_url(_portal_seen(), job.uid),
                      token=master_token(settings.SECRET_KEY, job.uid))


def _site(job) -> Path | None:
    """The job's environment (``envs.py``), if its package has requirements."""
    if not job.environment:
        return None
    site = env_path(job.datacenter, job.environment)
    return site if site.is_dir() else None


def _runner_env() -> dict[str, str]:
    """What a process outside the sandbox that starts one (the runner, bwrap) gets: nothing of
    the job's (bwrap reads it from its stdin, fed from memory), nothing of the portal's."""
    return {"PATH": SYSTEM_PATH, "LANG": os.environ.get("LANG", "C.UTF-8")}


def sandboxing() -> str | None:
    """Why replicas run without a sandbox (None: they run in one). Raises when a sandbox is
    required (``PADDLECLOUD_LOCAL_SANDBOX=bwrap``) and cannot be made."""
    mode = settings.PADDLECLOUD_LOCAL_SANDBOX  # auto, bwrap or off (checked by the settings)
    if mode == "off":
        return "PADDLECLOUD_LOCAL_SANDBOX is off"
    problem = sandbox_problem()
    if problem and mode == "bwrap":
        raise BackendError(f"local jobs must run in a sandbox (PADDLECLOUD_LOCAL_SANDBOX="
                           f"bwrap), and none can be made here: {problem}")
    return problem


def isolation_notice() -> tuple[bool, str]:
    """What the portal says when it starts about local jobs: (isolated, the sentence)."""
    try:
        problem = sandboxing()
    except BackendError as exc:
        return False, f"Local jobs will not start: {exc}"
    if problem is None:
        return True, ("Local jobs run in bubblewrap sandboxes: each sees only its package, its "
                      "owner's home and the public directory, and its job's own network")
    return False, ("WARNING: local jobs are not sandboxed (" + problem + "): they run as this "
                   "portal's user and can read everything it can, other users' homes and the "
                   "portal's secrets included. Use the local backend only for mutually "
                   "trusting users, or install bubblewrap (see docs/admin/security.md)")


def leftovers_stop(grace: float, live: Callable[[set[str]], set[str]] | None = None) -> int:
    """Stop what local jobs hold on this machine that no portal can reach any more, and
    return how many: job networks whose private directory is gone (its var/ removed, its job
    cleaned up by a portal killed half way) or whose directory records another holder (one
    started by a portal killed before it recorded it), probes' networks whose prober was
    killed (their directories removed too), and runners whose run directory is gone. With
    ``live`` (which of this portal's job uids are of jobs that may still run), also the
    networks of this portal's jobs that have ended or are gone (their release cut off).
    Another portal's living jobs, under its own var/, are left alone. Runs with every
    reconciliation, and with ``live`` as a worker starts (``worker_start``)."""
    stopped = 0
    root = jobs_root()
    found = holders()
    ours = {Path(label).name for _, _, label in found if Path(label).parent == root}
    alive = live(ours) if live is not None and ours else ours
    for pid, start, label in found:
        left = probe_left(label)
        private = Path(label)
        if private.is_absolute():
            if not private.is_dir():
                left = True
            elif private.parent == root and (private / "run").is_dir():
                with dir_locked(private / "run"):  # not one being started and recorded now
                    recorded = read_json(netns_file(private))
                    left = not recorded or recorded.get("pid") != pid
                if private.name not in alive:
                    _release(private)
                    left = True
        if left:
            holder_kill(pid, start)  # its relay watches it and goes with it
            stopped += 1
    for path in probe_dirs_left():  # what a killed prober's holder and sandboxes had used
        shutil.rmtree(path, ignore_errors=True)
    runners = [pid for pid, argv in process_argvs()  # each the leader of its own group
               if len(argv) > 3 and argv[1] == os.fsencode(RUNNER) and argv[2] == b"--state"
               and not os.path.isdir(argv[3])]
    groups_stop(runners, grace)
    return stopped + len(runners)


def worker_start(live: Callable[[set[str]], set[str]], grace: float) -> int:
    """What a worker does for local jobs as it starts: follow the runners that nobody follows
    (their followers died while no worker ran: those that ended are announced at once), and
    release every network nothing living owns (``leftovers_stop`` with ``live``: probes', and
    jobs' that ended). Returns how many of both."""
    return exits().adopt_all() + leftovers_stop(grace, live)


def _release(private: Path) -> None:
    """Let go of the network (and relay) a job's private directory records."""
    netns_stop(netns_file(private))
    relay_stop(relay_file(private))  # it ends with the network: this waits for it


class LocalBackend(Backend):
    placed_host = "127.0.0.1"

    # --- files -----------------------------------------------------------------------------

    def prepare(self, job, attempt: int = 0) -> None:
        private = job_dir(job)
        (private / "run").mkdir(parents=True, exist_ok=True)
        # Two starts of one job (a retried task beside a slow one) take turns.
        with (private / "prepare.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._prepare(job, private)

    def _prepare(self, job, private: Path) -> None:
        if _as_owner():
            home_give(job, home_ids(job.owner))

        pkg = private / "pkg"
        if not pkg.exists():
            tmp = private / "pkg.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            package_copy(job, tmp)
            if _as_owner():  # its replicas read it whatever the portal's umask
                tree_give(tmp, home_ids(job.owner))
            tmp.rename(pkg)

        if (pkg / "requirements.txt").is_file():
            with os.fdopen(output_open(job, "setup.log"), "ab") as out:
                env_ensure(job, pkg, out, sandboxed=sandboxing() is None)

    def paths(self, job) -> Paths:
        """In a sandbox, at their PFS paths, as on Kubernetes (the sandbox binds the home and
        the public directory there); without one, where they are on the disk."""
        try:
            sandboxed = sandboxing() is None
        except BackendError:  # a sandbox is required and cannot be made: start says so
            sandboxed = True
        if sandboxed:
            return pfs_paths(job.datacenter.name, job.owner.username, job.name)
        return Paths(output=str(output_dir(job)), pfs_home=str(home_dir(job)),
                     pfs_public=str(job.datacenter.public_path),
                     checkpoints=str(checkpoints_dir(job)))

    def image_build_problem(self, datacenter) -> str | None:
        if settings.PADDLECLOUD_LOCAL_BUILDS:
            return None
        return (f"datacenter {datacenter.name!r} would build on the portal's machine (its "
                "build steps in a network that reaches only the allowed package indexes): its "
                "administrator allows that with PADDLECLOUD_LOCAL_BUILDS=1")

    def image_build(self, build, dockerfile: str, log: int, auth, *, insecure: bool,
                    cancelled=lambda: "") -> str:
        """``paddlectl build`` on this machine: buildah, daemonless (``package_build``). Jobs
        here run as processes, not in images: they never wait for a build."""
        if (problem := self.image_build_problem(build.datacenter)) is not None:
            raise BackendError(problem)
        return package_build(build, dockerfile, log, auth, insecure=insecure,
                             cancelled=cancelled)

    def cleanup(self, job) -> None:
        self.release(job)
        shutil.rmtree(job_dir(job), ignore_errors=True)

    def release(self, job) -> None:
        _release(job_dir(job))

    def orphans_stop(self, datacenters, known, grace: float) -> int:
        root = jobs_root()
        if not root.is_dir():
            return leftovers_stop(grace)
        privates = list(root.iterdir())
        kept = known({private.name for private in privates})
        found = 0
        for private in privates:
            if private.name in kept:
                continue
            found += 1
            started = [read_json(pid_file) for pid_file in (private / "run").glob("*.pid")
                       if pid_file not in (netns_file(private), relay_file(private))]
            groups_stop([s["pid"] for s in started if s], grace)
            _release(private)
            shutil.rmtree(private, ignore_errors=True)
        return found + leftovers_stop(grace)

    # --- processes -------------------------------------------------------------------------

    def topology(self, job, replicas) -> Topology:
        master_file = job_dir(job) / "master"
        collective = not any(r.role == "pserver" for r in replicas)
        unset = [r for r in replicas if not r.endpoint]
        kept = [r.endpoint for r in replicas if r.endpoint]
        if collective and master_file.exists():
            kept.append(master_file.read_text())
        # Every replica (and a collective job's master) its own port: one job's replicas share
        # a network, its own or the machine's.
        fresh = free_endpoints(len(unset) + (collective and not master_file.exists()),
                               taken=kept)
        given = dict(zip(map(id, unset), fresh, strict=False))
        endpoints = [(r.role, r.endpoint or given[id(r)])
                     for r in sorted(replicas, key=lambda r: (r.role, r.index))]
        pservers = tuple(endpoint for role, endpoint in endpoints if role == "pserver")
        trainers = tuple(endpoint for role, endpoint in endpoints if role == "trainer")
        master = None
        if collective:
            if not master_file.exists():
                master_file.parent.mkdir(parents=True, exist_ok=True)
                master_file.write_text(fresh[-1])
            master = master_file.read_text()
        return Topology(pservers=pservers, trainers=trainers, master=master,
                        task_master=master_access(job),
                        session=session_access(settings.SECRET_KEY, job, _portal_seen()))

    def _files(self, job, replica) -> tuple[Path, Path]:
        return attempt_files(job_dir(job) / "run", replica.name)

    def start(self, job, replica, env: dict[str, str]) -> str:
        pid_file, _ = self._files(job, replica)
        started = read_json(pid_file)
        if started and started.get("attempt") == replica.attempt:
            return f"pid:{started['pid']}"  # this attempt is running or has run: not twice
        pkg = job_dir(job) / "pkg"
        site = _site(job)
        # The client packages this portal imports, as in a sandbox (another checkout's may be
        # installed): a notebook's launcher and kernels use the portal's own SDK.
        pythonpath = [str(site) if site else "", str(pkg),
                      *dict.fromkeys(str(d.parent) for d in client_dirs())]
        try:
            problem = sandboxing()
            if problem is None:
                full_env = process_env(
                    env, path=f"{os.path.dirname(sys.executable)}:{SYSTEM_PATH}",
                    home=pfs_home(job.datacenter.name, job.owner.username),
                    pythonpath=[str(site) if site else "", WORKSPACE,
                                *dict.fromkeys(str(d.parent) for d in client_dirs())])
                sandboxed = sandbox_command(self._sandbox(job, replica, full_env),
                                            entry_argv(stoppable(job.entry)))
                # Its environment goes in on bwrap's stdin, never on a command line.
                command, stdin = list(sandboxed.argv), sandboxed.args
                runner_env = _runner_env()
            else:
                path = f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', SYSTEM_PATH)}"
                runner_env = process_env(env, path=path, home=str(home_dir(job)),
                                         pythonpath=pythonpath)
                command, stdin = entry_argv(job.entry), None
        except (SandboxError, RelayError) as exc:
            raise BackendError(f"cannot make its sandbox: {exc}") from None
        log = output_open(job, log_relpath(replica.role, replica.index))
        claim = None
        try:
            # Followed from before it starts: its worker killed at any moment leaves it to
            # another (exits.py).
            claim = exits().claim(pid_file.parent, replica.name, replica.attempt, str(job.uid))
            pid = attempt_start(pid_file.parent, replica.name, replica.attempt, log, command,
                                cwd=pkg, env=runner_env, stdin=stdin)
        except BaseException:
            if claim:
                exits().drop(claim)
            raise
        finally:
            os.close(log)
        if claim:
            exits().follow(claim, pid)
        else:  # its lock was held for a moment (a start cut off before, its end announced)
            exits().adopt(pid_file.parent, replica.name, replica.attempt, str(job.uid))
        return f"pid:{pid}"

    def _sandbox(self, job, replica, env: dict[str, str]) -> Sandbox:
        """What a replica sees: its package read-only at ``WORKSPACE`` (its working
        directory, as on Kubernetes), its owner's home read-write and the public directory
        read-only at their PFS paths (what it prints is what users write), its requirements
        read-only; its job's network, with the relay to the portal in it when the job has a
        master."""
        private = job_dir(job)
        dc, user = job.datacenter.name, job.owner.username
        binds = [Bind(str(private / "pkg"), WORKSPACE),
                 Bind(str(home_dir(job)), pfs_home(dc, user), writable=True)]
        site = _site(job)
        if site:
            binds.append(Bind(str(site)))  # shared with other jobs: read-only
        public = job.datacenter.public_path
        if public.is_dir() and not public.is_symlink():
            binds.append(Bind(str(public), pfs_public(dc)))
        network = netns_start(netns_file(private), str(private))  # named: leftovers_stop
        if _relayed(job):
            relay_start(relay_file(private), network, portal_address(), f"job-{job.uid}")
        return Sandbox(binds=binds, env=env, cwd=WORKSPACE, network=network,
                       hostname=replica.name, ids=home_ids(job.owner))

    async def port_open(self, job, replica, port: int):
        """A socket made in the job's network (``ports.py``), connected to the replica's
        ``127.0.0.1:port``; on the machine's own network without a sandbox."""
        made = await asyncio.to_thread(self._port_dial, job, replica, port)
        return await socket_stream(made)

    def _port_dial(self, job, replica, port: int):
        seen = attempt_observe(job_dir(job) / "run", replica.name, replica.attempt)
        if seen.status != Status.RUNNING:
            raise BackendError(f"{replica.name} of job {job.name!r} is not running")
        network = netns_read(netns_file(job_dir(job)))
        if network is None and _sandboxed():
            raise BackendError(f"job {job.name!r} is not running (its network is gone)")
        if network is not None and port == RELAY_PORT:
            raise BackendError(f"port {port} of a local job is its way to the portal "
                               "(docs/master.md), not the job's own")
        try:
            return port_dial(network, port)
        except PortError as exc:
            raise BackendError(f"{replica.name} of job {job.name!r}: {exc}") from None

    def observe(self, job, replica) -> Observation:
        seen = attempt_observe(job_dir(job) / "run", replica.name, replica.attempt)
        if seen.status == Status.RUNNING:  # one nobody follows (of a portal before followers)
            exits().adopt(job_dir(job) / "run", replica.name, replica.attempt, str(job.uid))
        return seen

    async def exec_open(self, job, replica, argv, *, tty, size=None, term="xterm"):
        """In the replica's sandbox, as the replica runs (``enter.py``)."""
        started = read_json(self._files(job, replica)[0])
        if not started or started.get("attempt") != replica.attempt:
            raise BackendError(f"worker {replica.name} is not running")
        return await exec_start(started["pid"], list(argv), tty=tty, size=size, term=term)

    def stop(self, job, replicas, grace: float) -> None:
        """Stop the replicas, then let the job's network go (replicas are stopped only when
        their job ends; one still running keeps the network until it exits)."""
        self.stop_for_restart(job, replicas, grace)
        self.release(job)

    def stop_for_restart(self, job, replicas, grace: float) -> None:
        groups = []
        for replica in replicas:
            started = read_json(self._files(job, replica)[0])
            if started:
                groups.append(started["pid"])
        groups_stop(groups, grace)
