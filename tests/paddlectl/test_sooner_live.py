""""You would start sooner if…" in paddlectl against the live portal: a dry run of a job that
would wait for the quota, and ``paddlectl get jobs NAME`` of a queued one, name the change that
would start it sooner, with its predicted start (docs/users/jobs.md)."""

from __future__ import annotations

import json
import re

from tests.paddlectl.test_jobs_live import ok


def test_a_dry_run_and_get_job_say_what_would_start_a_job_sooner(live_cli, package):
    # alice's quota: 4 CPUs. "one" holds 2 of them for an hour at most (its deadline).
    ok(live_cli("submit", "-jobname", "one", "-entry", "python train.py", "-parallelism", "2",
                "-cpu", "1", "-deadline", "3600", package))
    dry = ok(live_cli("submit", "-jobname", "wide", "-entry", "x", "-parallelism", "3",
                      "-cpu", "1", "--dry-run", package)).stdout
    assert re.search(r"^It would queue at #1 \(waiting for quota: cpu 3 asked, 2 of 4 free\)",
                     dry, re.M), dry
    assert ("It would start sooner if submitted so changed:\n"
            "  would start now with -trainers 2 (now: in 60 min)\n") in dry, dry
    plan = json.loads(ok(live_cli("submit", "-jobname", "wide", "-entry", "x", "-parallelism",
                                  "3", "-cpu", "1", "--dry-run", "-o", "json", package)).stdout)
    assert [s["change"] for s in plan["admission"]["sooner"]] == [{"trainers": 2}]

    ok(live_cli("submit", "-jobname", "wide", "-entry", "x", "-parallelism", "3", "-cpu", "1",
                package))
    shown = ok(live_cli("get", "jobs", "wide")).stdout
    assert shown.endswith("It would start sooner if submitted so changed:\n"
                          "  would start now with -trainers 2 (now: in 60 min)\n"), shown
