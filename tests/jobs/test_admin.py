"""Admins can look at every job, its replicas and its events, but not edit them by hand."""

from __future__ import annotations

import pytest

from accounts.models import AuditEntry
from jobs.models import Job, Usage
from jobs.transitions import job_transition, replica_transition
from tests.factories import job_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice, datacenter):
    job = job_row(alice, datacenter, "fit-a-line", replicas={})
    trainer = job.replicas.get()
    job_transition(job, "starting", "replicas created")
    replica_transition(trainer, "starting", "process started", host="node1")
    return job


def test_job_list_and_detail(admin_browser, job):
    listing = admin_browser.get("/admin/jobs/job/?state__exact=starting")
    assert listing.status_code == 200
    assert "fit-a-line" in listing.content.decode()
    detail = admin_browser.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "replicas created" in detail and "process started" in detail
    assert "node1" in detail


def test_jobs_are_not_edited_by_hand(admin_browser, job):
    assert admin_browser.get("/admin/jobs/job/add/").status_code == 403
    response = admin_browser.post(f"/admin/jobs/job/{job.pk}/change/", {"state": "succeeded"})
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == "starting"


def test_admins_kill_jobs_through_the_same_service(admin_browser, job, held_tasks,
                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin_browser.post("/admin/jobs/job/", {
            "action": "kill", "_selected_action": [job.pk]}, follow=True)
    assert "Killed 1 job(s)." in response.content.decode()
    job.refresh_from_db()
    assert (job.state, job.state_reason) == ("killed", "killed by root")
    # Once committed: its replicas are stopped, its owner's home is measured (what it wrote
    # counts), its metrics are kept for comparing it, the owner's waiting jobs may be
    # admitted, and the dashboards hear of it.
    assert held_tasks.sent == []  # not before the commit
    for callback in callbacks:
        callback()
    owner = (job.owner_id, job.datacenter_id)
    assert sorted(held_tasks.sent) == [("jobs.tasks.home_measure", owner),
                                       ("jobs.tasks.job_metrics_keep", (job.pk,)),
                                       ("jobs.tasks.job_stop", (job.pk,)),
                                       ("jobs.tasks.jobs_admit", owner)]
    assert "_after_commit.<locals>.send" in {c.__qualname__ for c in callbacks}

    again = admin_browser.post("/admin/jobs/job/", {
        "action": "kill", "_selected_action": [job.pk]}, follow=True)
    assert "has already ended (killed)" in again.content.decode()


def test_an_admins_delete_removes_a_job_as_its_owners_does(
        admin_browser, job, held_tasks, django_capture_on_commit_callbacks):
    """A live job cannot be deleted here; a killed one whose trainer has not stopped yet is
    removed as ``kill -rm`` removes it: audited, its remains sent to be stopped, and its run
    ended in the usage ledger (it would count against the budget for ever otherwise)."""
    assert admin_browser.get(f"/admin/jobs/job/{job.pk}/delete/").status_code == 403
    job_transition(job, "killed", "killed by root")
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_browser.post(f"/admin/jobs/job/{job.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()
    [(role, ended)] = Usage.objects.filter(job_key=job.pk).values_list("role", "ended_at")
    assert role == "trainer" and ended is not None
    entry = AuditEntry.objects.get(action=AuditEntry.Action.JOB_DELETE)
    assert (entry.actor.username, entry.target) == ("root", "alice/fit-a-line")
    assert [name for name, _ in held_tasks.sent] == ["jobs.tasks.job_remains_remove"]


def test_the_usage_ledger_is_read_only_in_the_admin(admin_browser, job):
    run = Usage.objects.get(job_key=job.pk)
    listing = admin_browser.get("/admin/jobs/usage/").content.decode()
    assert "fit-a-line" in listing and "trainer" in listing
    assert admin_browser.get("/admin/jobs/usage/add/").status_code == 403
    assert admin_browser.get(f"/admin/jobs/usage/{run.pk}/delete/").status_code == 403
    assert admin_browser.post(f"/admin/jobs/usage/{run.pk}/change/",
                              {"cpu": "0"}).status_code == 403
    assert Usage.objects.get(pk=run.pk).cpu == 1000
