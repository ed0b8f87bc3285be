"""Shared fixtures. The suite runs on real PostgreSQL and Redis (``./dev test`` sets
DATABASE_URL and REDIS_URL): when either cannot be reached the run fails at once, it never
quietly falls back to SQLite or skips the service-backed tests."""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts.services import datacenter_upsert, token_create, user_upsert
from tests.factories import home, job_fields, package_write, submit_job
from tests.notify_receivers import SmtpServer, WebhookReceiver
from tests.outages import PortalProcess, RedisServer, TcpProxy

# Fixtures: the real cluster, Kueue on it.
from tests.real_kube.fixtures import real_kube, real_kueue  # noqa: F401

PASSWORD = "correct horse battery staple"


def pytest_configure(config):
    config.addinivalue_line("markers", "package(program, name='pkg', files=None): what the "
                            "``package`` fixture writes (tests.factories.package_write)")
    _default_signal_handlers()


def _default_signal_handlers():
    """The children tests signal get the default handlers: a run started in the background
    by a script ignores SIGINT and SIGQUIT, and an ignored signal stays ignored across exec
    (Ctrl-C to a paddlectl would do nothing). Handled here, they are reset in every child."""
    for signum in (signal.SIGINT, signal.SIGQUIT):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT
                          else signal.SIG_DFL)


def pytest_sessionstart(session):
    if os.environ.get("PADDLECLOUD_TEST_ALLOW_SQLITE") == "1":
        return
    problems = []
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine != "django.db.backends.postgresql":
        problems.append(f"the database is {engine}, not PostgreSQL: set DATABASE_URL")
    else:
        import psycopg

        db = settings.DATABASES["default"]
        try:
            psycopg.connect(host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"],
                            password=db["PASSWORD"], dbname="postgres", connect_timeout=5).close()
        except psycopg.Error as exc:
            problems.append(f"PostgreSQL at {db['HOST']}:{db['PORT']} cannot be reached: {exc}")
    if not settings.REDIS_URL:
        problems.append("REDIS_URL is not set")
    else:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5).ping()
        except redis.RedisError as exc:
            problems.append(f"Redis at {settings.REDIS_URL} cannot be reached: {exc}")
    if problems:
        pytest.exit("the test suite needs real services (run it with ./dev test):\n  "
                    + "\n  ".join(problems), returncode=3)


def _descendants(pid: int) -> list[tuple[int, str]]:
    """The live processes below ``pid`` (pid, command line); zombies are not counted: their
    parent has yet to reap them, and they hold nothing."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(proc.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop()
        try:
            command = (Path("/proc") / str(child) / "cmdline").read_bytes()
        except OSError:
            continue
        found.append((child, command.replace(b"\0", b" ").decode(errors="replace").strip()))
        queue.extend(children.get(child, []))
    return found


def _threads_left() -> list[str]:
    """The threads still running, but the main one and the idle worker of asgiref's
    process-wide executor (every sync_to_async call of the process shares it; it ends with
    the interpreter)."""
    from asgiref.sync import SyncToAsync

    shared = set(SyncToAsync.single_thread_executor._threads)
    return [thread.name for thread in threading.enumerate()
            if thread is not threading.main_thread() and thread.is_alive()
            and thread not in shared]


_LEFT_BY_WORKERS: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """What a pytest-xdist worker's tests left behind (its ``pytest_sessionfinish``)."""
    name = node.gateway.id
    _LEFT_BY_WORKERS.extend(f"{line} (worker {name})"
                            for line in getattr(node, "workeroutput", {}).get("left_behind", ()))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """No test leaves a process or a thread behind, whatever its outcome: what is still there
    once every fixture is torn down fails the run, named."""
    deadline = time.monotonic() + 10  # a child just signalled may take a moment to go
    while (processes := _descendants(os.getpid())) or _threads_left():
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lines = [f"process {pid}: {command}" for pid, command in processes]
    lines += [f"thread {name}" for name in _threads_left()]
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:  # a pytest-xdist worker: the controller reports it
        worker["left_behind"] = lines
        return
    lines += _LEFT_BY_WORKERS
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = "left behind by the tests:\n  " + "\n  ".join(lines)
    if reporter is not None:
        reporter.write_line(message, red=True)
    else:
        print(message, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


TEST_CREDENTIAL_KEY = Fernet.generate_key().decode()


@pytest.fixture(autouse=True)
def _credential_keys(settings):
    """Registry passwords are encrypted with a key of the test run (DEBUG is off in tests, so
    none would be made into var/)."""
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [TEST_CREDENTIAL_KEY]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2 is slow on purpose; the tests hash hundreds of passwords."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _var_in_tmp(settings, tmp_path):
    """The portal's var/ and PFS of every test are its own, never the checkout's (tests that
    need them somewhere in particular set them after this)."""
    settings.VAR_DIR = tmp_path / "var"
    settings.PADDLECLOUD_PFS_ROOT = tmp_path / "var" / "pfs"
    settings.PADDLECLOUD_METRICS_CACHE_DIR = tmp_path / "var" / "cache" / "metrics"


@pytest.fixture(autouse=True)
def _no_local_job_left(_var_in_tmp, settings, tmp_path_factory):
    """Whatever a test's outcome, no process of a local job it started — replicas, their
    sandboxes, a job's network — outlives it: what the reconciler does to jobs the database
    forgot, done to every job in the test's own var/ (never a real one)."""
    yield
    var = Path(settings.VAR_DIR)
    if var.is_relative_to(tmp_path_factory.getbasetemp()) and (var / "jobs").is_dir():
        from jobs.backends.local.backend import LocalBackend

        LocalBackend().orphans_stop([], lambda uids: set(), grace=1)
    from jobs.backends.local.exits import exits_stop

    exits_stop()  # the thread that followed its runners' exits


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test's start holds are renewed no more once it has run (the thread that renews them
    would query a database its fixtures are about to close). A worker the test started stops
    renewing its own as it stops (``jobs.tasks.start_holds_stop``)."""
    from jobs.starts import holds_stop

    holds_stop()
    return (yield)


@pytest.fixture(autouse=True)
def _no_pod_watch_left():
    """A test that watched a cluster's pods stops the watch (it would poll a fake API server
    that is gone, for the rest of the run), and its threads have ended (``stop`` cuts their
    streams and waits for them)."""
    from jobs.backends.kubernetes.pods_watch import pod_caches_stop, pod_caches_watching

    yield
    if left := pod_caches_watching():
        pod_caches_stop()
        pytest.fail(f"pod watches left running: {left}")
    if threads := [t.name for t in threading.enumerate()
                   if t.name.startswith(("pods-", "namespaces-"))]:
        pytest.fail(f"pod watch threads left running: {threads}")


@pytest.fixture(autouse=True)
def _clear_cache():
    """Login-failure counters live in the cache (Redis, a database of its own for tests)."""
    cache.clear()
    yield
    cache.clear()


class HeldTasks:
    """The work queued through ``kernel.queue``, held here instead of sent to a worker:
    a test sees what was asked for (``sent``, ``of``) and may have some of it done at once, in
    its own process (``run``); the rest is dropped, as a lost message would be."""

    def __init__(self):
        self.sent: list[tuple[str, tuple]] = []
        self.inline: dict[str, Callable] = {}

    def run(self, name: str, function: Callable | None = None) -> None:
        """Do task ``name`` (or ``function`` in its place) as soon as it is sent."""
        from kernel.celery import app

        if function is None:
            importlib.import_module(name.rsplit(".", 1)[0])  # registers the app's tasks
            function = app.tasks[name]
        self.inline[name] = function

    def of(self, name: str) -> list[tuple]:
        """The arguments of each ``name`` sent, in order."""
        return [args for sent, args in self.sent if sent == name]

    def send(self, name: str, args: tuple, countdown: float | None = None) -> None:
        self.sent.append((name, args))
        if name in self.inline:
            self.inline[name](*args)


@pytest.fixture
def held_tasks(monkeypatch) -> HeldTasks:
    """No queued task reaches a worker (one left running by an earlier test would pick it
    up): for tests that drive the engine themselves."""
    held = HeldTasks()
    monkeypatch.setattr("kernel.queue._send", held.send)
    return held


@pytest.fixture
def celery_worker():
    """The worker runportal embeds, consuming from the real Redis broker of REDIS_URL.
    Tests that use it need ``django_db(transaction=True)``: it reads what they commit.
    One per test, on an empty queue: no task of one test runs during another."""
    from kernel.celery import app as celery_app
    from paddlecloud.worker import EmbeddedWorker

    assert celery_app.conf.broker_url == settings.REDIS_URL
    celery_app.control.purge()
    worker = EmbeddedWorker(concurrency=2, beat=False)
    worker.start()
    yield worker
    worker.stop()
    celery_app.control.purge()
    # A task still running as the test ended (a job's clean-up, say) may have watched a
    # cluster's pods again after the test stopped its watches: they end with the worker.
    from jobs.backends.kubernetes.pods_watch import pod_caches_stop

    pod_caches_stop()


@pytest.fixture
def smtp_server(settings) -> SmtpServer:
    """A real SMTP server on loopback, the portal's mail going to it (the SMTP backend)."""
    server = SmtpServer()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    yield server
    server.stop()


@pytest.fixture
def webhook_receiver(settings) -> WebhookReceiver:
    """A webhook receiver on loopback, which the portal is allowed to reach (plain HTTP, on
    127.0.0.0/8: the administrator's settings)."""
    receiver = WebhookReceiver()
    settings.PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.PADDLECLOUD_WEBHOOK_ALLOW_HTTP = True
    yield receiver
    receiver.stop()


@pytest.fixture
def fresh_pfs_root(tmp_path) -> Path:
    """A fresh PFS root, in the test's tmp_path."""
    return tmp_path / "pfs"


@pytest.fixture
def pfs_home(settings, tmp_path, fresh_pfs_root, datacenter):
    """alice's PFS home on disk, under a fresh PFS root."""
    settings.PADDLECLOUD_PFS_ROOT = fresh_pfs_root
    settings.VAR_DIR = tmp_path / "var"
    path = fresh_pfs_root / home().removeprefix("/pfs/")
    path.mkdir(parents=True)
    return path


@pytest.fixture
def package(request, pfs_home) -> str:
    """alice's trainer package in her PFS home (/pfs/datacenter1/home/alice/pkg), its PFS path:
    a train.py that says hi, or what the test's ``package`` mark gives (the arguments of
    ``tests.factories.package_write``: program, name, files)."""
    mark = request.node.get_closest_marker("package")
    args, kwargs = (mark.args, mark.kwargs) if mark else ((), {})
    return package_write(pfs_home, *args, **kwargs)


@pytest.fixture
def submit(request, alice, datacenter, package):
    """``submit(name="fit", **fields)``: alice's job of ``package`` submitted through the
    service (``tests.factories.submit_job``). Without the ``celery_worker`` fixture the test
    drives the engine itself, so its tasks are held (a worker left running by an earlier test
    would pick them up); no process of a job submitted is left after the test."""
    from jobs.backends import backend_for
    from jobs.models import Job

    if "celery_worker" not in request.fixturenames:
        request.getfixturevalue("held_tasks")
    submitted: list[Job] = []

    def do(name="fit", **fields) -> Job:
        submitted.append(submit_job(alice, datacenter, name, package=package, **fields))
        return submitted[-1]

    yield do
    for job in submitted:
        if Job.objects.filter(pk=job.pk).exists():
            backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def datacenter(db):
    return datacenter_upsert("datacenter1", description="first")[0]


@pytest.fixture
def other_datacenter(db):
    return datacenter_upsert("datacenter2", description="second")[0]


@pytest.fixture
def make_user(db, datacenter):
    def make(username="alice", datacenters=("datacenter1",), **kwargs):
        return user_upsert(username, password=PASSWORD, datacenter_names=list(datacenters),
                           **kwargs)[0]

    return make


@pytest.fixture
def alice(make_user):
    return make_user("alice")


@pytest.fixture
def browser(alice) -> Client:
    """alice's browser, logged in."""
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    return client


@pytest.fixture
def admin_browser(datacenter) -> Client:
    """A browser logged in as a staff superuser (``root``)."""
    user_upsert("root", password=PASSWORD, datacenter_names=["datacenter1"], staff=True,
                superuser=True)
    client = Client()
    assert client.login(username="root", password=PASSWORD)
    return client


@pytest.fixture
def token_client(alice):
    """An API client authenticated as alice with a fresh token for datacenter1."""
    issued = token_create(alice, datacenter_name="datacenter1")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    client.issued = issued
    return client


@pytest.fixture
def assert_queries_flat(django_assert_num_queries):
    """``assert_queries_flat(get, grow)``: ``get()`` (a request to a list endpoint) takes
    exactly as many queries after ``grow()`` has added rows as before, so a query per row (an
    N+1) fails. Returns both answers (each must be a 200), for the test to check that the rows
    were really listed."""
    def check(get, grow):
        get()  # a token's last use is recorded once a minute, not on each request
        with CaptureQueriesContext(connection) as before:
            small = get()
        count = len(before.captured_queries)  # now: the next request clears the log
        grow()
        with django_assert_num_queries(count):
            large = get()
        for response in (small, large):
            assert response.status_code == 200, response.content
        return small, large

    return check


def assert_error(response, status: int, code: str, field: str | None = None) -> dict:
    """The one error shape: status, JSON body with code, message and fields."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"code", "message", "fields"}, body
    assert body["code"] == code, body
    assert body["message"], body
    assert "Traceback" not in response.content.decode()
    if field is not None:
        assert field in body["fields"], body
        assert field in body["message"], body
    return body


def streamed(response) -> bytes:
    """A streamed answer's bytes (logs stream an async iterator, as under ASGI)."""
    from asgiref.sync import async_to_sync

    assert response.streaming and response.is_async

    async def read():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)()


class LivePortal:
    """The real ASGI app served by uvicorn on a free port, for tests that speak HTTP."""

    def __init__(self, url, datacenter, user, home):
        self.url, self.datacenter, self.user, self.home = url, datacenter, user, home
        self.port = int(url.rsplit(":", 1)[1])

    @functools.cached_property
    def http(self):
        """alice's ``session``, made once."""
        return self.session()

    def token(self, user=None) -> str:
        return token_create(user or self.user, datacenter_name=self.datacenter.name).raw

    def session(self, user=None):
        """A ``requests`` session authenticated with a fresh token."""
        import requests

        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.token(user)}"
        return session

    def job_post(self, name: str = "fit", *, timeout: float | None = None, **fields):
        """The answer to alice's job (``tests.factories.job_fields``) submitted over the API."""
        return self.session().post(f"{self.url}/api/v1/jobs/", timeout=timeout,
                                   json=job_fields(self.user, self.datacenter, name, **fields))


@pytest.fixture
def live_portal(transactional_db, settings, pfs_home, datacenter, alice):
    """The portal over real HTTP (uvicorn in a thread, the test database), alice a member of
    datacenter1 with her PFS home under a fresh PFS root (``pfs_home``)."""
    import socket
    import threading
    import time

    import uvicorn
    from channels.layers import channel_layers

    settings.ALLOWED_HOSTS = ["*"]

    from paddlecloud.asgi import application, http
    from paddlecloud.serving import server_config

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.PADDLECLOUD_PORTAL_URL = f"http://127.0.0.1:{port}"  # where local replicas reach it
    server = uvicorn.Server(server_config(application, host="127.0.0.1", port=port,
                                          lifespan="on", log_level="warning"))  # as runportal
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield LivePortal(f"http://127.0.0.1:{port}", datacenter, alice, pfs_home)
    server.should_exit = True
    thread.join(5)
    if thread.is_alive():  # a WebSocket still open (a browser page outlives the portal)
        server.force_exit = True
        thread.join(5)
    http.stop()  # the lifespan's stop does it, unless the exit was forced
    # The channel layer remembers the event loop its receives run on; one left on this
    # server's loop would make every consumer of the next live portal fail ("Two event loops
    # are trying to receive() on one channel layer at once!"). The next portal gets a new one.
    channel_layers.backends.clear()
    close_server_connections()


@pytest.fixture
def own_redis(tmp_path) -> RedisServer:
    """A Redis server of the test's own (never the machine's: the test stops it), killed at
    the end whatever happened."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def database_proxy() -> TcpProxy:
    """A proxy in front of the test's PostgreSQL (``portal_process(database_port=…)``) that the
    test closes (connections refused, open ones cut) and opens again; closed at the end."""
    proxy = TcpProxy(int(connection.settings_dict["PORT"] or 5432))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def portal_process(transactional_db, pfs_home, datacenter, alice, tmp_path):
    """``portal_process(database_port=None, **env)``: the portal served by ``runportal`` in a
    process of its own (``tests.outages.PortalProcess``), started, on the test's database
    (through ``database_port``, a proxy's, when given), alice's home under pfs_home's root,
    and ``env`` (REDIS_URL, say: without it, the embedded default's in-process queue). Stopped
    at the end."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    # alice's password hashed as the portal's process can check it (the test run's hasher is
    # a fast one only it has), with few rounds: her first login there upgrades it.
    alice.password = PBKDF2PasswordHasher().encode(PASSWORD, "portal", iterations=1000)
    alice.save(update_fields=["password"])
    started: list[PortalProcess] = []
    db = connection.settings_dict

    def start(database_port: int | None = None, **env: str) -> PortalProcess:
        url = (f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
               f"{database_port or db['PORT'] or 5432}/{db['NAME']}")
        portal = PortalProcess(tmp_path / f"portal{len(started)}", DATABASE_URL=url,
                               PADDLECLOUD_PFS_ROOT=str(settings.PADDLECLOUD_PFS_ROOT), **env)
        started.append(portal)
        portal.start()
        return portal

    yield start
    for portal in started:
        portal.stop()
    close_server_connections()


def close_server_connections():
    """Drop the connections the server's threads left open, so the test database can go."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")


# Every spelling of a boolean query parameter the API takes (``follow``, ``recursive``,
# ``parents``, ``overwrite``), with what it means; anything else is a 400 naming the parameter.
FLAG_SPELLINGS = [("1", True), ("true", True), ("True", True), ("YES", True), ("on", True),
                  ("0", False), ("false", False), ("FALSE", False), ("no", False), ("Off", False)]
BAD_FLAGS = ["", "2", "y", "enabled", "true "]
