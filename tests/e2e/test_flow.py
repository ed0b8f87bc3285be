"""The dashboard's main path, as a user without a terminal takes it: log in, make a folder in
the PFS home and upload the fit_a_line trainer into it, submit it from the form, and watch it
train with PaddlePaddle (2 data-parallel trainers on the local backend, a real Celery worker):
states, live log lines and the loss curve, without reloading the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login, screenshot

pytest.importorskip("paddle", reason="fit_a_line trains with PaddlePaddle (./dev installs it)")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fit_a_line" / "train.py"
TRAINING = 120_000  # ms: PaddlePaddle starting two trainers and training on 2 CPU cores
PASSES = 60  # ~15 s of training here: long enough to watch it run


@pytest.mark.timeout(300)
def test_upload_fit_a_line_submit_it_and_watch_it_train(page, live_portal, celery_worker):
    login(page, next_path="/files/")
    page.get_by_label("New folder").fill("fit-a-line")
    page.get_by_role("button", name="Create folder").click()
    page.locator('#listing tr[data-name="fit-a-line"] a').first.click()
    expect(page.get_by_text("/pfs/datacenter1/home/alice/fit-a-line", exact=True)).to_be_visible()
    page.locator("#upload-input").set_input_files(str(EXAMPLE))
    uploaded = page.locator('#uploads li[data-name="train.py"]')
    expect(uploaded.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "100")
    expect(page.locator('#listing tr[data-name="train.py"]')).to_be_visible()
    assert (live_portal.home / "fit-a-line" / "train.py").read_bytes() == EXAMPLE.read_bytes()

    page.get_by_role("link", name="Submit").click()
    page.get_by_label("Name", exact=True).fill("fit-a-line")
    page.get_by_label("Trainer package").fill("/pfs/datacenter1/home/alice/fit-a-line")
    page.get_by_label("Entry command").fill("python train.py")
    page.get_by_label("Trainers", exact=True).fill("2")
    page.get_by_label("Passes").fill(str(PASSES))
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url("**/jobs/fit-a-line/")
    state = page.locator('#job-state [data-part="label"]')
    expect(state).to_have_text("running", timeout=TRAINING)
    expect(page.locator("#log")).to_contain_text("loss", timeout=TRAINING)
    chart = page.locator('#charts figure[data-metric="loss"] svg')
    expect(chart).to_have_attribute("data-points", re.compile(r"^([2-9]\d|\d{3,})$"),
                                    timeout=TRAINING)  # 20 points or more
    screenshot(page, "job-page-training")  # the README's picture: live logs and the curve

    expect(state).to_have_text("succeeded", timeout=TRAINING)
    expect(page.locator("#events")).to_contain_text("every trainer exited 0")
    expect(page.locator("#log")).to_contain_text(f"finished {PASSES} passes")
    # fit_a_line reports the loss of every step (16 a pass): all of them are plotted.
    expect(chart).to_have_attribute("data-points", str(16 * PASSES))
    for worker in ("trainer-0", "trainer-1"):
        row = page.locator(f'#workers tr[data-name="{worker}"]')
        expect(row.locator('[data-field="exit_code"]')).to_have_text("0")
    screenshot(page, "job-page-succeeded")
