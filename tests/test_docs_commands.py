"""The users' pages (docs/users/*.md) say what to type: every fenced ``bash`` block there is run
as printed, in the order a reader follows the pages, by one shell in a clone the way `./dev up`
leaves it (the demo user, var/demo-password, var/paddle-config, fit-a-line's model), against a
live portal. A block that cannot run here says why in an HTML comment just above it (invisible
on the page): ``<!-- not run by tests/test_docs_commands.py: WHY -->``."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.management.commands.runexample import Command as RunExample
from jobs.models import Job

ROOT = Path(__file__).resolve().parents[1]
USERS = ROOT / "docs" / "users"
# As a reader goes: the quick start sets the shell up, the API page logs in ($TOKEN).
ORDER = ("quickstart", "api", "files", "jobs", "sdk", "paddlectl", "dashboard")
BLOCK = re.compile(r"^(?:<!-- not run by tests/test_docs_commands\.py: (?P<why>.*?) -->\n)?"
                   r"(?P<indent> *)```bash\n(?P<body>.*?)^(?P=indent)```$", re.S | re.M)
PORTAL = "http://127.0.0.1:8000"  # where `./dev up` serves, as the pages write it


def blocks(page: Path) -> list[tuple[str | None, str]]:
    """The page's bash blocks: (why it is not run, or None; its text)."""
    text = page.read_text()
    found = [(m["why"], m["body"]) for m in BLOCK.finditer(text)]
    assert len(found) == text.count("```bash\n"), f"{page}: a bash block not closed"
    return found


def test_every_users_page_is_run_in_order_and_every_skipped_block_says_why():
    assert sorted(ORDER) == sorted(p.stem for p in USERS.glob("*.md"))
    for name in ORDER:
        for why, _ in blocks(USERS / f"{name}.md"):
            assert why is None or why.strip(), f"{name}.md: a block not run must say why"


@pytest.mark.django_db(transaction=True)
def test_the_users_pages_commands_run_as_printed_as_the_demo_user(live_portal, settings,
                                                                   tmp_path):
    clone = tmp_path / "clone"  # what ./dev up leaves
    shutil.copytree(ROOT / "examples", clone / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (clone / ".venv").symlink_to(sys.prefix)
    settings.VAR_DIR = clone / "var"
    call_command("demo", endpoint=live_portal.url, stdout=io.StringIO())
    config = RunExample()
    config.config = clone / "var" / "paddle-config"
    config._write_config(live_portal.url, (clone / "var" / "demo-password").read_text().strip())
    # fit-a-line's model, where examples/fit_a_line/train.py's save() writes it
    demo_home = live_portal.home.parent / "demo"
    model = demo_home / "jobs" / "fit-a-line" / "output" / "model" / "fit_a_line.pdparams"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"the parameters fit_a_line saved")

    script = "set -euo pipefail\n" + "".join(
        body for name in ORDER for why, body in blocks(USERS / f"{name}.md") if why is None)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "NO_PROXY": "127.0.0.1,localhost",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    result = subprocess.run(["bash", "-x", "-c", script.replace(PORTAL, live_portal.url)],
                            cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

    assert (clone / "fit_a_line.pdparams").read_bytes() == model.read_bytes()  # downloaded
    assert '"username":"demo"' in result.stdout.replace(" ", "")  # the API's /me answered
    assert (demo_home / "data" / "fit_a_line" / "train.py").is_file()  # paddlectl file
    assert not (demo_home / "data" / "raw").exists()  # made, filled, removed
    for job in ("my-first-job", "fit-a-line-api"):  # the quick start's, the API's
        assert Job.objects.filter(name=job, owner__username="demo").exists()
