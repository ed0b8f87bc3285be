"""The notifications page: subscribe (a webhook's secret shown on that answer only), mistakes
beside their fields, test and remove; what the dashboard subscriptions told."""

from __future__ import annotations

import pytest

from notifications.models import Notification, Subscription

pytestmark = pytest.mark.django_db
PAGE = "/notifications/"


def test_subscribe_see_the_secret_once_test_and_remove(browser, webhook_receiver, held_tasks,
                                                       django_capture_on_commit_callbacks):
    url = webhook_receiver.url("/hook")
    answer = browser.post(PAGE, {"action": "add", "events": ["job.failed", "job.killed"],
                                 "channel": "webhook", "target": url, "format": "slack"})
    assert answer.status_code == 200
    subscription = Subscription.objects.get()
    secret = answer.context["secret"]
    assert secret.startswith("whsec_") and secret in answer.content.decode()
    assert answer["Cache-Control"].startswith("max-age=0")
    page = browser.get(PAGE).content.decode()
    assert secret not in page and url in page and "job.failed, job.killed" in page

    browser.post(PAGE, {"action": "add", "events": ["job.succeeded"], "channel": "dashboard"})
    board = Subscription.objects.get(channel="dashboard")
    with django_capture_on_commit_callbacks(execute=True):
        answer = browser.post(PAGE, {"action": "test", "subscription": board.pk}, follow=True)
    assert f"A test notification is on its way to subscription {board.pk}" in \
        answer.content.decode()
    Notification.objects.update(sent_at=Notification.objects.get().created_at)
    assert "a test of PaddleCloud&#x27;s notifications to the dashboard" in \
        browser.get(PAGE).content.decode()

    answer = browser.post(PAGE, {"action": "remove", "subscription": subscription.pk},
                          follow=True)
    assert f"Removed subscription {subscription.pk}" in answer.content.decode()
    assert list(Subscription.objects.all()) == [board]


def test_mistakes_show_beside_their_fields(browser):
    answer = browser.post(PAGE, {"action": "add", "events": ["job.waiting"],
                                 "channel": "webhook", "target": "https://10.0.0.1/x"})
    form = answer.context["form"]
    assert "private or reserved network" in form.errors["target"][0]
    assert form.errors["wait_minutes"] == ["required with event job.waiting: a number of "
                                           "minutes"]
    assert not Subscription.objects.exists()
