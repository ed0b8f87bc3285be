"""The Notebooks page with Django's test client on the real database: New notebook (each
mistake beside its field, nothing made), its row, Keep and Stop (asked first), an Open of one
that does not run yet said, and another user's notebook not found. Its JupyterLab is not
started here (held_tasks): tests/e2e/test_notebooks.py opens a running one."""

from __future__ import annotations

import pytest

from interactive.models import Session
from jobs.models import Job, JobEvent
from tests.dashboard.test_account_pages import messages_of
from tests.dashboard.test_job_pages import element, text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]


def test_a_notebook_is_started_kept_and_stopped_from_the_page(browser, pfs_home, make_user):
    page = browser.get("/notebooks/")
    assert page.status_code == 200 and "No notebooks running." in text(page)

    refused = browser.post("/notebooks/", {"name": "lab", "idle": "forever", "memory": "lots"})
    assert refused.status_code == 200
    shown = text(refused)
    assert "a length of time from 1s to 7d" in shown and "memory" in shown
    assert not Job.objects.exists() and not Session.objects.exists()
    assert not (pfs_home / "jobs" / "lab").exists()

    started = browser.post("/notebooks/", {"name": "lab", "idle": "30m", "cpu": "500m"},
                           follow=True)
    assert messages_of(started) == ["notebook lab started: open it once it runs"]
    _, row = element(started, "notebook-lab")
    assert "500m CPU · 1Gi" in row and "30m" in row and "Open" not in row, row
    job = Job.objects.get(name="lab")
    assert job.session == "notebook" and job.entry == "python -m paddlecloud_sdk.sessions notebook"

    opened = browser.get("/notebooks/lab/open", follow=True)
    assert messages_of(opened)[0].startswith("notebook lab is ")
    assert "it opens once it runs" in messages_of(opened)[0]

    kept = browser.post("/notebooks/lab/keep", {"keep": "yes"}, follow=True)
    assert messages_of(kept) == ["notebook lab kept: never stopped when idle"]
    assert "kept: never stopped" in element(kept, "notebook-lab")[1]
    assert JobEvent.objects.filter(job=job, reason__startswith="kept alive by alice").exists()

    assert "Stop notebook lab?" in text(browser.get("/notebooks/lab/stop"))
    assert "Stop notebook lab?" in text(browser.post("/notebooks/lab/stop"))  # not confirmed
    stopped = browser.post("/notebooks/lab/stop", {"confirm": "yes"}, follow=True)
    assert messages_of(stopped) == ["notebook lab stopped"]
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("killed", "stopped by alice")
    assert "No notebooks running." in text(stopped)

    bob = make_user("bob")
    browser.force_login(bob)
    for path in ("/notebooks/lab/open", "/notebooks/lab/stop"):
        assert browser.get(path).status_code == 404, path
    assert browser.post("/notebooks/lab/keep", {"keep": "yes"}).status_code == 404
