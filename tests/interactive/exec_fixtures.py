"""``paddlectl``: the command line as a user runs it against the live portal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT
from tests.sdk.conftest import write_config


@pytest.fixture
def paddlectl(live_portal, tmp_path):
    """``paddlectl(*argv, user="alice", input=b"")``: the command line, run as a user runs it
    against the live portal (its own process, its config)."""
    def run(*argv, user="alice", input=b""):
        config = write_config(tmp_path / user / ".paddle" / "config", live_portal.url,
                              username=user)
        env = {**os.environ, "PADDLE_CONFIG": str(config), "HOME": str(tmp_path / user),
               "NO_PROXY": "127.0.0.1,localhost", "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "paddlectl", *argv], input=input,
                              capture_output=True, cwd=tmp_path, env=env, timeout=60,
                              check=False)
    return run
