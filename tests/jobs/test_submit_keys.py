"""``Idempotency-Key`` on ``POST /api/v1/jobs/``: the same key from the same user within a day
answers with the job the first request made (201, the same body, ``Idempotent-Replayed:
true``) and makes nothing; with another request it is refused (422); a malformed key is a 400
naming the header."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.services import token_create
from jobs.models import Job, SubmitKey
from tests.conftest import assert_error
from tests.factories import home, job_fields, package_write

URL = "/api/v1/jobs/"


def post(client, data, key: str | None):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post(URL, data, format="json", **headers)


def test_the_same_key_again_is_the_same_job(token_client, alice, datacenter, package):
    data = job_fields(alice, datacenter, "fit", package=package)
    first = post(token_client, data, "k-1")
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first.headers
    again = post(token_client, data, "k-1")
    assert again.status_code == 201, again.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Job.objects.filter(owner=alice).count() == 1

    # Another key is another submission (here: the name is taken).
    assert_error(post(token_client, data, "k-2"), 400, "invalid", "name")


def test_the_same_key_with_another_request_is_refused(token_client, alice, datacenter,
                                                      package):
    assert post(token_client, job_fields(alice, datacenter, "fit", package=package),
                "k").status_code == 201
    body = assert_error(post(token_client, job_fields(alice, datacenter, "other",
                                                      package=package), "k"),
                        422, "idempotency_key_reused", "Idempotency-Key")
    assert "another submission" in body["message"]
    assert list(Job.objects.values_list("name", flat=True)) == ["fit"]


def test_a_key_is_each_users_own_and_lasts_a_day(token_client, alice, make_user, datacenter,
                                                  package, settings):
    assert post(token_client, job_fields(alice, datacenter, "fit", package=package),
                "k").status_code == 201
    bob = make_user("bob")
    bobs = APIClient()
    bobs.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_create(bob, datacenter_name='datacenter1').raw}")
    bobs_package = package_write(settings.PADDLECLOUD_PFS_ROOT / home("bob").removeprefix("/pfs/"))
    answer = post(bobs, job_fields(bob, datacenter, "fit", package=bobs_package), "k")
    assert answer.status_code == 201, answer.content
    assert "Idempotent-Replayed" not in answer.headers
    assert Job.objects.filter(owner=bob, name="fit").exists()

    SubmitKey.objects.filter(owner=alice).update(created_at=timezone.now() - timedelta(hours=25))
    later = post(token_client, job_fields(alice, datacenter, "fit2", package=package), "k")
    assert later.status_code == 201, later.content
    assert "Idempotent-Replayed" not in later.headers
    assert sorted(Job.objects.filter(owner=alice).values_list("name", flat=True)) == [
        "fit", "fit2"]


@pytest.mark.parametrize("key", ["", "x" * 201, "naïve", "tab\there"])
def test_a_malformed_key_is_refused_naming_the_header(token_client, alice, datacenter,
                                                     package, key):
    body = assert_error(post(token_client, job_fields(alice, datacenter, "fit",
                                                      package=package), key),
                        400, "invalid", "Idempotency-Key")
    assert "1 to 200 printable ASCII characters" in body["message"]
    assert not Job.objects.exists()


def test_a_refused_submission_keeps_no_key(token_client, alice, datacenter, package):
    bad = job_fields(alice, datacenter, "fit", package=package, trainers=0)
    assert post(token_client, bad, "k").status_code == 400
    good = post(token_client, job_fields(alice, datacenter, "fit", package=package), "k")
    assert good.status_code == 201, good.content
    assert "Idempotent-Replayed" not in good.headers
