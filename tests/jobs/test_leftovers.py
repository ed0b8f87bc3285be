"""What local jobs hold on the machine is found and released by the next reconciliation (a
portal's start runs one) when no portal can reach it any more (issue 33, item 17): real
network holders and runners, left as a portal killed at the wrong moment leaves them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs.backends.local.backend import LocalBackend, jobs_root, netns_file
from jobs.backends.netns import holders, netns_alive, netns_start
from paddlecloud_core.processes import attempt_start, group_live


def reconcile() -> int:
    """What the reconciler does for the local backend (every job unknown to the database)."""
    return LocalBackend().orphans_stop([], lambda uids: uids, grace=1)


def gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def private(settings):
    """A job's private directory under this portal's var/."""
    path = jobs_root() / "3a42531d-0000-0000-0000-000000000017"
    (path / "run").mkdir(parents=True)
    return path


def test_a_network_whose_job_directory_is_gone_is_released(private):
    held = netns_start(netns_file(private), str(private))
    shutil.rmtree(private)  # its portal was killed cleaning the job up, or var/ went
    assert netns_alive(held)
    assert reconcile() >= 1
    assert gone(held.pid)


def test_a_network_started_but_never_recorded_is_released(private):
    held = netns_start(netns_file(private), str(private))
    netns_file(private).unlink()  # the portal was killed before it recorded it
    mine = netns_start(netns_file(private), str(private))  # what the next start records
    reconcile()
    assert gone(held.pid)
    assert netns_alive(mine)  # the recorded one is the job's: kept
    LocalBackend().orphans_stop([], lambda uids: set(), grace=1)
    assert gone(mine.pid)


def test_a_probes_network_outlives_no_killed_prober(tmp_path):
    prober = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import sys, time
        sys.path[:0] = {sys.path!r}
        from jobs.backends.local.sandbox import _probe_label
        from jobs.backends.netns import netns_start
        netns_start({str(tmp_path / "netns.pid")!r}, _probe_label())
        print("held", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert prober.stdout.readline().strip() == "held"
        ours = [pid for pid, _, label in holders() if label.startswith(f"probe:{prober.pid}:")]
        assert len(ours) == 1
        reconcile()
        assert not gone(ours[0], timeout=0.5)  # its prober lives: kept
    finally:
        prober.send_signal(signal.SIGKILL)  # killed in the middle of its probe
        prober.wait()
    reconcile()
    assert gone(ours[0])


def test_a_runner_whose_run_directory_is_gone_is_stopped(private):
    log = os.open(private / "train.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        pid = attempt_start(private / "run", "trainer-0", 0, log, ["sleep", "600"],
                            cwd="/", env={"PATH": "/usr/bin:/bin"})
    finally:
        os.close(log)
    shutil.rmtree(private)
    assert group_live(pid)
    reconcile()
    assert not group_live(pid)
