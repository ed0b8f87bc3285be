"""``./dev``: what ``./dev test`` installs, and why (``./dev needs``), on a machine that lacks
some of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine_without(tmp_path: Path, *left_out: str) -> str:
    """A PATH of every program this machine has (the checkout's virtualenv first) but
    ``left_out``: a directory of links to them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    path = [str(ROOT / ".venv" / "bin"), *os.environ["PATH"].split(os.pathsep)]
    for directory in path:
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name not in left_out and not link.exists() and os.access(entry.path,
                                                                                os.X_OK):
                link.symlink_to(entry.path)
    return str(bin_dir)


def test_dev_needs_names_what_the_suite_would_install_and_why(tmp_path):
    everything = subprocess.run(["./dev", "needs"], cwd=ROOT, capture_output=True, text=True,
                                timeout=120, env={**os.environ,
                                                  "PATH": machine_without(tmp_path / "all")})
    assert everything.returncode == 0, everything.stderr
    had = {line.split()[0] for line in everything.stdout.splitlines()}

    result = subprocess.run(["./dev", "needs"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PATH": machine_without(
                                tmp_path / "some", "zsh", "fish", "promtool")})
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert set(listed) - had == {"zsh", "fish", "prometheus"}
    assert "completion script runs in the real zsh" in listed["zsh"]
    assert "promtool checks the portal's metrics" in listed["prometheus"]
