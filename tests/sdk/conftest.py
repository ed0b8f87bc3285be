"""The SDK as a user's program uses it: in this process, with a config file of its own
(``PADDLE_CONFIG``) and none of the environment contract unless a test sets it."""

from __future__ import annotations

import pytest
import yaml

from paddlecloud_core.contract import RESERVED_ENV
from tests.conftest import PASSWORD

CONTRACT = sorted(RESERVED_ENV | {"PADDLE_NOTEBOOK"})


@pytest.fixture(autouse=True)
def _no_job_environment(monkeypatch):
    """Tests run outside a job unless they say otherwise."""
    for name in CONTRACT:
        monkeypatch.delenv(name, raising=False)


def write_config(path, endpoint: str, *, username: str = "alice", password: str = PASSWORD,
                 datacenter: str = "datacenter1"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "datacenters": [{"name": datacenter, "username": username, "password": password,
                         "endpoint": endpoint}],
        "current-datacenter": datacenter}, sort_keys=False))
    path.chmod(0o600)
    return path


@pytest.fixture
def sdk_config(live_portal, tmp_path, monkeypatch):
    """alice's config for the live portal, found through $PADDLE_CONFIG."""
    config = write_config(tmp_path / "home" / ".paddle" / "config", live_portal.url)
    monkeypatch.setenv("PADDLE_CONFIG", str(config))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return config


def set_env(monkeypatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
