"""The sweeps page with Django's test client on the real database: the form that starts a
sweep (every mistake shown, nothing created), the row of each sweep with its progress and best
so far, and its kill."""

from __future__ import annotations

import pytest
import yaml

from experiments.models import Sweep
from jobs.models import Job
from tests.dashboard.test_account_pages import messages_of
from tests.dashboard.test_job_pages import element, text
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
