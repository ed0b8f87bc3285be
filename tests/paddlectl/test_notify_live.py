"""``paddlectl notify`` against a live portal: add (a webhook's secret printed once), ls as a
table, test (the notification reaches a webhook receiver on loopback through the worker),
rm; mistakes named by the portal, exit 1."""

from __future__ import annotations

import json

import pytest

from tests.paddlectl.test_jobs_live import fails, ok, table
from tests.polling import wait

pytestmark = pytest.mark.django_db(transaction=True)


def test_add_list_test_and_remove(live_cli, celery_worker, webhook_receiver):
    url = webhook_receiver.url("/hook")
    added = ok(live_cli("notify", "add", "-events", "job.failed,job.killed", "-channel",
                        "webhook", "-target", url, "-format", "slack")).stdout
    first, second = added.splitlines()
    hook = first.split()[1]
    assert first == f"subscription {hook} added: job.failed, job.killed to {url}"
    secret = second.removeprefix("signing secret (shown this once): ")
    assert secret.startswith("whsec_")
    webhook_receiver.secrets["/hook"] = secret
    board = ok(live_cli("notify", "add", "-events", "job.succeeded", "-channel",
                        "dashboard")).stdout.split()[1]

    assert table(ok(live_cli("notify", "ls")).stdout) == [
        ["ID", "EVENTS", "CHANNEL", "TARGET", "GROUP", "STATUS"],
        [hook, "job.failed,job.killed", "webhook", url, "-", "ok"],
        [board, "job.succeeded", "dashboard", "-", "-", "ok"]]
    listed = ok(live_cli("notify", "ls", "-o", "json")).stdout
    assert secret not in listed and json.loads(listed)[0]["format"] == "slack"

    assert ok(live_cli("notify", "test", hook)).stdout.startswith("test notification ")
    wait(lambda: webhook_receiver.events() == ["test"], timeout=30,
         message=lambda: f"the test notification: {webhook_receiver.refused}")
    (delivery,) = webhook_receiver.received.values()
    assert delivery.body == {"text": f"a test of PaddleCloud's notifications to {url}"}

    assert ok(live_cli("notify", "rm", hook, board)).stdout == (
        f"subscription {hook} removed\nsubscription {board} removed\n")
    assert ok(live_cli("notify", "ls")).stdout == "no subscriptions in datacenter datacenter1\n"
    fails(live_cli("notify", "rm", hook), 3, f"you have no subscription {hook}")


def test_mistakes_are_named(live_cli):
    fails(live_cli("notify", "add", "-events", "job.exploded", "-channel", "email",
                   "-target", "x@example.com"), 1, "events: unknown event 'job.exploded'")
    fails(live_cli("notify", "add", "-events", "job.failed", "-channel", "webhook", "-target",
                   "https://10.0.0.1/x"), 1, "target: host '10.0.0.1' is at 10.0.0.1")
    fails(live_cli("notify", "add", "-channel", "email"), 1, "-events and -channel required")
    fails(live_cli("notify", "test"), 1, "usage: paddlectl notify")
