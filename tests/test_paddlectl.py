"""The installed ``paddlectl`` console script, run as users run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import paddlecloud

VENV_BIN = Path(sys.executable).parent


def paddlectl_path() -> str:
    found = shutil.which("paddlectl") or shutil.which("paddlectl", path=str(VENV_BIN))
    assert found, f"paddlectl is not installed (not on PATH nor in {VENV_BIN})"
    return found


def paddlectl(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    return subprocess.run([paddlectl_path(), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def assert_usage(text: str) -> None:
    assert text.startswith("Usage: paddlectl"), text
    subcommands = text.split("Subcommands:", 1)[1]
    listed = {line.split()[0] for line in subcommands.splitlines()
              if line.startswith(("\t", "  ")) and line.strip()}
    assert {"help", "version"} <= listed, text


@pytest.mark.parametrize("flag", ["version", "--version"])
def test_version_prints_the_package_version(flag):
    result = paddlectl(flag)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"paddlectl {paddlecloud.__version__}\n"
    assert result.stdout.strip() == "paddlectl 0.1.0"
    assert result.stderr == ""


@pytest.mark.parametrize("args", [(), ("help",), ("--help",), ("-h",)])
def test_no_arguments_or_help_prints_usage(args):
    result = paddlectl(*args)
    assert result.returncode == 0, result.stderr
    assert_usage(result.stdout)
    assert result.stderr == ""


def test_an_unknown_subcommand_is_a_usage_error():
    result = paddlectl("frobnicate", "--now")
    assert result.returncode == 1
    assert result.stdout == ""
    first_line = result.stderr.splitlines()[0]
    assert first_line == "paddlectl: unknown subcommand 'frobnicate'"
    # The usage follows, so the user sees what they could have typed.
    assert_usage(result.stderr.split("\n\n", 1)[1])
