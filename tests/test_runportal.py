"""The embedded default end to end: migrate, demo, runportal — as the README's first command
runs them — on SQLite with the in-process worker, in a fresh var/ directory."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.processes import ROOT, clean_env, run_python


def manage(var_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return run_python(["manage.py", *args], var_dir)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(url: str, data: dict | None = None, token: str | None = None) -> tuple[int, dict | str]:
    request = urllib.request.Request(url, method="POST" if data is not None else "GET")
    if data is not None:
        request.data = json.dumps(data).encode()
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


@pytest.fixture
def var_dir(tmp_path) -> Path:
    return tmp_path / "var"


def test_runportal_refuses_an_unmigrated_database(var_dir):
    result = manage(var_dir, "runportal", "--port", str(free_port()))
    assert result.returncode == 1
    assert "unapplied migrations" in result.stderr
    assert "migrate" in result.stderr


# Refused before anything binds (192.0.2.7 is TEST-NET-1: nowhere).
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::"])  # noqa: S104
def test_debug_is_never_served_where_others_can_reach_it(var_dir, host):
    assert manage(var_dir, "migrate", "--no-input", "-v", "0").returncode == 0
    refused = manage(var_dir, "runportal", "--host", host, "--port", str(free_port()))
    assert refused.returncode == 1
    assert "DEBUG is on, and its error pages show code and settings to anyone who can " \
           f"reach {host}:" in refused.stderr
    assert "set DEBUG=0 with SECRET_KEY" in refused.stderr


def test_embedded_portal_serves_the_api_with_its_worker(var_dir):
    assert manage(var_dir, "migrate", "--no-input", "-v", "0").returncode == 0
    port = free_port()
    demo = manage(var_dir, "demo", "--endpoint", f"http://127.0.0.1:{port}")
    assert demo.returncode == 0, demo.stderr
    password = (var_dir / "demo-password").read_text().strip()
    assert f"password  {password}" in demo.stdout
    assert f"endpoint: http://127.0.0.1:{port}" in demo.stdout

    log = var_dir / "portal.log"
    with log.open("w") as out:
        portal = subprocess.Popen(
            [sys.executable, "manage.py", "runportal", "--port", str(port)], cwd=ROOT,
            env=clean_env(var_dir), stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if call(f"{base}/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"the portal did not come up:\n{log.read_text()}")

        assert call(f"{base}/api/v1/version")[1]["api"] == "v1"
        status, issued = call(f"{base}/api/v1/auth/token/",
                              {"username": "demo", "password": password})
        assert status == 201, issued
        status, me = call(f"{base}/api/v1/me", token=issued["token"])
        assert status == 200
        assert me["username"] == "demo"
        assert me["datacenter"]["name"] == "datacenter1"
        assert me["datacenter"]["backend"] == "local"

        status, page = call(f"{base}/login/")
        assert status == 200 and "Log in" in page
        status, _css = call(f"{base}/static/css/paddlecloud.css")
        assert status == 200
        status, error = call(f"{base}/api/v1/nowhere")
        assert status == 404 and error["code"] == "not_found"
    finally:
        portal.send_signal(signal.SIGTERM)  # as `docker stop` does
        portal.wait(timeout=30)
    output = log.read_text()
    assert "embedded worker ready" in output
    assert "beat on" in output
    # It says what local jobs can reach (this machine makes sandboxes: ./dev installs bwrap).
    assert "Local jobs run in bubblewrap sandboxes" in output
    assert portal.returncode == 0, output
    assert "Traceback" not in output
    assert output.count(f"PaddleCloud is serving on {base}/ (Ctrl-C stops it)") == 1
    # The 404 above: in the access log, once (the client heard why in the body).
    assert output.count("/api/v1/nowhere") == 1, output
    assert output.rstrip().endswith("PaddleCloud stopped")


def test_a_quiet_portal_leaves_saying_where_it_serves_to_its_caller(var_dir):
    """./dev up starts it so: the line would come before the example's output, not after,
    and a line per request would come between the example's lines."""
    assert manage(var_dir, "migrate", "--no-input", "-v", "0").returncode == 0
    port = free_port()
    portal = subprocess.Popen(
        [sys.executable, "manage.py", "runportal", "--port", str(port), "--quiet",
         "--no-access-log", "--no-worker"], cwd=ROOT, env=clean_env(var_dir),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if call(f"http://127.0.0.1:{port}/healthz")[0] == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline and portal.poll() is None, "not up"
                time.sleep(0.2)
    finally:
        portal.send_signal(signal.SIGTERM)
        output = portal.communicate(timeout=30)[0]
    assert portal.returncode == 0, output
    assert "serving on" not in output
    assert "/healthz" not in output  # asked for above; no access log
    assert output.rstrip().endswith("PaddleCloud stopped")


EMBEDDED_TASK = """
import django
django.setup()
from datetime import timedelta
from django.core.management import call_command
from django.utils import timezone
call_command("migrate", verbosity=0)
from accounts.models import ApiToken
from accounts.services import datacenter_upsert, token_create, user_upsert
from accounts.tasks import token_purge
from paddlecloud.worker import EmbeddedWorker
datacenter_upsert("datacenter1")
user = user_upsert("eve", password="a long enough password", datacenter_names=["datacenter1"])[0]
stale = token_create(user).token
ApiToken.objects.filter(pk=stale.pk).update(expires_at=timezone.now() - timedelta(days=60))
worker = EmbeddedWorker(concurrency=1, beat=False)
worker.start()
print("purged", token_purge.delay().get(timeout=30), "left", ApiToken.objects.count())
worker.stop()
"""


def test_embedded_worker_runs_tasks_without_redis(var_dir):
    result = run_python(["-c", EMBEDDED_TASK], var_dir)
    assert result.returncode == 0, result.stderr
    assert "purged 1 left 0" in result.stdout
    assert "memory://" in result.stderr  # the in-process broker, not Redis
