"""The submit page's datacenter choice "auto (earliest start)", for a user with accounts in
several datacenters: the portal runs the dry run in each of them and places the job where it
would start first, its package looked for at the same place in each datacenter's PFS, and says
why (the message, the job's first event); nowhere to go is an error naming each reason
(docs/users/jobs.md, "Choosing the datacenter")."""

from __future__ import annotations

import html

import pytest

from jobs.models import Job
from tests.factories import PACKAGE, package_write
from tests.jobs.test_sooner import busy  # noqa: F401 (a fixture: datacenter1 busy, 2 free)

pytestmark = pytest.mark.django_db

FORM = {"name": "wide", "package": PACKAGE, "entry": "x", "trainers": "2", "cpu": "1",
        "datacenter": "auto"}


def test_auto_on_the_submit_form_places_the_job_in_the_free_datacenter(browser, busy,  # noqa: F811
                                                                         pfs_home):
    package_write(pfs_home.parents[2] / "datacenter2" / "home" / "alice")
    page = browser.get("/jobs/new/").content.decode()
    assert '<option value="auto">auto (earliest start)</option>' in page
    response = browser.post("/jobs/new/", FORM, follow=True)
    job = Job.objects.get(name="wide")
    assert (job.datacenter.name, job.package) == ("datacenter2",
                                                  "/pfs/datacenter2/home/alice/pkg")
    why = "placed in datacenter2: starts now (datacenter1: in 60 min)"
    assert job.events.order_by("pk").first().reason == f"submitted by alice; {why}"
    assert response.redirect_chain[-1][0] == "/jobs/wide/"
    assert f"job wide submitted; {why}" in html.unescape(response.content.decode())


def test_auto_with_nowhere_to_go_names_each_reason_and_submits_nothing(browser, busy):  # noqa: F811
    response = browser.post("/jobs/new/", {**FORM, "package": "/pfs/datacenter1/home/alice/no"})
    page = html.unescape(response.content.decode())
    assert response.status_code == 200
    assert ("datacenter: auto: no datacenter can take the job (datacenter1: "
            "package: /pfs/datacenter1/home/alice/no is not a directory in PFS") in page, page
    assert "; datacenter2: package: /pfs/datacenter2/home/alice/no is not a directory" in page
    assert not Job.objects.filter(name="wide").exists()
