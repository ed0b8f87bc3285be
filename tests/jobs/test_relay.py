"""The relay from a job's network to the portal (jobs/backends/local/relay.py), with the real bwrap,
real network namespaces and a stdlib HTTP server on the host's loopback standing in for the
portal: a sandboxed process reaches the portal through it and through nothing else; it is found
again, bounded, idle when nothing passes, ends cleanly on SIGTERM and goes with the job's
network; nothing is left behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobs.backends.local import relay as relay_module
from jobs.backends.local.relay import (
    RELAY_MARKER,
    RELAY_PORT,
    RelayError,
    relay_alive,
    relay_read,
    relay_start,
    relay_stop,
)
from jobs.backends.local.sandbox import Sandbox, client_dirs, sandbox_command, sandbox_problem
from jobs.backends.netns import netns_start, netns_stop
from paddlecloud_core.contract import RELAY_SOURCE_ADDRESS

pytestmark = pytest.mark.skipif(sandbox_problem() is not None,
                                reason=f"no sandbox here: {sandbox_problem()}")

VENV_BIN = str(Path(sys.executable).parent)
OUTSIDE_ENV = {"PATH": "/usr/bin:/bin"}


class Portal(ThreadingHTTPServer):
    """Answers every POST with its path, a digest of its body, its Host, and the body itself
    when asked (``?echo``); ``slow`` seconds late. Counts the requests it serves at once."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self):
        super().__init__(("127.0.0.1", 0), PortalHandler)
        self.slow = 0.0
        self.lock = threading.Lock()
        self.serving = self.most = 0


class PortalHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # http.server's name
        server = self.server
        with server.lock:
            server.serving += 1
            server.most = max(server.most, server.serving)
        try:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(server.slow)
            if self.path.endswith("?echo"):
                out = body
            else:
                out = json.dumps({"path": self.path, "host": self.headers["Host"],
                                  "peer": self.client_address[0],
                                  "sha256": hashlib.sha256(body).hexdigest()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        finally:
            with server.lock:
                server.serving -= 1

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_portal():
    """A stand-in for the portal (``Portal``), serving on a free port of loopback."""
    server = Portal()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def relays_of(label: str) -> list[int]:
    """The pids of the relays labelled ``label`` that run (not zombies)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{RELAY_MARKER}\0{label}\0".encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def job_network(tmp_path):
    """A job's ``run/`` with its network; at the end the network and the relay are stopped,
    and no relay of this test is left."""
    run = tmp_path / "run"
    run.mkdir()
    label = f"job-{uuid.uuid4()}"
    netns = netns_start(run / "netns.pid", label)
    yield run, netns, label
    netns_stop(run / "netns.pid")
    relay_stop(run / "relay.pid")
    assert relays_of(label) == []
    assert not (run / "relay.pid").exists()


def in_network(netns, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Python in a sandbox in the job's network, as a replica runs."""
    pythonpath = os.pathsep.join(dict.fromkeys(str(d.parent) for d in client_dirs()))
    sandbox = Sandbox(env={"PATH": f"{VENV_BIN}:/usr/bin:/bin", "PYTHONPATH": pythonpath},
                      network=netns, hostname="trainer-0")
    return sandbox_command(sandbox, ["python", "-c", textwrap.dedent(code)]).run(
        env=OUTSIDE_ENV, capture_output=True, text=True, timeout=timeout)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_a_sandboxed_process_reaches_the_portal_through_the_relay_only(fake_portal, job_network):
    run, netns, label = job_network
    port = fake_portal.server_address[1]
    relay = relay_start(run / "relay.pid", netns, ("127.0.0.1", port), label)
    assert relay.port == RELAY_PORT == 80
    result = in_network(netns, f"""
        import hashlib, json, os, socket, urllib.request
        url = "http://127.0.0.1:{RELAY_PORT}/api/v1/master/{label}"
        small = urllib.request.urlopen(url + "/next", data=b'{{"trainer": 0}}', timeout=20)
        big = os.urandom(3 << 20)  # more than the relay buffers: it must hold back and go on
        echoed = urllib.request.urlopen(url + "/x?echo", data=big, timeout=20).read()
        try:  # the portal's own port, on this network's loopback: nothing there
            socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            direct = True
        except OSError:
            direct = False
        print(json.dumps({{"small": json.loads(small.read()), "echoed": echoed == big,
                          "direct": direct}}))
        """)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    # (from an address of its own, which no proxy in front of the portal has)
    assert seen["small"] == {"path": f"/api/v1/master/{label}/next", "host": "127.0.0.1:80",
                             "peer": RELAY_SOURCE_ADDRESS,
                             "sha256": hashlib.sha256(b'{"trainer": 0}').hexdigest()}
    assert seen["echoed"] is True
    assert seen["direct"] is False
    # The relay runs in the machine's network, in a session of its own (it outlives the
    # portal's), and is not the portal's child.
    assert os.readlink(f"/proc/{relay.pid}/ns/net") == os.readlink("/proc/self/ns/net")
    assert os.getsid(relay.pid) != os.getsid(0)
    assert relays_of(label) == [relay.pid]


def test_a_replica_cannot_listen_in_the_relays_place(job_network):
    _, netns, _ = job_network
    result = in_network(netns, f"""
        import socket
        try:
            socket.create_server(("127.0.0.1", {RELAY_PORT}))
            print("listening")
        except PermissionError:
            print("refused")
        """)
    assert result.stdout.strip() == "refused", result.stderr


def test_the_relay_is_found_again_and_goes_with_the_jobs_network(fake_portal, job_network):
    run, netns, label = job_network
    target = ("127.0.0.1", fake_portal.server_address[1])
    record = run / "relay.pid"
    relay = relay_start(record, netns, target, label)
    # As a restarted portal: the record names it, and it is not started twice.
    assert relay_read(record) == relay
    assert relay_start(record, netns, target, label) == relay
    assert relays_of(label) == [relay.pid]

    netns_stop(run / "netns.pid")  # the job ended: only its network is stopped
    deadline = time.monotonic() + 5
    while relay_alive(relay):
        assert time.monotonic() < deadline, "the relay outlived its job's network"
        time.sleep(0.02)
    assert relays_of(label) == []
    relay_stop(record)
    assert not record.exists()
    relay_stop(record)  # again: nothing to do

    # A network made anew gets a relay of its own; one for a network that is gone is refused.
    again = netns_start(run / "netns.pid", label)
    fresh = relay_start(record, again, target, label)
    # A new relay, in the new network (the kernel may give a namespace a freed inode again).
    assert fresh.pid != relay.pid and fresh.netns == again.inode and again.pid != netns.pid
    # A portal that moved (restarted on another port) gets a relay that forwards there, on the
    # same port in the job's network: the URL the replicas have still holds.
    moved = relay_start(record, again, ("127.0.0.1", target[1] + 1), label)
    assert moved.pid != fresh.pid and not relay_alive(fresh) and moved.port == fresh.port
    assert relays_of(label) == [moved.pid]
    # A relay of a version that connected from 127.0.0.1, as a proxy does (its record says no
    # source), is replaced by one that connects from its own address.
    old = json.loads(record.read_text())
    del old["source"]
    record.write_text(json.dumps(old))
    current = relay_start(record, again, moved.target, label)
    assert current.pid != moved.pid and not relay_alive(moved)
    assert current.source == RELAY_SOURCE_ADDRESS and relays_of(label) == [current.pid]
    with pytest.raises(RelayError, match="the job's network is gone"):
        relay_start(run / "other.pid", netns, target, label)


def test_connections_are_bounded_and_all_answered(fake_portal, job_network, monkeypatch):
    run, netns, label = job_network
    monkeypatch.setattr(relay_module, "MAX_CONNECTIONS", 4)
    fake_portal.slow = 0.2
    relay_start(run / "relay.pid", netns, ("127.0.0.1", fake_portal.server_address[1]), label)
    result = in_network(netns, f"""
        import concurrent.futures, json, urllib.request
        def call(i):
            url = "http://127.0.0.1:{RELAY_PORT}/api/v1/master/x/next"
            return json.loads(urllib.request.urlopen(url, data=str(i).encode(),
                                                     timeout=30).read())["sha256"]
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            print(len(set(pool.map(call, range(20)))))
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "20"  # each answered, to its own request
    assert 1 <= fake_portal.most <= 4  # never more at once than the relay takes


def test_the_relay_sleeps_while_idle_and_ends_cleanly_on_sigterm(fake_portal, job_network):
    run, netns, label = job_network
    relay = relay_start(run / "relay.pid", netns, ("127.0.0.1", fake_portal.server_address[1]),
                        label)
    # An idle connection held open from the job's side, and another to a portal that then
    # goes away, keep nothing busy.
    holder = sandbox_command(
        Sandbox(env={"PATH": f"{VENV_BIN}:/usr/bin:/bin"}, network=netns,
                hostname="trainer-0"),
        ["python", "-c", textwrap.dedent(f"""
            import socket, sys, time
            s = socket.create_connection(("127.0.0.1", {RELAY_PORT}))
            print("connected", flush=True)
            time.sleep(60)
            """)],
    ).popen(env=OUTSIDE_ENV, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "connected"
        time.sleep(0.2)
        before = cpu_ticks(relay.pid)
        time.sleep(1.0)
        assert cpu_ticks(relay.pid) - before <= 2  # at most 20 ms of CPU in a second
        os.kill(relay.pid, signal.SIGTERM)
        deadline = time.monotonic() + 2  # well before relay_stop would SIGKILL it
        while relay_alive(relay):
            assert time.monotonic() < deadline, "the relay did not end on SIGTERM"
            time.sleep(0.02)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)


def test_a_portal_that_is_down_closes_the_connection_and_the_relay_goes_on(job_network):
    run, netns, label = job_network
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    relay = relay_start(run / "relay.pid", netns, ("127.0.0.1", port), label)
    result = in_network(netns, f"""
        import urllib.error, urllib.request
        try:
            urllib.request.urlopen("http://127.0.0.1:{RELAY_PORT}/x", data=b"{{}}", timeout=10)
            print("answered")
        except (urllib.error.URLError, ConnectionError) as exc:
            print("refused")
        """)
    assert result.stdout.strip() == "refused", result.stderr
    assert relay_alive(relay)


def test_a_portal_without_an_ipv4_address_is_refused_saying_why(job_network):
    run, netns, _ = job_network
    with pytest.raises(RelayError, match=r"the portal's host ::1 has no IPv4 address"):
        relay_start(run / "relay.pid", netns, ("::1", 8000))
