"""One worker, a thousand running jobs: what the portal costs while nothing changes, and how
soon it sees what does.

    .venv/bin/python bench/scale.py --running 500           # the real control plane
    .venv/bin/python bench/scale.py --running 1000 --fake   # the fake API server

On PostgreSQL and Redis (a database and a Redis database of its own, removed afterwards),
against the real Kubernetes control plane (tests/real_kube: Kubernetes' own API server,
controllers and scheduler, started for the run, or the one ``--kubeconfig`` names, with node
agents of the bench's own sized for the jobs, their pods processes of this machine), or with
``--fake`` the fake API server (tests/k8s_api_server, scripted pods, in this process): it
submits ``--running`` jobs of 2 trainers each (2 pods) for ``--users`` users, starts a real
``celery worker`` (prefork, ``--concurrency``) and ``celery beat`` on them, and waits until
every job runs. Then, for ``--window`` seconds while nothing changes, it measures:

- the tasks the worker ran (``celery inspect stats``, before and after): broker messages per
  minute, by task — target: the reconciler's own (the beat schedule's tasks) only;
- the worker's CPU (its main process and its pool's children, /proc): target ≤ 5 % of one core;
- the database's transactions per minute on the bench's database (``pg_stat_database``; the
  portal runs each statement outside ``atomic()`` as a transaction of its own, so this is its
  statements, less those grouped in one transaction);

then ends ``--exits`` jobs one at a time (a trainer's container exits 1: on the real node its
entry's ``sleep`` is killed and the entry goes on to ``exit 1``; on the fake server it is told
to exit) and times each from the exit until the job reads ``failed`` in the database: target
p95 ≤ 1 s. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from portal import (
    ROOT,
    BenchError,
    Stopped,
    cell,
    database_admin,
    database_url,
    handle_signals,
    in_process_options,
    in_process_scratch_remove,
    log,
)

sys.path.insert(0, str(ROOT))

DATABASE = "paddlecloud_bench_scale"
TARGET_CPU = 0.05  # of one core, for the worker
TARGET_EXIT_P95 = 1.0  # seconds from a pod's exit to its job's new state
# Pods per node agent: a node's pods are ports of one Linux bridge, which takes at most 1 024.
PODS_PER_NODE = 1000
# The trainers' entry on the real node: runs until its sleep is killed, then exits 1.
ENTRY = "sleep 1000000; exit 1"


def _env(database_url: str, redis_url: str, tmp: Path, log_level: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLECLOUD_", "DJANGO_"))}
    env.update(DATABASE_URL=database_url, REDIS_URL=redis_url,
               PADDLECLOUD_VAR_DIR=str(tmp / "var"), PADDLECLOUD_PFS_ROOT=str(tmp / "pfs"),
               SECRET_KEY="bench-scale-" + os.urandom(8).hex(), CELERY_LOG_LEVEL=log_level,
               DJANGO_SETTINGS_MODULE="paddlecloud.settings")
    return env


def _tree_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and every process below it (the worker's pool)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents, times = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    tree, grew = {pid}, True
    while grew:
        below = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(below)
        tree |= below
    return sum(times.get(p, 0.0) for p in tree)


class _Told(threading.Thread):
    """A watch of one pod from ``version``: ``at``, when (``time.monotonic``) the API server
    first said its trainer container had ended (None if not within 30 s)."""

    def __init__(self, core, pod, version: str):
        super().__init__(daemon=True)
        self.core, self.pod, self.version = core, pod, version
        self.at: float | None = None
        self.opened = threading.Event()
        self.start()
        self.opened.wait(10)

    def run(self) -> None:
        from kubernetes import watch

        stream = watch.Watch()
        self.opened.set()  # (the watch starts from ``version``: nothing is missed)
        for event in stream.stream(
                self.core.list_namespaced_pod, self.pod.metadata.namespace,
                field_selector=f"metadata.name={self.pod.metadata.name}",
                resource_version=self.version, timeout_seconds=30):
            statuses = event["object"].status.container_statuses or []
            if any(s.name == "trainer" and s.state.terminated for s in statuses):
                self.at = time.monotonic()
                stream.stop()


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="paddlecloud-bench-scale-"))
        self.database = f"{DATABASE}_{os.getpid()}"
        self.database_url = database_url(args.database_url, self.database)
        self.env = _env(self.database_url, args.redis_url, self.tmp, args.worker_log_level)
        self.processes: dict[str, subprocess.Popen] = {}
        self.fake = None
        self.cluster = None
        self.started: Path | None = None  # the control plane's directory, when started here
        self.nodes: list[str] = []  # the bench's node agents (in self.processes)
        self.created = False

    # -- set-up ------------------------------------------------------------------------------

    def setup(self) -> None:
        log(f"database {self.database}, Redis {self.args.redis_url}, files in {self.tmp}")
        database_admin(self.args.database_url, f'CREATE DATABASE "{self.database}"')
        self.created = True
        os.environ.update(self.env)
        import django

        django.setup()
        from django.core.cache import cache
        from django.core.management import call_command

        cache.clear()  # the bench's own Redis database
        from kernel.celery import app

        app.control.purge()
        call_command("migrate", verbosity=0)

        from accounts.services import datacenter_upsert, quota_set, user_upsert

        (self.tmp / "pfs" / "dc" / "public").mkdir(parents=True)
        if self.args.fake:
            kubeconfig, volume = self._fake()
        else:
            kubeconfig, volume = self._real()
        datacenter = datacenter_upsert(
            "dc", backend="kubernetes", kubeconfig=str(kubeconfig), kube_volume=volume,
            namespace_prefix="paddle-", start_timeout=0)[0]
        self.users = []
        each = -(-self.args.running // self.args.users)  # jobs per user, at most
        for u in range(self.args.users):
            name = f"user{u}"
            pkg = self.tmp / "pfs" / "dc" / "home" / name / "pkg"
            pkg.mkdir(parents=True)
            (pkg / "train.py").write_text("pass\n")
            pkg.chmod(0o755)
            user = user_upsert(name, password=os.urandom(12).hex(), datacenter_names=["dc"])[0]
            quota_set(None, datacenter, user, jobs=each, queued=each, cpu=4 * each * 1000,
                      memory=4 * each * 2**30)
            self.users.append(user)
        self.datacenter = datacenter

    def _fake(self) -> tuple[Path, dict]:
        from tests.k8s_api_server.config import Settings
        from tests.k8s_api_server.server import FakeKubernetes
        from tests.kube import portal_kubeconfig

        # A fake that keeps up with thousands of pods: it looks at what changed, and at
        # everything only every 30 s (its own work shares this process's one core).
        settings = Settings(history_size=20 * self.args.running + 1000, tick_seconds=5.0,
                            full_pass_seconds=30.0)
        self.fake = FakeKubernetes(kubeconfig_path=self.tmp / "kubeconfig",
                                   settings=settings).start()
        # (held to deploy/rbac.yaml, as the portal is in a cluster)
        return portal_kubeconfig(self.fake), {"hostPath": {"path": str(self.tmp / "pfs")}}

    def _real(self) -> tuple[Path, dict]:
        """The real control plane (started here, or ``--kubeconfig``'s), with node agents of
        the bench's own, as many as the pods need (one holds at most ``POD_PER_NODE``: its
        pods' network is one Linux bridge), each sized for its share; the portal's
        ServiceAccount's kubeconfig and the datacenter's PFS volume."""
        from tests.kube import nfs_pfs_volume
        from tests.real_kube import control_plane

        self.tmp.chmod(0o755)  # the pods run as the datacenter's uid: they read the package
        if self.args.kubeconfig:
            from tests.real_kube.fixtures import reused

            self.cluster = reused(Path(self.args.kubeconfig).resolve(), self.tmp)
        else:
            log("starting the real control plane")
            self.started = self.tmp / "kube"
            self.cluster = control_plane.up(self.started, node=False)
        from kubernetes import client

        self.core = client.CoreV1Api(control_plane.api_client(self.cluster.admin_kubeconfig))
        pods = 2 * self.args.running + 10
        count = -(-pods // PODS_PER_NODE)
        each = -(-pods // count)
        for k in range(count):
            name = f"bench-scale-{os.getpid()}-{k}"
            directory = self.tmp / "nodes" / name
            directory.mkdir(parents=True)
            out = (self.tmp / f"{name}.log").open("wb")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            self.processes[name] = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", control_plane.NODE_MODULE, "--kubeconfig",
                 str(self.cluster.admin_kubeconfig), "--name", name, "--dir", str(directory),
                 "--nfs-server", control_plane.NFS_SERVER, "--pods", str(each),
                 "--cpu", str(each * 2), "--memory", f"{each * 4}Gi",
                 "--ephemeral-storage", f"{each * 8}Gi"],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=out, start_new_session=True)
            self.nodes.append(name)
        for name in self.nodes:
            line = self.processes[name].stdout.readline()
            if not line.startswith(b"ready"):
                raise BenchError(f"node agent {name} did not start; see {self.tmp / name}.log")
        log(f"{count} node agent(s) of {each} pods each: {', '.join(self.nodes)}")
        return self.cluster.portal_kubeconfig, nfs_pfs_volume(self.tmp / "pfs" / "dc")

    def start_worker(self) -> None:
        from kernel.celery import app

        if others := app.control.inspect(timeout=1).ping():
            raise BenchError(f"workers already consume from {self.args.redis_url} "
                             f"({', '.join(others)}): give the bench a Redis database of its "
                             "own (--redis-url)")
        for name, command in (
                ("worker", ["celery", "-A", "paddlecloud", "worker",
                            "--loglevel", self.args.worker_log_level,
                            "--concurrency", str(self.args.concurrency), "--without-gossip",
                            "--without-mingle", "-n", f"bench-scale-{os.getpid()}@%h"]),
                ("beat", ["celery", "-A", "paddlecloud", "beat", "--loglevel", "WARNING",
                          "--schedule", str(self.tmp / "celerybeat-schedule")])):
            out = (self.tmp / f"{name}.log").open("wb")
            self.processes[name] = subprocess.Popen(  # noqa: S603
                [str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=ROOT,
                env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        deadline = time.monotonic() + 60
        while not app.control.inspect(timeout=1).ping():
            self._alive()
            if time.monotonic() > deadline:
                raise BenchError("the worker did not answer in 60 s")

    def _alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise BenchError(f"{name} exited {process.returncode}; see "
                                 f"{self.tmp / (name + '.log')}")

    def submit(self) -> None:
        from jobs.models import Job
        from jobs.services import job_submit

        n = self.args.running
        started = time.monotonic()
        for i in range(n):
            user = self.users[i % len(self.users)]
            job_submit(user, self.datacenter, {
                "name": f"job-{i}", "package": f"/pfs/dc/home/{user.username}/pkg",
                "entry": "python train.py" if self.args.fake else ENTRY, "trainers": 2,
                "restart_limit": 0})
        log(f"{n} jobs submitted in {time.monotonic() - started:.0f} s; waiting for them to run")
        deadline = time.monotonic() + self.args.timeout
        while (running := Job.objects.filter(state="running").count()) < n:
            self._alive()
            if time.monotonic() > deadline:
                raise BenchError(f"only {running} of {n} jobs ran within {self.args.timeout} s")
            if other := Job.objects.exclude(state__in=("running", "starting", "pending",
                                                       "queued")).first():
                raise BenchError(f"job {other.name} is {other.state}: {other.state_reason}")
            time.sleep(2)
        log(f"all {n} jobs run ({2 * n} pods), {time.monotonic() - started:.0f} s after the "
            "first submission")

    # -- measuring ---------------------------------------------------------------------------

    def _drained(self, quiet: bool = False) -> None:
        """Wait until the worker has done what was asked of it: no message waits in the
        broker's queue, none is held by the worker (``unacked``)."""
        from kernel.celery import app

        started = time.monotonic()
        with app.connection_for_read() as connection:
            redis = connection.default_channel.client
            while redis.llen("celery") or redis.hlen("unacked"):
                self._alive()
                if time.monotonic() - started > self.args.timeout:
                    raise BenchError("the worker's queue did not drain")
                time.sleep(1)
        if not quiet:
            log(f"the worker's queue drained in {time.monotonic() - started:.0f} s")

    def _tasks(self) -> dict[str, int]:
        from kernel.celery import app

        stats = app.control.inspect(timeout=5).stats() or {}
        totals: dict[str, int] = {}
        for worker in stats.values():
            for name, count in (worker.get("total") or {}).items():
                totals[name] = totals.get(name, 0) + count
        return totals

    def _transactions(self) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                           "WHERE datname = %s", [self.database])
            return cursor.fetchone()[0]

    def idle(self) -> dict:
        from django.db import connection

        self._drained()
        log(f"settling {self.args.settle} s, then measuring {self.args.window} s of idle")
        time.sleep(self.args.settle)
        worker = self.processes["worker"].pid
        tasks, cpu, xacts = self._tasks(), _tree_cpu_seconds(worker), self._transactions()
        connection.close()  # the bench's own: not in the window
        started = time.monotonic()
        time.sleep(self.args.window)
        elapsed = time.monotonic() - started
        cpu = _tree_cpu_seconds(worker) - cpu
        xacts = self._transactions() - xacts - 3  # the bench's own three statements
        after = self._tasks()
        ran = {name: after.get(name, 0) - tasks.get(name, 0) for name in after}
        ran = {name: count for name, count in ran.items() if count}
        from django.conf import settings

        scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
        per_minute = 60 / elapsed
        return {"window_s": round(elapsed, 1),
                "messages_per_min": round(sum(ran.values()) * per_minute, 1),
                "tasks_per_min": {k: round(v * per_minute, 1) for k, v in sorted(ran.items())},
                "only_scheduled": set(ran) <= scheduled,
                "worker_cpu": round(cpu / elapsed, 4),
                "db_transactions_per_min": round(max(xacts, 0) * per_minute, 1)}

    def exits(self) -> tuple[list[float], list[float]]:
        """The delays from each exit to its job's state, and (on the real control plane)
        from each exit to the API server's word of it (a watch of the pod's, opened first)."""
        import random

        from jobs.models import Job

        rng = random.Random(20)  # noqa: S311 - which jobs end, the same in every run
        names = rng.sample(range(self.args.running), self.args.exits)
        delays, seen = [], []
        for i in names:
            job = Job.objects.select_related("owner").get(name=f"job-{i}")
            namespace = f"paddle-{job.owner.username}"
            exited, told = self._exit(job, namespace)
            while Job.objects.filter(pk=job.pk, state="running").exists():
                if time.monotonic() - exited > 30:
                    raise BenchError(f"job-{i} still runs 30 s after its trainer exited")
                time.sleep(0.01)
            delays.append(time.monotonic() - exited)
            if told is not None:
                told.join(30)
                if told.at is not None:
                    seen.append(told.at - exited)
            log(f"job-{i} (uid {job.uid}): its trainer exited; the job failed "
                f"{delays[-1]:.3f} s later" + (f", the API server said so after "
                                             f"{seen[-1]:.3f} s" if told and told.at else ""))
            # Its stop (its pods deleted, each a change) done before the next exit, so that
            # each is timed alone.
            while job.replicas.exclude(state__in=("succeeded", "failed", "killed")).exists():
                if time.monotonic() - exited > 120:
                    raise BenchError(f"job-{i} was not stopped in 120 s")
                time.sleep(0.1)
            self._drained(quiet=True)
        return delays, seen

    def _exit(self, job, namespace: str) -> tuple[float, _Told | None]:
        """Trainer 0's container of ``job`` made to exit 1: when (``time.monotonic``), and
        on the real control plane the watch that sees the API server say so."""
        if self.fake is not None:
            pods = [p["metadata"]["name"] for p in self.fake.store.list("pods", namespace)
                    if p["metadata"]["labels"].get("paddlecloud.org/job-uid") == str(job.uid)
                    and p["metadata"]["name"].split("-tr-")[1].startswith("0-")]
            exited = time.monotonic()
            self.fake.controller.terminate_container(namespace, pods[0], exit_code=1)
            return exited, None
        from tests.real_kube.node_kubelet import signal_container

        listing = self.core.list_namespaced_pod(
            namespace, label_selector=f"paddlecloud.org/job-uid={job.uid}")
        pod = next(p for p in listing.items if p.metadata.name.split("-tr-")[1].startswith("0-"))
        told = _Told(self.core, pod, listing.metadata.resource_version)
        exited = time.monotonic()
        # The entry's sleep killed (as by the node's OOM killer): the entry exits 1.
        signal_container(pod.metadata.uid, "trainer", signal.SIGKILL, command="sleep")
        return exited, told

    # -- clean-up ----------------------------------------------------------------------------

    def close(self) -> None:
        celery = [n for n in self.processes if n not in self.nodes]
        self._stop(celery, 30)
        if self.fake is not None:
            self.fake.stop()
        try:
            self._real_close()
        finally:
            if self.created:
                in_process_scratch_remove(self.args.database_url, self.database, self.tmp,
                                          keep=self.args.keep)
            elif not self.args.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def _stop(self, names: list[str], grace: float) -> None:
        for name in names:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.processes[name].pid, signal.SIGTERM)
        for name in names:
            process = self.processes[name]
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop in {grace:.0f} s: killed")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def _real_close(self) -> None:
        """What the bench made on the real control plane: the portal's namespaces and volumes
        (on a cluster it did not start), its node agents (each stops its pods) and their
        Nodes, the control plane it started."""
        from tests.real_kube import control_plane

        if self.cluster is None:
            return
        try:
            self._cluster_clean()
        finally:
            if self.started is not None:
                log(f"stopping the control plane: {', '.join(control_plane.down(self.started))}")

    def _cluster_clean(self) -> None:
        from kubernetes import client

        api = self.core.api_client
        if self.started is None:
            from jobs.backends.kubernetes.names import MANAGED_BY, MANAGED_BY_LABEL
            from tests.kube import _remove_managed

            try:
                _remove_managed(api, f"{MANAGED_BY_LABEL}={MANAGED_BY}", timeout=600)
            except Exception as exc:  # said, and the rest still cleaned
                log(f"the portal's namespaces were not all removed: {exc!r}")
        self._stop(self.nodes, 600)
        for name in self.nodes:
            with contextlib.suppress(Exception):
                client.CoreV1Api(api).delete_node(name)
        api.close()


def _p95(delays: list[float]) -> float:
    return statistics.quantiles(delays, n=20)[18] if len(delays) > 1 else delays[0]


def report(idle: dict, delays: list[float], seen: list[float]) -> str:
    p95 = _p95(delays)
    rows = [
        ("broker messages/min", cell(idle["messages_per_min"]),
         "reconciler's only", "yes" if idle["only_scheduled"] else "NO"),
        ("worker CPU, % of a core", cell(idle["worker_cpu"] * 100, 2), "<= 5",
         f"{idle['worker_cpu'] / TARGET_CPU:.2f} of the target"),
        ("DB transactions/min", cell(idle["db_transactions_per_min"]), "-", ""),
        ("exit -> state p50, s", cell(statistics.median(delays), 3), "", ""),
        ("exit -> state p95, s", cell(p95, 3), "<= 1",
         f"{p95 / TARGET_EXIT_P95:.2f} of the target: "
         + ("OK" if p95 <= TARGET_EXIT_P95 else "MISSED")),
    ]
    if seen:  # the node agent and the API server's part of it; the rest is the portal's
        rows[3:3] = [("exit -> API p50, s", cell(statistics.median(seen), 3), "", ""),
                     ("exit -> API p95, s", cell(_p95(seen), 3), "", "")]
    lines = [f"{'figure':<26}{'measured':>10}  {'target':<18}{'measured / target'}"]
    lines += [f"{a:<26}{b:>10}  {c:<18}{d}" for a, b, c, d in rows]
    lines.append("tasks/min while idle: " + (", ".join(
        f"{k} {v}" for k, v in idle["tasks_per_min"].items()) or "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--running", type=int, default=1000, help="jobs running (2 pods each)")
    parser.add_argument("--users", type=int, default=20, help="whose jobs they are (evenly)")
    parser.add_argument("--window", type=float, default=60, help="seconds of idle measured")
    parser.add_argument("--settle", type=float, default=20,
                        help="seconds after every job runs before the window")
    parser.add_argument("--exits", type=int, default=20, help="jobs ended one by one, timed")
    parser.add_argument("--concurrency", type=int, default=2, help="the worker's processes")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds the jobs may take to all run")
    parser.add_argument("--kubeconfig",
                        help="an admin's kubeconfig of a running real control plane (./dev kube "
                             "up's); else one is started for the run")
    parser.add_argument("--fake", action="store_true",
                        help="the fake API server (tests/k8s_api_server) instead of the real "
                             "control plane")
    in_process_options(parser, redis_db=14)
    parser.add_argument("--worker-log-level", default="WARNING",
                        help="the worker's log level (INFO: each task and its time)")
    args = parser.parse_args(argv)
    handle_signals()
    bench = Bench(args)
    try:
        bench.setup()
        bench.start_worker()
        bench.submit()
        idle = bench.idle()
        delays, seen = bench.exits()
    except (BenchError, Stopped, KeyboardInterrupt) as exc:
        log(f"failed: {exc}" if isinstance(exc, BenchError) else "stopped")
        return 1
    finally:
        bench.close()
    p50, p95 = statistics.median(delays), _p95(delays)
    print(json.dumps({"bench": "scale", "cluster": "fake" if args.fake else "real",
                      "running": args.running, **idle,
                      "exit_delays_s": [round(d, 3) for d in delays],
                      "exit_p50_s": round(p50, 3), "exit_p95_s": round(p95, 3),
                      "exit_p95_target_s": TARGET_EXIT_P95,
                      "exit_p95_result": "OK" if p95 <= TARGET_EXIT_P95 else "MISSED",
                      **({"exit_to_api_s": [round(d, 3) for d in seen]} if seen else {})}))
    print(report(idle, delays, seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
