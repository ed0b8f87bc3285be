"""Local jobs run in sandboxes (issue 14, finding 10): a job submitted to the local backend and
run by a real Celery worker cannot reach what its owner must not — other homes, ``var/`` (the
portal's keys, its SQLite database), the portal's environment and processes, PostgreSQL, Redis
or the portal on the host's loopback — while its replicas reach each other and its owner's home.
Its ``requirements.txt`` is installed from wheels only, with no user code run on the machine's
network. Without a sandbox the portal says, when it starts, that jobs can read what it can."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.backends import environments
from jobs.backends.local import backend as local
from jobs.backends.local import envs
from jobs.backends.local.backend import job_dir
from jobs.backends.netns import netns_read
from jobs.files import output_dir
from jobs.models import Job
from jobs.services import job_submit
from tests.package_index import make_wheel
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

# Each trainer tries everything a hostile job would, and prints what it could do.
PROBE = textwrap.dedent("""\
    import json, os, socket, sys, time

    found = {"id": os.environ["PADDLE_TRAINER_ID"]}

    def can_read(path):
        try:
            with open(path, "rb") as f:
                return f.read(64).decode("latin-1")
        except OSError as exc:
            return None

    for name in ("secret_key", "bob", "sqlite", "keys", "portal_environ"):
        found[name] = can_read(os.environ["PROBE_" + name.upper()])
    found["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    found["portal_env"] = sorted(set(os.environ) & {"DATABASE_URL", "SECRET_KEY", "REDIS_URL",
                                                    "DJANGO_SETTINGS_MODULE"})
    def can_connect(port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return True
        except OSError:
            return False

    found["host_ports"] = {str(p): can_connect(p) for p in
                           map(int, os.environ["PROBE_PORTS"].split(","))}
    found["cwd"] = os.getcwd()
    found["paths"] = {name: os.environ[name] for name in (
        "PADDLE_OUTPUT_DIR", "PADDLE_PFS_HOME", "PADDLE_PFS_PUBLIC", "PADDLE_CHECKPOINT_DIR")}
    found["public_read"] = can_read(os.path.join(os.environ["PADDLE_PFS_PUBLIC"], "shared.txt"))
    home = os.environ["PADDLE_OUTPUT_DIR"]
    with open(os.path.join(home, f"written-{found['id']}"), "w") as f:
        f.write("ok")
    try:
        open(os.path.join(os.environ["PROBE_PUBLIC"], "x"), "w").close()
        found["public_writable"] = True
    except OSError:
        found["public_writable"] = False
    # Trainer 0 serves on its endpoint; trainer 1 reaches it over the job's own loopback.
    port = int(os.environ["PADDLE_CURRENT_ENDPOINT"].rsplit(":", 1)[1])
    peer = os.environ["PADDLE_TRAINER_ENDPOINTS"].split(",")[0]
    if found["id"] == "0":
        server = socket.create_server(("127.0.0.1", port))
        server.settimeout(30)
        connection, _ = server.accept()
        found["peer_said"] = connection.recv(16).decode()
    else:
        for _ in range(300):
            try:
                socket.create_connection(peer.split(":"), timeout=1).sendall(b"hello")
                break
            except OSError:
                time.sleep(0.1)
    print("PROBE " + json.dumps(found), flush=True)
    """)


@pytest.fixture
def host_listener():
    """A server on the host's loopback, as PostgreSQL, Redis and the portal are."""
    server = socket.create_server(("127.0.0.1", 0))
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def submit(alice, datacenter, pfs_home, settings, make_user, host_listener):
    make_user("bob")
    bob = pfs_home.parent / "bob"
    bob.mkdir()
    (bob / "data.txt").write_text("bob's data")
    var = Path(settings.VAR_DIR)
    var.mkdir(parents=True, exist_ok=True)
    for name, text in (("secret_key", "the portal's secret key"),
                       ("paddlecloud.sqlite3", "SQLite format 3"),
                       ("credential_keys", "the fernet key")):
        (var / name).write_text(text)
    public = datacenter.public_path
    public.mkdir(parents=True, exist_ok=True)
    (public / "shared.txt").write_text("everyone's")
    pkg = pfs_home / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text(PROBE)
    submitted = []

    def do(name="probe", **fields) -> Job:
        env = {"PROBE_SECRET_KEY": str(var / "secret_key"), "PROBE_BOB": str(bob / "data.txt"),
               "PROBE_SQLITE": str(var / "paddlecloud.sqlite3"),
               "PROBE_KEYS": str(var / "credential_keys"),
               "PROBE_PORTAL_ENVIRON": f"/proc/{os.getpid()}/environ",
               "PROBE_PORTS": f"{host_listener},5432,6379",
               "PROBE_PUBLIC": "/pfs/datacenter1/public"}
        job = job_submit(alice, datacenter, {"name": name, "package": "/pfs/datacenter1/home/"
                                             "alice/pkg", "entry": "python train.py",
                                             "env": env, **fields}).job
        submitted.append(job)
        return job

    yield do
    for job in submitted:  # leave no process, and no network holder, behind
        local.LocalBackend().stop(job, list(job.replicas.all()), grace=1)
        local.LocalBackend().cleanup(job)


def probes(job) -> list[dict]:
    found = []
    for index in range(job.trainers):
        log = (output_dir(job) / f"node_{index}" / "train.log").read_text()
        found += [json.loads(line[6:]) for line in log.splitlines() if line.startswith("PROBE ")]
    return sorted(found, key=lambda probe: probe["id"])


def ended(job) -> Job:
    wait(lambda: Job.objects.get(pk=job.pk).state in ("succeeded", "failed"), timeout=90,
         message="the job to end")
    job.refresh_from_db()
    return job


def test_a_local_job_reaches_nothing_of_the_portal_nor_of_other_users(
        celery_worker, submit, host_listener, monkeypatch):
    assert local.sandboxing() is None, "this machine must make sandboxes (./dev installs bwrap)"
    job = ended(submit(trainers=2))
    assert job.state == "succeeded", job.state_reason
    first, second = probes(job)
    for probe in (first, second):
        assert {k: probe[k] for k in ("secret_key", "bob", "sqlite", "keys",
                                      "portal_environ")} == dict.fromkeys(
            ("secret_key", "bob", "sqlite", "keys", "portal_environ"))
        assert probe["portal_env"] == []
        # bwrap's init, the trainer and what it started: nothing of the host's.
        assert len(probe["pids"]) <= 3 and max(probe["pids"]) < 10, probe["pids"]
        assert set(probe["host_ports"].values()) == {False}, probe["host_ports"]
        assert probe["public_writable"] is False
    assert first["peer_said"] == "hello"  # the job's replicas reach each other
    for index in (0, 1):
        assert (output_dir(job) / f"written-{index}").read_text() == "ok"
    # The job's network is let go once it has ended.
    assert netns_read(job_dir(job) / "run" / "netns.pid") is None


def test_a_local_job_sees_its_files_at_their_pfs_paths_and_prints_no_host_path(
        celery_worker, submit, settings):
    """As on Kubernetes: the owner's home and the public directory at /pfs/…, the package
    in /workspace (its working directory); so what a trainer prints is what users write,
    never where the portal keeps them on its disk."""
    job = ended(submit(trainers=2))
    assert job.state == "succeeded", job.state_reason
    home, public = "/pfs/datacenter1/home/alice", "/pfs/datacenter1/public"
    for probe in probes(job):
        assert probe["cwd"] == "/workspace"
        assert probe["paths"] == {
            "PADDLE_OUTPUT_DIR": f"{home}/jobs/probe/output", "PADDLE_PFS_HOME": home,
            "PADDLE_PFS_PUBLIC": public, "PADDLE_CHECKPOINT_DIR": f"{home}/jobs/probe/checkpoints"}
        assert probe["public_read"] == "everyone's" and probe["public_writable"] is False
    for index in (0, 1):
        log = (output_dir(job) / f"node_{index}" / "train.log").read_text()
        for host in (str(settings.PADDLECLOUD_PFS_ROOT), str(settings.VAR_DIR)):
            assert host not in log, log


def test_requirements_come_as_wheels_and_are_installed_for_the_job_only(
        celery_worker, submit, pfs_home):
    pkg = pfs_home / "pkg"
    (pkg / "wheels").mkdir()
    make_wheel(pkg / "wheels", "tinydep")
    (pkg / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinydep\n")
    (pkg / "train.py").write_text("import tinydep; print('imported', tinydep.NAME)\n")
    job = ended(submit("reqs"))
    assert job.state == "succeeded", job.state_reason
    assert "imported tinydep" in (output_dir(job) / "node_0" / "train.log").read_text()
    assert (envs.env_path(job.datacenter, job.environment) / "tinydep.py").is_file()
    assert "installing requirements.txt" in (output_dir(job) / "setup.log").read_text()
    probe = subprocess.run([sys.executable, "-c", "import tinydep"], capture_output=True,
                           check=False)
    assert probe.returncode != 0  # the portal's own environment is untouched


def test_a_requirement_that_would_run_code_to_build_is_refused(celery_worker, submit,
                                                               pfs_home):
    """A source distribution runs its setup.py to build: never on the machine's network,
    where 127.0.0.1 is the portal's."""
    pkg = pfs_home / "pkg"
    (pkg / "dist").mkdir()
    source = pkg / "dist" / "evil-1.0"
    source.mkdir()
    (source / "setup.py").write_text("from setuptools import setup; setup(name='evil')\n")
    subprocess.run(["tar", "-czf", "evil-1.0.tar.gz", "evil-1.0"], cwd=pkg / "dist",
                   check=True)
    subprocess.run(["rm", "-r", str(source)], check=True)
    (pkg / "requirements.txt").write_text("--no-index\n--find-links dist\nevil\n")
    job = ended(submit("evil"))
    assert job.state == "failed"
    assert "requirements.txt could not be installed" in job.state_reason
    assert "wheels only" in job.state_reason
    assert "evil" in (output_dir(job) / "setup.log").read_text()


def test_without_a_sandbox_the_portal_says_jobs_are_for_trusting_users(settings, datacenter,
                                                                       capsys):
    settings.PADDLECLOUD_LOCAL_SANDBOX = "off"
    isolated, notice = local.isolation_notice()
    assert not isolated
    assert "not sandboxed" in notice and "mutually trusting users" in notice
    settings.PADDLECLOUD_LOCAL_SANDBOX = "auto"
    isolated, notice = local.isolation_notice()
    assert isolated and "bubblewrap sandboxes" in notice


def test_a_sandbox_required_but_unavailable_fails_jobs_with_the_reason(
        celery_worker, submit, settings, monkeypatch):
    settings.PADDLECLOUD_LOCAL_SANDBOX = "bwrap"
    monkeypatch.setattr(local, "sandbox_problem", lambda: "bwrap is not installed")
    job = ended(submit("needs-sandbox"))
    assert job.state == "failed"
    assert "must run in a sandbox" in job.state_reason
    assert "bwrap is not installed" in job.state_reason


def test_the_sandboxed_pip_sees_the_files_the_machines_pip_configuration_names(
        tmp_path, monkeypatch):
    """A pip.conf naming a constraints file (or find-links) works in the sandbox as outside:
    pip fails on a file it cannot open."""
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    secret.chmod(0o600)
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nconstraint = {constraints}\nextra = {secret}\n"
                      "cert = /usr/share/ca-certificates\n")
    tmp_path.chmod(0o755)
    monkeypatch.setattr(environments, "PIP_CONFIG", (str(config), str(tmp_path / "absent.conf")))
    uv_env = envs._uv_env({"PIP_FIND_LINKS": str(wheels), "OTHER": "/opt"})
    assert uv_env["UV_CONSTRAINT"] == str(constraints)  # pip's settings in uv's words
    binds = envs._config_binds(uv_env)
    # Its files, read-only; not those the world may not read, nor what sandboxes show anyway.
    assert sorted((b.src, b.writable) for b in binds) == sorted([
        (str(constraints), False), (str(wheels), False)])
