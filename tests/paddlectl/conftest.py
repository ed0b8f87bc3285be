"""paddlectl as users run it: the installed console script in a subprocess, with HOME in a
temporary directory and a config file written there (mode 0600)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import PASSWORD

VENV_BIN = Path(sys.executable).parent


def paddlectl_path() -> str:
    found = shutil.which("paddlectl", path=str(VENV_BIN)) or shutil.which("paddlectl")
    assert found, f"paddlectl is not installed (not in {VENV_BIN} nor on PATH)"
    return found


def free_port() -> int:
    """A port nothing listens on: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cli:
    def __init__(self, home: Path):
        self.home = home
        self.config = home / ".paddle" / "config"
        self.cwd = home.parent / "work"  # where commands run
        self.cwd.mkdir(exist_ok=True)

    @property
    def tokens_file(self) -> Path:
        return self.config.parent / "tokens.json"

    def tokens(self) -> dict:
        return json.loads(self.tokens_file.read_text()) if self.tokens_file.exists() else {}

    def write_config(self, datacenters: list[dict], current: str | None = "datacenter1",
                     mode: int = 0o600, text: str | None = None) -> Path:
        data: dict = {"datacenters": datacenters}
        if current is not None:
            data["current-datacenter"] = current
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(text if text is not None else
                               yaml.safe_dump(data, sort_keys=False))
        self.config.chmod(mode)
        return self.config

    def environ(self, extra: dict | None = None) -> dict:
        environ = {**os.environ, "HOME": str(self.home), "PADDLE_CONFIG": str(self.config),
                   "NO_PROXY": "127.0.0.1,localhost", **(extra or {})}
        environ["PATH"] = os.pathsep.join([str(VENV_BIN), environ.get("PATH", "")])
        return environ

    def __call__(self, *args: str, cwd: Path | None = None, stderr=subprocess.PIPE,
                 timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([paddlectl_path(), *args], stdout=subprocess.PIPE, stderr=stderr,
                              text=True, timeout=timeout, env=self.environ(env),
                              cwd=cwd or self.cwd)

    def start(self, *args: str) -> subprocess.Popen:
        """paddlectl running in the background."""
        return subprocess.Popen([paddlectl_path(), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.environ(),
                                cwd=self.cwd)


def datacenter_entry(name="datacenter1", username="alice", password=PASSWORD,
                     endpoint=None) -> dict:
    return {"name": name, "username": username, "password": password,
            "endpoint": endpoint or f"http://127.0.0.1:{free_port()}"}


@pytest.fixture
def cli(tmp_path) -> Cli:
    home = tmp_path / "home"
    home.mkdir()
    return Cli(home)


@pytest.fixture
def offline_cli(cli) -> Cli:
    """A config whose endpoint refuses connections: nothing may need the server."""
    cli.write_config([datacenter_entry()])
    return cli


@pytest.fixture
def live_cli(live_portal, cli) -> Cli:
    """alice's config for the live portal."""
    cli.write_config([datacenter_entry(endpoint=live_portal.url)])
    cli.portal = live_portal
    return cli
