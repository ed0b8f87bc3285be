"""The job commands end to end: paddlectl in a subprocess against the live portal, jobs run by
a real Celery worker on the local backend — the seeds' examples as they are written, and what
each mistake says."""

from __future__ import annotations

import json
import queue
import re
import signal
import threading
import time

import pytest
import yaml

from tests.factories import HOME

# Trainers print who they are, GREETING, LINES lines (one every EVERY s), then sleep SLEEP s;
# parameter servers serve until the job stops them.
TRAINER = """\
import os, sys, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    print("pserver", os.environ["PADDLE_PSERVER_ID"], "serving", flush=True)
    time.sleep(600)
    sys.exit(0)
tid = os.environ["TRAINER_ID"]
print("trainer", tid, "of", os.environ["TRAINERS"], "passes",
      os.environ["PADDLE_INIT_NUM_PASSES"], flush=True)
print("GREETING=" + os.environ.get("GREETING", "-"), flush=True)
for i in range(int(os.environ.get("LINES", "3"))):
    print("trainer", tid, "line", i, flush=True)
    time.sleep(float(os.environ.get("EVERY", "0")))
time.sleep(float(os.environ.get("SLEEP", "0")))
print("trainer", tid, "done", flush=True)
"""

# The seeds' package in alice's PFS home (the ``package`` fixture).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.package(TRAINER, "package")]


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def fails(result, code: int, *messages: str):
    assert (result.returncode, result.stdout) == (code, ""), (result.stdout, result.stderr)
    assert result.stderr.startswith("paddlectl: ") and result.stderr.count("\n") == 1, \
        result.stderr
    for message in messages:
        assert message in result.stderr
    return result


def table(text: str) -> list[list[str]]:
    """An aligned table as rows of cells (columns are 3 spaces apart at least)."""
    return [re.split(r" {2,}", line.strip()) for line in text.splitlines()]


@pytest.fixture
def local_package(live_cli):
    pkg = live_cli.cwd / "mypkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "train.py").write_text(TRAINER)
    (pkg / "data" / "part-0").write_text("1 2 3\n")
    return pkg


@pytest.fixture
def jobs(live_cli):
    """Ask the API about a job; at the end, no replica of any job is left running."""
    http = live_cli.portal.session()
    url = f"{live_cli.portal.url}/api/v1/jobs/"

    class Jobs:
        def get(self, name: str) -> dict:
            return http.get(f"{url}{name}/").json()

        def wait(self, name: str, states=("succeeded", "failed", "killed"),
                 timeout: float = 30) -> dict:
            deadline = time.monotonic() + timeout
            while (job := self.get(name))["state"] not in states:
                assert time.monotonic() < deadline, f"job {name} stayed {job['state']}"
                time.sleep(0.1)
            return job

    yield Jobs()
    from jobs.backends import backend_for
    from jobs.models import Job

    for job in Job.objects.select_related("datacenter", "owner"):
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


# -- the seeds' examples ----------------------------------------------------------------------

SEEDS_SUBMIT = ("submit", "-jobname", "my-paddlecloud-job", "-cpu", "1", "-gpu", "0",
                "-memory", "1Gi", "-parallelism", "2", "-pscpu", "1", "-pservers", "1",
                "-psmemory", "1Gi", "-passes", "1", "-entry", "python train.py")


def test_the_seeds_submit_get_and_logs(live_cli, celery_worker, package, jobs):
    name = "my-paddlecloud-job"
    submitted = ok(live_cli(*SEEDS_SUBMIT, package))
    assert submitted.stdout.startswith(f"job {name} submitted: starting\n")
    assert f"paddlectl logs {name} -f" in submitted.stdout

    # logs -f follows every worker from before it starts until it ends, each line after its
    # worker's name; -w one worker, as it is.
    followed = ok(live_cli("logs", name, "-f"))
    trainer_0 = ("trainer 0 of 2 passes 1\nGREETING=-\n"
                 + "".join(f"trainer 0 line {i}\n" for i in range(3)) + "trainer 0 done\n")
    lines = followed.stdout.splitlines()
    assert [line.removeprefix("trainer-0 | ") for line in lines
            if line.startswith("trainer-0 | ")] == trainer_0.splitlines()
    assert "pserver-0 | pserver 0 serving" in lines
    assert "trainer-1 | trainer 1 done" in lines
    assert jobs.wait(name)["state"] == "succeeded"
    assert ok(live_cli("logs", name, "-w", "trainer-0", "-f")).stdout == trainer_0

    listed = table(ok(live_cli("get", "jobs")).stdout)
    # How long it ran and how long ago it was made (kubectl's DURATION and AGE); the reason
    # only where the state needs one.
    assert listed[0] == ["NAME", "STATE", "TRAINERS", "PSERVERS", "DURATION", "AGE", "REASON"]
    assert listed[1][:4] == [name, "succeeded", "2", "1"]
    assert re.fullmatch(r"\d+[smh]", listed[1][4]) and listed[1][6] == "-"
    wide = table(ok(live_cli("get", "jobs", "-o", "wide")).stdout)
    assert wide[0][6:] == ["START", "PRIORITY", "PREDICTED START", "CPU", "MEMORY", "GPU",
                           "PSCPU", "PSMEMORY", "PASSES", "IMAGE", "ENTRY", "REASON"]
    assert wide[1][6].endswith("ago)")  # local time with its age
    assert wide[1][7:9] == ["normal", "-"]  # it no longer waits: no predicted start
    assert wide[1][9:13] == ["1", "1Gi", "0", "1"] and "python train.py" in wide[1]
    # a local job runs as processes, in no image: "none", as its page says
    assert dict(zip(wide[0], wide[1], strict=True))["IMAGE"] == "none"
    as_json = json.loads(ok(live_cli("get", "jobs", "-o", "json")).stdout)
    assert [(j["name"], j["trainers"], j["package"]) for j in as_json] == [(name, 2, package)]
    assert yaml.safe_load(ok(live_cli("get", "jobs", name, "-o", "yaml")).stdout)["name"] == name

    workers = table(ok(live_cli("get", "workers", name)).stdout)
    assert workers[0] == ["NAME", "STATE", "RESTARTS", "EXIT", "START", "REASON"]
    assert [row[:4] for row in workers[1:]] == [
        ["pserver-0", "succeeded", "0", "-"], ["trainer-0", "succeeded", "0", "0"],
        ["trainer-1", "succeeded", "0", "0"]]
    wide = table(ok(live_cli("get", "workers", name, "-o", "wide")).stdout)
    assert wide[0][5:] == ["HOST", "ENDPOINT", "FINISHED", "REASON"]
    assert "stopped: the trainers finished" in wide[1]
    assert [w["name"] for w in json.loads(
        ok(live_cli("get", "workers", name, "-o", "json")).stdout)] == \
        ["pserver-0", "trainer-0", "trainer-1"]

    assert ok(live_cli("logs", name)).stdout.splitlines() == [
        "pserver-0 | pserver 0 serving",
        *(f"trainer-0 | {line}" for line in trainer_0.splitlines()),
        *(line for line in lines if line.startswith("trainer-1 | "))]
    assert ok(live_cli("logs", name, "-w", "trainer-1", "--tail", "1")).stdout == \
        "trainer 1 done\n"
    assert ok(live_cli("logs", name, "--worker", "pserver-0")).stdout == "pserver 0 serving\n"
    fails(live_cli("logs", name, "-w", "trainer-7"), 3, "has no worker 'trainer-7'")

    # An ended job cannot be killed; kill -rm removes it from the history.
    fails(live_cli("kill", name), 1, "has already ended (succeeded)")
    removed = ok(live_cli("kill", name, "-rm"))
    assert removed.stdout == (f"job {name} succeeded and removed from the history (its output "
                              f"stays in {HOME}/jobs/{name}/output)\n")
    fails(live_cli("get", "workers", name), 3, f"you have no job named '{name}'")
    assert ok(live_cli("get", "jobs")).stdout == "no jobs in datacenter datacenter1\n"


def test_a_local_package_with_dashed_flags_env_kill_and_delete(live_cli, celery_worker,
                                                                local_package, jobs):
    name = "local-job"
    submitted = ok(live_cli("submit", "--jobname", name, "--entry", "python train.py",
                            "-e", "GREETING=hello world", "--env", "SLEEP=30", "mypkg"))
    remote = f"{HOME}/jobs/{name}/mypkg"
    assert submitted.stdout.startswith(f"uploading mypkg to {remote}\n"
                                       f"job {name} submitted: starting\n")
    uploaded = live_cli.portal.home / "jobs" / name / "mypkg"
    assert (uploaded / "data" / "part-0").read_text() == "1 2 3\n"
    job = jobs.get(name)
    assert (job["package"], job["env"]) == (remote, {"GREETING": "hello world", "SLEEP": "30"})

    # The log streams as it is written, while the trainer runs.
    follower = live_cli.start("logs", name, "-f")
    received: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [received.put(line) for line in follower.stdout],
                              daemon=True)
    reader.start()
    try:
        lines = [received.get(timeout=20) for _ in range(5)]
        # A job's only worker is named too, as help says (-w prints one log as it is).
        assert lines == [f"trainer-0 | {line}\n" for line in (
            "trainer 0 of 1 passes 1", "GREETING=hello world",
            *(f"trainer 0 line {i}" for i in range(3)))]
        assert follower.poll() is None  # still following: the trainer sleeps
        jobs.wait(name, ("running",))

        # Running jobs cannot be deleted; the seeds' kill stops one.
        fails(live_cli("delete", "job", name), 1, f"job '{name}' is running: kill it first")
        assert ok(live_cli("kill", name)).stdout == \
            f"job {name} killed: its workers are being stopped\n"
        assert follower.wait(timeout=20) == 0  # the follow ends with the worker
        reader.join(5)
        assert received.empty()  # killed while it slept: it never said "done"
    finally:
        if follower.poll() is None:
            follower.kill()
        follower.wait()
    workers = table(ok(live_cli("get", "workers", name)).stdout)
    assert workers[1][:2] == ["trainer-0", "killed"]

    # The name is taken until the job is deleted: nothing is uploaded for a taken name.
    (local_package.parent / "other").mkdir()
    fails(live_cli("submit", "-jobname", name, "-entry", "python train.py", "other"), 1,
          f"you already have a job named '{name}'")
    assert not (live_cli.portal.home / "jobs" / name / "other").exists()
    deleted = ok(live_cli("delete", "job", name))
    assert deleted.stdout == f"job {name} deleted (its output stays in {HOME}/jobs/{name}/output)\n"
    fails(live_cli("get", "jobs", name), 3, f"you have no job named '{name}'")


def test_kill_rm_waits_for_the_end_and_deletes(live_cli, celery_worker, package, jobs):
    name = "short-lived"
    ok(live_cli("submit", "-jobname", name, "-entry", "python train.py", "-e", "SLEEP=30",
                package))
    jobs.wait(name, ("running",))
    # Ctrl-C ends logs -f quietly, with 130.
    follower = live_cli.start("logs", name, "-f")
    assert follower.stdout.readline() == "trainer-0 | trainer 0 of 1 passes 1\n"
    follower.send_signal(signal.SIGINT)
    assert follower.wait(timeout=10) == 130
    assert follower.stderr.read() == ""
    follower.stdout.close()
    follower.stderr.close()

    removed = ok(live_cli("kill", "-rm", name))
    assert removed.stdout.startswith(f"job {name} killed and removed from the history")
    fails(live_cli("logs", name), 3, f"you have no job named '{name}'")


def test_removed_jobs_still_count_against_the_budget(live_cli, celery_worker, package, jobs):
    """alice's three 20-CPU jobs run 9 s each (0.15 CPU-hours in all); then her budget is set
    to 0.1 CPU-hours a day: spent. She deletes one (DELETE), kills and removes one still
    running (kill -rm), and lets the third's TTL remove it: her use stays what it was, and her
    next job waits for her budget (the use is kept in the usage ledger, not the jobs)."""
    from accounts.models import Budget
    from accounts.services import quota_set
    from jobs.tasks import jobs_reconcile

    portal = live_cli.portal
    quota_set(None, portal.datacenter, portal.user, cpu=64000, jobs=10, queued=10)
    for name, sleep, more in (("deleted", "9", ()), ("killed", "60", ()),
                              ("expired", "9", ("-ttl", "1"))):
        ok(live_cli("submit", "-jobname", name, "-cpu", "20", "-entry", "python train.py",
                    "-e", "LINES=0", "-e", f"SLEEP={sleep}", *more, package))
    assert jobs.wait("deleted")["state"] == jobs.wait("expired")["state"] == "succeeded"
    Budget.objects.create(datacenter=portal.datacenter, user=portal.user, cpu_hours=0.1,
                          window="day")
    http = portal.session()

    def used() -> float:
        [budget] = http.get(f"{portal.url}/api/v1/quota/budgets").json()
        return budget["cpu_hours"]["used"]

    before = used()
    assert before >= 0.1
    ok(live_cli("delete", "job", "deleted"))
    assert ok(live_cli("kill", "-rm", "killed")).stdout.startswith(
        "job killed killed and removed from the history")
    jobs_reconcile.delay()  # the reconciler removes what is past its TTL
    deadline = time.monotonic() + 30
    while "expired" in ok(live_cli("get", "jobs")).stdout:
        assert time.monotonic() < deadline, "the TTL did not remove the job"
        time.sleep(0.2)
    assert used() >= before
    assert ok(live_cli("submit", "-jobname", "next", "-entry", "python train.py",
                       package)).stdout.startswith("job next submitted: queued")
    assert re.fullmatch(r"waiting for budget: 0\.\d of 0\.1 CPU-hours used in the last 24 "
                        r"hours \(rolling\)", jobs.get("next")["state_reason"])


# -- dry runs ---------------------------------------------------------------------------------

def test_dry_run_shows_what_would_be_started_and_starts_nothing(live_cli, package,
                                                                 local_package):
    planned = yaml.safe_load(ok(live_cli(*SEEDS_SUBMIT, "--dry-run", "-o", "yaml",
                                         package)).stdout)
    assert planned["dry_run"] is True
    assert {key: planned["job"][key] for key in ("name", "package", "trainers", "pservers",
                                                 "cpu", "memory")} == {
        "name": "my-paddlecloud-job", "package": package, "trainers": 2, "pservers": 1,
        "cpu": "1", "memory": "1Gi"}
    assert [r["name"] for r in planned["replicas"]] == ["pserver-0", "trainer-0", "trainer-1"]

    shown = ok(live_cli(*SEEDS_SUBMIT, "-dry-run", package)).stdout
    assert shown.startswith("dry run: nothing was created. Job my-paddlecloud-job would run "
                            f"'python train.py' in {package} on 3 replicas:\n")
    assert table(shown.split("\n", 1)[1])[0] == ["NAME", "ROLE", "CPU", "MEMORY", "GPU"]

    # A local package is not uploaded: the plan says where it would go.
    local = json.loads(ok(live_cli("submit", "-jobname", "try", "-entry", "python train.py",
                                   "-e", "A=1", "--dry-run", "-o", "json", "mypkg")).stdout)
    assert local["job"]["package"] == f"{HOME}/jobs/try/mypkg"
    assert local["job"]["env"] == {"A": "1"}
    assert local["upload"] == {"from": str(local_package.resolve()), "to": f"{HOME}/jobs/try/mypkg"}
    assert len(local["replicas"]) == 1
    text = ok(live_cli("submit", "-jobname", "try", "-entry", "x", "--dry-run", "mypkg")).stdout
    assert "The local package mypkg would be uploaded there first (dry run: not uploaded).\n" \
        in text
    assert not (live_cli.portal.home / "jobs").exists()
    assert json.loads(ok(live_cli("get", "jobs", "-o", "json")).stdout) == []


def test_paddlectl_names_another_users_job_in_no_reason(live_cli, package, held_tasks):
    """bob's job holds the datacenter's reservation, alice's small job waits for its turn:
    what paddlectl shows her (get jobs, a dry run) says "another user's job", never its name
    or bob's. (Nothing is started: the tasks are held.)"""
    from accounts.models import Datacenter
    from accounts.services import quota_set, user_upsert
    from jobs.services import job_submit

    portal = live_cli.portal
    Datacenter.objects.filter(pk=portal.datacenter.pk).update(capacity_cpu=4000)
    bob = user_upsert("bob", password="a-long-password-1", datacenter_names=["datacenter1"])[0]
    (portal.home.parent / "bob" / "pkg").mkdir(parents=True)
    for user in (portal.user, bob):
        quota_set(None, portal.datacenter, user, cpu=64000, jobs=10, queued=10)
    ok(live_cli("submit", "-jobname", "first", "-parallelism", "2", "-cpu", "1", "-entry", "x",
                package))
    job_submit(bob, Datacenter.objects.get(pk=portal.datacenter.pk), {
        "name": "secret-project", "package": "/pfs/datacenter1/home/bob/pkg", "entry": "x",
        "trainers": 4, "cpu": "1"})
    small = ("submit", "-jobname", "small", "-cpu", "1", "-entry", "x")
    dry_run = ok(live_cli(*small, "--dry-run", package)).stdout
    ok(live_cli(*small, package))
    listed = ok(live_cli("get", "jobs", "small", "-o", "wide")).stdout
    for shown in (dry_run, listed):
        assert "the datacenter's capacity is held for another user's job" in shown
        assert "secret-project" not in shown and "bob" not in shown


# -- mistakes ---------------------------------------------------------------------------------

def test_mistakes_are_the_servers_messages_with_exit_codes(live_cli, package, local_package):
    base = ("submit", "-jobname", "bad", "-entry", "python train.py")
    fails(live_cli(*base, "-cpu", "abc", package), 1, "cpu:")
    both = fails(live_cli(*base, "-cpu", "abc", "-parallelism", "0", package), 1)
    assert "cpu:" in both.stderr and "trainers:" in both.stderr  # every mistake at once
    fails(live_cli(*base, "-gpu", "two", package), 1, "gpu: 'two' is not a whole number")
    fails(live_cli(*base, f"{HOME}/nowhere"), 1, "package:")
    fails(live_cli("submit", "-entry", "python train.py", package), 1, "name: required")

    # A local package: the name is checked here and the rest by the server, before uploading.
    fails(live_cli("submit", "-jobname", "Bad_Name", "-entry", "x", "mypkg"), 1,
          "jobname:", "'_' is not allowed")
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "-memory", "lots", "mypkg"), 1,
          "memory:")
    # 1GB might mean 1Gi to whoever wrote it: asked for, never taken as 10^9 bytes silently.
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "-memory", "1GB", "mypkg"), 1,
          "memory: '1GB' is ambiguous: write 1G (units of 10^9 bytes) or 1Gi (units of 2^30 "
          "bytes)")
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "-topology", "v1.py", "mypkg"),
          1, "topology: v1.py is not a file in the package")
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "nothing-here"), 1,
          "nothing-here does not exist")
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "-e", "NO_SUCH_VARIABLE_X",
                   "mypkg"), 1, "-e NO_SUCH_VARIABLE_X: use KEY=VALUE")
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "-e", "TRAINER_ID=3", "mypkg"),
          1, "env.TRAINER_ID: reserved")
    assert not (live_cli.portal.home / "jobs").exists()

    for args in (("get", "jobs", "nope"), ("get", "workers", "nope"), ("logs", "nope"),
                 ("kill", "nope"), ("delete", "job", "nope")):
        fails(live_cli(*args), 3, "you have no job named 'nope' in datacenter 'datacenter1'")
    fails(live_cli("logs", "nope", "--tail", "many"), 3)
    fails(live_cli("get", "frobs"), 1, "get: unknown resource 'frobs'")
    fails(live_cli("get", "workers"), 1, "name one job")
    fails(live_cli("delete", "frobs", "x"), 1, "delete: unknown resource 'frobs'")


def test_wrong_password_is_exit_2(live_cli):
    config = yaml.safe_load(live_cli.config.read_text())
    config["datacenters"][0]["password"] = "wrong"
    live_cli.write_config(config["datacenters"])
    fails(live_cli("get", "jobs"), 2)


# -- quota and registries ---------------------------------------------------------------------

def test_get_quota_shows_what_is_used_of_each_limit(live_cli, package):
    (live_cli.portal.home / "data.bin").write_bytes(b"x" * 5000)
    # No worker runs here: the job is admitted (it holds its quota) and stays starting.
    ok(live_cli("submit", "-jobname", "holder", "-entry", "python train.py", "-parallelism",
                "2", "-cpu", "750m", "-memory", "1Gi", package))
    rows = table(ok(live_cli("get", "quota")).stdout)
    assert rows == [["RESOURCE", "LIMIT", "USED"], ["cpu", "4", "1500m"], ["memory", "8Gi", "2Gi"],
                    ["gpu", "0", "0"], ["jobs", "2", "1"], ["queued", "100", "0"],
                    ["storage", "10Gi", rows[6][2]]]
    assert re.fullmatch(r"[56]\.\dKi", rows[6][2])  # about 5 000 bytes, as people read it
    assert table(ok(live_cli("get", "quota", "-o", "wide")).stdout)[1] == \
        ["cpu", "4", "1500m", "4000", "1500"]
    data = json.loads(ok(live_cli("get", "quota", "-o", "json")).stdout)
    assert data["datacenter"] == "datacenter1"
    assert data["quota"]["storage"]["used_value"] >= 5000 + len(TRAINER)


def test_get_quota_shows_budgets_used_and_left(live_cli):
    from accounts.models import Budget

    portal = live_cli.portal
    Budget.objects.create(datacenter=portal.datacenter, user=portal.user, gpu_hours=10,
                          cpu_hours=100, window="month", kind="calendar")
    out = ok(live_cli("get", "quota")).stdout
    budgets = table(out.split("\n\n")[1])
    assert budgets == [["BUDGET", "LIMIT", "USED", "LEFT", "LOST TO RESTARTS"],
                       ["you: gpu-hours this month", "10.0", "0.0", "10.0", "0.0"],
                       ["you: cpu-hours this month", "100.0", "0.0", "100.0", "0.0"]]
    data = json.loads(ok(live_cli("get", "quota", "-o", "json")).stdout)
    assert data["budgets"][0]["kind"] == "calendar"
    assert data["budgets"][0]["since"].endswith("-01T00:00:00+00:00")


def test_get_usage_and_get_audit(live_cli):
    """``get usage`` shows the report as a table, and as the portal's CSV with -o csv; ``get
    audit`` the entries the user may read, -action narrowing them."""
    from datetime import timedelta

    from accounts.services import token_create
    from tests.jobs.test_budgets import hours_ago_within_a_day, ran

    portal = live_cli.portal
    began = hours_ago_within_a_day(2, timedelta(minutes=30))  # the CSV's rows are days
    ran(portal.user, portal.datacenter, "earlier", gpu=2, began=began,
        ended=began + timedelta(minutes=30))
    rows = table(ok(live_cli("get", "usage", "-by", "month")).stdout)
    assert rows == [["PERIOD", "USER", "GROUP", "JOBS", "GPU-HOURS", "CPU-HOURS", "MEDIAN WAIT"],
                    [began.strftime("%Y-%m-01"), portal.user.username, "-", "1", "1.0", "0.5",
                     "-"]]
    out = ok(live_cli("get", "usage", "-o", "csv")).stdout
    assert out.splitlines()[0].startswith("period,user,group,datacenter,jobs,gpu_hours")
    assert out.splitlines()[1].split(",")[5] == "1.0"
    fails(live_cli("get", "usage", "-by", "year"), 1, "invalid choice: 'year'")
    fails(live_cli("get", "jobs", "-by", "week"), 1, "-by is for get usage")
    fails(live_cli("get", "usage", "-per", "group", "-o", "csv"), 1,
          "a report per group is for group leads and admins")
    token_create(portal.user, name="for-audit")
    audit = table(ok(live_cli("get", "audit", "-action", "token.create")).stdout)
    assert audit[0][:4] == ["TIME", "WHO", "ACTION", "WHAT"]
    assert {row[-3] for row in audit[1:]} == {"token.create"}
    assert "for-audit" in ok(live_cli("get", "audit", "-o", "csv")).stdout


def test_the_tables_say_why_a_job_failed_without_o_wide(live_cli, celery_worker, package,
                                                        jobs):
    ok(live_cli("submit", "-jobname", "broken", "-entry", "python nothing-here.py", package))
    job = jobs.wait("broken")
    assert job["state"] == "failed" and job["state_reason"]
    listed = table(ok(live_cli("get", "jobs")).stdout)
    assert listed[1][:2] == ["broken", "failed"] and listed[1][-1] == job["state_reason"]
    worker = json.loads(ok(live_cli("get", "workers", "broken", "-o", "json")).stdout)[0]
    assert worker["state"] == "failed" and worker["reason"]
    assert table(ok(live_cli("get", "workers", "broken")).stdout)[1][-1] == worker["reason"]


def test_jobs_over_the_free_quota_wait_in_line(live_cli, package):
    for name in ("one", "two", "three", "four"):
        ok(live_cli("submit", "-jobname", name, "-entry", "python train.py", package))
    submitted = ok(live_cli("submit", "-jobname", "five", "-entry", "x", package)).stdout
    assert submitted.startswith("job five submitted: queued #3 (waiting behind job three)\n")
    rows = table(ok(live_cli("get", "jobs")).stdout)
    # The quota allows 2 jobs at once; the others wait, in the order they were submitted.
    assert [row[:2] for row in rows[1:]] == [["five", "queued #3"], ["four", "queued #2"],
                                            ["three", "queued #1"],
                                            ["two", "starting"], ["one", "starting"]]
    waiting = json.loads(ok(live_cli("get", "jobs", "three", "-o", "json")).stdout)
    assert waiting["state_reason"] == "waiting for quota: jobs 1 asked, 0 of 2 free"
    assert rows[3][-1] == waiting["state_reason"]  # in the table, without -o wide
    fails(live_cli("submit", "-jobname", "huge", "-entry", "python train.py", "-parallelism",
                   "3", "-cpu", "2", package), 1,
          "cpu: the job asks for 6 CPU in all (3 trainers x 2), 2 more than your quota of 4")


def test_priority_places_a_job_and_a_dry_run_says_when_it_would_start(live_cli, package):
    # Deadlines: the user's first jobs, each ends by its own at the latest (else nothing would
    # tell when, and the starts behind them would be "unknown").
    for name in ("one", "two", "three"):
        ok(live_cli("submit", "-jobname", name, "-entry", "python train.py", "-deadline", "3600",
                    package))
    urgent = ok(live_cli("submit", "-jobname", "urgent", "-entry", "x", "-priority", "high",
                         "-deadline", "600", package)).stdout
    assert urgent.startswith("job urgent submitted: queued #1 (waiting for quota: jobs 1 "
                             "asked, 0 of 2 free)\nstart predicted 20")
    dry = ok(live_cli("submit", "-jobname", "later", "-entry", "x", "-priority", "low",
                      "--dry-run", package)).stdout
    assert re.search(r"^It would queue at #3 \(waiting behind job urgent\); start predicted "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d \(in \d+[smhd]; between \d+[smhd] and "
                     r"\d+[smhd]\)\.$", dry, re.M), dry
    wide = table(ok(live_cli("get", "jobs", "-o", "wide")).stdout)
    header = [cell.lower() for cell in wide[0]]
    by_name = {row[0]: dict(zip(header, row, strict=True)) for row in wide[1:]}
    assert by_name["urgent"]["priority"] == "high" and by_name["three"]["priority"] == "normal"
    assert by_name["urgent"]["predicted start"].startswith("20")
    fails(live_cli("submit", "-jobname", "bad", "-entry", "x", "-priority", "urgent", package),
          1, "priority: one of high, normal, low, not 'urgent'")


def test_get_group_shows_the_group_its_quota_and_its_members_jobs(live_cli, package):
    from accounts.models import Membership, Team
    from accounts.services import user_upsert
    from jobs.models import Job

    fails(live_cli("get", "group"), 3, "you are in no group in datacenter 'datacenter1'")
    portal = live_cli.portal
    team = Team.objects.create(datacenter=portal.datacenter, name="vision", cpu=3000)
    bob = user_upsert("bob", password="x" * 12, datacenter_names=["datacenter1"])[0]
    Membership.objects.filter(datacenter=portal.datacenter).update(team=team)
    Job.objects.create(owner=bob, datacenter=portal.datacenter, name="bobs", state="running",
                       entry="x", image="paddle", package="/pfs/datacenter1/home/bob/p")
    ok(live_cli("submit", "-jobname", "mine", "-entry", "python train.py", "-parallelism", "1",
                "-cpu", "1", package))
    out = ok(live_cli("get", "group")).stdout
    assert out.startswith("group vision (weight 1): alice, bob\n")
    rows = table(out.split("\n\n")[0].split("\n", 1)[1])
    assert rows[1][:3] == ["cpu", "3", "2"]  # the group's limit and what both jobs hold
    assert rows[3][:2] == ["gpu", "no limit"]
    jobs = table(out.split("\n\n")[1])
    assert [row[:3] for row in jobs[1:]] == [["alice", "mine", "starting"],
                                             ["bob", "bobs", "running"]]
    data = json.loads(ok(live_cli("get", "group", "-o", "json")).stdout)
    assert [j["owner"] for j in data["jobs"]] == ["alice", "bob"]


def test_a_job_that_would_wait_beyond_the_queued_cap_is_refused(live_cli, package):
    from accounts.services import quota_set

    quota_set(None, live_cli.portal.datacenter, live_cli.portal.user, jobs=1, queued=1)
    ok(live_cli("submit", "-jobname", "runs", "-entry", "python train.py", package))
    ok(live_cli("submit", "-jobname", "waits", "-entry", "python train.py", package))
    fails(live_cli("submit", "-jobname", "refused", "-entry", "python train.py", package), 1,
          "queued: 1 of your jobs already wait in datacenter 'datacenter1', and your quota "
          "lets 1 wait at once; submit it once some have started, or kill some")
    assert table(ok(live_cli("get", "quota")).stdout)[5] == ["queued", "1", "1"]


def test_registry_credentials(live_cli, package):
    ok(live_cli("registry", "-name", "mine", "-server", "registry.example.com:5000",
                "-username", "bob", "-password", "s3cret-pw"))
    listed = ok(live_cli("get", "registry"))
    assert table(listed.stdout) == [["NAME", "SERVER", "USERNAME"],
                                    ["mine", "registry.example.com:5000", "bob"]]
    shown = ok(live_cli("get", "registry", "mine", "-o", "json")).stdout
    assert json.loads(shown)["username"] == "bob" and "s3cret" not in shown
    fails(live_cli("registry", "-name", "mine", "-server", "https://registry.example.com",
                   "-username", "bob", "-password", "pw"), 1,
          "name: you already have registry credentials named 'mine'",
          "write the host[:port] alone, without https://")
    fails(live_cli("registry", "-name", "mine"), 1, "-server, -username required")

    ok(live_cli("submit", "-jobname", "private", "-entry", "x", "-image",
                "registry.example.com:5000/me/img:1", "-registry", "mine", package))
    job = json.loads(ok(live_cli("get", "jobs", "private", "-o", "json")).stdout)
    assert job["registry"] == "mine"
    fails(live_cli("submit", "-jobname", "other", "-entry", "x", "-registry", "nope",
                   package), 1, "registry: you have no registry credentials named 'nope'")
    fails(live_cli("delete", "registry", "mine"), 1,
          "job 'private' pulls its image with 'mine' and has not ended")
    ok(live_cli("kill", "private"))
    deleted = ok(live_cli("delete", "registry", "mine"))
    assert deleted.stdout == "registry mine deleted\n"
    assert ok(live_cli("get", "registry")).stdout == "no registries in datacenter datacenter1\n"
    fails(live_cli("delete", "registry", "mine"), 3, "no registry credentials named 'mine'")


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_unknown_api_paths_are_404_for_every_method(live_cli, method):
    response = live_cli.portal.session().request(
        method, f"{live_cli.portal.url}/api/v1/frobs/", json={})
    assert response.status_code == 404, response.text
    assert response.json()["message"] == "no API endpoint at /api/v1/frobs/"


def test_a_quick_trainer_has_a_start_time(live_cli, celery_worker, package, jobs):
    ok(live_cli("submit", "-jobname", "quick", "-entry", "python train.py", "-e", "LINES=0",
                package))
    assert jobs.wait("quick")["state"] == "succeeded"
    worker, = json.loads(ok(live_cli("get", "workers", "quick", "-o", "json")).stdout)
    assert worker["started_at"] is not None, worker
