"""The portal as a deployment runs it, on services of its own, for the fault suite.

``Deployment`` starts a PostgreSQL instance (Debian's binaries, a temporary data directory,
run as the ``postgres`` user when we are root) and a redis-server, each on a free port of
127.0.0.1 and never the machine's shared ones; a small tmpfs as the users' PFS root; then, as
docker-compose.yml does, ``paddlecloud migrate``, the web process (``runportal --no-worker``),
two Celery workers (``celery -A paddlecloud worker``) and beat (``celery -A paddlecloud
beat``), each a process group of its own, on the local backend with DEBUG off. Every one of
them can be stopped, killed and started again (``Service``); ``close`` stops everything it
started and removes what it made (processes, local jobs, data directories, the mount),
whatever happened before.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from glob import glob
from pathlib import Path

import psycopg
import redis
import requests
from cryptography.fernet import Fernet

from jobs.backends.netns import process_argvs
from tests.polling import wait
from tests.processes import ROOT, clean_env

PASSWORD = "correct horse battery staple"
DATACENTER = "datacenter1"
JOBS_QUOTA = 2  # each user's concurrent jobs
PFS_SIZE = "64m"  # the tmpfs of the users' homes
READY_SECONDS = 60  # a service that is not up by then failed to start
USERS = 16  # made once; each test takes the next


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    """A long-running process of the deployment, in a process group of its own (its pool's
    children with it), its output appended to ``log``; ``ready()`` says when it serves."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path, *,
                 ready: Callable[[Service], bool], user: str | None = None,
                 stop_signal: int = signal.SIGTERM, cwd: Path = ROOT):
        self.name, self.argv, self.env, self.log, self.cwd = name, argv, env, log, cwd
        self._ready, self.user, self.stop_signal = ready, user, stop_signal
        self.process: subprocess.Popen | None = None
        self.log_offset = 0  # where this run's output begins in the log
        self.pids: list[int] = []  # every pid it ran as: a probe names its prober by pid

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def start(self) -> None:
        assert not self.alive(), f"{self.name} runs already"
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        as_user = ({"user": self.user, "group": self.user, "extra_groups": []}
                   if self.user and os.geteuid() == 0 else {})
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, **as_user)
        self.pids.append(self.process.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        return self._ready(self)

    def wait_ready(self, timeout: float = READY_SECONDS) -> None:
        def up():
            assert self.alive(), f"{self.name} exited ({self.process.returncode}):\n" \
                                 f"{self.output()[-3000:]}"
            return self.ready()

        wait(up, timeout, lambda: f"{self.name} did not start in {timeout} s:\n"
                                  f"{self.output()[-3000:]}", every=0.1)

    def output(self) -> str:
        """What this run has written so far."""
        with contextlib.suppress(OSError), self.log.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")
        return ""

    def signal(self, sig: int) -> None:
        """``sig`` to the whole group (a worker's pool, PostgreSQL's backends)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        """kill -9, the whole group, as the machine (or the OOM killer) does."""
        if self.process is None:
            return
        self.pids += [pid for pid in group_members(self.pid) if pid not in self.pids]
        self.signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 15) -> None:
        """Its own way of stopping (to the leader), then kill -9 what is left."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(self.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self.kill()


def _answers_http(url: str) -> bool:
    with contextlib.suppress(requests.RequestException):
        requests.get(f"{url}/healthz", timeout=2)
        return True
    return False


def _said(text: str) -> Callable[[Service], bool]:
    return lambda service: text in service.output()


class Deployment:
    """Everything the fault suite runs the portal on; ``open`` starts it, ``close`` undoes
    it."""

    def __init__(self, base: Path):
        self.base = base  # logs, var/, static files: removed with the test run's tmp
        self.var = base / "var"
        self.token = f"faults-{secrets.token_hex(4)}"  # on every job's command line
        self.pg_dir = Path(tempfile.mkdtemp(prefix="paddlecloud-faults-pg-"))  # postgres's
        self.redis_dir = base / "redis"
        self.pfs = Path(tempfile.mkdtemp(prefix="paddlecloud-faults-pfs-"))
        self.pfs_mounted = False
        self.pg_port, self.redis_port, self.web_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.web_port}"
        self.database_url = f"postgres://postgres@127.0.0.1:{self.pg_port}/paddlecloud"
        self.services: dict[str, Service] = {}
        self.users: dict[str, dict] = {}  # username: {"id", "token"}
        self._users_given = 0
        self._secret = secrets.token_urlsafe(50)
        self._fernet = Fernet.generate_key().decode()

    # --- the services ---------------------------------------------------------------------

    @property
    def postgres(self) -> Service:
        return self.services["postgres"]

    @property
    def redis(self) -> Service:
        return self.services["redis"]

    @property
    def web(self) -> Service:
        return self.services["web"]

    @property
    def workers(self) -> list[Service]:
        return [self.services["worker1"], self.services["worker2"]]

    @property
    def beat(self) -> Service:
        return self.services["beat"]

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(
            self.var, DATABASE_URL=self.database_url,
            REDIS_URL=f"redis://127.0.0.1:{self.redis_port}/0", DEBUG="0",
            SECRET_KEY=self._secret, PADDLECLOUD_CREDENTIAL_KEYS=self._fernet,
            ALLOWED_HOSTS="127.0.0.1,localhost", SECURE_SSL_REDIRECT="0",
            SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0", SECURE_HSTS_SECONDS="0",
            STATIC_ROOT=str(self.base / "static"), PADDLECLOUD_BACKEND="local",
            PADDLECLOUD_PFS_ROOT=str(self.pfs), PADDLECLOUD_PORTAL_URL=self.url,
            # Its own temporary files (a probe killed half way leaves its directory there).
            TMPDIR=str(self.base / "tmp"), PYTHONUNBUFFERED="1", **extra)

    def open(self) -> None:
        self.var.mkdir(parents=True, exist_ok=True)
        (self.base / "tmp").mkdir()
        self._pfs_mount()
        self._postgres_init()
        self.redis_dir.mkdir()
        redis_argv = ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                      "--dir", str(self.redis_dir), "--daemonize", "no", "--appendonly", "no",
                      "--save", "3600 1 300 100 60 10000"]  # redis:7's defaults (compose)
        self.services["redis"] = Service("redis", redis_argv, os.environ.copy(),
                                         self.base / "redis.log",
                                         ready=lambda _: self.redis_answers())
        self.redis.start()
        self.postgres.wait_ready()
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE paddlecloud")
        # Migrating and collecting the static files (the image's build step) side by side.
        steps = [self._manage_start("migrate", "--no-input", "-v", "0"),
                 self._manage_start("collectstatic", "--no-input", "-v", "0")]
        for step in steps:
            out = step.communicate(timeout=300)[0]
            assert step.returncode == 0, f"{step.args}: {out}"
        self.redis.wait_ready()
        python = sys.executable
        web_argv = [python, "manage.py", "runportal", "--host", "127.0.0.1", "--port",
                    str(self.web_port), "--no-worker", "--skip-collectstatic"]
        self.services["web"] = Service("web", web_argv, self.env(), self.base / "web.log",
                                       ready=lambda _: _answers_http(self.url))
        for n in (1, 2):
            # docker-compose.yml's worker command; two processes of the pool each.
            argv = [python, "-m", "celery", "-A", "paddlecloud", "worker", "--loglevel",
                    "INFO", "--concurrency", "2", "-n", f"worker{n}@%h"]
            self.services[f"worker{n}"] = Service(
                f"worker{n}", argv, self.env(CELERY_LOG_LEVEL="INFO"),
                self.base / f"worker{n}.log", ready=_said(" ready."))
        beat_argv = [python, "-m", "celery", "-A", "paddlecloud", "beat", "--loglevel", "INFO",
                     "--schedule", str(self.base / "celerybeat-schedule")]
        self.services["beat"] = Service("beat", beat_argv, self.env(CELERY_LOG_LEVEL="INFO"),
                                        self.base / "beat.log", ready=_said("beat: Starting"))
        for name in ("web", "worker1", "worker2", "beat"):
            self.services[name].start()
        self._users_make()  # while they start
        for service in self.services.values():
            service.wait_ready()

    def ensure_up(self) -> None:
        """Start whatever is not running (a fault left it stopped or killed), as a
        supervisor would, and wait until each serves."""
        down = [service for service in self.services.values() if not service.alive()]
        for service in down:
            service.start()
        for service in down:
            service.wait_ready()

    def close(self) -> None:
        """Stop and remove everything, whatever state a failure left it in."""
        for name in ("beat", "worker1", "worker2", "web"):
            if name in self.services:
                self.services[name].kill()
        self._leftovers_kill()
        for name in ("redis", "postgres"):
            if name in self.services:
                self.services[name].signal(signal.SIGCONT)  # should a test have frozen it
                self.services[name].stop()
        if self.pfs_mounted:
            subprocess.run(["umount", str(self.pfs)], check=False, capture_output=True)
            if os.path.ismount(self.pfs):
                subprocess.run(["umount", "-l", str(self.pfs)], check=False)
        shutil.rmtree(self.pfs, ignore_errors=True)
        shutil.rmtree(self.pg_dir, ignore_errors=True)

    def _leftovers_kill(self) -> None:
        """kill -9 whatever of ours is still there: runners and sandboxes under our var/,
        trainers (our token on their command line), network holders named after our var/ or
        a probe of one of our processes. (Not ./dev down: it releases every holder on the
        machine it finds left over, those of other portals' tests too.)"""
        ours = [str(self.var).encode(), self.token.encode()]
        probers = {pid for service in self.services.values() for pid in service.pids}
        for pid, argv in process_argvs():
            line = b" ".join(argv)
            label = argv[6].decode(errors="replace") if len(argv) > 6 else ""
            probe = re.fullmatch(r"probe:(\d+):\d+", label)
            if any(text in line for text in ours) or (
                    b"paddlecloud-netns" in line and probe and int(probe[1]) in probers):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    # --- the parts ----------------------------------------------------------------------------

    def _pfs_mount(self) -> None:
        """A small tmpfs as the users' PFS root: a full PFS is one file away."""
        if os.geteuid() != 0:
            raise RuntimeError("the fault suite mounts a tmpfs as the PFS root: run it as root")
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={PFS_SIZE},mode=0755",
                        "paddlecloud-faults-pfs", str(self.pfs)], check=True)
        self.pfs_mounted = True

    def _postgres_init(self) -> None:
        bins = sorted(glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
        if not bins:
            raise RuntimeError("no PostgreSQL binaries in /usr/lib/postgresql/*/bin: "
                               "apt-get install postgresql")
        bin_dir = Path(bins[-1])
        data = self.pg_dir / "data"
        as_user = {}
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            shutil.chown(self.pg_dir, "postgres", "postgres")
            as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, cwd=self.pg_dir, **as_user)
        argv = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.pg_port),
                "-k", str(self.pg_dir), "-c", "listen_addresses=127.0.0.1",
                "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=300"]
        log = self.base / "postgres.log"
        self.services["postgres"] = Service(
            "postgres", argv, {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}, log,
            ready=lambda _: self.postgres_answers(),
            user="postgres", stop_signal=signal.SIGINT,  # fast shutdown: clients cut off
            cwd=self.pg_dir)
        self.postgres.start()

    def _dsn(self, database: str = "paddlecloud") -> str:
        return (f"host=127.0.0.1 port={self.pg_port} user=postgres dbname={database} "
                "connect_timeout=2")

    def postgres_answers(self) -> bool:
        with contextlib.suppress(psycopg.Error), psycopg.connect(self._dsn("postgres")):
            return True
        return False

    def redis_client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.redis_port, socket_timeout=5)

    def redis_answers(self) -> bool:
        with contextlib.suppress(redis.RedisError):
            return bool(self.redis_client().ping())
        return False

    def _manage_start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT,
                                env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def manage(self, *args: str, timeout: float = 120) -> str:
        """``paddlecloud ARGS`` as the deployment's admin runs it; its output."""
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT,
                                env=self.env(), capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, f"manage.py {args[0]}: {result.stderr}"
        return result.stdout

    def _users_make(self) -> None:
        said = self.manage("shell", "-v", "0", "-c", USERS_MAKE.format(
            datacenter=DATACENTER, count=USERS, password=PASSWORD, jobs=JOBS_QUOTA))
        self.users = json.loads(said.strip().splitlines()[-1])

    def user_next(self) -> tuple[str, dict]:
        """A user no test has used yet: its name and {"id", "token"}."""
        names = sorted(self.users)
        assert self._users_given < len(names), "more tests than users: raise USERS"
        name = names[self._users_given]
        self._users_given += 1
        return name, self.users[name]

    def home(self, username: str) -> Path:
        return self.pfs / DATACENTER / "home" / username

    # --- looking at it --------------------------------------------------------------------

    def sql(self, query: str, *params) -> list[tuple]:
        """Rows of ``query`` on the portal's database (a connection of its own each time)."""
        with psycopg.connect(self._dsn(), autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def connect(self) -> psycopg.Connection:
        """A connection of the test's own (to hold a lock with)."""
        return psycopg.connect(self._dsn())

    def job_dir(self, uid) -> Path:
        return self.var / "jobs" / str(uid)

    def logs(self) -> str:
        """The tail of every service's log, for a failure's message."""
        return "\n".join(f"--- {name} ---\n{service.output()[-2500:]}"
                         for name, service in self.services.items())


# The users of the suite, each with a token for the datacenter (printed as JSON).
USERS_MAKE = """
import json
from accounts.services import datacenter_upsert, token_create, user_upsert
datacenter_upsert("{datacenter}")
made = {{}}
for n in range({count}):
    user = user_upsert(f"user{{n:02d}}", password="{password}", datacenter_names=["{datacenter}"],
                       quota={{"jobs": {jobs}}})[0]
    token = token_create(user, datacenter_name="{datacenter}").raw
    made[user.username] = {{"id": user.pk, "token": token}}
print(json.dumps(made))
"""



def socket_owner(port: int) -> int | None:
    """The process holding the TCP socket whose local end is 127.0.0.1:``port`` (a database
    client, named by pg_stat_activity's client_port)."""
    wanted = f"0100007F:{port:04X}"
    inode = None
    for table in ("/proc/net/tcp",):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == wanted:
                inode = fields[9]
                break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"{entry.path}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) == target:
                        return int(entry.name)
    return None


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(entry.path, "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                    found.append(int(entry.name))
    return found


def parent_of(pid: int) -> int | None:
    with contextlib.suppress(OSError, IndexError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


def group_of(pid: int) -> int | None:
    with contextlib.suppress(ProcessLookupError):
        return os.getpgid(pid)
    return None


def time_left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)
