"""The dashboard's "Open in VisualDL" (dashboard/views/visualdl.py), its pages as served: the job
list's button beside Compare, a job's button (not on a session's own page), the page that asks
before starting one when scripts are off, the page that waits while the session's job does,
the page of one that ended, and another user's 404. The sessions' jobs are not started here
(their tasks are held): tests/interactive/test_visualdl.py runs them."""

from __future__ import annotations

import re
import threading

import pytest
from django.contrib.messages import get_messages
from django.db import connections
from django.test import Client

from interactive.models import Session
from interactive.sessions import session_stop
from interactive.visualdl import visualdl_open
from jobs.models import Job
from jobs.states import JobState
from tests.conftest import PASSWORD
from tests.factories import job_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks", "pfs_home")]


@pytest.fixture
def jobs(alice, datacenter):
    for name in ("mnist", "resnet"):
        job_row(alice, datacenter, name, state=JobState.SUCCEEDED, replicas={})


def said(response) -> str:
    """The message the answer leaves for the next page (the latest)."""
    return [str(message) for message in get_messages(response.wsgi_request)][-1]


def test_the_list_and_a_jobs_page_offer_it(browser, jobs, alice, datacenter):
    page = browser.get("/jobs/").content.decode()
    assert re.search(r'<button [^>]*id="visualdl-button" formaction="/visualdl/"[^>]*>'
                     r'Open in VisualDL</button>', page)
    assert re.search(r'<form id="visualdl-form" method="post" action="/visualdl/" hidden>'
                     r'<input type="hidden" name="csrfmiddlewaretoken"', page)
    job_page = browser.get("/jobs/mnist/").content.decode()
    assert re.search(r'<form method="post" action="/visualdl/" class="inline">.*'
                     r'<input type="hidden" name="jobs" value="mnist"><button [^>]*>'
                     r'Open in VisualDL</button></form>', job_page)
    # A VisualDL session's own page has no such button.
    browser.post("/visualdl/", {"jobs": ["mnist"]})
    session = Session.objects.get()
    assert "Open in VisualDL" not in browser.get(f"/jobs/{session.job.name}/").content.decode()


def test_without_scripts_it_asks_first_then_starts_and_waits(browser, jobs, alice):
    asked = browser.get("/visualdl/", {"jobs": ["resnet", "mnist"]})
    page = asked.content.decode()
    assert asked.status_code == 200 and not Session.objects.exists()
    assert "<h1 id=\"visualdl-title\">VisualDL for mnist, resnet</h1>" in page
    assert page.count('<input type="hidden" name="jobs"') == 2
    assert "stopped once nobody has looked at it for 15m" in page
    assert '<button type="submit" id="visualdl-start">Start VisualDL</button>' in page

    started = browser.post("/visualdl/", {"jobs": ["mnist", "resnet"]})
    session = Session.objects.get()
    assert started.status_code == 302 and started["Location"] == f"/visualdl/{session.job.name}/"
    assert session.kind == "visualdl" and session.jobs == ["mnist", "resnet"]
    assert session.idle_seconds == 15 * 60
    job = session.job
    assert (job.owner, job.session, job.trainers, job.cpu, job.memory) == (
        alice, "visualdl", 1, 1000, 2**30)
    assert job.entry == "python -m paddlecloud_sdk.sessions visualdl mnist resnet"

    waiting = browser.get(started["Location"])
    page = waiting.content.decode()
    assert waiting.status_code == 200
    assert '<meta http-equiv="refresh" content="2">' in page
    assert f"Starting: its job is {job.state}" in page
    assert f'href="/jobs/{job.name}/"' in page
    # Asked again for the same jobs: to the same session, which is said.
    again = browser.get("/visualdl/", {"jobs": ["resnet", "mnist"]})
    assert again["Location"] == started["Location"]
    assert said(again) == f"your VisualDL for mnist, resnet is {job.name}, already started"
    assert Session.objects.count() == 1


def test_a_session_that_ended_says_so_and_opens_again(browser, jobs, alice, datacenter):
    started = browser.post("/visualdl/", {"jobs": ["mnist"]})
    name = Session.objects.get().job.name
    session_stop(alice, datacenter, name)
    page = browser.get(started["Location"]).content.decode()
    assert f"VisualDL session {name} has ended (killed: stopped by alice)" in page
    assert 'http-equiv="refresh"' not in page
    assert '<button type="submit" id="visualdl-start">Open VisualDL again</button>' in page
    again = browser.post("/visualdl/", {"jobs": ["mnist"]})
    assert again.status_code == 302 and again["Location"] != started["Location"]
    assert Job.objects.filter(session="visualdl").count() == 2


def test_mistakes_are_said_and_another_users_session_is_not_found(browser, jobs, make_user):
    nothing = browser.post("/visualdl/", {})
    assert nothing["Location"] == "/jobs/"
    assert said(nothing) == "VisualDL: jobs: tick at least one job to open VisualDL for"
    unknown = browser.post("/visualdl/", {"jobs": ["nope"]})
    assert unknown["Location"] == "/jobs/nope/"
    assert said(unknown) == ("VisualDL: jobs: you have no job named 'nope' in datacenter "
                             "'datacenter1'")
    started = browser.post("/visualdl/", {"jobs": ["mnist"]})
    make_user("bob")
    bob = Client()
    assert bob.login(username="bob", password=PASSWORD)
    assert bob.get(started["Location"]).status_code == 404
    refused = bob.post("/visualdl/", {"jobs": ["mnist"]})
    assert said(refused) == ("VisualDL: jobs: you have no job named 'mnist' in datacenter "
                             "'datacenter1'")
    assert Session.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_button_pressed_twice_at_once_starts_one(jobs, alice, datacenter):
    """Two requests for the same jobs at the same moment (a double click): one session."""
    start = threading.Barrier(2)
    found: list = []

    def press():
        try:
            start.wait(10)
            found.append(visualdl_open(alice, datacenter, ["mnist", "resnet"]))
        finally:
            connections.close_all()

    pressing = [threading.Thread(target=press) for _ in range(2)]
    for thread in pressing:
        thread.start()
    for thread in pressing:
        thread.join(60)
    assert sorted(started for _, started in found) == [False, True]
    assert len({session.pk for session, _ in found}) == 1
    assert Session.objects.count() == 1
