"""A job's "Run again…" (issue 39): the submit form filled in from the job, naming it as the
origin, its package the snapshot the job ran; the job's page shows the snapshot and its
digest; a re-run's page says what it re-runs; another user's job fills nothing in."""

from __future__ import annotations

import html
import re

import pytest

from tests.factories import job_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]


def value_of(page: str, name: str) -> str:
    found = re.search(rf'<input[^>]*name="{name}"[^>]*value="([^"]*)"', page) or re.search(
        rf'<textarea[^>]*name="{name}"[^>]*>\s*([^<]*)</textarea>', page)
    return html.unescape(found.group(1)) if found else ""


DIGEST = "sha256:" + "ab" * 32


def test_run_again_opens_the_form_filled_in_from_the_job(browser, alice, datacenter, pfs_home):
    snapshot = "/pfs/datacenter1/home/alice/jobs/fit/package"
    job_row(alice, datacenter, "fit", entry="python train.py --lr 0.1", passes=3,
            env={"LR": "0.1", "BATCH": "64"}, package_snapshot=snapshot,
            package_digest=DIGEST, replicas={})
    page = browser.get("/jobs/fit/").content.decode()
    assert 'href="/jobs/new/?from=fit"' in page and "Run again…" in page
    assert f'<code id="package-snapshot">{snapshot}</code>' in page
    assert f'<code id="package-digest">{DIGEST}</code>' in page

    form = browser.get("/jobs/new/", {"from": "fit"}).content.decode()
    assert value_of(form, "rerun_of") == "fit"
    assert value_of(form, "package") == snapshot  # the bytes it ran, not the package now
    assert value_of(form, "entry") == "python train.py --lr 0.1"
    assert value_of(form, "passes") == "3"
    assert value_of(form, "env").splitlines() == ["LR=0.1", "BATCH=64"]
    assert value_of(form, "name") == ""  # a new name, the user's to choose


def test_a_reruns_page_names_its_origin(browser, alice, datacenter, pfs_home):
    job_row(alice, datacenter, "fit", replicas={})
    job_row(alice, datacenter, "fit-r1", rerun_of="fit", replicas={})
    page = browser.get("/jobs/fit-r1/").content.decode()
    assert re.search(r'<dd id="rerun-of"><a href="/jobs/fit/">fit</a></dd>', page)
    assert 'id="rerun-of"' not in browser.get("/jobs/fit/").content.decode()


def test_another_users_job_is_not_found(browser, alice, make_user, datacenter, pfs_home):
    job_row(make_user("bob"), datacenter, "bobs", env={"TOKEN": "bobs-secret"})
    answer = browser.get("/jobs/new/", {"from": "bobs"})
    assert answer.status_code == 404
    assert "bobs-secret" not in answer.content.decode()
