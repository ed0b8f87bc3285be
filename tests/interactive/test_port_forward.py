"""``paddlectl port-forward`` as users run it (the console script in a subprocess, its config for
the live portal) to a real local job's ports: bytes both ways (an HTTP upload and its digest; a
WebSocket's messages), an audit entry for each connection forwarded, clear errors for a job
another user cannot see, one that does not run, and a port nothing listens on."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess

import pytest
import requests
from websockets.sync.client import connect

from accounts.models import AuditEntry
from tests.paddlectl.conftest import Cli, datacenter_entry, free_port
from tests.processes import process_stop

from .apps import HTTP_PORT, WS_PORT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture
def forward(live_portal, tmp_path):
    """``forward(*args, user="alice")``: paddlectl port-forward running in the background with
    the user's config, once it says where it listens (its local port); stopped at the end."""
    started: list[subprocess.Popen] = []

    def start(*args: str, user: str = "alice") -> tuple[subprocess.Popen, int]:
        home = tmp_path / f"home-{user}-{len(started)}"
        home.mkdir()
        cli = Cli(home)
        cli.write_config([datacenter_entry(username=user, endpoint=live_portal.url)])
        process = cli.start("port-forward", *args)
        started.append(process)
        first = process.stdout.readline()
        assert first.startswith("Forwarding from 127.0.0.1:"), (
            first + process.stderr.read() if process.poll() is not None else first)
        return process, int(first.split()[2].rsplit(":", 1)[1])

    yield start
    for process in started:
        process_stop(process, signal.SIGINT)
        process.stdout.close()
        process.stderr.close()


def test_bytes_pass_both_ways_and_each_forward_is_audited(serving_job, forward):
    http, local = forward("web", f"0:{HTTP_PORT}")
    body = os.urandom(4 << 20)
    answer = requests.post(f"http://127.0.0.1:{local}/upload", data=body, timeout=60)
    assert answer.json() == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    assert requests.get(f"http://127.0.0.1:{local}/there", timeout=30).json()["path"] == "/there"

    _, ws_local = forward("web", f"0:{WS_PORT}", "-w", "trainer-0")
    with connect(f"ws://127.0.0.1:{ws_local}/echo", open_timeout=10) as socket:
        socket.send("through the portal")
        assert socket.recv(timeout=10) == "echo: through the portal"

    entries = AuditEntry.objects.filter(action="job.port_forward").order_by("id")
    assert [(e.actor_name, e.target, e.details["worker"], e.details["port"]) for e in entries] \
        == [("alice", "alice/web", "trainer-0", HTTP_PORT)] * 2 + [
            ("alice", "alice/web", "trainer-0", WS_PORT)]
    http.send_signal(signal.SIGINT)
    assert http.wait(10) == 130


def test_nothing_listening_is_said_and_the_forward_goes_on(serving_job, forward):
    port = free_port()
    process, local = forward("web", f"0:{port}")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{local}/", timeout=30)
    assert process.poll() is None  # still listening: something may listen there later
    process.send_signal(signal.SIGINT)
    process.wait(10)
    said = process.stderr.read()
    assert f"paddlectl: port-forward: trainer-0 of job 'web': nothing listens on port {port}" \
        in said


def test_a_job_of_another_user_or_not_running_is_refused(live_portal, serving_job, tmp_path):
    from accounts.services import user_upsert
    from tests.conftest import PASSWORD

    user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])

    def refused(*args, user="alice") -> subprocess.CompletedProcess:
        home = tmp_path / f"once-{user}"
        home.mkdir(exist_ok=True)
        cli = Cli(home)
        cli.write_config([datacenter_entry(username=user, endpoint=live_portal.url)])
        return cli("port-forward", *args)

    bob = refused("web", str(HTTP_PORT), user="bob")
    assert bob.returncode == 3  # not found, as for a job that does not exist
    assert "no job named 'web'" in bob.stderr
    assert refused("web", "x").stderr == (
        "paddlectl: PORT: a port number from 1 to 65535, not 'x' (as in `paddlectl "
        "port-forward JOB 8080` or `… 9000:8080`)\n")

    live_portal.session().post(f"{live_portal.url}/api/v1/jobs/web/kill", timeout=30)
    stopped = refused("web", str(HTTP_PORT))
    assert stopped.returncode == 1
    assert stopped.stderr == ("paddlectl: job 'web' is killed, not running: only a running "
                              "job's ports can be forwarded\n")
    assert not AuditEntry.objects.filter(action="job.port_forward").exists()
