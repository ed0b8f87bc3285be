"""The commands the quick start prints work as printed, in a shell whose PATH has no virtualenv
(a new terminal after `./dev up`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from accounts.management.commands.runexample import Command

pytestmark = pytest.mark.django_db(transaction=True)


def test_runexample_prints_a_paddlectl_command_that_works_as_printed(live_cli, tmp_path,
                                                                      monkeypatch):
    clone = tmp_path / "clone"  # where ./dev up ran: the config is var/paddle-config there
    (clone / "var").mkdir(parents=True)
    config = clone / "var" / "paddle-config"
    shutil.copy(live_cli.config, config)
    monkeypatch.chdir(clone)
    command = Command()
    command.config = config
    hint = command.config_hint()
    assert hint.startswith(f"PADDLE_CONFIG={config} ")  # absolute: works from anywhere

    fresh = {"PATH": "/usr/bin:/bin", "HOME": str(live_cli.home),
             "NO_PROXY": "127.0.0.1,localhost"}
    assert shutil.which("paddlectl", path=fresh["PATH"]) is None  # not on this PATH
    elsewhere = tmp_path / "elsewhere"  # another terminal, in another directory
    elsewhere.mkdir()
    result = subprocess.run(["sh", "-c", f"{hint} get jobs"], cwd=elsewhere, env=fresh,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no jobs")  # the portal answered, as the config's user


def test_runexample_without_endpoint_uses_the_portal_dev_up_wrote(tmp_path):
    """`PORT=9000 ./dev up` writes var/paddle-config for :9000; a later `paddlecloud runexample
    ps_numpy` (no --endpoint, as the docs run it) goes to that portal, not to :8000."""
    command = Command()
    command.config = tmp_path / "paddle-config"
    assert command._endpoint_written() == "http://127.0.0.1:8000"  # nothing written yet
    command._write_config("http://127.0.0.1:9000", "secret")
    assert command._endpoint_written() == "http://127.0.0.1:9000"
