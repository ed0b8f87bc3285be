"""A sweep in the jobs list, in Chromium against the real ASGI server with a real Celery worker
running its trials on the local backend: one row of the sweep appears live (none of its trials
has a row of its own), its progress and best value follow the trials without a reload, and it
expands to its trials."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from experiments.services import sweep_submit
from tests.e2e.conftest import login, screenshot
from tests.e2e.test_jobs import TRAINER, WAIT

pytestmark = pytest.mark.package(TRAINER, "quick")


def test_a_sweep_is_one_live_row_of_the_jobs_list_that_expands_to_its_trials(
        page, live_portal, celery_worker, package):
    login(page, next_path="/jobs/")
    expect(page.get_by_text("No jobs yet.")).to_be_visible()
    sweep_submit(live_portal.user, live_portal.datacenter, {
        "name": "lr", "method": "grid", "parallel": 2,
        "job": {"entry": "python train.py", "package": package, "env": {"SLEEP": "0.05"}},
        "space": {"env.STEPS": [20, 30, 40]}, "objective": {"metric": "loss"}})
    row = page.locator('#jobs tr[data-kind="sweep"][data-name="lr"]')
    expect(row).to_be_visible(timeout=WAIT)
    expect(row.locator('[data-field="method"]')).to_have_text("sweep · grid")
    # it goes on without a reload: every trial ends, the best loss is the longest trial's
    expect(row.locator('[data-field="progress"]')).to_have_text(
        "3 done, 0 running, 0 waiting, 0 stopped", timeout=WAIT * 3)
    expect(row.locator('[data-field="state"]')).to_have_text("done", timeout=WAIT)
    expect(row.locator('[data-field="best"]')).to_have_text("loss 0.025 (lr-3: env.STEPS=40)",
                                                            timeout=WAIT)
    expect(page.locator("#jobs tbody tr")).to_have_count(1)  # no row of a trial
    trials = row.locator('[data-field="trial-list"] li')
    expect(trials.first).to_be_hidden()
    row.get_by_text("3/3 trials").click()
    expect(trials).to_have_count(3)
    expect(trials.nth(2)).to_contain_text("lr-3 succeeded env.STEPS=40")
    screenshot(page, "jobs-list-sweep")
    row.get_by_role("link", name="its trials as rows of jobs").click()
    page.wait_for_url("**/jobs/?sweep=lr")
    expect(page.locator("#jobs tbody tr:not([data-kind])")).to_have_count(3)
    page.locator('#jobs tr[data-name="lr-1"]').get_by_role("link", name="lr-1").click()
    page.wait_for_url("**/jobs/lr-1/")
