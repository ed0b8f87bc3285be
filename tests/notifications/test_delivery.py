"""Notifications delivered for real: jobs run through the portal (the local backend, the
Celery worker the portal embeds, on the real Redis and PostgreSQL), their events sent to a
webhook receiver and an SMTP server on loopback. Each subscribed event arrives once (the
receiver drops a repeat by its id), signed, within the 5 seconds the product promises; a
failing endpoint is tried again, and one failing for days is disabled and its owner told."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.backends.local.sandbox import sandbox_problem
from jobs.models import Job, JobEvent
from jobs.services import job_kill
from notifications.events import JOB_STATE_EVENTS
from notifications.models import Notification, Subscription
from tests.polling import wait

TRAINER = """\
import os, sys, time
time.sleep(float(os.environ.get("SLEEP", "3")))
sys.exit(int(os.environ.get("CODE", "0")))
"""
URL = "/api/v1/notifications/subscriptions/"
IN_TIME = 5.0  # seconds from the change to its arrival: the product's promise (README)

pytestmark = [pytest.mark.package(TRAINER), pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(sandbox_problem() is not None,
                                 reason="local jobs need a sandbox")]


def subscribe(client, receiver=None, **fields) -> dict:
    response = client.post(URL, fields, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    if receiver is not None:
        receiver.secrets[fields["target"].split(str(receiver.server.server_address[1]))[1]] = \
            created["secret"]
    return created


def told(job: Job) -> list[tuple[str, object]]:
    """The events the job's moves make, with when each was made."""
    return [(JOB_STATE_EVENTS[e.to_state], e.time)
            for e in JobEvent.objects.filter(job=job, replica__isnull=True,
                                             to_state__in=JOB_STATE_EVENTS)]


def state(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def test_each_subscribed_event_arrives_once_signed_and_in_time(
        celery_worker, token_client, alice, datacenter, submit, smtp_server,
        webhook_receiver):
    json_hook = webhook_receiver.url("/json")
    subscribe(token_client, webhook_receiver, channel="webhook", target=json_hook,
              events=["job.started", "job.succeeded", "job.failed", "job.killed"])
    subscribe(token_client, webhook_receiver, channel="webhook", format="slack",
              target=webhook_receiver.url("/slack"), events=["job.failed"])
    subscribe(token_client, channel="email", target="alice@example.com",
              events=["job.succeeded", "job.failed"])

    good = submit("good")
    bad = submit("bad", env={"CODE": "3"})
    wait(lambda: state(good) == "succeeded" and state(bad) == "failed", timeout=60,
         message="the jobs to end")
    held = submit("held", env={"SLEEP": "600"})
    wait(lambda: state(held) == "running", timeout=60, message="the job to run")
    job_kill(alice, datacenter, "held")
    wait(lambda: state(held) == "killed", timeout=30, message="the job to be killed")

    expected = {(job.name, kind, at) for job in (good, bad, held) for kind, at in told(job)}
    assert {(n, k) for n, k, _ in expected} >= {
        ("good", "job.succeeded"), ("bad", "job.failed"), ("held", "job.started"),
        ("held", "job.killed")}
    wait(lambda: len(webhook_receiver.events("/json")) == len(expected)
         and webhook_receiver.events("/slack") == ["job.failed"]
         and len(smtp_server.messages) == 2, timeout=30,
         message=lambda: f"the notifications: {webhook_receiver.events()}, "
                         f"{len(smtp_server.messages)} e-mails, {webhook_receiver.refused}")
    assert not webhook_receiver.refused  # every one signed, with a fresh timestamp
    by_job = {(d.body["job"]["name"], d.body["event"]): d
              for d in webhook_receiver.received.values() if d.path == "/json"}
    assert set(by_job) == {(n, k) for n, k, _ in expected}  # each once
    for name, kind, at in expected:
        delivery = by_job[(name, kind)]
        assert delivery.at - at.timestamp() < IN_TIME, (name, kind)
        assert delivery.body["id"] == delivery.headers["PaddleCloud-Notification-Id"]
    assert by_job[("bad", "job.failed")].body["text"] == (
        f"job alice/bad failed: {Job.objects.get(pk=bad.pk).state_reason}")
    slack = next(d for d in webhook_receiver.received.values() if d.path == "/slack")
    assert slack.body == {"text": by_job[("bad", "job.failed")].body["text"]}

    subjects = sorted(m["Subject"] for m in smtp_server.messages)
    assert subjects[0].startswith("[PaddleCloud] job alice/bad failed")
    assert subjects[1].startswith("[PaddleCloud] job alice/good succeeded")
    assert all(m["X-Envelope-To"] == "alice@example.com" for m in smtp_server.messages)
    assert len(smtp_server.ids()) == 2
    # (the sender marks one sent once the receiver's answer reaches it)
    wait(lambda: not Notification.objects.filter(sent_at__isnull=True).exists(), timeout=10,
         message="every notification marked sent")


def test_a_failing_endpoint_is_tried_again_with_back_off(
        celery_worker, token_client, webhook_receiver, settings):
    settings.PADDLECLOUD_NOTIFY_RETRY_SECONDS = 1
    created = subscribe(token_client, webhook_receiver, channel="webhook",
                        target=webhook_receiver.url("/flaky"), events=["job.failed"])
    webhook_receiver.fail(2)
    token_client.post(f"{URL}{created['id']}/test")
    wait(lambda: webhook_receiver.events() == ["test"], timeout=30,
         message=lambda: f"the test notification: {list(Notification.objects.values())}")
    # (marked sent once the receiver's answer reaches the sender, a moment after it got it)
    notification = wait(lambda: Notification.objects.filter(sent_at__isnull=False).first(),
                        timeout=10, message="the notification marked sent")
    assert (notification.attempts, webhook_receiver.requests) == (3, 3)
    # Tried again after 1 s, then 2 s: doubling.
    assert notification.sent_at - notification.created_at >= timedelta(seconds=3)
    assert Subscription.objects.get().failing_since is None  # it works again


def test_an_endpoint_failing_for_days_is_disabled_and_its_owner_told(
        celery_worker, token_client, alice, webhook_receiver, smtp_server, settings):
    alice.email = "alice@example.com"
    alice.save()
    settings.PADDLECLOUD_NOTIFY_DISABLE_DAYS = 3
    settings.PADDLECLOUD_NOTIFY_RETRY_SECONDS = 1
    created = subscribe(token_client, webhook_receiver, channel="webhook",
                        target=webhook_receiver.url("/gone"), events=["job.failed"])
    Subscription.objects.filter(pk=created["id"]).update(
        failing_since=timezone.now() - timedelta(days=3, minutes=1))
    webhook_receiver.fail(10)
    token_client.post(f"{URL}{created['id']}/test")
    wait(lambda: smtp_server.messages, timeout=30, message="the owner's e-mail")
    subscription = Subscription.objects.get()
    assert subscription.disabled_at is not None
    assert "failing since" in subscription.disabled_reason
    (message,) = smtp_server.messages
    assert message["Subject"] == f"[PaddleCloud] notifications to {created['target']} disabled"
    assert message["X-Envelope-To"] == "alice@example.com"
    listed = token_client.get(URL).json()[0]
    assert listed["disabled_at"] and listed["disabled_reason"] == subscription.disabled_reason
    wait(lambda: Notification.objects.get().given_up_at is not None, timeout=10,
         message="the notification to be given up")
    assert webhook_receiver.requests == 1
