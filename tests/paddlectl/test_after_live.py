"""``paddlectl submit -after JOB[:ok|any]`` against the live portal (issue 40 point 4): the job
waits for the jobs it runs after with that reason (in ``get jobs`` too), a dry run predicts its
start after theirs, ``unknown`` (and why) where their end is; mistakes name the field and exit
1. (Nothing is started: the tasks are held.)"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from .test_jobs_live import fails, ok, table

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_after_waits_says_why_and_a_dry_run_predicts_after_the_chain(
        live_cli, package, held_tasks):
    from accounts.services import quota_set
    from jobs.models import Job

    portal = live_cli.portal
    quota_set(None, portal.datacenter, portal.user, jobs=3, queued=10)
    # Deadlines: alice's first jobs, each ends by its own at the latest.
    ok(live_cli("submit", "-jobname", "prep", "-entry", "x", "-deadline", "3600", package))
    said = ok(live_cli("submit", "-jobname", "train", "-entry", "x", "-deadline", "600",
                       "-after", "prep", package)).stdout
    assert said.startswith("job train submitted: queued #1 (waiting for job prep to "
                           "succeed)\n"), said
    rows = {row[0]: row for row in table(ok(live_cli("get", "jobs")).stdout)[1:]}
    assert rows["train"][1] == "queued #1"
    assert rows["train"][-1] == "waiting for job prep to succeed"

    # Two -after, each with its mode; the dry run: after train (itself after prep).
    dry = json.loads(ok(live_cli("submit", "-jobname", "report", "-entry", "x", "-after",
                                 "train:any", "-after", "prep", "--dry-run", "-o", "json",
                                 package)).stdout)
    admission = dry["admission"]
    assert admission["reason"] == "waiting for job train to end and job prep to succeed"
    predicted = datetime.fromisoformat(admission["predicted_start"]["at"])
    prep_ends = Job.objects.get(name="prep").started_at + timedelta(seconds=3600)
    assert abs(predicted - (prep_ends + timedelta(seconds=600))) < timedelta(seconds=30)
    assert dry["job"]["after"] == "train:any,prep"

    # Where the end of the job it runs after is unknown, so is its start, and why.
    ok(live_cli("submit", "-jobname", "explore", "-entry", "x", package))  # no deadline
    said = ok(live_cli("submit", "-jobname", "summary", "-entry", "x", "-after", "explore",
                       "--dry-run", package)).stdout
    assert ("It would queue at #2 (waiting for job explore to succeed); start predicted "
            "unknown (it runs after job explore, and nothing tells when that ends: no job of "
            "its owner has ended yet to tell how long it runs).") in said, said


def test_submit_after_mistakes_name_the_field_and_exit_1(live_cli, package, held_tasks):
    from accounts.services import user_upsert
    from tests.factories import job_row

    portal = live_cli.portal
    bob = user_upsert("bob", password="a-long-password-1", datacenter_names=["datacenter1"])[0]
    job_row(bob, portal.datacenter, "secret")
    ok(live_cli("submit", "-jobname", "prep", "-entry", "x", package))
    base = ("submit", "-jobname", "train", "-entry", "x")
    for after in ("nosuch", "secret"):  # bob's job is no job of hers: the same words
        fails(live_cli(*base, "-after", after, package), 1,
              f"after: you have no job named '{after}' in datacenter 'datacenter1' (a job runs "
              "only after jobs of your own)")
    fails(live_cli(*base, "-after", "prep:maybe", package), 1,
          "after: JOB or JOB:MODE", "the mode of prep is 'maybe': give ok or any")
    fails(live_cli(*base, "-after", "prep", "-after", "train", package), 1,
          "after: a job cannot run after itself (train)")
    fails(live_cli("get", "jobs", "train"), 3)
