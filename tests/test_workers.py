"""The suite on several worker processes (tests/workers.py, ``./dev test``'s ``-n``): what one of
a kind shares a worker, each worker has its own Redis database, and what a worker's tests leave
behind still fails the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.workers import worker_redis_url

ROOT = Path(__file__).resolve().parents[1]


def test_each_worker_counts_down_from_the_urls_database():
    assert worker_redis_url("redis://127.0.0.1:6379/15", "gw0") == "redis://127.0.0.1:6379/15"
    assert worker_redis_url("redis://:pw@redis:6380/15?x=1", "gw3") == "redis://:pw@redis:6380/12?x=1"
    assert worker_redis_url("redis://127.0.0.1:6379", "gw0") == "redis://127.0.0.1:6379/0"
    with pytest.raises(pytest.UsageError, match="no Redis database for worker gw2"):
        worker_redis_url("redis://127.0.0.1:6379/1", "gw2")


def run_suite(tmp_path: Path, tests: str, conftest: str = "") -> subprocess.CompletedProcess:
    """``tests`` as a suite of its own on two workers, with the plugin as ./dev test loads it."""
    (tmp_path / "test_it.py").write_text(textwrap.dedent(tests))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(conftest))
    # Not a worker's: when this test runs on one, the inner run is a controller of its own.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTEST_XDIST_")}
    env.update(REDIS_URL="redis://127.0.0.1:6379/15", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(tmp_path),
         "-p", "tests.workers", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
         "-q", "-o", "markers=image\nreal_kubernetes", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_what_there_is_one_of_runs_on_one_worker_and_each_worker_has_its_redis(tmp_path):
    ran = run_suite(tmp_path, f"""
        import os, pytest

        def record(kind):
            with open({str(tmp_path / "ran")!r}, "a") as out:
                out.write(f"{{kind}} {{os.environ['PYTEST_XDIST_WORKER']}} "
                          f"{{os.environ['REDIS_URL']}}\\n")

        @pytest.mark.image
        @pytest.mark.parametrize("n", range(6))
        def test_image(n):
            record("image")

        @pytest.mark.real_kubernetes
        @pytest.mark.parametrize("n", range(6))
        def test_cluster(n):
            record("cluster")

        @pytest.mark.parametrize("n", range(12))
        def test_other(n):
            record("other")
        """)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = [line.split() for line in (tmp_path / "ran").read_text().splitlines()]
    workers = {kind: {worker for k, worker, _ in lines if k == kind} for kind, *_ in lines}
    assert len(workers["image"]) == 1 and len(workers["cluster"]) == 1
    assert workers["other"] == {"gw0", "gw1"}  # the rest is shared out
    urls = {worker: url for _, worker, url in lines}
    assert urls == {"gw0": "redis://127.0.0.1:6379/15", "gw1": "redis://127.0.0.1:6379/14"}


def test_a_process_a_workers_test_leaves_behind_fails_the_run_named(tmp_path):
    pid_file = tmp_path / "pid"
    ran = run_suite(tmp_path, f"""
        import subprocess

        def test_leaves_a_sleeper():
            sleeper = subprocess.Popen(["sleep", "300"])
            open({str(pid_file)!r}, "w").write(str(sleeper.pid))
        """, conftest="from tests.conftest import pytest_sessionfinish, pytest_testnodedown  "
                      "# noqa: F401\n")
    try:
        assert ran.returncode == 1, ran.stdout + ran.stderr
        assert "left behind by the tests" in ran.stdout
        assert "sleep 300 (worker gw" in ran.stdout
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
