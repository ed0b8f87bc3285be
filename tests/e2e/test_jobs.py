"""The job pages in Chromium against the real ASGI server, with a real Celery worker running
jobs as processes on the local backend: submit a job through the form and watch it run (state,
log lines, loss curve) without reloading; mistakes beside their fields; kill through the
dialog; the list updating live; nobody else sees the job."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from accounts.services import user_upsert
from jobs.models import Job
from tests.conftest import PASSWORD
from tests.e2e.conftest import job_form_fill, login, screenshot
from tests.factories import submit_job

# Prints numbered lines and reports a falling loss; STEPS and SLEEP set how long it runs.
TRAINER = """\
import os, time
from paddlecloud_sdk import report

steps = int(os.environ.get("STEPS", "30"))
for i in range(steps):
    print(f"step {i} of {steps}", flush=True)
    report(step=i, loss=1 / (i + 1))
    time.sleep(float(os.environ.get("SLEEP", "0.1")))
print("done", flush=True)
"""

pytestmark = pytest.mark.package(TRAINER, "quick")
WAIT = 25_000  # ms: a job's state, as seen by the page


def state_of(page):
    return page.locator('#job-state [data-part="label"]')


def test_submit_a_job_and_watch_it_run_to_success(page, live_portal, celery_worker, package):
    login(page, next_path="/jobs/new/")
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    page.get_by_label("Name", exact=True).fill("quick")
    page.get_by_label("Trainer package").fill(package)
    page.get_by_label("Entry command").fill("python train.py")
    page.get_by_label("Environment").fill("STEPS=40\nSLEEP=0.15")
    screenshot(page, "job-submit")
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url("**/jobs/quick/")
    expect(page.get_by_text("job quick submitted")).to_be_visible()
    # Live, without reloading: running, the log lines as they are printed, then succeeded.
    expect(state_of(page)).to_have_text("running", timeout=WAIT)
    expect(page.locator("#log")).to_contain_text("step 1 of 40", timeout=WAIT)
    expect(state_of(page)).to_have_text("succeeded", timeout=WAIT)
    expect(page.locator("#log")).to_contain_text("done")
    lines = page.locator("#log .line")
    expect(lines).to_have_count(41)
    expect(lines.first).to_have_attribute("data-n", "1")
    worker = page.locator('#workers tr[data-name="trainer-0"]')
    expect(worker.locator('[data-field="state"]')).to_have_text("succeeded")
    expect(worker.locator('[data-field="exit_code"]')).to_have_text("0")
    expect(page.locator("#events")).to_contain_text("succeeded")
    expect(page.locator("#delete")).to_be_visible()
    expect(page.locator("#kill")).to_be_hidden()

    # The loss curve: one point per report, the empty state gone.
    chart = page.locator('#charts figure[data-metric="loss"] svg')
    expect(chart).to_have_attribute("data-points", "40", timeout=WAIT)
    expect(chart.locator("circle")).to_have_count(40)
    expect(chart.locator("path.curve")).to_have_attribute("d", re.compile(r"^M[\d.]+,[\d.]+L"))
    expect(page.locator("#charts-empty")).to_be_hidden()
    expect(page.locator("#charts figure figcaption")).to_contain_text("0.025 at step 39")

    # Search keeps the matching lines, marked.
    page.get_by_label("Search").fill("step 1")
    expect(page.locator("#log .line:not([hidden])")).to_have_count(11)  # 1 and 10 to 19
    expect(page.locator("#log mark").first).to_have_text("step 1")
    page.get_by_label("Search").fill("")
    expect(page.locator("#log .line:not([hidden])")).to_have_count(41)
    expect(page.locator("#log-download")).to_have_attribute("href",
                                                            "/jobs/quick/logs/trainer-0.log")
    download = page.request.get("/jobs/quick/logs/trainer-0.log")
    assert download.headers["content-disposition"] == 'attachment; filename="quick-trainer-0.log"'
    assert download.text().splitlines()[-2:] == ["step 39 of 40", "done"]
    screenshot(page, "job-detail")


def test_a_mistake_is_shown_beside_its_field_and_a_dry_run_shows_the_plan(page, live_portal,
                                                                         package):
    login(page, next_path="/jobs/new/")
    job_form_fill(page, "Bad_Name", package, trainers="0")
    page.get_by_role("button", name="Submit job").click()

    trainers = page.get_by_label("Trainers", exact=True)
    expect(trainers).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#id_trainers_error")).to_have_text("must be between 1 and 1000, not 0")
    expect(page.locator("#id_name_error")).to_contain_text("'_' is not allowed")
    expect(page.locator("#error-summary")).to_contain_text("Trainers")
    expect(page.get_by_label("Entry command")).to_have_value("python train.py")  # kept
    screenshot(page, "job-submit-error")
    assert not Job.objects.exists()

    page.get_by_label("Name", exact=True).fill("fine")
    trainers.fill("2")
    page.get_by_role("button", name="Show what would be created").click()
    plan = page.locator("#plan")
    expect(plan).to_contain_text("Dry run: nothing was created")
    expect(plan.get_by_role("cell", name="trainer-1")).to_be_visible()
    expect(page.get_by_label("Trainers", exact=True)).to_have_value("2")
    assert not Job.objects.exists()


def test_the_list_updates_live_and_a_long_job_is_killed_through_the_dialog(
        page, live_portal, celery_worker, package):
    login(page, next_path="/jobs/")
    expect(page.get_by_text("No jobs yet.")).to_be_visible()
    submit_job(live_portal.user, live_portal.datacenter, "long", package=package,
               env={"STEPS": "1000", "SLEEP": "0.2"})
    # The new job appears at the top, and its row follows its state.
    row = page.locator('#jobs tr[data-name="long"]')
    expect(row).to_be_visible(timeout=WAIT)
    expect(row.locator('[data-part="label"]')).to_have_text("running", timeout=WAIT)
    expect(page.locator("#live-status")).to_contain_text("long is running")
    screenshot(page, "jobs-list")

    row.get_by_role("link", name="long").click()
    page.wait_for_url("**/jobs/long/")
    expect(page.locator("#log")).to_contain_text("step 2 of 1000", timeout=WAIT)
    # Pausing holds the new lines back; following again shows them.
    follow = page.get_by_role("button", name="Follow")
    follow.click()
    expect(follow).to_have_attribute("aria-pressed", "false")
    shown = page.locator("#log .line").count()
    expect(page.locator("#log-status")).to_contain_text(re.compile(r"paused, [1-9]\d* new"))
    assert page.locator("#log .line").count() == shown
    follow.click()
    expect(follow).to_have_attribute("aria-pressed", "true")
    assert page.locator("#log .line").count() > shown
    page.get_by_role("link", name="Kill…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Kill job long?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert Job.objects.get(name="long").state == "running"

    page.get_by_role("link", name="Kill…").click()
    page.get_by_role("dialog").get_by_role("button", name="Kill long").click()
    page.wait_for_url("**/jobs/long/")
    expect(page.get_by_text("job long killed")).to_be_visible()
    expect(state_of(page)).to_have_text("killed")
    expect(page.locator('#workers tr[data-name="trainer-0"] [data-field="state"]')
           ).to_have_text("killed", timeout=WAIT)
    expect(page.locator("#log-status")).to_contain_text("the worker has ended", timeout=WAIT)

    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete long").click()
    page.wait_for_url("**/jobs/")
    expect(page.get_by_text("job long deleted")).to_be_visible()
    expect(page.locator('#jobs tr[data-name="long"]')).to_have_count(0)
    assert not Job.objects.filter(name="long").exists()


def test_a_queued_jobs_page_says_its_workers_have_not_started(page, live_portal, package,
                                                              held_tasks):
    from accounts.models import Quota

    Quota.objects.filter(user=live_portal.user).update(jobs=1)
    submit_job(live_portal.user, live_portal.datacenter, "first", package=package)
    submit_job(live_portal.user, live_portal.datacenter, "second", package=package)
    login(page, next_path="/jobs/second/")
    expect(page.locator("#log-status")).to_have_text(
        "trainer-0 has not started: the job is queued")
    expect(page.locator("#log-download")).to_be_hidden()
    expect(page.locator("#log")).to_be_hidden()  # no empty box


def test_an_event_repeated_past_the_burst_shows_its_count_live(page, live_portal, package,
                                                                held_tasks):
    """More events of a kind than are listed in a minute (jobs.models.REPEAT_BURST): the
    page shows how many more came, and the count grows in place as they come."""
    from jobs.models import REPEAT_BURST, event_repeatable
    from jobs.notify import job_changed

    job = submit_job(live_portal.user, live_portal.datacenter, "flood", package=package)
    login(page, next_path="/jobs/flood/")
    expect(page.locator("#events")).to_contain_text("submitted by alice")
    for number in range(REPEAT_BURST + 5):
        event_repeatable(job.pk, "leased", "waiting", f"given back {number}")
    job_changed(job.pk)  # outside a transaction: sent at once
    listed = page.locator("#events .event.to-waiting")
    expect(listed).to_have_count(REPEAT_BURST, timeout=WAIT)
    expect(listed.last.locator('[data-field="repeats"]')).to_contain_text(
        "and 5 more like it, until")
    event_repeatable(job.pk, "leased", "waiting", "given back again")
    job_changed(job.pk)
    expect(listed.last.locator('[data-field="repeats"]')).to_contain_text("and 6 more like it")
    expect(listed).to_have_count(REPEAT_BURST)  # replaced where it was, not added


def test_another_user_cannot_see_the_job(page, live_portal, package, held_tasks):
    # held_tasks: the job is not run
    submit_job(live_portal.user, live_portal.datacenter, "secret", package=package)
    user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])
    login(page, "bob", next_path="/jobs/")
    expect(page.get_by_text("No jobs yet.")).to_be_visible()
    expect(page.locator('#jobs tr[data-name="secret"]')).to_have_count(0)

    page.console.allow("404")  # the page of a job that is not bob's: not found
    response = page.goto("/jobs/secret/")
    assert response.status == 404
    # The page of a job that is someone else's is that of a job that does not exist.
    theirs = page.inner_text("body")
    assert page.goto("/jobs/nothing/").status == 404
    assert theirs == page.inner_text("body").replace("nothing", "secret")
    assert page.request.get("/jobs/secret/logs/trainer-0.log").status == 404


def test_an_expired_session_goes_to_the_login_page_and_back(page, live_portal):
    login(page, next_path="/jobs/")
    page.context.clear_cookies()
    page.goto("/jobs/new/")
    page.wait_for_url(re.compile(r"/login/\?next=/jobs/new/$"))
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/jobs/new/")
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()


def test_submit_and_kill_work_without_javascript(browser, live_portal, package, held_tasks):
    # held_tasks: the job is not run
    context = browser.new_context(base_url=live_portal.url, java_script_enabled=False)
    try:
        page = context.new_page()
        login(page, next_path="/jobs/new/")
        page.get_by_label("Name", exact=True).fill("plain")
        page.get_by_label("Trainer package").fill(package)
        page.get_by_label("Entry command").fill("python train.py")
        page.get_by_role("button", name="Submit job").click()
        page.wait_for_url("**/jobs/plain/")
        expect(state_of(page)).to_have_text("starting")

        page.get_by_role("link", name="Kill…").click()  # no dialog: a page that asks
        page.wait_for_url("**/jobs/plain/kill")
        page.get_by_role("button", name="Kill plain").click()
        page.wait_for_url("**/jobs/plain/")
        expect(state_of(page)).to_have_text("killed")
        page.get_by_role("link", name="Delete…").click()
        page.get_by_role("button", name="Delete plain").click()
        page.wait_for_url("**/jobs/")
        expect(page.get_by_text("job plain deleted")).to_be_visible()
    finally:
        context.close()


def test_the_curves_are_the_pages_width_with_a_log_scale_smoothing_and_zoom(
        page, live_portal, package, held_tasks):
    """A loss whose first point is a hundred times the rest: drawn across the card's width; a
    log scale shows the rest apart (powers of ten on its axis); smoothing draws the average
    with the raw curve faint behind; dragging across steps 20 to 60 shows those alone, a
    double click the whole run again."""
    from tests.jobs.files import metrics_path

    job = submit_job(live_portal.user, live_portal.datacenter, "curves", package=package)
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": step, "time": 1763700000.0 + step,
                                        "loss": 100.0 if step == 0 else 1 / step})
                            + "\n" for step in range(100)))
    login(page, next_path="/jobs/curves/")
    figure = page.locator('#charts figure[data-metric="loss"]')
    chart = figure.locator("svg")
    expect(chart).to_have_attribute("data-points", "100", timeout=WAIT)
    card = page.locator("#charts").bounding_box()
    assert chart.bounding_box()["width"] > 0.95 * card["width"]  # the card's width, not a tile

    figure.get_by_role("button", name="log scale").click()
    expect(chart).to_have_attribute("data-scale", "log")
    ticks = chart.locator("text.tick.y").all_text_contents()
    assert {"100", "1", "0.01"} <= set(ticks), ticks  # decades, each point in its own
    figure.get_by_role("button", name="smooth").click()
    expect(chart).to_have_attribute("data-smooth", "on")
    expect(chart.locator("path.curve.raw")).to_have_count(1)

    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    left, right = box["x"] + 0.3 * box["width"], box["x"] + 0.65 * box["width"]
    page.mouse.move(left, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(right, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    shown = int(chart.get_attribute("data-shown"))
    assert 10 < shown < 60, shown
    expect(figure.get_by_role("button", name="whole run")).to_be_visible()
    chart.dblclick()
    expect(chart).to_have_attribute("data-shown", "100")
    expect(figure.get_by_role("button", name="whole run")).to_be_hidden()


def test_the_events_open_on_the_newest_none_cut_at_the_top(page, live_portal, package,
                                                           held_tasks):
    from jobs.models import JobEvent

    job = submit_job(live_portal.user, live_portal.datacenter, "eventful", package=package)
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state="pending", to_state="pending",
                 reason=f"event {n}" + (": a longer reason that wraps" * 8 * (n % 3)))
        for n in range(40))
    login(page, next_path="/jobs/eventful/")
    events = page.locator("#events")
    expect(events).to_contain_text("event 39")
    page.wait_for_function(  # the live list scrolls to the newest once it comes
        "l => l.scrollTop > 0 && l.scrollHeight - l.scrollTop - l.clientHeight < 1",
        arg=events.element_handle())
    cut = events.evaluate("""list => {
        const top = list.getBoundingClientRect().top;
        const first = [...list.children].find(e => e.getBoundingClientRect().bottom > top + 1);
        return top - first.getBoundingClientRect().top;
    }""")
    assert cut <= 0.5, (cut, screenshot(page, "events-cut"))
