"""The pods' two scripts, run with /bin/sh here as the pods run them: paths from the
environment (a temporary directory stands in for the PFS mount), no network."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from jobs.backends.kubernetes.scripts import INIT_SCRIPT, RUN_SCRIPT

VENV_BIN = str(Path(sys.executable).parent)  # a python3 with pip
# The pods' /bin/sh may be any of these; every one that is here runs the scripts.
SHELLS = [shell for shell in ("/bin/dash", "/bin/bash", "/bin/busybox") if Path(shell).exists()]


@pytest.fixture(params=SHELLS)
def scripts(request, tmp_path) -> dict:
    found = {"shell": [request.param, "sh"] if request.param.endswith("busybox")
             else [request.param]}
    for name, text in (("init", INIT_SCRIPT), ("run", RUN_SCRIPT)):
        found[name] = tmp_path / f"{name}.sh"
        found[name].write_text(text)
    return found


def tiny_wheel(directory: Path) -> str:
    """A pure-Python wheel that pip installs without an index."""
    name = "tinydep-1.0-py3-none-any.whl"
    files = {
        "tinydep/__init__.py": "VALUE = 42\n",
        "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
                                       "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record += f"{path},sha256={digest.decode()},{len(text.encode())}\n"
    files["tinydep-1.0.dist-info/RECORD"] = record + "tinydep-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / name, "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
    return name


@pytest.fixture
def package(tmp_path) -> Path:
    """A trainer package in the owner's home, requiring a wheel that sits beside it."""
    pkg = tmp_path / "pfs" / "home" / "alice" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "train.py").write_text("print('training')\n")
    (pkg / "requirements.txt").write_text(f"./{tiny_wheel(pkg)}\n")
    return pkg


def job_dir(tmp_path) -> Path:
    return tmp_path / "pfs" / "home" / "alice" / "jobs" / "x"


def init_env(tmp_path, pod: str, package: Path, path: str = VENV_BIN) -> dict[str, str]:
    workspace = tmp_path / pod / "workspace"  # the pod's emptyDir
    workspace.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{path}:{os.environ['PATH']}", "HOME": str(tmp_path), "HOSTNAME": pod,
        "PIP_NO_INDEX": "1", "PIP_NO_CACHE_DIR": "1",
        "PADDLECLOUD_PACKAGE": str(package), "PADDLECLOUD_WORKSPACE": str(workspace),
        "PADDLECLOUD_SITE_PACKAGES": str(job_dir(tmp_path) / ".site-packages-abcde"),
        "PADDLECLOUD_REQUIREMENTS_LOG": str(job_dir(tmp_path) / "output" / "requirements.log"),
    }


def init(scripts, env) -> subprocess.Popen:
    return subprocess.Popen([*scripts["shell"], str(scripts["init"])], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# --- init.sh -------------------------------------------------------------------------------------

def slow_python(tmp_path) -> str:
    """A python3 that takes a second to start: the second pod surely comes while the first
    installs."""
    slow = tmp_path / "slowbin"
    slow.mkdir()
    (slow / "python3").write_text(f'#!/bin/sh\nsleep 1\nexec {VENV_BIN}/python3 "$@"\n')
    (slow / "python3").chmod(0o755)
    return str(slow)


def test_requirements_are_installed_once_for_pods_starting_together(tmp_path, scripts, package):
    slow = slow_python(tmp_path)
    pods = [init(scripts, init_env(tmp_path, f"pod-{i}", package, path=slow)) for i in range(2)]
    for pod in pods:
        _, err = pod.communicate(timeout=120)
        assert pod.returncode == 0, err
    site = job_dir(tmp_path) / ".site-packages-abcde"
    log = (job_dir(tmp_path) / "output" / "requirements.log").read_text()
    assert log.count("installs requirements.txt") == 1, log
    assert (site / "tinydep" / "__init__.py").is_file()
    assert Path(f"{site}.done").exists() and not Path(f"{site}.tmp").exists()
    for i in range(2):
        workspace = tmp_path / f"pod-{i}" / "workspace"
        assert (workspace / "train.py").read_text() == "print('training')\n"
    imported = subprocess.run([sys.executable, "-c", "import tinydep; print(tinydep.VALUE)"],
                              env={"PYTHONPATH": str(site)}, capture_output=True, text=True,
                              check=True)
    assert imported.stdout == "42\n"

    again = init(scripts, init_env(tmp_path, "pod-2", package))  # a restarted pod
    assert again.wait(timeout=60) == 0
    assert log == (job_dir(tmp_path) / "output" / "requirements.log").read_text()


def test_a_failing_install_fails_the_pod_with_pips_exit_code(tmp_path, scripts, package):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'ERROR: no such package' >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    pod = init(scripts, init_env(tmp_path, "pod-0", package, path=str(fake)))
    _, err = pod.communicate(timeout=60)
    assert pod.returncode == 3
    assert "requirements.txt could not be installed (pip exited 3)" in err
    log = (job_dir(tmp_path) / "output" / "requirements.log").read_text()
    assert "ERROR: no such package" in log
    site = job_dir(tmp_path) / ".site-packages-abcde"
    assert not Path(f"{site}.done").exists()

    retried = init(scripts, init_env(tmp_path, "pod-0", package))  # the lock was let go
    assert retried.wait(timeout=120) == 0
    assert (site / "tinydep").is_dir()


DIGEST = "ab" * 32


def shared_env(tmp_path, pod: str, package: Path, path: str = VENV_BIN) -> dict[str, str]:
    """A pod of a job whose environment the portal knows (``PADDLECLOUD_ENV_DIGEST``)."""
    envs = tmp_path / "pfs" / "home" / "alice" / ".paddlecloud" / "envs"
    return {**init_env(tmp_path, pod, package, path), "PADDLECLOUD_ENV_DIGEST": DIGEST,
            "PADDLECLOUD_SITE_PACKAGES": str(envs / DIGEST / "site-packages")}


def test_an_environment_is_built_once_waited_for_then_found(tmp_path, scripts, package):
    slow = slow_python(tmp_path)
    pods = [init(scripts, shared_env(tmp_path, f"pod-{i}", package, path=slow))
            for i in range(2)]
    said = []
    for pod in pods:
        _, err = pod.communicate(timeout=120)
        assert pod.returncode == 0, err
        said.append(err)
    env = tmp_path / "pfs" / "home" / "alice" / ".paddlecloud" / "envs" / DIGEST
    assert (env / "site-packages" / "tinydep" / "__init__.py").is_file()
    assert (env / "used").is_file() and json.loads((env / "built.json").read_text())["size"]
    assert sorted(p.name for p in env.parent.iterdir()) == [DIGEST, f"{DIGEST}.lock"]
    short = DIGEST[:12]
    assert sum(f"environment {short} built" in err for err in said) == 1, said
    assert sum(f"environment {short} is being built by another pod: waiting" in err
               and f"environment {short} found" in err for err in said) == 1, said
    log = (job_dir(tmp_path) / "output" / "requirements.log").read_text()
    assert log.count("installs requirements.txt") == 1, log

    again = init(scripts, shared_env(tmp_path, "pod-2", package))  # another job: found
    _, err = again.communicate(timeout=60)
    assert again.returncode == 0 and f"environment {short} found in {env}" in err, err


def test_a_failed_build_fails_its_waiters_with_pips_message_and_is_not_kept(
        tmp_path, scripts, package):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "python3").write_text(
        "#!/bin/sh\nsleep 1\necho 'ERROR: No matching distribution found for nope' >&2\n"
        "exit 3\n")
    (fake / "python3").chmod(0o755)
    pods = [init(scripts, shared_env(tmp_path, f"pod-{i}", package, path=str(fake)))
            for i in range(2)]
    results = [(pod.wait(timeout=60), pod.stderr.read()) for pod in pods]
    for pod in pods:
        pod.stdout.close()
        pod.stderr.close()
    for code, err in results:
        assert code != 0 and "ERROR: No matching distribution found for nope" in err, err
    assert sorted(code for code, _ in results) == [1, 3]  # the builder's is pip's
    envs = tmp_path / "pfs" / "home" / "alice" / ".paddlecloud" / "envs"
    assert not (envs / DIGEST).exists() and not list(envs.glob("*.tmp-*"))

    later = init(scripts, shared_env(tmp_path, "pod-2", package))  # builds again, and works
    _, err = later.communicate(timeout=120)
    assert later.returncode == 0, err
    assert (envs / DIGEST / "site-packages" / "tinydep").is_dir()
    assert not (envs / f"{DIGEST}.failed").exists()


def test_a_package_without_requirements_is_only_copied(tmp_path, scripts, package):
    (package / "requirements.txt").unlink()
    env = init_env(tmp_path, "pod-0", package)
    assert init(scripts, env).wait(timeout=60) == 0
    assert (Path(env["PADDLECLOUD_WORKSPACE"]) / "train.py").exists()
    assert not job_dir(tmp_path).exists()


def test_a_missing_package_is_named(tmp_path, scripts):
    pod = init(scripts, init_env(tmp_path, "pod-0", tmp_path / "gone"))
    _, err = pod.communicate(timeout=60)
    assert pod.returncode == 1
    assert f"the trainer package {tmp_path / 'gone'} is not a directory" in err


# --- run.sh --------------------------------------------------------------------------------------

def run(scripts, tmp_path, entry: str, **extra: str) -> subprocess.Popen:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    env = {"PATH": f"{VENV_BIN}:{os.environ['PATH']}", "TMPDIR": str(tmp_path),
           "PADDLECLOUD_LOG": str(tmp_path / "output" / "node_1" / "train.log"), **extra}
    return subprocess.Popen([*scripts["shell"], str(scripts["run"]), entry], cwd=workspace, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def train_log(tmp_path) -> str:
    path = tmp_path / "output" / "node_1" / "train.log"
    return path.read_text() if path.exists() else ""


def test_output_goes_to_the_pod_log_and_the_archived_log(tmp_path, scripts):
    replica = run(scripts, tmp_path, "echo out; echo err >&2; pwd; exit 7")
    pod_log, _ = replica.communicate(timeout=30)
    assert replica.returncode == 7
    assert pod_log == f"out\nerr\n{tmp_path / 'workspace'}\n"
    assert train_log(tmp_path) == pod_log
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("paddlecloud-run")] == []

    restarted = run(scripts, tmp_path, "echo again")
    assert restarted.communicate(timeout=30)[0] == "again\n"
    assert restarted.returncode == 0
    assert train_log(tmp_path) == pod_log + "\n--- restart ---\nagain\n"


def test_sigterm_reaches_everything_the_entry_started(tmp_path, scripts):
    entry = ("sleep 300 & echo $! > child.pid; "
             "trap 'echo stopping; exit 42' TERM; echo ready; wait")
    replica = run(scripts, tmp_path, entry)
    deadline = time.monotonic() + 30
    while "ready" not in train_log(tmp_path):
        assert time.monotonic() < deadline, "the entry did not start"
        time.sleep(0.05)
    child = int((tmp_path / "workspace" / "child.pid").read_text())
    replica.send_signal(signal.SIGTERM)
    pod_log, _ = replica.communicate(timeout=30)
    assert replica.returncode == 42
    assert pod_log == "ready\nstopping\n"
    assert train_log(tmp_path) == pod_log
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the entry's child outlived the SIGTERM"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_an_entry_killed_by_a_signal_exits_128_plus_the_signal(tmp_path, scripts):
    replica = run(scripts, tmp_path, "echo dying; kill -KILL $$")
    pod_log, _ = replica.communicate(timeout=30)
    assert replica.returncode == 128 + signal.SIGKILL
    assert train_log(tmp_path) == "dying\n"
    assert "dying\n" in pod_log  # and the shell's word on it, e.g. "Killed"


def test_a_sigterm_at_any_moment_of_the_start_stops_everything(tmp_path, scripts):
    """However early SIGTERM comes — before the entry started, while it makes its session,
    before it opened its output — run.sh passes it on and ends, and nothing of the entry is
    left (the process kubelet caught pods that ran on: a signal lost in the forking shell, and
    tee waiting for ever on a FIFO the entry never opened)."""
    seconds = 700 + os.getpid() % 200  # this test's entries, told apart from any other sleep
    for attempt in range(40):
        replica = run(scripts, tmp_path, f"sleep {seconds}")
        time.sleep(attempt % 20 / 1000)
        replica.send_signal(signal.SIGTERM)
        try:
            said, _ = replica.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            replica.kill()
            raise AssertionError(f"run.sh ran on after a SIGTERM {attempt % 20} ms in") from None
        # Killed before it set its trap (not PID 1 here), or stopped the entry and exited 143
        # (bash misparsed the trap when it ran while a $(…) was being expanded: exit 2; run.sh
        # has no command substitution once its traps are set).
        assert replica.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), said
    deadline = time.monotonic() + 10
    while left := [pid for pid in os.listdir("/proc") if pid.isdigit()
                   and _cmdline(pid) == f"sleep\0{seconds}\0"]:
        if time.monotonic() > deadline:
            for pid in left:
                os.kill(int(pid), signal.SIGKILL)
            raise AssertionError(f"{len(left)} entries outlived their SIGTERM")
        time.sleep(0.05)


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def test_the_entry_starts_once_its_peers_resolve_and_sees_their_addresses(tmp_path, scripts):
    """Peers named by DNS are handed to the entry as addresses (PaddlePaddle compares them with
    POD_IP); names that are no peer's, and addresses, are left as they are."""
    entry = "echo $PADDLE_PSERVERS_IP_PORT_LIST $PADDLE_INIT_PSERVERS $PADDLE_CURRENT_ENDPOINT"
    replica = run(scripts, tmp_path, entry, PADDLECLOUD_PEERS="localhost:6170,localhost:6171",
                  PADDLE_PSERVERS_IP_PORT_LIST="localhost:6170,10.1.2.3:6171",
                  PADDLE_INIT_PSERVERS="localhost,10.1.2.3",
                  PADDLE_CURRENT_ENDPOINT="other.invalid:6170")
    pod_log, _ = replica.communicate(timeout=30)
    assert replica.returncode == 0, pod_log
    assert pod_log == "127.0.0.1:6170,10.1.2.3:6171 127.0.0.1,10.1.2.3 other.invalid:6170\n"


def test_a_peer_that_never_resolves_fails_the_pod_naming_it(tmp_path, scripts):
    replica = run(scripts, tmp_path, "echo started", PADDLECLOUD_PEERS="ps-0.nowhere.invalid:1",
                  PADDLECLOUD_PEERS_TIMEOUT="2")
    pod_log, _ = replica.communicate(timeout=30)
    assert replica.returncode == 1
    assert pod_log == ("paddlecloud: waiting for ps-0.nowhere.invalid to have an address\n"
                       "paddlecloud: ps-0.nowhere.invalid has no address after 2s: is its pod "
                       "running?\n")
    assert train_log(tmp_path) == pod_log  # the archived log says why, too


def test_a_peer_that_has_ended_is_not_waited_for_and_a_success_says_so(tmp_path, scripts):
    """A collective job's trainer whose pod starts after a peer's whole run: the peer's pod has
    left DNS, its file in PADDLECLOUD_PEERS_ENDED says it succeeded, and the entry starts
    without its address (its name stays). A replica whose entry exits 0 leaves its own file
    there; one that fails leaves none (it will run again)."""
    ended = tmp_path / "output" / ".paddlecloud-ended" / "0"
    ended.mkdir(parents=True)
    (ended / "tr-0.nowhere.invalid").touch()
    peers = "localhost:6170,tr-0.nowhere.invalid:6170"
    replica = run(scripts, tmp_path, "echo $PADDLE_TRAINER_ENDPOINTS", PADDLECLOUD_PEERS=peers,
                  PADDLE_TRAINER_ENDPOINTS=peers, PADDLECLOUD_PEERS_ENDED=str(ended),
                  PADDLECLOUD_PEERS_TIMEOUT="30")
    pod_log, _ = replica.communicate(timeout=30)
    assert replica.returncode == 0, pod_log
    assert pod_log == ("paddlecloud: tr-0.nowhere.invalid has ended: not waiting for its "
                       "address\n127.0.0.1:6170,tr-0.nowhere.invalid:6170\n")
    assert sorted(p.name for p in ended.iterdir()) == ["localhost", "tr-0.nowhere.invalid"]

    failed = tmp_path / "failed"
    replica = run(scripts, tmp_path, "exit 3", PADDLECLOUD_PEERS="localhost:6170",
                  PADDLECLOUD_PEERS_ENDED=str(failed))
    replica.communicate(timeout=30)
    assert replica.returncode == 3 and not failed.exists()
