"""paddlectl and the SDK reach a datacenter through the one client package
(``paddlecloud_client``): the same config gives both the same home, and each names itself in
the requests it sends."""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from paddlecloud_core import __version__
from paddlecloud_sdk import connect
from paddlectl.context import Context
from tests.sdk.conftest import write_config


@pytest.fixture
def endpoint(monkeypatch):
    """A server that answers every GET with ``{}`` and keeps each request's User-Agent."""
    agents: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            agents.append(self.headers["User-Agent"])
            body = json.dumps({}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield f"http://127.0.0.1:{server.server_port}", agents
    server.shutdown()
    server.server_close()
    thread.join()


def test_both_programs_find_the_same_home_and_name_themselves(endpoint, tmp_path):
    url, agents = endpoint
    config = write_config(tmp_path / "config", url, username="alice", datacenter="dc1")
    cli = Context(argparse.Namespace(config=str(config)))
    sdk = connect(config)
    cli.client.server_version()
    sdk.client.server_version()
    assert agents == [f"paddlectl/{__version__}", f"paddlecloud-sdk/{__version__}"]
    assert cli.home == sdk.home == "/pfs/dc1/home/alice"
