"""``paddlectl submit -from JOB``: a job re-run with changes, through the live portal with a real
Celery worker on the local backend — the changes shown field by field before it is submitted,
the new job recording its origin (``rerun_of``) and, unchanged, the same spec as the original,
running the package snapshot the original ran byte for byte (issue 39) however the package
changed since, or with ``-package`` the package as it is now, the digests' change shown; a
snapshot changed or removed, a re-run of another user's job, or of none, refused naming the
field."""

from __future__ import annotations

import re
import shutil

import pytest

from paddlecloud_core.spec import FIELDS
from tests.factories import HOME, job_row
from tests.paddlectl import test_jobs_live
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)

TRAINER = """\
import os
print("LR", os.environ.get("LR"), "trainer", os.environ.get("PADDLE_TRAINER_ID"), flush=True)
"""
SAME = [f.name for f in FIELDS if f.name not in ("name", "rerun_of", "package")]
jobs = test_jobs_live.jobs  # the fixture: a job as the API shows it, waited for


@pytest.fixture
def original(live_cli, celery_worker, jobs):
    pkg = live_cli.portal.home / "lrpkg"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAINER)
    ok(live_cli("submit", "-jobname", "fit", "-entry", "python train.py", "-e", "LR=0.1",
                "-e", "BATCH=64", "-passes", "2", f"{HOME}/lrpkg"))
    assert jobs.wait("fit")["state"] == "succeeded"
    return jobs.get("fit")


def test_a_rerun_shows_what_changes_then_runs_with_its_origin(live_cli, original, jobs):
    out = ok(live_cli("submit", "-from", "fit", "-e", "LR=0.5", "-trainers", "2", "-y")).stdout
    head, _, rest = out.partition("dry run")
    assert head.splitlines()[0] == "job fit-r1: a re-run of fit, changed:"
    assert table("\n".join(head.splitlines()[1:-1])) == [
        ["FIELD", "FIT", "FIT-R1"], ["trainers", "1", "2"], ["env.LR", "0.1", "0.5"]]
    assert head.splitlines()[-1] == \
        f"package: fit's snapshot, {original['package_digest']} (byte for byte)"
    assert "job fit-r1 submitted" in rest and "(a re-run of fit)" in rest
    rerun = jobs.wait("fit-r1")
    assert rerun["state"] == "succeeded", rerun["state_reason"]
    assert (rerun["rerun_of"], rerun["trainers"], rerun["env"]) == (
        "fit", 2, {"LR": "0.5", "BATCH": "64"})
    assert {k: rerun[k] for k in SAME if k not in ("trainers", "env")} == \
        {k: original[k] for k in SAME if k not in ("trainers", "env")}
    assert (rerun["package"], rerun["package_digest"]) == (
        original["package_snapshot"], original["package_digest"])

    # Unchanged: the same spec, field for field; only its name and origin are its own.
    out = ok(live_cli("submit", "-from", "fit", "-y")).stdout
    assert out.startswith("job fit-r2: a re-run of fit, the same spec.\n")
    same = jobs.wait("fit-r2")
    assert same["state"] == "succeeded"
    assert {k: same[k] for k in SAME} == {k: original[k] for k in SAME}
    assert same["rerun_of"] == "fit" and original["rerun_of"] == ""
    assert same["package_digest"] == original["package_digest"]

    # -dry-run: the changes and the plan, nothing submitted
    out = ok(live_cli("submit", "-from", "fit", "-jobname", "fit-big", "-memory", "2Gi",
                      "-dry-run")).stdout
    assert ["memory", "1Gi", "2Gi"] in table(out.split("dry run")[0].split("\npackage:")[0])
    assert jobs.get("fit-big").get("code") == "not_found"


def test_a_rerun_of_no_job_of_yours_is_refused_naming_the_field(live_cli, jobs, make_user):
    fails(live_cli("submit", "-from", "nothing", "-y"), 3, "you have no job named 'nothing'")
    bob = make_user("bob")
    job_row(bob, live_cli.portal.datacenter, "bobs")
    http = live_cli.portal.session()
    answer = http.post(f"{live_cli.portal.url}/api/v1/jobs/", json={
        "name": "mine", "package": f"{HOME}", "entry": "python train.py", "rerun_of": "bobs"})
    body = answer.json()
    assert (answer.status_code, body["code"], list(body["fields"])) == (
        400, "invalid", ["rerun_of"])
    assert body["fields"]["rerun_of"] == ["you have no job named 'bobs' in datacenter "
                                          "'datacenter1'"]


def log_of(live_cli, name: str) -> str:
    return (live_cli.portal.home / "jobs" / name / "output" / "node_0" / "train.log").read_text()


def test_a_rerun_runs_the_bytes_its_origin_ran_whatever_changed_since(live_cli, celery_worker,
                                                                      jobs):
    pkg = live_cli.portal.home / "verpkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "train.py").write_text('print("VERSION", open("data/v").read(), flush=True)\n')
    (pkg / "data" / "v").write_text("one")
    ok(live_cli("submit", "-jobname", "ver", "-entry", "python train.py", f"{HOME}/verpkg"))
    original = jobs.wait("ver")
    assert original["state"] == "succeeded", original["state_reason"]
    assert "VERSION one" in log_of(live_cli, "ver")
    # Copied into the job's own directory at submission, its digest recorded.
    assert original["package"] == f"{HOME}/verpkg"
    assert original["package_snapshot"] == f"{HOME}/jobs/ver/package"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", original["package_digest"])
    snapshot = live_cli.portal.home / "jobs" / "ver" / "package"
    assert (snapshot / "data" / "v").read_text() == "one"

    (pkg / "data" / "v").write_text("two")  # the user changes the package afterwards

    # By default: the original's snapshot, byte for byte, whatever the package holds now.
    out = ok(live_cli("submit", "-from", "ver", "-y")).stdout
    assert out.startswith("job ver-r1: a re-run of ver, the same spec.\n")
    assert f"package: ver's snapshot, {original['package_digest']} (byte for byte)" in out
    again = jobs.wait("ver-r1")
    assert again["state"] == "succeeded", again["state_reason"]
    assert "VERSION one" in log_of(live_cli, "ver-r1")
    assert again["package_digest"] == original["package_digest"]
    assert again["package"] == original["package_snapshot"]
    assert again["package_snapshot"] == f"{HOME}/jobs/ver-r1/package"

    # -package: the package as it is now, the digests' change shown before it is submitted.
    out = ok(live_cli("submit", "-from", "ver", "-package", f"{HOME}/verpkg", "-y")).stdout
    now = jobs.wait("ver-r2")
    assert now["state"] == "succeeded", now["state_reason"]
    assert "VERSION two" in log_of(live_cli, "ver-r2")
    assert now["package_digest"] != original["package_digest"]
    head = out.split("dry run")[0]
    assert head.splitlines()[0] == "job ver-r2: a re-run of ver, changed:"
    assert table("\n".join(head.splitlines()[1:])) == [
        ["FIELD", "VER", "VER-R2"],
        ["package", original["package_snapshot"], f"{HOME}/verpkg"],
        ["package_digest", original["package_digest"], now["package_digest"]]]


def test_a_snapshot_changed_or_gone_is_refused_naming_the_package(live_cli, celery_worker,
                                                                  jobs):
    pkg = live_cli.portal.home / "gonepkg"
    pkg.mkdir()
    (pkg / "train.py").write_text('print("hi")\n')
    ok(live_cli("submit", "-jobname", "gone", "-entry", "python train.py", f"{HOME}/gonepkg"))
    original = jobs.wait("gone")
    snapshot = live_cli.portal.home / "jobs" / "gone" / "package"

    (snapshot / "train.py").write_text('print("tampered")\n')
    fails(live_cli("submit", "-from", "gone", "-y"), 1,
          f"paddlectl: package: the package snapshot of job gone "
          f"({original['package_snapshot']}) has changed since it was taken "
          f"({original['package_digest']} recorded", "-package PATH")

    shutil.rmtree(snapshot)
    fails(live_cli("submit", "-from", "gone", "-y"), 1,
          f"paddlectl: package: the package snapshot of job gone "
          f"({original['package_snapshot']}) is gone: its files were removed", "-package PATH")
    assert jobs.get("gone-r1").get("code") == "not_found"
