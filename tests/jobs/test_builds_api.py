"""/api/v1/builds/ (``paddlectl build``): what bad input gets — every mistake under its field,
nothing recorded, nothing queued — and that a build is only its owner's."""

from __future__ import annotations

import pytest

from jobs.models import Build
from tests.conftest import assert_error
from tests.factories import HOME

URL = "/api/v1/builds/"


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field", "says"), [
    ({}, "package", "required"),
    ({"package": f"{HOME}/nowhere"}, "package", "is not a directory in PFS"),
    ({"package": "/pfs/datacenter1/home/bob/pkg"}, "package", ""),
    ({"package": "PKG", "image": "Bad Image!"}, "image", ""),
    ({"package": "PKG", "base": "registry.example.com/x:"}, "base", ""),
    ({"package": "PKG"}, "image", "has no build registry"),
    ({"package": "PKG", "image": "r.example.com/a/b", "registry": "nope"}, "registry",
     "no registry credentials named 'nope'"),
    ({"package": "PKG", "image": "r.example.com/a/b", "colour": "red"}, "colour",
     "unknown field"),
])
def test_a_bad_build_is_refused_under_its_field_and_nothing_is_recorded(
        token_client, held_tasks, package, body, field, says):
    body = {key: package if value == "PKG" else value for key, value in body.items()}
    error = assert_error(token_client.post(URL, body, format="json"), 400, "invalid", field)
    assert says in error["fields"][field][0]
    assert not Build.objects.exists()
    assert held_tasks.sent == []


@pytest.mark.django_db(transaction=True)
def test_a_build_is_accepted_queued_and_only_its_owner_sees_it(
        token_client, held_tasks, package, datacenter, make_user, settings):
    settings.PADDLECLOUD_LOCAL_BUILDS = True
    answer = token_client.post(URL, {"package": package, "base": "python:3.11-slim",
                                     "image": "registry.example.com/team/trainer"},
                               format="json")
    assert answer.status_code == 202, answer.content
    build = answer.json()
    assert build["state"] == "building" and build["base"] == "python:3.11-slim"
    # A name without a tag gets the digest's.
    assert build["image"].startswith("registry.example.com/team/trainer:pc-")
    assert [name for name, _ in held_tasks.sent] == ["jobs.tasks.build_run"]
    shown = token_client.get(f"{URL}{build['id']}/")
    assert shown.status_code == 200 and shown.json()["id"] == build["id"]

    from rest_framework.test import APIClient

    from accounts.services import token_create

    bob = APIClient()
    bob.credentials(HTTP_AUTHORIZATION="Bearer "
                    + token_create(make_user("bob"), datacenter_name="datacenter1").raw)
    assert_error(bob.get(f"{URL}{build['id']}/"), 404, "not_found")


@pytest.mark.django_db
def test_builds_on_the_portals_machine_wait_for_the_admins_yes(token_client, held_tasks,
                                                               package):
    error = assert_error(token_client.post(URL, {"package": package,
                                                 "image": "r.example.com/a/b"},
                                           format="json"), 409, "builds_unavailable")
    assert "PADDLECLOUD_LOCAL_BUILDS=1" in error["message"]
    assert not Build.objects.exists() and held_tasks.sent == []


@pytest.mark.django_db
def test_a_builds_requirements_are_read_as_data_before_anything_is_recorded(
        token_client, held_tasks, package, pfs_home, settings):
    """Issue 33, item 5: the requirements.txt a build's pip installs obeys the rules of a job's
    (paddlecloud_core/requirements.py): no other index than the datacenter allows, no path."""
    settings.PADDLECLOUD_LOCAL_BUILDS = True
    (pfs_home / "pkg" / "requirements.txt").write_text(
        "--index-url http://127.0.0.1:6379/\n-r /etc/shadow\n")
    error = assert_error(token_client.post(URL, {"package": package, "image": "r.example.com/a/b"},
                                           format="json"), 400, "invalid", "package")
    said = error["fields"]["package"][0]
    assert said.startswith("requirements.txt: line 1 ('--index-url http://127.0.0.1:6379/'): "
                           "http://127.0.0.1:6379/ is not one of the package indexes")
    assert "line 2 ('-r /etc/shadow'): -r is not allowed" in said
    assert not Build.objects.exists()
    assert held_tasks.sent == []
