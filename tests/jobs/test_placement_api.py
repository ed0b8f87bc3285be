"""The API's ``placement`` (paddlectl's and the SDK's ``-datacenter auto`` send why they chose
the datacenter): recorded as the job's first event; text of bounded length, else an error
naming the field and nothing made."""

from __future__ import annotations

import pytest

from jobs.models import Job
from paddlecloud_core.placement import PLACEMENT_MOST
from tests.factories import PACKAGE

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]

BODY = {"name": "fit", "package": PACKAGE, "entry": "x"}


def test_placement_is_the_jobs_first_event(token_client, pfs_home):
    (pfs_home / "pkg").mkdir()
    why = "placed in datacenter1: starts now (datacenter2: in 40 min)"
    response = token_client.post("/api/v1/jobs/", {**BODY, "placement": why}, format="json")
    assert response.status_code == 201, response.json()
    first = Job.objects.get(name="fit").events.order_by("pk").first()
    assert first.reason == f"submitted by alice; {why}"


@pytest.mark.parametrize("placement", ["x" * (PLACEMENT_MOST + 1), 3])
def test_a_placement_too_long_or_not_text_is_refused(token_client, pfs_home, placement):
    (pfs_home / "pkg").mkdir()
    response = token_client.post("/api/v1/jobs/", {**BODY, "placement": placement},
                                 format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["placement"] == [
        f"why this datacenter was chosen (-datacenter auto): text of at most {PLACEMENT_MOST} "
        "characters"]
    assert not Job.objects.exists()
