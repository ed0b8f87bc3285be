"""A worker killed -9 in the middle of a delivery (issue 41's "across a worker restart"): real
``celery worker`` processes (tests/jobs/test_killed_workers.py's), a real local job, a webhook
receiver on loopback that took the notification but whose answer never reached the killed
worker. The next worker sends it again once the dead one's claim runs out; the receiver drops
the repeat by its id: each event arrives once."""

from __future__ import annotations

import pytest
from django.conf import settings

from jobs.backends.local.sandbox import sandbox_problem
from jobs.models import Job
from notifications.models import Notification
from tests.factories import submit_job
from tests.jobs.test_killed_workers import Workers
from tests.polling import wait

TRAINER = """\
import os, time
time.sleep(float(os.environ.get("SLEEP", "3")))
"""

pytestmark = [pytest.mark.package(TRAINER), pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(sandbox_problem() is not None,
                                 reason="local jobs need a sandbox")]


@pytest.fixture
def workers(tmp_path, monkeypatch, webhook_receiver):
    """Workers that may send to the loopback receiver, with the test's credential key."""
    from kernel.celery import app

    monkeypatch.setenv("PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("PADDLECLOUD_WEBHOOK_ALLOW_HTTP", "true")
    monkeypatch.setenv("PADDLECLOUD_CREDENTIAL_KEYS",
                       ",".join(settings.PADDLECLOUD_CREDENTIAL_KEYS))
    app.control.purge()
    started = Workers(tmp_path)
    yield started
    webhook_receiver.release()
    started.stop()
    app.control.purge()


def state(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def test_a_notification_whose_worker_was_killed_while_sending_arrives_once(
        workers, token_client, alice, datacenter, package, webhook_receiver):
    created = token_client.post("/api/v1/notifications/subscriptions/", {
        "channel": "webhook", "target": webhook_receiver.url("/hook"),
        "events": ["job.started", "job.succeeded"]}, format="json").json()
    webhook_receiver.secrets["/hook"] = created["secret"]
    first = workers.start("first")
    workers.ready(first)
    webhook_receiver.hold()  # the first notification is taken, and its answer held

    job = submit_job(alice, datacenter, "resent", package=package, env={"SLEEP": "8"})
    assert webhook_receiver.wait_held(60), workers.logs()
    assert webhook_receiver.events() == ["job.started"]
    workers.kill(first)  # while it waits for the answer
    started = Notification.objects.get(kind="job.started")
    assert started.sent_at is None  # the killed worker never knew it arrived

    workers.ready(workers.start("second"))
    wait(lambda: state(job) == "succeeded", timeout=60,
         message=lambda: f"the job to succeed:\n{workers.logs()}")
    wait(lambda: not Notification.objects.filter(sent_at__isnull=True).exists(), timeout=40,
         message=lambda: f"every notification sent: {list(Notification.objects.values())}")
    assert webhook_receiver.events() == ["job.started", "job.succeeded"]  # each once
    assert webhook_receiver.repeats == [str(started.pk)]  # sent again, dropped by its id
    assert not webhook_receiver.refused
    assert Notification.objects.get(pk=started.pk).attempts == 1  # the second worker's
