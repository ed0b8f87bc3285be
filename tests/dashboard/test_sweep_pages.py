"""The sweeps page with Django's test client on the real database: the form that starts a
sweep (every mistake shown, nothing created), the row of each sweep with its progress and best
so far, and its kill."""

from __future__ import annotations

import pytest
import yaml

from experiments.models import Sweep
from jobs.models import Job
from tests.dashboard.test_account_pages import messages_of
from tests.dashboard.test_job_pages import element, form_data, text
from tests.factories import PACKAGE, package_write

# Trials are recorded, not started (held_tasks): these tests look at pages, not processes.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]


def spec(**changes) -> str:
    return yaml.safe_dump({"name": "lr", "job": {"package": PACKAGE, "entry": "python train.py"},
                           "space": {"env.LR": [0.1, 0.01, 0.001]}, "parallel": 2,
                           "objective": {"metric": "loss"}, **changes})


def test_a_sweep_is_started_shown_and_killed_from_the_page(browser, pfs_home):
    package_write(pfs_home, "print('hello')\n")
    page = browser.get("/sweeps/")
    assert page.status_code == 200
    assert "No sweeps yet." in text(page) and "env.LEARNING_RATE" in text(page)

    refused = browser.post("/sweeps/", {"spec": spec(max_trials=0, method="bayes")})
    assert refused.status_code == 200
    shown = text(refused)
    assert "max_trials: a whole number from 1 to 1000" in shown
    assert "method: unknown method 'bayes'" in shown
    assert "not YAML" in text(browser.post("/sweeps/", {"spec": "name: [unclosed"}))
    assert not Sweep.objects.exists() and not Job.objects.exists()

    started = browser.post("/sweeps/", {"spec": spec()}, follow=True)
    assert messages_of(started) == ["sweep lr started: its first trials are submitted"]
    _, row = element(started, "sweep-lr")
    assert row.startswith("lr grid running lr-1, lr-2 (2/3)"), row
    assert "0 done, 2 running, 0 waiting, 0 stopped, 1 to submit" in row
    assert "unknown (no trial has finished yet" in row

    assert "Kill sweep lr?" in text(browser.get("/sweeps/lr/kill"))
    assert "Kill sweep lr?" in text(browser.post("/sweeps/lr/kill"))  # not confirmed
    assert not Job.objects.filter(state="killed").exists()
    killed = browser.post("/sweeps/lr/kill", {"confirm": "yes"}, follow=True)
    assert messages_of(killed) == ["sweep lr killed: its trials are being stopped"]
    _, row = element(killed, "sweep-lr")
    assert row.startswith("lr grid killed") and "2 killed" in row, row
    assert set(Job.objects.values_list("state", flat=True)) == {"killed"}
    again = browser.post("/sweeps/lr/kill", {"confirm": "yes"}, follow=True)
    assert messages_of(again) == ["sweep 'lr' has already ended (killed)"]


def listed_rows(response) -> list[tuple[str, str]]:
    """(kind, name) of each row of the jobs list, in order."""
    tbody = text(response).split('<table class="jobs stack" id="jobs"', 1)[1].split("</tbody>")[0]
    return [("sweep" if 'data-kind="sweep"' in row else "job",
             row.split('data-name="', 1)[1].split('"', 1)[0])
            for row in tbody.split("<tr")[1:] if "data-name=" in row.split(">", 1)[0]]


def test_the_jobs_list_shows_a_sweep_as_one_row_that_expands_to_its_trials(browser, pfs_home,
                                                                          alice, datacenter):
    from accounts.services import quota_set
    from jobs.services import job_kill

    quota_set(None, datacenter, alice, jobs=10)
    package_write(pfs_home, "print('hello')\n")
    assert browser.post("/jobs/new/", form_data(name="before")).status_code == 302
    assert browser.post("/sweeps/", {"spec": spec()}).status_code == 302
    job_kill(alice, datacenter, "lr-1")
    page = browser.get("/jobs/")
    assert listed_rows(page) == [("sweep", "lr"), ("job", "before")]
    row = text(page).split('data-kind="sweep"', 1)[1].split("</tr>")[0]
    assert "sweep · grid" in row and "2/3 trials" in row
    assert "0 done, 1 running, 0 waiting, 0 stopped, 1 killed, 1 to submit" in row
    assert "no value reported yet" in row and "end unknown: no trial has finished yet" in row
    # expanded: each trial, its state and settings, a link to its page; and to the list of them
    assert '<details class="trials"' in row
    assert '<a href="/jobs/lr-1/">lr-1</a> <span class="badge state-killed">killed</span>' in row
    assert "env.LR=0.1" in row and "env.LR=0.01" in row
    assert 'href="?sweep=lr"' in row and 'href="/sweeps/#sweep-lr"' in row

    # a state filter keeps the sweep when one of its trials is in that state
    assert listed_rows(browser.get("/jobs/?state=killed")) == [("sweep", "lr")]
    assert listed_rows(browser.get("/jobs/?state=succeeded")) == []
    # its trials as rows of jobs (filters apply within), and a sweep that is not there
    trials = browser.get("/jobs/?sweep=lr")
    assert listed_rows(trials) == [("job", "lr-2"), ("job", "lr-1")]
    assert "The trials of sweep <strong>lr</strong>" in text(trials)
    assert listed_rows(browser.get("/jobs/?sweep=lr&state=killed")) == [("job", "lr-1")]
    assert browser.get("/jobs/?sweep=nothing").status_code == 404
