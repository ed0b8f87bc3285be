"""VisualDL in Chromium: two real jobs report their loss with the SDK (``report()``), their owner
ticks them in the job list and presses "Open in VisualDL", waits on the session's page, and
lands in VisualDL's scalars at the session's own origin (through the portal's proxy) with both
jobs' runs; a job's page opens one for that job alone; another user gets 404 there. The
sessions are stopped at the end."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.services import user_upsert
from interactive.models import Session
from interactive.sessions import session_stop
from jobs.models import Job, Replica
from jobs.states import FINAL_JOB_STATES, JobState
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot, watched_page
from tests.factories import home, package_write
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

TRAINER = """\
from paddlecloud_sdk import report

scale = float(open("scale").read())
for step in range(20):
    report(step=step, loss=scale / (step + 1), accuracy=1 - 1 / (step + 2))
"""


@pytest.fixture
def reported_jobs(live_portal, celery_worker):
    """alice's jobs ``vdl-small`` and ``vdl-large``, ended, each having reported 20 steps."""
    names = {"vdl-small": "1.0", "vdl-large": "4.0"}
    for name, scale in names.items():
        package_write(live_portal.home, TRAINER, name=f"pkg-{name}", files={"scale": scale})
        answer = live_portal.job_post(name, package=f"{home()}/pkg-{name}")
        assert answer.status_code == 201, answer.text
    wait(lambda: set(Job.objects.filter(name__in=names).values_list("state", flat=True))
         == {JobState.SUCCEEDED}, 120, "both jobs to succeed")
    yield sorted(names)
    for session in Session.objects.select_related("job", "job__owner", "job__datacenter"):
        job = session.job
        job.refresh_from_db()
        if job.state not in FINAL_JOB_STATES:
            session_stop(job.owner, job.datacenter, job.name)
        wait(lambda job=job: not Replica.objects.filter(job=job, state="running").exists(), 60,
             "the session's replica to end")


def test_two_jobs_ticked_open_in_visualdl_with_both_runs(browser, live_portal, reported_jobs,
                                                        request):
    portal = f"http://localhost:{live_portal.port}"  # its routes: {key}.localhost
    with watched_page(browser, portal, request) as page:
        login(page, next_path="/jobs/")
        for name in reported_jobs:
            page.get_by_label(f"compare {name}").check()
        page.get_by_role("button", name="Open in VisualDL").click()
        page.wait_for_url("**/visualdl/*/")
        session = page.url.rstrip("/").rsplit("/", 1)[1]
        expect(page.locator("h1")).to_have_text("VisualDL for vdl-large, vdl-small")
        # The page looks again until VisualDL answers, then goes there: the route's origin.
        page.wait_for_url(lambda url: ".localhost:" in url and url.endswith("/app/scalar"),
                          timeout=120_000)
        origin = page.url.removesuffix("/app/scalar")
        assert origin != portal
        for name in reported_jobs:  # each job a run, in VisualDL's list of runs
            expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=30_000)
        with page.expect_response(lambda answer: "tag=loss" in answer.url, timeout=30_000):
            page.get_by_text("loss", exact=True).first.click()  # its charts, opened
        expect(page.locator("canvas")).to_have_count(2, timeout=30_000)
        page.wait_for_timeout(3000)  # their drawing (in workers) and its animation: the picture
        screenshot(page, "visualdl-two-jobs")
        runs = page.evaluate("fetch('/app/api/runs').then((answer) => answer.json())")
        assert sorted(runs["data"]) == reported_jobs
        visualdl_url = page.url

        # From one job's page: that job alone, another VisualDL.
        page.goto(f"{portal}/jobs/vdl-small/")
        page.get_by_role("button", name="Open in VisualDL").click()
        page.wait_for_url(lambda url: ".localhost:" in url and url.endswith("/app/scalar"),
                          timeout=120_000)
        assert not page.url.startswith(origin)  # its own route
        expect(page.get_by_text("vdl-small", exact=True).first).to_be_visible(timeout=30_000)
        runs = page.evaluate("fetch('/app/api/runs').then((answer) => answer.json())")
        assert runs["data"] == ["vdl-small"]

    user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])
    with watched_page(browser, portal, request) as page:
        page.console.allow("404")
        login(page, "bob")
        assert page.goto(f"/visualdl/{session}/").status == 404
        assert page.goto(visualdl_url).status == 404
        assert page.goto(f"{origin}/app/api/runs").status == 404
