"""A notebook in Chromium, as a person uses one: alice starts it from the dashboard's Notebooks
page ("New notebook"), opens it (the portal's proxy, at an origin of its own, its Jupyter token
added on the way and never shown), writes a cell in JupyterLab that trains a few steps of Paddle
and submits a distributed job with the SDK (as alice, from inside the notebook's sandbox through
its relay), runs it, and finds that job in the portal's job list. Bob, another user, gets 404 at
every URL of the notebook. Everything is stopped at the end."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from accounts.services import user_upsert
from interactive import sessions
from jobs.models import Job, Replica
from jobs.services import job_kill
from jobs.states import FINAL_JOB_STATES, FINAL_REPLICA_STATES
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot, watched_page
from tests.factories import package_write
from tests.interactive.notebooks import notebook_running
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

# What alice runs in her notebook's first cell: a few steps of Paddle, then a distributed job
# (two trainers) of her package, submitted with the SDK.
CELL = """\
import numpy as np, paddle
from paddlecloud_sdk import PaddleJob

paddle.seed(1)
x = paddle.to_tensor(np.random.rand(64, 13).astype("float32"))
y = x.sum(axis=1, keepdim=True)
model = paddle.nn.Linear(13, 1)
opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())
losses = []
for step in range(5):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss))
print("trained", len(losses), "steps, loss", round(losses[0], 3), "->", round(losses[-1], 3))
job = PaddleJob(job_name="from-notebook", trainer_package="{package}",
                entry_point="python train.py", trainers=2).submit()
print("submitted", job.job_name, job.info["state"])
"""


@pytest.mark.timeout(480)
def test_a_notebook_from_the_dashboard_trains_and_submits_a_job_and_is_alices_alone(
        browser, live_portal, celery_worker, request):
    package = package_write(live_portal.home, name="hello")
    portal = f"http://localhost:{live_portal.port}"
    with watched_page(browser, portal, request) as page:
        login(page, next_path="/notebooks/")
        form = page.locator("#new-notebook")
        form.get_by_label("Name").fill("lab")
        form.get_by_label("Stop when idle for").fill("1h")
        form.get_by_role("button", name="Start the notebook").click()
        expect(page.locator("#notebook-lab")).to_be_visible()
        notebook_running(live_portal.home, "lab")
        page.reload()
        open_link = page.locator("#open-lab")
        expect(open_link).to_be_visible()
        screenshot(page, "notebooks-page")
        page.goto(open_link.get_attribute("href"))  # it opens in a new tab for people
        page.wait_for_url(re.compile(r"^http://[a-z0-9]+\.localhost:\d+/lab"))
        origin = page.url.split("/lab", 1)[0]
        # JupyterLab: a Python notebook from the launcher, the cell written (as a paste) and
        # run once its kernel is ready.
        page.locator(".jp-LauncherCard[data-category='Notebook']").first.click(timeout=60_000)
        editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
        expect(editor).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
        editor.click()
        page.keyboard.insert_text(CELL.format(package=package))
        expect(editor).to_contain_text("from-notebook")
        page.get_by_role("button", name="Run this cell and advance").click()
        output = page.locator(".jp-Notebook .jp-OutputArea-output").first
        expect(output).to_contain_text("submitted from-notebook", timeout=90_000)
        expect(output).to_contain_text("trained 5 steps")
        screenshot(page, "notebook-trains-and-submits")

        page.goto(f"{portal}/jobs/")
        expect(page.locator("#jobs")).to_contain_text("from-notebook")
    submitted = Job.objects.get(name="from-notebook")
    assert (submitted.owner.username, submitted.trainers, submitted.session) == ("alice", 2, "")

    user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])
    with watched_page(browser, portal, request) as page:
        page.console.allow("404")
        login(page, "bob")
        for url in (f"{origin}/lab", f"{origin}/api/kernels", f"{origin}/api/contents",
                    f"{portal}/notebooks/lab/open", f"{portal}/notebooks/lab/stop",
                    f"{portal}/api/v1/sessions/lab/"):
            assert page.goto(url).status == 404, url

    alice = live_portal.user
    sessions.session_stop(alice, live_portal.datacenter, "lab")
    if Job.objects.get(name="from-notebook").state not in FINAL_JOB_STATES:
        job_kill(alice, live_portal.datacenter, "from-notebook")
    wait(lambda: not Replica.objects.exclude(state__in=FINAL_REPLICA_STATES).exists(),
         timeout=30, message="every replica to stop")
