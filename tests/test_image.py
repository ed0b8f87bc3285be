"""The portal's image, built and run for real: the repository's ``Dockerfile`` and context,
``docker build`` in a Docker engine of this module's own (``tests.images.docker_engine``), FROM
a Debian bookworm root filesystem made with debootstrap (nothing can be pulled from Docker Hub
here: ``--build-arg BASE=``); ``--network host`` lets its steps reach PyPI and the Debian
mirror. The image is built once and used twice:

- alone, against this machine's PostgreSQL (a database the module makes and drops) and Redis
  (a database number of its own): it migrates, serves ``/healthz``, its static files, and lets
  a user made with ``paddlecloud adduser`` log in, through the API and the login page;
- as ``docker-compose.yml`` brings it up (``docker-compose``, v1, Debian's), with PostgreSQL
  and Redis in an image made here from Debian's packages: a job submitted with ``paddlectl``
  runs in the worker's container, in a bubblewrap sandbox, and succeeds; its log is read.

The engine has no bridge network (``dockerd --bridge=none``): every container shares the
host's network, on ports this module picks. Everything is removed at the end, whatever the
outcome: containers, the compose project and its volumes, the engine with its images, the
database.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
import requests
import yaml
from django.conf import settings

from tests.conftest import PASSWORD
from tests.images import base_rootfs, cache_dir, docker_engine, overlay_works
from tests.paddlectl.conftest import Cli, datacenter_entry, free_port

ROOT = Path(__file__).resolve().parent.parent
BASE = "paddlecloud-test/bookworm:1"  # the debootstrap'd root filesystem, as it is
IMAGE = "paddlecloud:latest"  # the name docker-compose.yml gives the image it builds
BUILDER = "paddlecloud-test/builder:latest"  # the Dockerfile's builder stage
SERVICES = "paddlecloud-test/services:1"
NO_BUILDKIT = {"DOCKER_BUILDKIT": "0"}  # the classic builder: this client has no buildx

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(shutil.which("dockerd") is None or shutil.which("docker") is None,
                       reason="Docker is not installed (./dev test installs docker.io)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="a private dockerd needs root"),
    pytest.mark.timeout(1200),  # a cold cache: debootstrap, then pip installs from PyPI
]


# --- the engine and the images -------------------------------------------------------------

@pytest.fixture(scope="module")
def engine():
    with docker_engine("overlay2" if overlay_works() else "vfs") as engine:
        yield engine


def cached_image(engine, name: str, path: Path, make) -> None:
    """``name`` loaded from ``path`` (a ``docker save``), or made (``make()``) and saved
    there, replacing the older versions of it (``path``'s name up to its last ``-``)."""
    if path.is_file():
        engine.run("load", "--input", str(path), timeout=600)
        return
    make()
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    engine.run("save", "--output", str(partial), *name.split(), timeout=600)
    for old in path.parent.glob(f"{path.name.rsplit('-', 1)[0]}-*.tar"):
        old.unlink(missing_ok=True)
    os.replace(partial, path)


@pytest.fixture(scope="module")
def base(engine) -> str:
    """The base root filesystem as it is (no ``python`` beside ``python3``, as in Debian),
    imported once and then loaded: the same image, whose layers a build can find again."""
    rootfs = base_rootfs()
    cached_image(engine, BASE, cache_dir() / f"image-{rootfs.stem}.tar",
                 lambda: engine.run("import", "--change", 'CMD ["/bin/bash"]', str(rootfs),
                                    BASE, timeout=600))
    return BASE


@pytest.fixture(scope="module")
def image(engine, base) -> str:
    """The portal's image, built from the repository as a user builds it, FROM ``base``.
    The layers of the last build with this Dockerfile, pyproject.toml and base are kept in the
    test cache (the builder stage and the image): the build finds its dependencies' layer
    there (pip, from PyPI, takes most of a build) and makes the code's layers again."""
    key = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in (
        "Dockerfile", "pyproject.toml")) + base.encode()).hexdigest()[:16]
    cached = cache_dir() / f"portal-layers-{base_rootfs().stem}-{key}.tar"
    build = ["build", "--network", "host", "--build-arg", f"BASE={base}"]
    if cached.is_file():
        engine.run("load", "--input", str(cached), timeout=600)
        engine.run(*build, "--cache-from", BUILDER, "--cache-from", IMAGE, "--tag", IMAGE,
                   str(ROOT), env=NO_BUILDKIT, timeout=1500)
        return IMAGE

    def make():
        engine.run(*build, "--tag", IMAGE, str(ROOT), env=NO_BUILDKIT, timeout=1500)
        # The builder stage by name (each of its steps is in this engine's cache now).
        engine.run(*build, "--target", "builder", "--tag", BUILDER, str(ROOT),
                   env=NO_BUILDKIT, timeout=600)

    cached_image(engine, f"{BUILDER} {IMAGE}", cached, make)
    return IMAGE


# PostgreSQL and Redis from Debian's packages (no postgres:16 or redis:7 from Docker Hub). For
# the postgres service, an entry point that honours what the official image's does with the
# variables docker-compose.yml sets: POSTGRES_USER (the superuser), POSTGRES_PASSWORD,
# POSTGRES_DB, made once in PGDATA (its volume); PGPORT is the port (pg_isready, the health
# check, reads it too).
SERVICES_DOCKERFILE = f"""\
FROM {BASE}
RUN mkdir -p /etc/postgresql-common \\
 && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \\
 && apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
    postgresql redis-server \\
 && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint /usr/local/bin/
"""
POSTGRES_ENTRYPOINT = """\
#!/bin/sh
set -eu
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
as_postgres() { setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres: "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
  chown postgres /tmp/pwfile
  as_postgres "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile \\
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm /tmp/pwfile
  db="${POSTGRES_DB:-$POSTGRES_USER}"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \\"$db\\"" | as_postgres "$bin/postgres" --single -D "$PGDATA" \\
      postgres >/dev/null
  fi
fi
exec setpriv --reuid=postgres --regid=postgres --clear-groups -- "$bin/postgres" \\
  -D "$PGDATA" -c listen_addresses=127.0.0.1 -p "${PGPORT:-5432}"
"""


@pytest.fixture(scope="module")
def services(engine, base, tmp_path_factory) -> str:
    """The image of the postgres and redis services: made once (apt-get from the machine's
    Debian mirror, about a minute), then kept under the test cache with ``docker save`` and
    loaded from there, named by what it is made of."""
    key = hashlib.sha256(repr((SERVICES_DOCKERFILE, POSTGRES_ENTRYPOINT,
                               base_rootfs().name)).encode()).hexdigest()[:16]

    def make():
        context = tmp_path_factory.mktemp("services")
        (context / "Dockerfile").write_text(SERVICES_DOCKERFILE)
        entrypoint = context / "postgres-entrypoint"
        entrypoint.write_text(POSTGRES_ENTRYPOINT)
        entrypoint.chmod(0o755)
        engine.run("build", "--network", "host", "--tag", SERVICES, str(context),
                   env=NO_BUILDKIT, timeout=900)

    cached_image(engine, SERVICES, cache_dir() / f"services-{key}.tar", make)
    return SERVICES


# --- this machine's PostgreSQL and Redis, for the image alone ----------------------------------

@pytest.fixture(scope="module")
def database_url() -> str:
    """A database of its own on the suite's PostgreSQL, dropped at the end."""
    db = settings.DATABASES["default"]
    name = f"paddlecloud_image_{os.getpid()}"
    connect = {"host": db["HOST"], "port": db["PORT"] or 5432, "user": db["USER"],
               "password": db["PASSWORD"], "dbname": "postgres", "autocommit": True}
    with psycopg.connect(**connect) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield (f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}"
               f"/{name}")
    finally:
        with psycopg.connect(**connect) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def redis_url() -> str:
    """The suite's Redis, a database number the suite does not use, emptied before and
    after."""
    url = urlsplit(settings.REDIS_URL)
    used = int(url.path.strip("/") or 0)
    url = urlunsplit(url._replace(path=f"/{14 if used != 14 else 13}"))
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def portal_env(port: int) -> dict[str, str]:
    """What an operator puts in the portal's environment: secrets of its own, DEBUG off,
    plain HTTP on this machine."""
    return {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "PADDLECLOUD_CREDENTIAL_KEYS": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PADDLECLOUD_PORTAL_URL": f"http://127.0.0.1:{port}",
        "SECURE_SSL_REDIRECT": "0",
        "SECURE_HSTS_SECONDS": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
    }


def wait_healthy(url: str, alive, logs, seconds: float = 180) -> requests.Response:
    """GET url/healthz until it answers 200; ``alive()`` false or the time up fails with
    ``logs()``."""
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(requests.RequestException):
            answer = requests.get(f"{url}/healthz", timeout=5)
            if answer.status_code == 200:
                return answer
        assert alive(), f"the portal's container ended:\n{logs()}"
        assert time.monotonic() < deadline, f"no healthy portal in {seconds} s:\n{logs()}"
        time.sleep(0.3)


def log_in_everywhere(url: str, username: str) -> None:
    """What a user notices: the API gives a token for the password, and the login page (its
    CSRF token, its stylesheet from the collected static files) leads to the jobs page."""
    answer = requests.post(f"{url}/api/v1/auth/token/", timeout=30, json={
        "username": username, "password": PASSWORD, "datacenter": "datacenter1"})
    assert answer.status_code == 201, answer.text
    token = answer.json()["token"]
    me = requests.get(f"{url}/api/v1/me", headers={"Authorization": f"Bearer {token}"},
                      timeout=30)
    assert (me.status_code, me.json()["username"]) == (200, username), me.text
    wrong = requests.post(f"{url}/api/v1/auth/token/", timeout=30, json={
        "username": username, "password": "not it"})
    assert (wrong.status_code, wrong.json()["code"]) == (401, "invalid_credentials")

    browser = requests.Session()
    page = browser.get(f"{url}/login/", timeout=30)
    assert page.status_code == 200
    styles = re.findall(r'<link[^>]+href="(/static/[^"]+\.css)"', page.text)
    assert styles, page.text
    for style in styles:
        served = browser.get(f"{url}{style}", timeout=30)
        assert (served.status_code, served.headers["Content-Type"].split(";")[0]) == \
            (200, "text/css"), style
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    done = browser.post(f"{url}/login/", timeout=30, headers={"Referer": f"{url}/login/"},
                        data={"csrfmiddlewaretoken": csrf, "username": username,
                              "password": PASSWORD, "next": "/"})
    assert done.status_code == 200, done.text
    assert urlsplit(done.url).path == "/jobs/", done.url
    assert username in done.text


# --- the image alone ---------------------------------------------------------------------------

def test_the_image_serves_the_portal_and_its_users_log_in(engine, image, database_url,
                                                          redis_url):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**portal_env(port), "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    name = "paddlecloud-test-portal"
    # The environment from the client's (-e NAME), never on a command line.
    environment = [arg for key in env for arg in ("--env", key)]
    try:
        engine.run("run", "--detach", "--network", "host", "--name", name, *environment,
                   image, "sh", "-c",
                   "paddlecloud migrate --no-input -v 0 && exec paddlecloud runportal "
                   f"--host 127.0.0.1 --port {port} --no-worker --skip-collectstatic",
                   env=env)

        def alive() -> bool:
            return engine.run("inspect", "--format", "{{.State.Running}}", name,
                              check=False).stdout.strip() == "true"

        def logs() -> str:
            done = engine.run("logs", "--tail", "60", name, check=False)
            return done.stdout + done.stderr

        assert wait_healthy(url, alive, logs).json()["status"] == "ok"
        # The portal runs as its own user, who cannot change its code or static files.
        assert engine.run("exec", name, "id", "-un").stdout == "paddlecloud\n"
        assert engine.run("exec", name, "sh", "-c", "touch /app/staticfiles/x",
                          check=False).returncode != 0
        engine.run("exec", name, "paddlecloud", "adddatacenter", "datacenter1")
        engine.run("exec", "--interactive", name, "paddlecloud", "adduser", "alice",
                   "--password-stdin", "--datacenter", "datacenter1", input=PASSWORD + "\n")
        log_in_everywhere(url, "alice")
    finally:
        engine.run("rm", "--force", name, check=False)


def test_the_workers_settings_make_sandboxes(engine, image):
    """The worker service's settings in docker-compose.yml, as ``docker run`` (and ``docker
    compose``) apply them, are what bubblewrap needs to make the local backend's sandboxes in
    the image; Docker's defaults are not."""
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    settings_ = [arg for opt in worker["security_opt"] for arg in ("--security-opt", opt)]
    settings_ += [arg for cap in worker["cap_drop"] for arg in ("--cap-drop", cap)]
    probe = ["python3", "-c", "from jobs.backends.local.sandbox import sandbox_problem; "
             "print(sandbox_problem())"]
    made = engine.run("run", "--rm", "--network", "host", *settings_, image, *probe)
    assert made.stdout == "None\n"
    refused = engine.run("run", "--rm", "--network", "host", image, *probe)
    assert refused.stdout.startswith("the job's network could not be made: [Errno 1] "
                                     "unshare: Operation not permitted"), refused.stdout


# --- docker-compose.yml -----------------------------------------------------------------------

TRAIN_PY = """\
import os, sys
print("hello from", os.environ["TRAINING_ROLE"].lower(), os.environ["PADDLE_TRAINER_ID"],
      "as uid", os.getuid(), "with python", sys.version_info[0])
print("the portal's secrets:", "SECRET_KEY" in os.environ, os.path.exists("/app/paddlecloud"))
"""


class Compose:
    """``docker-compose`` on the repository's docker-compose.yml (as ``compose_file`` writes
    it) and this module's override, in the repository (``build: .``), with its own project
    name and .env (never the checkout's own .env)."""

    def __init__(self, engine, directory: Path, project: str):
        self.engine = engine
        self.base = ["docker-compose", "--ansi", "never", "--project-name", project,
                     "--project-directory", str(ROOT),
                     "--file", str(directory / "docker-compose.yml"),
                     "--file", str(directory / "docker-compose.override.yml"),
                     "--env-file", str(directory / ".env")]

    def __call__(self, *args: str, check: bool = True, timeout: float = 300,
                 input: str | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.base, *args], capture_output=True, text=True,
                                env=self.engine.environ(),
                                timeout=timeout, cwd=ROOT,
                                **({"input": input} if input is not None
                                   else {"stdin": subprocess.DEVNULL}))
        if check and result.returncode != 0:
            raise RuntimeError(f"docker-compose {' '.join(args)} exited {result.returncode}:"
                               f"\n{result.stdout}{result.stderr}")
        return result

    def logs(self) -> str:
        done = self("logs", "--no-color", "--tail", "40", check=False)
        return done.stdout + done.stderr


def compose_file() -> dict:
    """docker-compose.yml with two changes an override cannot make (it adds to a list, never
    removes from one): web publishes no port (a port published on the host's network means
    nothing, and docker-compose refuses it there); and the worker's
    ``systempaths=unconfined``, which ``docker compose`` (v2) and ``docker run`` turn into
    Docker's masked and read-only /proc paths left out, but which docker-compose v1 passes to
    the engine as it is (refused: "invalid --security-opt"), is ``privileged``, the only way
    v1 has to leave them out (``test_the_workers_settings_make_sandboxes`` checks the shipped
    settings themselves with ``docker run``). The worker still runs as its user, without a
    capability (no-new-privileges)."""
    stack = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert stack["services"]["web"].pop("ports") == ["8000:8000"]
    worker = stack["services"]["worker"]
    worker["security_opt"].remove("systempaths=unconfined")
    worker["privileged"] = True
    return stack


def compose_override(services: str, ports: dict[str, int]) -> dict:
    """What this machine needs beside docker-compose.yml: the engine has no bridge, so every
    service shares the host's network (where the services' names do not resolve): each listens
    on a port of the test's choosing on 127.0.0.1, and the portal's URLs say so. PostgreSQL
    and Redis are the image made here (Debian's 15 and 7), not postgres:16 and redis:7 from
    Docker Hub; docker-compose.yml itself is what users run, unchanged."""
    host = "127.0.0.1"
    portal = {
        "network_mode": "host",
        "environment": {
            "DATABASE_URL": (f"postgres://paddlecloud:paddlecloud@{host}:{ports['postgres']}"
                             "/paddlecloud"),
            "REDIS_URL": f"redis://{host}:{ports['redis']}/0",
            "PADDLECLOUD_PORTAL_URL": f"http://{host}:{ports['web']}",
            "ALLOWED_HOSTS": f"{host},localhost",
        },
    }
    fast = {"interval": "1s", "retries": 120}
    return {"services": {
        "postgres": {"image": services, "network_mode": "host",
                     "command": ["postgres-entrypoint"],
                     "environment": {"PGPORT": str(ports["postgres"])},
                     "healthcheck": fast},
        "redis": {"image": services, "network_mode": "host",
                  "command": ["redis-server", "--bind", host, "--port", str(ports["redis"]),
                              "--save", "", "--appendonly", "no"],
                  "healthcheck": {"test": ["CMD", "redis-cli", "-p", str(ports["redis"]),
                                           "ping"], **fast}},
        "web": {**portal,
                "command": ("sh -c 'paddlecloud migrate --no-input && exec paddlecloud "
                            f"runportal --host {host} --port {ports['web']} --no-worker "
                            "--skip-collectstatic'"),
                "healthcheck": {"test": [
                    "CMD", "python", "-c", "import urllib.request; urllib.request.urlopen("
                    f"'http://{host}:{ports['web']}/healthz')"], **fast}},
        "worker": {**portal, "environment": {**portal["environment"],
                                             "PADDLECLOUD_METRICS_PORT": str(ports["metrics"])}},
        "beat": portal,
    }}


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose is not installed (./dev test installs it)")
def test_docker_compose_runs_a_job(engine, image, services, tmp_path):
    directory = tmp_path / "compose"
    directory.mkdir()
    ports = {name: free_port() for name in ("postgres", "redis", "web", "metrics")}
    (directory / "docker-compose.yml").write_text(yaml.safe_dump(compose_file(),
                                                                sort_keys=False))
    (directory / "docker-compose.override.yml").write_text(
        yaml.safe_dump(compose_override(services, ports), sort_keys=False))
    # The .env of docker-compose.yml's instructions.
    env = portal_env(ports["web"])
    (directory / ".env").write_text(f"SECRET_KEY={env['SECRET_KEY']}\n"
                                    "PADDLECLOUD_CREDENTIAL_KEYS="
                                    f"{env['PADDLECLOUD_CREDENTIAL_KEYS']}\n")
    compose = Compose(engine, directory, f"pcimage{os.getpid()}")
    url = f"http://127.0.0.1:{ports['web']}"
    try:
        compose("up", "--detach", "--no-build", timeout=600)
        running = compose("ps", "--services", "--filter", "status=running").stdout.split()
        assert sorted(running) == ["beat", "postgres", "redis", "web", "worker"], \
            compose.logs()
        wait_healthy(url, lambda: True, compose.logs)
        compose("exec", "-T", "web", "paddlecloud", "adddatacenter", "datacenter1")
        compose("exec", "-T", "web", "paddlecloud", "adduser", "alice", "--password-stdin",
                "--datacenter", "datacenter1", input=PASSWORD + "\n")
        log_in_everywhere(url, "alice")

        cli = Cli(tmp_path / "home")
        cli.home.mkdir()
        cli.write_config([datacenter_entry(endpoint=url)])
        package = cli.cwd / "hello"
        package.mkdir()
        (package / "train.py").write_text(TRAIN_PY)
        # python3: the sandbox's PATH is the system's, where Debian has no `python`.
        submitted = cli("submit", "--jobname", "hello", "--entry", "python3 train.py", "hello",
                        timeout=120)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        try:
            followed = cli("logs", "hello", "-f", timeout=300)
        except subprocess.TimeoutExpired:
            pytest.fail("the job's log did not end within 300 s:\n" + compose.logs())
        assert followed.returncode == 0, followed.stdout + followed.stderr + compose.logs()
        # In the worker's container, in a sandbox (docker-compose.yml's security_opt): nobody
        # (uid 65534), without the portal's environment or its code.
        assert followed.stdout == ("trainer-0 | hello from trainer 0 as uid 65534 with python 3\n"
                                   "trainer-0 | the portal's secrets: False False\n"), \
            compose.logs()
        workers = cli("get", "workers", "hello", "-o", "json")
        assert workers.returncode == 0, workers.stderr
        assert [(w["name"], w["state"], w["exit_code"]) for w in yaml.safe_load(
            workers.stdout)] == [("trainer-0", "succeeded", 0)], workers.stdout
    finally:
        down = compose("down", "--volumes", "--remove-orphans", "--timeout", "10",
                       check=False, timeout=300)
        left = engine.run("ps", "--all", "--quiet").stdout.split()
        volumes = engine.run("volume", "ls", "--quiet").stdout.split()
    assert down.returncode == 0, down.stdout + down.stderr
    assert (left, volumes) == ([], [])
