"""A job's events: what a job can cause at will (its master's tasks given back, failed) is
recorded at most REPEAT_BURST times a kind a minute and the rest counted (jobs.models
.event_repeatable); the API's /events comes in cursor pages; the job's page shows the latest
EVENTS_SHOWN with a way to the older ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests
from django.db.models import Sum
from django.test import Client
from django.utils import timezone

from jobs.models import REPEAT_BURST, Job, JobEvent
from jobs.services import EVENTS_SHOWN
from tests.factories import package_write, submit_job
from tests.polling import wait

from .master_scenario import FINAL, recordio_dataset_write, state

GIVE_BACKS = 1000

# A trainer that takes a task and gives it back (the first waiting task, the same each time),
# GIVE_BACKS times as fast as it can, each time with a reason of its own; then ends well.
FLOODER = f"""\
from paddlecloud_sdk.master import Master
master = Master()
for number in range({GIVE_BACKS}):
    task = master.next()["task"]
    master.failed(task["id"], task["lease"], f"given back {{number}}", counted=False)
print("gave back {GIVE_BACKS} tasks", flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_a_job_flooding_its_master_with_give_backs_does_not_flood_its_events(
        live_portal, settings, celery_worker):
    settings.PADDLECLOUD_PORTAL_URL = live_portal.url
    package_write(live_portal.home, FLOODER)
    dataset = recordio_dataset_write(live_portal.home)
    job = submit_job(live_portal.user, live_portal.datacenter, "flood", dataset=dataset,
                     task_records=20)
    wait(lambda: state(job) in FINAL, 180, lambda: f"the job to end: {job.state_reason}")
    assert job.state == "succeeded", job.state_reason

    given_back = JobEvent.objects.filter(job=job, from_state="leased", to_state="waiting")
    # Within the minute: REPEAT_BURST of them listed, every give-back counted.
    assert given_back.count() == REPEAT_BURST
    assert given_back.count() + given_back.aggregate(n=Sum("repeats"))["n"] == GIVE_BACKS
    assert list(given_back.values_list("reason", flat=True)) == [
        f"task 0 of pass 1 dispatched again: trainer-0 gave it back (given back {n})"
        for n in range(REPEAT_BURST)]
    last = given_back.last()
    assert last.repeats == GIVE_BACKS - REPEAT_BURST and last.repeated_until > last.time

    # The API and the job's page show it so, and stay small.
    api = live_portal.session()
    events = api.get(f"{live_portal.url}/api/v1/jobs/flood/events", timeout=20)
    assert events.status_code == 200 and len(events.content) < 20_000, len(events.content)
    shown = [e for e in events.json()["results"] if e["to_state"] == "waiting"]
    assert shown[-1]["repeats"] == GIVE_BACKS - REPEAT_BURST
    browser = Client()
    browser.force_login(live_portal.user)
    page = requests.get(f"{live_portal.url}/jobs/flood/", timeout=20,
                        cookies={"sessionid": browser.cookies["sessionid"].value})
    assert page.status_code == 200 and len(page.content) < 200_000, len(page.content)
    assert f"and {GIVE_BACKS - REPEAT_BURST} more like it, until" in page.text


@pytest.fixture
def long_history(alice, pfs_home, datacenter, held_tasks) -> Job:
    """alice's job with 250 events, one a second (as a long-lived job's replicas make)."""
    (pfs_home / "pkg").mkdir()
    job = submit_job(alice, datacenter, "long")
    start = timezone.now() - timedelta(hours=1)
    job.events.all().delete()
    JobEvent.objects.bulk_create(
        JobEvent(job=job, time=start + timedelta(seconds=n), from_state="running",
                 to_state="running", reason=f"event {n}") for n in range(250))
    return job


@pytest.mark.django_db
def test_a_jobs_events_come_in_pages_oldest_first(long_history, token_client):
    reasons, url, sizes = [], "/api/v1/jobs/long/events", []
    while url:
        answer = token_client.get(url)
        assert answer.status_code == 200, answer.content
        page = answer.json()
        sizes.append(len(page["results"]))
        reasons += [event["reason"] for event in page["results"]]
        url = page["next"]
    assert reasons == [f"event {n}" for n in range(250)]
    assert sizes == [100, 100, 50]  # 100 a page unless asked for more
    page = token_client.get("/api/v1/jobs/long/events?limit=1000").json()
    assert len(page["results"]) == 250 and page["next"] is None


@pytest.mark.django_db
def test_a_jobs_page_shows_its_latest_events_and_the_way_to_older_ones(long_history,
                                                                         browser):
    def shown(html: str) -> list[int]:
        return [int(part.split("<", 1)[0]) for part in html.split('data-field="reason">event ')[1:]]

    page = browser.get("/jobs/long/").content.decode()
    assert shown(page) == list(range(250 - EVENTS_SHOWN, 250))
    older = page.split('id="older-events"><a href="', 1)[1].split('"', 1)[0]
    page = browser.get(older.replace("&amp;", "&")).content.decode()
    assert shown(page) == list(range(250 - 2 * EVENTS_SHOWN, 250 - EVENTS_SHOWN))
    older = page.split('id="older-events"><a href="', 1)[1].split('"', 1)[0]
    page = browser.get(older).content.decode()
    assert shown(page) == list(range(250 - 2 * EVENTS_SHOWN))
    assert 'id="older-events"' not in page  # the first of them
    assert browser.get("/jobs/long/events/?before=x").status_code == 404
