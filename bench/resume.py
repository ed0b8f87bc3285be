"""Benchmark: a job restarted mid-run goes on from its latest checkpoint — how many steps it
loses, whether every record is still trained once a pass, and whether its model ends as good
as an uninterrupted run's (issue 37).

    .venv/bin/python bench/resume.py [--backends local,kubernetes] [--jobs collective,pserver]
                                     [--rounds kill,evict,stop] [--seed N] [--kubeconfig F]
                                     [--keep]

On PostgreSQL and Redis (a database and a Redis database of its own, removed afterwards), the
portal runs in this process as a deployment runs it: its API served by uvicorn over HTTP (the
job's master, which the replicas call), the embedded Celery worker; on the local backend (each
replica a sandboxed process), then on Kubernetes: the real control plane (tests/real_kube:
Kubernetes' own API server, controllers and scheduler, its node agent running the pods on this
machine, the PFS an NFS volume; started for the bench and stopped after it, unless
``--kubeconfig`` names a running one), the portal reached by the pods through a Service.
On each backend two jobs, each first run uninterrupted twice (the run-to-run noise of its
final loss), then once per round:

- ``collective``: examples/fit_a_line, real PaddlePaddle, 2 collective trainers reading the
  example's dataset through the job's master (tasks of 40 rows, 6 passes, a checkpoint every
  10 steps);
- ``pserver``: examples/ps_numpy, 2 pservers and 2 trainers (10 passes of 16 steps, a
  checkpoint every 10 steps, 0.05 s a step).

Rounds: ``kill`` — at a random step (past the first checkpoint) a trainer's processes are
killed (SIGKILL; trainer 1 of the collective job, whose trainers then all restart; trainer 0
of the pserver job, which restarts alone); ``evict`` (Kubernetes only) — that trainer's pod
is evicted (the Eviction API, as a drain or a preemption); ``stop`` — the whole job is
stopped by the portal (its owner's budget spent) and started again once the budget is raised,
new pservers and all. A lost node cannot be made on demand on a real control plane
(tests/jobs/test_resume_on_kubernetes.py shows it on the fake API server).

Each round prints one JSON line: ``resumed_from_step`` (where trainer 0's log says it first
went on from), ``restarts`` (of trainer 0, that trained), ``killed_at_step`` (trainer 0's last
reported step when it was stopped), ``lost_steps`` (their difference),
``records_trained_twice`` and ``records_skipped`` (records of the final model's steps, pass by
pass: each run's up to where the next run went on from, and the last run's — from the
trainers' logs), ``final_loss`` (the model's test loss) and the baseline's, with each target
and OK or MISSED. Targets: ``lost_steps`` at most the checkpoint interval, 0 records twice or
skipped, the final loss within the uninterrupted runs' noise (their spread, at least 10 % of
their mean). Exit 1 when a round failed or missed a target.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import portal
from portal import ROOT, BenchError, Stopped, log

sys.path.insert(0, str(ROOT))

DATABASE = "paddlecloud_bench_resume"
USER = "bench"
DC = "dc"
HOME = f"/pfs/{DC}/home/{USER}"
EXAMPLES = ROOT / "examples"
NOISE_FLOOR = 0.10  # of the baseline's mean loss: the least noise the final loss may show
FINAL = ("succeeded", "failed", "killed")

# Each job: the example, its submission, how many records a pass has, its checkpoint interval.
JOBS = {
    "collective": {
        "example": "fit_a_line", "interval": 10, "passes": 6, "records": 8 * 64,
        "fields": {"trainers": 2, "passes": 6, "restart_limit": 2, "task_records": 40,
                   "dataset": f"{HOME}/data/fit_a_line/part-*.txt",
                   "env": {"CHECKPOINT_EVERY": "10"}}},
    "pserver": {
        "example": "ps_numpy", "interval": 10, "passes": 10, "records": 8 * 64,
        "fields": {"trainers": 2, "pservers": 2, "passes": 10, "restart_limit": 2,
                   "env": {"CHECKPOINT_EVERY": "10", "STEP_SECONDS": "0.05"}}},
}
RESUMED = re.compile(r"trainer 0 (?:resumed from the checkpoint of|goes on from) step (\d+)")
ANY_RESUMED = re.compile(r"trainer \d+ (?:resumed from the checkpoint of|goes on from) step (\d+)")
# fit_a_line's step lines: trainer, pass (from 1), step, rows (none: a step of weight 0)
FIT_STEP = re.compile(r"^trainer (\d+) pass (\d+) step (\d+) (?:(\d+) rows|no rows)", re.M)
# ps_numpy's: trainer, pass (from 1), step; a step is a mini-batch of 16 rows on each trainer
PS_STEP = re.compile(r"^trainer (\d+) pass (\d+) step (\d+) loss", re.M)
PS_BATCH = 16
# Where a replica's log says it started again (a Kubernetes pod's log also has one after its
# init phase's lines).
RESTART = re.compile(r"\n--- restart(?: \d+)? ---\n")


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="paddlecloud-bench-resume-"))
        self.database = f"{DATABASE}_{os.getpid()}"
        self.created = False
        self.server = self.thread = self.worker = None
        self.random = random.Random(args.seed)  # noqa: S311 - when to stop, no secret
        self.steps: dict[str, int] = {}  # trainer 0's steps in an uninterrupted run, by job
        self.cluster = self.core = None  # the real control plane, while the bench is on it

    # -- the portal ---------------------------------------------------------------------------

    def setup(self) -> None:
        os.environ.update(
            DATABASE_URL=portal.database_url(self.args.database_url, self.database),
            REDIS_URL=self.args.redis_url, PADDLECLOUD_VAR_DIR=str(self.tmp / "var"),
            PADDLECLOUD_PFS_ROOT=str(self.tmp / "pfs"), PADDLECLOUD_BACKEND="local",
            SECRET_KEY="bench-resume-" + os.urandom(8).hex(),
            DJANGO_SETTINGS_MODULE="paddlecloud.settings")
        log(f"database {self.database}, Redis {self.args.redis_url}, files in {self.tmp}")
        portal.database_admin(self.args.database_url, f'CREATE DATABASE "{self.database}"')
        self.created = True
        import django

        django.setup()
        from django.conf import settings
        from django.core.cache import cache
        from django.core.management import call_command

        cache.clear()  # the bench's own Redis database
        call_command("migrate", verbosity=0)
        from accounts.models import Datacenter
        from accounts.services import datacenter_upsert, quota_set, user_upsert

        self.datacenter = datacenter_upsert(DC)[0]
        Datacenter.objects.filter(pk=self.datacenter.pk).update(budget_grace_seconds=0)
        self.datacenter.refresh_from_db()
        self.user = user_upsert(USER, password=os.urandom(12).hex(), datacenter_names=[DC])[0]
        quota_set(None, self.datacenter, self.user, cpu=16000, jobs=4)
        self.home = self.tmp / "pfs" / DC / "home" / USER
        for example in ("fit_a_line", "ps_numpy"):
            shutil.copytree(EXAMPLES / example, self.home / example,
                            ignore=shutil.ignore_patterns("__pycache__", "output"))
        shutil.copytree(EXAMPLES / "fit_a_line" / "data", self.home / "data" / "fit_a_line")

        import uvicorn

        from paddlecloud.asgi import application
        from paddlecloud.serving import server_config
        from paddlecloud.worker import EmbeddedWorker

        self.port = port = portal.free_port()
        settings.ALLOWED_HOSTS = ["*"]
        settings.PADDLECLOUD_PORTAL_URL = f"http://127.0.0.1:{port}"  # the replicas' master
        self.server = uvicorn.Server(server_config(application, host="127.0.0.1", port=port,
                                                   lifespan="on", log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise BenchError("the portal did not start")
            time.sleep(0.05)
        from kernel.celery import app

        app.control.purge()
        self.worker = EmbeddedWorker(concurrency=2, beat=False)
        self.worker.start()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join(10)
        if self.created:
            with contextlib.suppress(Exception):
                from jobs.models import Job
                from jobs.services import job_kill

                for job in Job.objects.exclude(state__in=FINAL):
                    job_kill(self.user, self.datacenter, job.name)
            portal.in_process_scratch_remove(self.args.database_url, self.database, self.tmp,
                                      keep=self.args.keep)
        elif not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- a run --------------------------------------------------------------------------------

    def submit(self, kind: str, name: str):
        from jobs.services import job_submit

        job = JOBS[kind]
        spec = {**json.loads((EXAMPLES / job["example"] / "job.json").read_text()),
                **job["fields"], "name": name, "package": f"{HOME}/{job['example']}"}
        if self.cluster is not None:
            spec.update(cpu="1", pscpu="500m")
        return job_submit(self.user, self.datacenter, spec).job

    @contextlib.contextmanager
    def on_kubernetes(self):
        """The datacenter on the real control plane for the block (tests/kube.py's
        ``on_real_kubernetes``), the portal exposed to its pods by a Service."""
        from django.conf import settings
        from kubernetes import client

        from tests.kube import on_real_kubernetes
        from tests.real_kube import control_plane
        from tests.real_kube.node_kubelet import expose_host_port

        started = None
        if self.args.kubeconfig:
            from tests.real_kube.fixtures import reused

            cluster = reused(Path(self.args.kubeconfig).resolve(), self.tmp)
        else:
            log("starting the real control plane (about a minute)")
            started = self.tmp / "kube"
            cluster = control_plane.up(started)
        admin = control_plane.api_client(cluster.admin_kubeconfig)
        try:
            settings.PADDLECLOUD_MASTER_BASE_URL = expose_host_port(
                admin, self.port, namespace="paddlecloud", service="paddlecloud")
            self.core = client.CoreV1Api(admin)
            with on_real_kubernetes(self.datacenter, settings, cluster, self.tmp / "pfs" / DC):
                self.cluster = cluster
                yield
        finally:
            self.cluster = None
            with contextlib.suppress(Exception):
                client.CoreV1Api(admin).delete_namespaced_service("paddlecloud", "paddlecloud")
            admin.close()
            if started is not None:
                control_plane.down(started)

    def trainer_pod(self, job, index: int):
        from paddlecloud_core.contract import job_namespace

        pods = self.core.list_namespaced_pod(
            job_namespace(job.datacenter, job.owner.username),
            label_selector=f"paddlecloud.org/job-uid={job.uid}").items
        return next(p for p in pods if (p.metadata.annotations or {}).get(
            "batch.kubernetes.io/job-completion-index") == str(index)
            and p.status.phase == "Running" and not p.metadata.deletion_timestamp)

    def wait(self, test, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not test():
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: not within {timeout:.0f} s")
            time.sleep(0.1)

    def ended(self, job):
        def done() -> bool:
            job.refresh_from_db()
            return job.state in FINAL

        self.wait(done, self.args.timeout, f"{job.name} to end")
        if job.state != "succeeded":
            raise BenchError(f"{job.name} {job.state}: {job.state_reason}")
        return job

    def reported(self, job) -> list[int]:
        """The steps trainer 0 reported so far (ps_numpy its own metrics.jsonl, fit_a_line
        the SDK's node_0/metrics.jsonl)."""
        from jobs.files import output_dir

        for path in (output_dir(job) / "metrics.jsonl",
                     output_dir(job) / "node_0" / "metrics.jsonl"):
            if path.exists():
                return [json.loads(line)["step"] for line in path.read_text().splitlines()
                        if line.strip()]
        return []

    def final_loss(self, job) -> float:
        from jobs.files import output_dir

        return json.loads((output_dir(job) / "model" / "summary.json").read_text())[
            "test_loss"]

    def stop(self, job, round_: str) -> int:
        """Stop the job as the round says once trainer 0 is past a random step; the step it
        had reported."""
        from jobs.files import checkpoints_dir

        spec = JOBS[job_kind(job)]
        total = self.steps[job_kind(job)]  # of an uninterrupted run
        at = self.random.randint(spec["interval"] + 1, int(total * 0.7))
        self.wait(lambda: self.reported(job) and self.reported(job)[-1] >= at
                  and any(checkpoints_dir(job).glob("step-*")), self.args.timeout,
                  f"{job.name} to pass step {at}")
        index = 0 if job.pservers else 1
        if round_ == "kill" and self.cluster is None:
            trainer = job.replicas.get(role="trainer", index=index)
            os.killpg(int(trainer.backend_ref.removeprefix("pid:")), signal.SIGKILL)
            return self.reported(job)[-1]
        if round_ in ("kill", "evict"):
            from tests.real_kube.node_kubelet import signal_container

            pod = self.trainer_pod(job, index)
            if round_ == "kill":  # its container's processes, as a node's OOM killer would
                signal_container(pod.metadata.uid, pod.spec.containers[0].name, signal.SIGKILL)
            else:
                self.core.create_namespaced_pod_eviction(
                    pod.metadata.name, pod.metadata.namespace,
                    {"metadata": {"name": pod.metadata.name,
                                  "namespace": pod.metadata.namespace}})
            return self.reported(job)[-1]
        from decimal import Decimal

        from django.utils import timezone

        from accounts.models import Budget
        from jobs.tasks import _budgets_enforce
        from scheduling.tasks import jobs_admit

        budget, _ = Budget.objects.update_or_create(
            datacenter=self.datacenter, user=self.user, defaults={"cpu_hours": Decimal("0")})

        def queued() -> bool:
            _budgets_enforce(timezone.now())
            job.refresh_from_db()
            return job.state == "queued" and not job.replicas.exclude(state="pending").exists()

        self.wait(queued, 60, f"{job.name} to be stopped for its budget")
        killed = self.reported(job)[-1]
        Budget.objects.filter(pk=budget.pk).delete()
        jobs_admit.delay(self.user.pk, self.datacenter.pk)
        return killed

    # -- what a run trained -------------------------------------------------------------------

    def records(self, job) -> tuple[int, int]:
        """Records trained twice and skipped in the final model: each pass's records of the
        steps each run kept (up to where the next run went on from), against the pass's."""
        from jobs.files import output_dir

        spec = JOBS[job_kind(job)]
        trained: Counter = Counter()
        for index in range(job.trainers):
            log_text = (output_dir(job) / f"node_{index}" / "train.log").read_text()
            runs = RESTART.split(log_text)
            # A run's steps count up to where the next run went on from (the rest went with
            # the model it had not saved); the last run's all count.
            starts = [int(found[0]) if (found := ANY_RESUMED.findall(run)) else 0
                      for run in runs]
            for run, first, until in zip(runs, starts, [*starts[1:], None], strict=True):
                def keep(step: int, first=first, until=until) -> bool:
                    return first < step and (until is None or step <= until)

                if job.pservers:
                    for _, pass_no, step in PS_STEP.findall(run):
                        if keep(int(step)):
                            trained[int(pass_no)] += PS_BATCH
                else:
                    for _, pass_no, step, rows in FIT_STEP.findall(run):
                        if keep(int(step)):
                            trained[int(pass_no)] += int(rows or 0)
        per_pass = spec["records"] if not job.pservers else None
        twice = skipped = 0
        for pass_no in range(1, spec["passes"] + 1):
            expected = per_pass if per_pass is not None else trained_uninterrupted(job, pass_no)
            twice += max(0, trained[pass_no] - expected)
            skipped += max(0, expected - trained[pass_no])
        return twice, skipped

    # -- rounds -------------------------------------------------------------------------------

    def baseline(self, backend: str, kind: str) -> tuple[float, float]:
        losses = []
        for n in range(2):
            job = self.ended(self.submit(kind, f"{backend}-{kind}-base-{n}"))
            losses.append(self.final_loss(job))
            self.steps[kind] = self.reported(job)[-1]
            log(f"{backend}/{kind}: uninterrupted run {n + 1}: final loss {losses[-1]:.6f}")
        mean = sum(losses) / len(losses)
        return mean, max(abs(losses[0] - losses[1]), NOISE_FLOOR * mean)

    def round(self, backend: str, kind: str, round_: str, baseline: tuple[float, float]
              ) -> dict:
        from jobs.files import output_dir

        job = self.submit(kind, f"{backend}-{kind}-{round_}")
        killed = self.stop(job, round_)
        log(f"{backend}/{kind}/{round_}: stopped at step {killed}")
        job = self.ended(job)
        log0 = (output_dir(job) / "node_0" / "train.log").read_text()
        found = RESUMED.findall(log0)
        if not found:
            raise BenchError(f"{job.name}: trainer 0 never said where it resumed from")
        resumed = int(found[0])  # the restart the round made (a later one counts too)
        twice, skipped = self.records(job)
        loss = self.final_loss(job)
        interval = JOBS[kind]["interval"]
        mean, noise = baseline
        checks = {"lost_steps": killed - resumed <= interval, "records_trained_twice": twice == 0,
                  "records_skipped": skipped == 0, "final_loss": abs(loss - mean) <= noise}
        return {"bench": "resume", "backend": backend, "job": kind, "round": round_,
                "killed_at_step": killed, "resumed_from_step": resumed,
                "restarts": sum(1 for run in RESTART.split(log0) if step_line(job).search(run)) - 1,
                "lost_steps": killed - resumed, "lost_steps_target": f"<= {interval}",
                "records_trained_twice": twice, "records_skipped": skipped,
                "records_target": 0, "final_loss": round(loss, 6),
                "baseline_loss": round(mean, 6), "final_loss_target": f"within {noise:.6f}",
                "result": "OK" if all(checks.values()) else
                "MISSED " + ", ".join(k for k, ok in checks.items() if not ok)}


def step_line(job) -> re.Pattern:
    return PS_STEP if job.pservers else FIT_STEP


def job_kind(job) -> str:
    return "pserver" if job.pservers else "collective"


def trained_uninterrupted(job, pass_no: int) -> int:
    """ps_numpy's records of a pass: each trainer's steps of it, a batch each (its shards' rows
    rounded down to whole batches)."""
    steps = 4 * 64 // PS_BATCH  # 4 shards of 64 rows a trainer
    return job.trainers * steps * PS_BATCH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="local,kubernetes",
                        help="where: local, kubernetes (comma separated)")
    parser.add_argument("--kubeconfig",
                        help="an admin's kubeconfig of a running control plane (./dev kube "
                             "up's); else one is started")
    parser.add_argument("--jobs", default="collective,pserver",
                        help="which jobs: collective, pserver (comma separated)")
    parser.add_argument("--rounds", default="kill,evict,stop",
                        help="which restarts: kill, evict (Kubernetes), stop (comma separated)")
    parser.add_argument("--seed", type=int, default=None,
                        help="of the random steps the restarts come at")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take")
    portal.in_process_options(parser, redis_db=13,
                              database_url="postgres://postgres:postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    kinds = [k for k in args.jobs.split(",") if k]
    rounds = [r for r in args.rounds.split(",") if r]
    if set(backends) - {"local", "kubernetes"} or set(kinds) - set(JOBS) or set(rounds) - {
            "kill", "evict", "stop"}:
        parser.error("--backends: local, kubernetes; --jobs: collective, pserver; --rounds: "
                     "kill, evict, stop")
    portal.handle_signals()
    bench = Bench(args)
    failed = False
    try:
        bench.setup()
        for backend in backends:
            with bench.on_kubernetes() if backend == "kubernetes" else contextlib.nullcontext():
                for kind in kinds:
                    baseline = bench.baseline(backend, kind)
                    for round_ in rounds:
                        if round_ == "evict" and backend == "local":
                            continue  # no pods to evict
                        try:
                            line = bench.round(backend, kind, round_, baseline)
                        except BenchError as exc:
                            line = {"bench": "resume", "backend": backend, "job": kind,
                                    "round": round_, "result": f"FAILED {exc}"}
                        print(json.dumps(line), flush=True)
                        failed |= line["result"] != "OK"
    except (BenchError, Stopped, KeyboardInterrupt) as exc:
        log(f"failed: {exc}" if isinstance(exc, BenchError) else "stopped")
        return 1
    finally:
        bench.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
