"""Writing notifications into the outbox, in the transaction of the change they tell of, and
asking a worker to send them once it commits (``delivery`` sends them; a worker's sweep
sends what that message did not reach: a worker killed, Redis down, a retry due)."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Membership
from jobs.models import Job
from kernel.queue import NOTIFICATIONS_SEND, task_later

from .events import EVENTS, JOB_STATE_EVENTS, TEST
from .models import Notification, Subscription


def subscriptions_for(datacenter_ids, owner_ids) -> dict[int, list[Subscription]]:
    """The live subscriptions that hear of each of ``owner_ids``' jobs: their own (in the
    job's datacenter), and their group's. One query (two with a group's)."""
    owner_ids = set(owner_ids)
    found = list(Subscription.objects.filter(disabled_at__isnull=True,
                                             datacenter_id__in=set(datacenter_ids))
                 .filter(Q(team__isnull=True, owner_id__in=owner_ids)
                         | Q(team__memberships__user_id__in=owner_ids)).distinct())
    teams: dict[int, set[int]] = {}
    if any(s.team_id for s in found):
        for user_id, team_id in Membership.objects.filter(
                user_id__in=owner_ids, team_id__in={s.team_id for s in found}
        ).values_list("user_id", "team_id"):
            teams.setdefault(user_id, set()).add(team_id)
    return {owner: [s for s in found if (s.team_id is None and s.owner_id == owner)
                    or s.team_id in teams.get(owner, ())]
            for owner in owner_ids}


def job_payload(kind: str, job: dict, now, said: str | None = None) -> dict:
    """What a notification about a job says (``job``: its values, ``JOB_VALUES``); ``said``:
    the event's own words, in place of its state's."""
    name = f"{job['owner__username']}/{job['name']}"
    what = {"job.started": "is running", "job.succeeded": "succeeded",
            "job.failed": "failed", "job.killed": "was killed"}.get(kind)
    if said is not None:
        text = f"job {name}: {said}"
    else:
        text = f"job {name} {what}" if what else f"job {name}: {EVENTS[kind].summary}"
        if job["state_reason"] and kind != "job.started":
            text += f": {job['state_reason']}"
    return {"event": kind, "time": now.isoformat(), "datacenter": job["datacenter__name"],
            "text": text,
            "job": {"name": job["name"], "owner": job["owner__username"],
                    "state": job["state"], "reason": job["state_reason"],
                    "url": f"{settings.PADDLECLOUD_PUBLIC_URL}/jobs/{job['name']}/"
                    if settings.PADDLECLOUD_PUBLIC_URL else None}}


JOB_VALUES = ("pk", "name", "state", "state_reason", "owner_id", "owner__username",
              "datacenter_id", "datacenter__name")


def job_moved_record(sender, *, target: str, moves: list[tuple[int, int, int]], **kwargs):
    """``jobs.signals.job_moved``'s receiver: the notifications of jobs that reached a state
    someone subscribed to, written in the transaction that moved them. ``moves``: (job id,
    owner id, datacenter id) each. One query when nobody subscribed."""
    kind = JOB_STATE_EVENTS.get(target)
    if kind is not None and moves:
        _jobs_record(kind, moves)


def run_resumed_record(sender, *, job_id: int, owner_id: int, datacenter_id: int, said: str,
                       **kwargs):
    """``jobs.signals.run_resumed``'s receiver: ``job.resumed`` notifications in the event's
    words, written in the transaction of the run's event."""
    _jobs_record("job.resumed", [(job_id, owner_id, datacenter_id)], said)


def _jobs_record(kind: str, moves: list[tuple[int, int, int]], said: str | None = None):
    """The notifications of ``kind`` about the jobs of ``moves`` ((job id, owner id,
    datacenter id) each) for whoever subscribed to it."""
    subscribed = subscriptions_for({dc for _, _, dc in moves}, {o for _, o, _ in moves})
    wanted = [(job_id, s) for job_id, owner, dc in moves for s in subscribed.get(owner, ())
              if s.datacenter_id == dc and kind in s.events]
    if not wanted:
        return
    now = timezone.now()
    jobs = {job["pk"]: job for job in Job.objects.filter(
        pk__in={job_id for job_id, _ in wanted}).values(*JOB_VALUES)}
    notifications_record([(s, kind, job_payload(kind, jobs[job_id], now, said), None)
                          for job_id, s in wanted if job_id in jobs], now)


def notifications_record(entries, now=None) -> list[Notification]:
    """Write notifications — ``(subscription, kind, payload, once_key)`` each — into the
    outbox, due now, and queue their sending for when the transaction commits. One with a
    ``once_key`` its subscription has had already is left out."""
    now = now or timezone.now()
    rows = []
    for subscription, kind, payload, once_key in entries:
        row = Notification(subscription=subscription, kind=kind, once_key=once_key,
                           created_at=now, due_at=now, payload=payload)
        row.payload = {"id": str(row.id), **payload}
        rows.append(row)
    if any(row.once_key for row in rows):
        rows = [row for row in rows if row.once_key is None or not _once_told(row)]
    Notification.objects.bulk_create(rows)
    if rows:
        task_later(NOTIFICATIONS_SEND, [str(row.id) for row in rows])
    return rows


def _once_told(row: Notification) -> bool:
    """Whether the row's subscription was told of its ``once_key`` (and, if not, it is now:
    the row is written in a savepoint, so a racing writer's is the one kept)."""
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:
        return True
    task_later(NOTIFICATIONS_SEND, [str(row.id)])
    return True  # written: not again in the bulk insert


def test_record(subscription: Subscription) -> Notification:
    """A test notification for ``subscription`` (``paddlectl notify test``)."""
    now = timezone.now()
    where = subscription.target or "the dashboard"
    payload = {"event": TEST, "time": now.isoformat(),
               "datacenter": subscription.datacenter.name,
               "text": f"a test of PaddleCloud's notifications to {where}"}
    return notifications_record([(subscription, TEST, payload, None)], now)[0]
