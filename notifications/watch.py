"""The events no single change makes, looked for every half minute (one worker at a time): a
job waiting longer than a subscription's ``wait_minutes``, a job's predicted start moved
earlier by more than its ``earlier_minutes``, a budget 80 % used or spent. Each is told once
(its ``once_key``: the job, the new prediction, the budget's window). Notifications sent
more than KEEP_DAYS ago are deleted."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Budget, Membership
from jobs.models import Job
from jobs.states import WAITING_STATES
from kernel.errors import REDIS_DOWN
from scheduling.budgets import LENGTHS, use, window_of
from scheduling.forecasts import job_predictions

from .models import Notification, Subscription
from .outbox import JOB_VALUES, job_payload, notifications_record

LOCK_SECONDS = 25
KEEP_DAYS = 30  # a notification sent (or given up on) is kept this long: the dashboard's list
BUDGET_WARNING = 0.8
PREDICTION_KEEP = 7 * 24 * 3600


def notifications_watch() -> None:
    try:
        if not cache.add("notifications:watch", 1, LOCK_SECONDS):
            return  # another worker's round
    except REDIS_DOWN:
        return
    now = timezone.now()
    Notification.objects.filter(created_at__lt=now - timedelta(days=KEEP_DAYS)).filter(
        Q(sent_at__isnull=False) | Q(given_up_at__isnull=False)).delete()
    wanted = [s for s in Subscription.objects.filter(disabled_at__isnull=True)
              .select_related("datacenter")
              if {"job.waiting", "job.earlier", "budget.warning", "budget.spent"}
              & set(s.events)]
    if not wanted:
        return
    owners = _owners(wanted)
    entries = _waits(wanted, owners, now) + _earlier(wanted, owners, now) + \
        _budgets(wanted, now)
    if entries:
        with transaction.atomic():
            notifications_record(entries, now)


def _owners(subscriptions) -> dict[int, set[int]]:
    """Whose jobs each subscription hears of: its owner's, or its group's members'."""
    members = defaultdict(set)
    for user_id, team_id in Membership.objects.filter(
            team_id__in={s.team_id for s in subscriptions if s.team_id}
    ).values_list("user_id", "team_id"):
        members[team_id].add(user_id)
    return {s.pk: members[s.team_id] if s.team_id else {s.owner_id} for s in subscriptions}


def _waiting(subscription, owners, *fields):
    return Job.objects.filter(datacenter_id=subscription.datacenter_id,
                              owner_id__in=owners[subscription.pk], state__in=WAITING_STATES)


def _waits(subscriptions, owners, now) -> list:
    out = []
    for s in subscriptions:
        if "job.waiting" not in s.events:
            continue
        for job in _waiting(s, owners).filter(
                created_at__lte=now - timedelta(minutes=s.wait_minutes)).values(*JOB_VALUES):
            payload = job_payload("job.waiting", job, now)
            payload["text"] = (f"job {job['owner__username']}/{job['name']} has waited more "
                               f"than {s.wait_minutes} minutes")
            out.append((s, "job.waiting", payload, f"job.waiting:{job['pk']}"))
    return out


def _earlier(subscriptions, owners, now) -> list:
    """A job's predicted start against the one seen last round (kept in the cache)."""
    chosen = [s for s in subscriptions if "job.earlier" in s.events]
    if not chosen:
        return []
    jobs = {}
    for s in chosen:
        for job in _waiting(s, owners).select_related("datacenter", "owner"):
            jobs[job.pk] = job
    predictions = job_predictions(jobs.values())
    out = []
    for s in chosen:
        for job in jobs.values():
            if (job.owner_id not in owners[s.pk] or job.datacenter_id != s.datacenter_id
                    or (at := predictions.get(job.pk)) is None or at.at is None):
                continue
            key = f"notifications:predicted:{s.pk}:{job.pk}"
            before = cache.get(key)
            cache.set(key, at.at.timestamp(), PREDICTION_KEEP)
            if before is None or before - at.at.timestamp() <= s.earlier_minutes * 60:
                continue
            values = {"pk": job.pk, "name": job.name, "state": job.state,
                      "state_reason": job.state_reason, "owner__username": job.owner.username,
                      "datacenter__name": job.datacenter.name}
            payload = job_payload("job.earlier", values, now)
            payload["predicted_start"] = at.as_dict()
            payload["text"] = (f"job {job.owner.username}/{job.name} is now predicted to start "
                               f"at {at.at:%Y-%m-%d %H:%M} UTC, "
                               f"{(before - at.at.timestamp()) / 60:.0f} minutes earlier")
            out.append((s, "job.earlier", payload,
                        f"job.earlier:{job.pk}:{int(at.at.timestamp())}"))
    return out


def _budgets(subscriptions, now) -> list:
    """A budget's use crossing 80 % and 100 %, once per window (a rolling window: once per
    its length)."""
    chosen = [s for s in subscriptions if {"budget.warning", "budget.spent"} & set(s.events)]
    out = []
    measured = {}
    for s in chosen:
        if s.team_id:
            budgets = Budget.objects.filter(team_id=s.team_id)
        else:
            team = Membership.objects.filter(user_id=s.owner_id, datacenter_id=s.datacenter_id
                                             ).values_list("team_id", flat=True).first()
            budgets = Budget.objects.filter(datacenter_id=s.datacenter_id, user_id=s.owner_id)
            if team:
                budgets = budgets | Budget.objects.filter(team_id=team)
        for budget in budgets.select_related("team", "user"):
            if budget.pk not in measured:
                measured[budget.pk] = use(budget, now)
            used = measured[budget.pk]
            start, words = window_of(budget, now)
            if budget.kind == Budget.Kind.ROLLING:
                length = LENGTHS[budget.window].total_seconds()
                start = int(now.timestamp() // length)
            else:
                start = int(start.timestamp())
            share = max([value / float(limit) for limit, value in (
                (budget.gpu_hours, used.gpu_hours), (budget.cpu_hours, used.cpu_hours))
                if limit], default=0.0)
            kind = ("budget.spent" if share >= 1 else
                    "budget.warning" if share >= BUDGET_WARNING else None)
            if kind is None or kind not in s.events:
                continue
            whose = f"group {budget.team.name}'s" if budget.team_id else \
                f"{budget.user.username}'s"
            out.append((s, kind, {
                "event": kind, "time": now.isoformat(), "datacenter": s.datacenter.name,
                "text": f"{whose} {budget.window} budget is {share:.0%} used {words}",
                "budget": {"whose": whose, "window": budget.window, "kind": budget.kind,
                           "gpu_hours": used.gpu_hours, "cpu_hours": used.cpu_hours,
                           "gpu_hours_limit": budget.gpu_hours and float(budget.gpu_hours),
                           "cpu_hours_limit": budget.cpu_hours and float(budget.cpu_hours)}},
                f"{kind}:{budget.pk}:{start}"))
    return out
