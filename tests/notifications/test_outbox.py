"""The outbox: a notification is written in the transaction of the change it tells of (a move
rolled back tells nothing), and the watch's events (a long wait, a budget 80 % used or spent)
are each told once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from accounts.models import Budget
from jobs.models import Job
from jobs.transitions import job_transition
from notifications.models import Notification, Subscription
from notifications.watch import notifications_watch
from tests.factories import job_row
from tests.jobs.test_budgets import ran

pytestmark = pytest.mark.django_db


def subscription(alice, datacenter, *events, **fields) -> Subscription:
    return Subscription.objects.create(owner=alice, datacenter=datacenter, events=list(events),
                                       channel="dashboard", **fields)


def test_a_move_rolled_back_tells_nothing_and_one_committed_tells_its_subscribers(
        alice, datacenter, make_user, held_tasks, django_capture_on_commit_callbacks):
    subscription(alice, datacenter, "job.failed")
    bob = make_user("bob")
    subscription(bob, datacenter, "job.failed")  # hears of bob's jobs only
    job = job_row(alice, datacenter, "fit", state="queued")

    with pytest.raises(RuntimeError), transaction.atomic():
        job_transition(job, "failed", "no luck")
        assert Notification.objects.count() == 1  # written with the move…
        raise RuntimeError
    assert not Notification.objects.exists()  # …and gone with it

    with django_capture_on_commit_callbacks(execute=True):
        job_transition(Job.objects.get(pk=job.pk), "failed", "no luck")
    (notification,) = Notification.objects.all()
    assert notification.subscription.owner == alice
    assert notification.payload == {
        "id": str(notification.pk), "event": "job.failed", "time": notification.payload["time"],
        "datacenter": "datacenter1", "text": "job alice/fit failed: no luck",
        "job": {"name": "fit", "owner": "alice", "state": "failed", "reason": "no luck",
                "url": None}}
    assert [args for name, args in held_tasks.sent
            if name == "notifications.tasks.notifications_send"] == [([str(notification.pk)],)]


def test_a_job_waiting_too_long_is_told_once(alice, datacenter, held_tasks):
    subscription(alice, datacenter, "job.waiting", wait_minutes=10)
    old = job_row(alice, datacenter, "old", state="queued")
    Job.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=11))
    job_row(alice, datacenter, "new", state="queued")
    notifications_watch()
    cache.delete("notifications:watch")  # the next round (one per half minute)
    notifications_watch()
    (notification,) = Notification.objects.all()
    assert notification.payload["text"] == "job alice/old has waited more than 10 minutes"


def test_a_budget_is_told_at_80_percent_and_spent_once_each_window(alice, datacenter,
                                                                   held_tasks):
    subscription(alice, datacenter, "budget.warning", "budget.spent")
    Budget.objects.create(datacenter=datacenter, user=alice, cpu_hours=10, window="day",
                          kind="rolling")
    now = timezone.now()
    ran(alice, datacenter, "a", cpu=1000, began=now - timedelta(hours=9),
        ended=now - timedelta(minutes=30))
    for _ in range(2):
        cache.delete("notifications:watch")
        notifications_watch()
    (warning,) = Notification.objects.all()
    assert warning.kind == "budget.warning"
    assert warning.payload["text"] == "alice's day budget is 85% used in the last 24 hours"

    ran(alice, datacenter, "b", cpu=1000, began=now - timedelta(hours=2), ended=now)
    for _ in range(2):
        cache.delete("notifications:watch")
        notifications_watch()
    assert sorted(Notification.objects.values_list("kind", flat=True)) == [
        "budget.spent", "budget.warning"]


def test_a_predicted_start_moved_earlier_is_told(alice, datacenter, held_tasks):
    """The watch keeps each waiting job's predicted start from one round to the next; one
    that moved earlier by more than the subscription's minutes is told (here the earlier
    prediction is planted: two hours later than the forecast now says)."""
    watched = subscription(alice, datacenter, "job.earlier", earlier_minutes=30)
    job = job_row(alice, datacenter, "fit", state="queued")
    notifications_watch()
    assert not Notification.objects.exists()  # the first prediction seen: nothing to compare
    key = f"notifications:predicted:{watched.pk}:{job.pk}"
    now_predicted = cache.get(key)
    assert now_predicted is not None
    cache.set(key, now_predicted + 2 * 3600)
    cache.delete("notifications:watch")
    notifications_watch()
    (notification,) = Notification.objects.all()
    assert notification.kind == "job.earlier"
    assert notification.payload["text"].startswith("job alice/fit is now predicted to start")
    assert notification.payload["text"].endswith("120 minutes earlier")


def test_a_groups_subscription_hears_of_its_members_jobs(alice, datacenter, make_user,
                                                         held_tasks):
    from accounts.models import Membership, Team

    team = Team.objects.create(datacenter=datacenter, name="vision")
    bob, carol = make_user("bob"), make_user("carol")
    Membership.objects.filter(user__in=[alice, bob]).update(team=team)
    subscription(alice, datacenter, "job.failed", team=team)
    for owner in (bob, carol):
        job_transition(job_row(owner, datacenter, "fit", state="queued"), "failed", "no")
    (notification,) = Notification.objects.all()
    assert notification.payload["text"] == "job bob/fit failed: no"


def test_notifications_sent_a_month_ago_are_deleted(alice, datacenter, held_tasks):
    watched = subscription(alice, datacenter, "job.failed")
    now = timezone.now()
    for sent, created in ((True, now - timedelta(days=31)), (False, now - timedelta(days=31)),
                          (True, now - timedelta(days=29))):
        Notification.objects.create(subscription=watched, kind="test", payload={},
                                    created_at=created, due_at=created,
                                    sent_at=created if sent else None)
    notifications_watch()
    assert sorted(Notification.objects.values_list("sent_at", flat=True),
                  key=lambda at: at is None) == [now - timedelta(days=29), None]
