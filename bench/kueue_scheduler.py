"""Kueue's own scheduler performance test, run on the real Kueue on this machine, for
``bench/admission.py --kueue`` (issue 34).

Kueue's runner (test/performance/scheduler/runner in its module, built here with ``go build``
from Go's module cache) runs against a kubeconfig as ``make run-performance-scheduler-in-cluster``
runs it (``--qps=1000 --burst=2000``): its generator makes the ResourceFlavor, the cohorts'
ClusterQueues (a nominal quota of 20 CPUs, borrowing up to 100 in the cohort, preemption as the
config says), a namespace and LocalQueue each, and their Workloads, each class at its creation
interval; its controller plays the jobs, marking each admitted Workload finished its class's run
time after admission; it ends once no ClusterQueue has a pending or reserving Workload, and
deletes what it made. Its config is configs/baseline/generator.yaml, scaled as admission.py
scales it: ``--users`` queues (in cohorts of the baseline's 6) of ``--jobs / --users``
workloads each, in the baseline's class shares (every workload set's count times the same
factor).

Kueue runs on a control plane started here (tests/real_kube) unless ``--kubeconfig`` names one
already up (``./dev kube up``'s); Kueue is installed there and removed after. Measured: the
runner's wall time (what Kueue's baseline, 15 000 workloads in 351 s, is), and from a watch of
the Workloads, the time from the runner's start to the last admission (as admission.py's
``wall s``); the rate is workloads over the latter.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from portal import BenchError, log

BASELINE_QUEUES_PER_COHORT = 6
RUNNER = "performance-scheduler-runner"


def runner_binary(source: Path, version: str) -> Path:
    """Kueue's runner, built once per version into the binaries' cache (beside kueue)."""
    cache = Path.home() / ".cache" / "paddlecloud" / "kube" / f"kueue-{version}" / "bin"
    binary = cache / RUNNER
    if os.access(binary, os.X_OK):
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    log(f"building Kueue's {RUNNER} ({version}) from {source}")
    go = shutil.which("go")
    if go is None:
        raise BenchError("no go on PATH: Kueue's runner is built from its module")
    built = subprocess.run(  # noqa: S603 - go, on Kueue's module
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary),
         "./test/performance/scheduler/runner"], cwd=source, capture_output=True, text=True,
        check=False)
    if built.returncode:
        raise BenchError(f"go build of Kueue's runner failed:\n{built.stderr[-3000:]}")
    return binary


def scaled_config(source: Path, jobs: int, users: int) -> dict:
    """configs/baseline/generator.yaml with ``users`` ClusterQueues of ``jobs / users``
    workloads each."""
    config = yaml.safe_load(
        (source / "test/performance/scheduler/configs/baseline/generator.yaml").read_text())
    (cohort,) = config["cohorts"]
    (queues,) = cohort["queuesSets"]
    per_queue = sum(s["count"] for s in queues["workloadsSets"])
    for workloads in queues["workloadsSets"]:
        workloads["count"] = round(workloads["count"] * jobs / users / per_queue)
    if users % BASELINE_QUEUES_PER_COHORT == 0:
        cohort["count"], queues["count"] = users // BASELINE_QUEUES_PER_COHORT, \
            BASELINE_QUEUES_PER_COHORT
    else:
        cohort["count"], queues["count"] = 1, users
    return config


@dataclass
class KueueResult:
    version: str = ""
    workloads: int = 0
    runner_wall_s: float | None = None  # as Kueue's baseline measures (generation to the end)
    last_admission_s: float | None = None  # from the runner's start to the last admission
    evictions: int = 0
    avg_ms_to_admission: dict = field(default_factory=dict)  # by workload class
    error: str | None = None

    @property
    def per_s(self) -> float | None:
        return self.workloads / self.last_admission_s if self.last_admission_s else None

    def as_dict(self) -> dict:
        def rounded(value, digits):
            return None if value is None else round(value, digits)

        return {"kueue_version": self.version, "kueue_workloads": self.workloads,
                "kueue_runner_wall_s": rounded(self.runner_wall_s, 3),
                "kueue_last_admission_s": rounded(self.last_admission_s, 3),
                "kueue_admissions_per_s": rounded(self.per_s, 1),
                "kueue_evictions": self.evictions,
                "kueue_avg_ms_to_admission": self.avg_ms_to_admission,
                "kueue_error": self.error}


class AdmissionWatch:
    """When each Workload was first seen admitted (a watch on all namespaces)."""

    def __init__(self, api):
        self.api = api
        self.admitted: dict[str, float] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> AdmissionWatch:
        self.thread.start()
        return self

    def _run(self) -> None:
        from jobs.backends.kubernetes.client import _lines  # the backend's watch reading

        version = ""
        while not self.stopping.is_set():
            query = [("watch", "1"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "30")]
            if version:
                query.append(("resourceVersion", version))
            with contextlib.suppress(Exception):
                response = self.api.open("GET", "/apis/kueue.x-k8s.io/v1beta2/workloads",
                                         query=query, timeout=(5, 60))
                for line in _lines(response.response):
                    if self.stopping.is_set():
                        break
                    event = json.loads(line)
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    conditions = obj.get("status", {}).get("conditions", [])
                    if any(c["type"] == "Admitted" and c["status"] == "True"
                           for c in conditions):
                        self.admitted.setdefault(obj["metadata"]["uid"], time.monotonic())
            self.stopping.wait(0.2)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=70)


def control_plane(stack: contextlib.ExitStack, state: Path) -> Path:
    """A control plane (tests/real_kube's) started in ``state``, stopped with ``stack``. Its
    admin's kubeconfig."""
    from tests.real_kube import control_plane as real

    stack.callback(real.down, state)
    plane = real.up(state)
    log(f"control plane up at {plane.url}")
    return plane.admin_kubeconfig


def run(jobs: int, users: int, timeout: float, kubeconfig: str | None, tmp: Path
        ) -> KueueResult:
    """Kueue's scaled baseline on the real Kueue; the control plane started here unless
    ``kubeconfig`` is given."""
    from tests.real_kube.kueue import KUEUE_VERSION, Kueue, kueue_source

    result = KueueResult(KUEUE_VERSION)
    source = kueue_source()
    binary = runner_binary(source, KUEUE_VERSION)
    config = tmp / "generator.yaml"
    config.write_text(yaml.safe_dump(scaled_config(source, jobs, users)))
    with contextlib.ExitStack() as stack:
        if kubeconfig is None:
            kubeconfig = str(control_plane(stack, tmp / "control-plane"))
        kueue = Kueue(Path(kubeconfig), tmp / "kueue")
        kueue.start()
        stack.callback(kueue.stop)
        log(f"Kueue {KUEUE_VERSION} ready (webhooks on 127.0.0.1:{kueue.ports['webhook']})")
        out = tmp / "runner"
        out.mkdir()
        watch = AdmissionWatch(kueue.api).start()
        stack.callback(watch.stop)
        began = time.monotonic()
        with (tmp / "runner.log").open("w") as runner_log:
            try:
                ran = subprocess.run(  # noqa: S603 - Kueue's runner
                    [str(binary), "--o", str(out), f"--generatorConfig={config}",
                     "--qps=1000", "--burst=2000", f"--timeout={int(timeout)}s"],
                    # In Kueue's tree: its test utilities look for the project's Makefile.
                    cwd=source, env={**os.environ, "KUBECONFIG": kubeconfig}, stdout=runner_log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout + 120,
                    check=False)
            except subprocess.TimeoutExpired as exc:
                raise BenchError(f"Kueue's runner did not end within {timeout + 120:.0f} s"
                                 ) from exc
        result.runner_wall_s = time.monotonic() - began
        if ran.returncode:
            tail = (tmp / "runner.log").read_text(errors="replace").splitlines()[-15:]
            raise BenchError(f"Kueue's runner exited {ran.returncode}:\n" + "\n".join(tail))
        with (out / "wlStates.csv").open() as states:
            rows = list(csv.DictReader(states))
        result.workloads = len(rows)
        result.evictions = sum(int(r["num evictions"]) for r in rows)
        summary = yaml.safe_load((out / "summary.yaml").read_text())
        result.avg_ms_to_admission = {name: c["averageTimeToAdmissionMs"] for name, c in
                                      sorted(summary["workloadClasses"].items())}
        if watch.admitted:
            result.last_admission_s = max(watch.admitted.values()) - began
        if len(watch.admitted) < result.workloads:
            log(f"the watch saw {len(watch.admitted)} of {result.workloads} admissions")
    return result


def run_logged(jobs: int, users: int, timeout: float, kubeconfig: str | None) -> KueueResult:
    """``run`` in a scratch directory (removed after), its failure in the result."""
    tmp = Path(tempfile.mkdtemp(prefix="paddlecloud-bench-kueue-"))
    try:
        return run(jobs, users, timeout, kubeconfig, tmp)
    except Exception as exc:  # reported beside the portal's figures
        log(f"Kueue's benchmark failed: {exc}")
        return KueueResult(error=f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
