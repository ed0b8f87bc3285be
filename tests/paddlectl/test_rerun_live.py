"""``paddlectl submit -from JOB``: a job re-run with changes, through the live portal with a real
Celery worker on the local backend — the changes shown field by field before it is submitted,
the new job recording its origin (``rerun_of``) and, unchanged, the same spec as the original;
a re-run of another user's job, or of none, refused naming the field."""

from __future__ import annotations

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
SAME = [f.name for f in FIELDS if f.name not in ("name", "rerun_of")]
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
    assert table("\n".join(head.splitlines()[1:])) == [
        ["FIELD", "FIT", "FIT-R1"], ["trainers", "1", "2"], ["env.LR", "0.1", "0.5"]]
    assert "job fit-r1 submitted" in rest and "(a re-run of fit)" in rest
    rerun = jobs.wait("fit-r1")
    assert rerun["state"] == "succeeded", rerun["state_reason"]
    assert (rerun["rerun_of"], rerun["trainers"], rerun["env"]) == (
        "fit", 2, {"LR": "0.5", "BATCH": "64"})
    assert {k: rerun[k] for k in SAME if k not in ("trainers", "env")} == \
        {k: original[k] for k in SAME if k not in ("trainers", "env")}

    # Unchanged: the same spec, field for field; only its name and origin are its own.
    out = ok(live_cli("submit", "-from", "fit", "-y")).stdout
    assert out.startswith("job fit-r2: a re-run of fit, the same spec.\n")
    same = jobs.wait("fit-r2")
    assert same["state"] == "succeeded"
    assert {k: same[k] for k in SAME} == {k: original[k] for k in SAME}
    assert same["rerun_of"] == "fit" and original["rerun_of"] == ""

    # -dry-run: the changes and the plan, nothing submitted
    out = ok(live_cli("submit", "-from", "fit", "-jobname", "fit-big", "-memory", "2Gi",
                      "-dry-run")).stdout
    assert ["memory", "1Gi", "2Gi"] in table(out.split("dry run")[0])
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
