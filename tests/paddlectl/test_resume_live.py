"""Transfers that lose their connection half way resume where the server got to: uploads ask
for the upload's offset, downloads continue with Range. A proxy in front of the live portal
breaks the connection once."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from urllib.parse import urlsplit

import pytest

from tests.factories import HOME

from .conftest import datacenter_entry

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 1 << 20


class FlakyProxy:
    """Forwards TCP to the portal; breaks the connection once ``cut`` bytes went ``up``
    (client to server) or ``down``."""

    def __init__(self, upstream: str, direction: str, cut: int):
        self.upstream = (urlsplit(upstream).hostname, urlsplit(upstream).port)
        self.direction, self.remaining, self.cuts = direction, cut, 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            for src, dst, direction in ((client, server, "up"), (server, client, "down")):
                pump = threading.Thread(target=self._pump, daemon=True,
                                        args=(src, dst, direction, (client, server)))
                self.threads.append(pump)
                pump.start()

    def _pump(self, src, dst, direction, pair) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                with self.lock:
                    if direction == self.direction and self.cuts == 0:
                        if len(data) >= self.remaining:
                            dst.sendall(data[:self.remaining])
                            self.cuts += 1
                            break
                        self.remaining -= len(data)
                dst.sendall(data)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Stop accepting and pumping, and wait for every thread (a closed listener alone
        does not wake an accept blocked in another thread; a shut-down one does)."""
        for sock in (self.listener, *self.sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for thread in self.threads:
            thread.join(10)
        for sock in self.sockets:
            sock.close()


@pytest.fixture
def flaky(live_cli):
    proxies = []

    def make(direction: str, cut: int) -> FlakyProxy:
        proxy = FlakyProxy(live_cli.portal.url, direction, cut)
        proxies.append(proxy)
        live_cli.write_config([datacenter_entry(endpoint=proxy.url)])
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def test_an_upload_cut_off_half_way_resumes(live_cli, flaky, settings):
    settings.PADDLECLOUD_PFS_CHUNK_SIZE = 2 * MiB
    data = os.urandom(9 * MiB)
    (live_cli.cwd / "big.bin").write_bytes(data)
    proxy = flaky("up", 5 * MiB)
    result = live_cli("cp", "big.bin", f"{HOME}/big.bin")
    assert result.returncode == 0, result.stderr
    assert proxy.cuts == 1
    assert (live_cli.portal.home / "big.bin").read_bytes() == data


def test_a_download_cut_off_half_way_resumes(live_cli, flaky):
    data = os.urandom(9 * MiB)
    (live_cli.portal.home / "big.bin").write_bytes(data)
    proxy = flaky("down", 3 * MiB)
    result = live_cli("cp", f"{HOME}/big.bin", "big.bin")
    assert result.returncode == 0, result.stderr
    assert proxy.cuts == 1
    assert (live_cli.cwd / "big.bin").read_bytes() == data
    assert sorted(p.name for p in live_cli.cwd.iterdir()) == ["big.bin"]


def test_a_directory_download_cut_off_leaves_nothing_behind(live_cli, flaky):
    (live_cli.portal.home / "results").mkdir()
    (live_cli.portal.home / "results" / "big.bin").write_bytes(os.urandom(6 * MiB))
    flaky("down", 2 * MiB)
    result = live_cli("cp", "-r", f"{HOME}/results", ".")
    assert result.returncode == 5
    assert "connection lost while receiving" in result.stderr
    assert list(live_cli.cwd.iterdir()) == []
