"""Elastic trainers on the dashboard: the submit form takes a range (and names its mistakes
beside the field), the list and the job's page show how many trainers a job holds and its
range."""

from __future__ import annotations

import html

import pytest

from jobs.models import Job
from tests.dashboard.test_job_pages import element, text
from tests.factories import PACKAGE
from tests.jobs import test_elastic
from tests.jobs.test_elastic import DATASET

pytestmark = pytest.mark.usefixtures("held_tasks")
package = test_elastic.package  # the elastic package and its dataset, a fixture


def form(**fields) -> dict:
    return {"name": "el", "package": PACKAGE,
            "entry": "python train.py", "pservers": "1", "dataset": DATASET, **fields}


def test_a_range_is_submitted_and_shown(browser, package):
    response = browser.post("/jobs/new/", form(trainers="2:4", trainers_lost_limit="2"))
    assert response.status_code == 302, response.content
    job = Job.objects.get(name="el")
    assert (job.trainers, job.trainers_min, job.trainers_lost_limit, job.trainers_held) == (
        4, 2, 2, 3)  # the default quota: 4 CPU, one for the pserver
    listed = browser.get("/jobs/").content.decode()
    assert '<td class="num" data-label="Trainers" data-field="trainers">3 (2\u20134)</td>' in listed
    page = browser.get("/jobs/el/")
    _, shown = element(page, "trainers-shown")
    assert shown == "3 (2\u20134)"
    assert "elastic: at least 2, at most 4; lost 0 of at most 2" in text(page)


def test_a_range_the_rules_refuse_is_shown_beside_the_field(browser, package):
    response = browser.post("/jobs/new/", form(trainers="2:4", pservers="0"))
    assert response.status_code == 200 and not Job.objects.exists()
    attrs, _ = element(response, "id_trainers")
    assert attrs["aria-invalid"] == "true"
    assert "a range (2:4) needs parameter servers" in html.unescape(
        element(response, "id_trainers_error")[1])
