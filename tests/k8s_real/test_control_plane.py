"""``python -m tests.real_kube up|down|status`` (what ``./dev kube`` runs), in a directory of
the test's: up starts a control plane that outlives the command, within the minute with the
binaries cached, that kubectl reaches and that says it is v1.35.4; an up after a crash stops
what the crashed one left; down leaves no process and no file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.backends.local.sandbox import start_of
from tests.k8s_real.api import Api
from tests.processes import processes_naming
from tests.real_kube import build, control_plane
from tests.real_kube.control_plane import ROOT

KUBECTL = shutil.which("kubectl")


def real_kube(command: str, state_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.real_kube", command, "--dir",
                           str(state_dir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


def gone(pids: list[int], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while any(start_of(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def state_dir(tmp_path):
    build.ensure()  # a build (minutes) is not what this test times
    state_dir = tmp_path / "kube"
    yield state_dir
    real_kube("down", state_dir)  # whatever the test's outcome
    assert processes_naming(str(state_dir)) == []


@pytest.mark.timeout(400)
def test_up_crash_up_down(state_dir):
    started = time.monotonic()
    done = real_kube("up", state_dir)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    print(f"up took {took:.1f} s")  # the measure, seen with -s
    assert took < 60, done.stderr
    kubeconfig = Path(done.stdout.strip())
    assert kubeconfig == state_dir / "admin.kubeconfig"
    running = control_plane.status(state_dir)
    assert set(running) >= {"etcd", "kube-apiserver", "kube-controller-manager",
                            "kube-scheduler"}
    assert real_kube("status", state_dir).returncode == 0
    if KUBECTL:
        listed = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "get", "ns",
                                 "-o", "name"], capture_output=True, text=True, timeout=60)
        assert {"namespace/default", "namespace/kube-system", "namespace/paddlecloud"} <= set(
            listed.stdout.split()), listed.stderr
    admin = Api(kubeconfig)
    try:
        assert admin.request("GET", "/version").body["gitVersion"] == "v1.35.4"
    finally:
        admin.close()

    # A crash: etcd and the API server killed, the controllers and scheduler left running.
    for name in ("etcd", "kube-apiserver"):
        os.kill(running[name], signal.SIGKILL)
    assert gone([running["etcd"], running["kube-apiserver"]])
    assert real_kube("status", state_dir).returncode == 1
    done = real_kube("up", state_dir)
    assert done.returncode == 0, done.stderr
    assert gone(list(running.values())), "the second up left the first one's processes"
    again = control_plane.status(state_dir)
    assert set(again) == set(running) and not set(again.values()) & set(running.values())

    done = real_kube("down", state_dir)
    assert done.returncode == 0, done.stderr
    assert gone(list(again.values()))
    assert processes_naming(str(state_dir)) == []
    assert list(state_dir.iterdir()) == []
    assert real_kube("status", state_dir).returncode == 1
