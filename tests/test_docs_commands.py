"""The pages say what to type, and what they say runs. The users' pages (docs/users/*.md): every
fenced ``bash`` block is run as printed, in the order a reader follows them, by one shell in a
clone where `./dev up` serves (the demo user, var/paddle-config, fit-a-line trained). The
administrators' index: its blocks run on a fresh embedded default. A block that cannot run here
(a cluster's, a server in the foreground, a synopsis) says why in an HTML comment just above it,
invisible on the page: ``<!-- not run by tests/test_docs_commands.py: WHY -->``; every page of
docs/ is held to that."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.outages import free_port
from tests.processes import clean_env, processes_naming

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
USERS = DOCS / "users"
ADMIN_RUN = (DOCS / "admin" / "index.md",)  # run by the last test below
# As a reader goes: the quick start sets the shell up, the API page logs in ($TOKEN).
ORDER = ("quickstart", "api", "files", "jobs", "sdk", "paddlectl", "dashboard", "notifications",
         "usage", "experiments", "compare", "notebooks", "visualdl")
BLOCK = re.compile(r"^(?:<!-- not run by tests/test_docs_commands\.py: (?P<why>.*?) -->\n)?"
                   r"(?P<indent> *)```bash\n(?P<body>.*?)^(?P=indent)```$", re.S | re.M)
PORTAL = "http://127.0.0.1:8000"  # where `./dev up` serves, as the pages write it


def blocks(page: Path) -> list[tuple[str | None, str]]:
    """The page's bash blocks: (why it is not run, or None; its text)."""
    text = page.read_text()
    found = [(m["why"], m["body"]) for m in BLOCK.finditer(text)]
    assert len(found) == text.count("```bash\n"), f"{page}: a bash block not closed"
    return found


def test_every_users_page_is_run_in_order_and_every_block_not_run_says_why():
    assert sorted(ORDER) == sorted(p.stem for p in USERS.glob("*.md"))
    pages = sorted(DOCS.rglob("*.md"))
    assert len(pages) > len(ORDER)
    for page in pages:
        for why, _ in blocks(page):
            assert why is None or why.strip(), f"{page}: a block not run must say why"
            assert why is not None or page.parent == USERS or page in ADMIN_RUN, (
                f"{page}: a block neither run by this test nor saying why it is not")


@pytest.mark.timeout(900)  # ./dev up trains fit_a_line for real before the pages run
def test_a_newcomers_path_dev_up_then_the_users_pages_as_printed(tmp_path):
    """The newcomer's path: `./dev up` as the README says (set up, migrate, the demo user,
    serve, train fit_a_line for real), then every runnable block of the users' pages pasted
    into one shell in the clone, as the demo user, against that portal; Ctrl-C and `./dev down`
    leave nothing running."""
    clone = tmp_path / "clone"  # where the reader stands: the examples, .venv and var/
    shutil.copytree(ROOT / "examples", clone / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (clone / ".venv").symlink_to(sys.prefix)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(clone / "var", PORT=str(port), PYTHONUNBUFFERED="1")
    up = subprocess.Popen([str(ROOT / "dev"), "up"], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          start_new_session=True)
    printed: list[str] = []
    try:
        deadline = time.monotonic() + 600
        for line in up.stdout:  # until it says it serves, having trained fit_a_line
            printed.append(line)
            if "PaddleCloud is serving on" in line or time.monotonic() > deadline:
                break
        said = "".join(printed)
        assert f"PaddleCloud is serving on {url}/" in said, said
        assert "fit_a_line succeeded" in said, said
        # The last command it printed works from any directory (absolute paths).
        config = clone / "var" / "paddle-config"
        assert f"PADDLE_CONFIG={config}" in said, said

        script = "set -euo pipefail\n" + "".join(
            body for name in ORDER for why, body in blocks(USERS / f"{name}.md") if why is None)
        shell_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
                     "NO_PROXY": "127.0.0.1,localhost",
                     **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
        result = subprocess.run(["bash", "-x", "-c", script.replace(PORTAL, url)],
                                cwd=clone, env=shell_env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr

        demo_home = clone / "var" / "pfs" / "datacenter1" / "home" / "demo"
        model = demo_home / "jobs" / "fit-a-line" / "output" / "model" / "fit_a_line.pdparams"
        assert (clone / "fit_a_line.pdparams").read_bytes() == model.read_bytes()  # trained
        assert '"username":"demo"' in result.stdout.replace(" ", "")  # the API's /me answered
        assert (demo_home / "data" / "fit_a_line" / "train.py").is_file()  # paddlectl file
        assert not (demo_home / "data" / "raw").exists()  # made, filled, removed
        listed = subprocess.run([str(clone / ".venv" / "bin" / "paddlectl"), "get", "jobs",
                                 "-o", "json"], env={**shell_env, "PADDLE_CONFIG": str(config)},
                                capture_output=True, text=True, timeout=60)
        names = {job["name"] for job in json.loads(listed.stdout)}
        assert {"fit-a-line", "my-first-job", "fit-a-line-api"} <= names, listed
    finally:  # Ctrl-C, then ./dev down: whatever the outcome, nothing of the trial runs on
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGINT)
        try:
            up.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.communicate()
        subprocess.run([str(ROOT / "dev"), "down"], cwd=ROOT, env=env, capture_output=True,
                       timeout=120)
    assert up.returncode == 0, "".join(printed)
    assert processes_naming(str(clone)) == []


def test_the_administrators_commands_run_as_printed_on_a_fresh_portal(tmp_path):
    """docs/admin/index.md's first block, pasted into a shell on a fresh embedded default (its
    /mnt/pfs made the test's own): two datacenters, alice in both with her quota in the first."""
    env = clean_env(tmp_path / "var", PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    paddlecloud = Path(sys.executable).parent / "paddlecloud"
    subprocess.run([paddlecloud, "migrate", "--no-input", "-v", "0"], env=env, check=True,
                   timeout=120)
    script = "set -euo pipefail\n" + "".join(
        body for why, body in blocks(ADMIN_RUN[0]) if why is None)
    result = subprocess.run(["bash", "-x", "-c", script.replace("/mnt/pfs", str(tmp_path / "pfs"))],
                            cwd=tmp_path, env=env, input="a long enough password\n",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = subprocess.run([paddlecloud, "shell", "-v", "0", "-c", """
import json
from django.contrib.auth import authenticate
from accounts.models import Membership, Quota
alice = "alice@example.com"
print(json.dumps({
    "in": {m.datacenter.name: str(m.datacenter.pfs_root_path)
           for m in Membership.objects.filter(user__username=alice)},
    "quota": [[q.cpu, q.memory, q.gpu, q.jobs, q.queued, q.storage]
              for q in Quota.objects.filter(user__username=alice, datacenter__name="datacenter1")],
    "logs_in": authenticate(username=alice, password="a long enough password") is not None}))
"""], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "in": {"datacenter1": str(tmp_path / "pfs" / "datacenter1"),
               "datacenter2": str(tmp_path / "pfs" / "datacenter2")},
        "quota": [[8000, 32 * 2**30, 1, 4, 50, 500 * 2**30]],
        "logs_in": True}
