"""When each waiting job is predicted to start, with a range: the scheduling model's forecast
(``paddlecloud_core.scheduling.forecast``) of a datacenter's pool (``pool``), for the job
pages, the API, the WebSockets and ``submit --dry-run``. A datacenter's forecast is cached
while none of its jobs changes state."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.cache import cache
from django.db.models import Max
from django.utils import timezone

from accounts.models import Datacenter
from jobs.models import Job, JobEvent
from jobs.states import WAITING_STATES
from kernel.errors import REDIS_DOWN
from paddlecloud_core.scheduling import Plan, Pool, forecast, schedule

from .pool import HEAD_FIELDS, QUEUE_ORDER, pool_load, shared

FORECAST_LOOK = 500  # waiting jobs of a datacenter a forecast reads at most


@dataclass(frozen=True)
class Prediction:
    """When a waiting job is predicted to start, with a range (None: not within the
    forecast's horizon, or never; or ``unknown``, which says why no time can be told)."""

    at: datetime | None
    earliest: datetime | None
    latest: datetime | None
    unknown: str = ""

    def as_dict(self) -> dict:
        return {**{key: value.isoformat() if value else None
                   for key, value in (("at", self.at), ("earliest", self.earliest),
                                      ("latest", self.latest))},
                "unknown": self.unknown or None}


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def forecast_pool(datacenter: Datacenter, owner_ids: Iterable[int],
                  extra: Job | None = None) -> Pool:
    """The pool a forecast of the datacenter reads: its waiting jobs (of ``owner_ids`` only,
    unless the datacenter has a capacity: then everyone's count), with ``extra`` (an unsaved
    job, id 0) as if it were submitted now."""
    waiting = Job.objects.filter(datacenter=datacenter, state__in=WAITING_STATES)
    if not shared(datacenter):
        waiting = waiting.filter(owner_id__in=list(owner_ids))
    waiting = list(waiting.order_by(*QUEUE_ORDER).only(*HEAD_FIELDS)[:FORECAST_LOOK])
    owners = {job.owner_id for job in waiting} | set(owner_ids)
    if extra is not None:
        waiting.append(extra)
    return pool_load(datacenter, owners, waiting)


def datacenter_forecast(datacenter: Datacenter, owner_ids: Iterable[int],
                        extra: Job | None = None) -> tuple[Plan, dict[int, Prediction]]:
    """The plan now and the predicted start of each waiting job of the datacenter
    (``forecast_pool``'s)."""
    pool = forecast_pool(datacenter, owner_ids, extra)
    now = timezone.now().timestamp()
    predicted = forecast(pool, now)
    return schedule(pool, now), {
        job_id: Prediction(_moment(f.start), _moment(f.low), _moment(f.high), f.unknown)
        for job_id, f in predicted.items()}


def _cache_call(method, *args):
    """A call to the cache that Redis down turns into a miss: a forecast decorates the lists
    and pages, which it must never fail (computed afresh meanwhile)."""
    try:
        return method(*args)
    except REDIS_DOWN:
        return None


def forecast_key(datacenter: Datacenter, owners: list[int]) -> str:
    """Where the datacenter's forecast for ``owners`` is cached: a new key as soon as any
    job of it changes state (its last event)."""
    last = JobEvent.objects.filter(job__datacenter=datacenter).aggregate(Max("id"))
    return (f"forecast:{datacenter.pk}:{last['id__max']}:"
            + ("all" if shared(datacenter) else ",".join(map(str, owners))))


def _passed(predictions: Iterable[Prediction]) -> bool:
    """Whether a start predicted has passed (the job still waits): the forecast is made
    again, never shown as a moment gone by."""
    now = timezone.now()
    return any(p.at is not None and p.at < now for p in predictions)


def job_predictions(jobs: Iterable[Job]) -> dict[int, Prediction]:
    """The predicted start of each waiting job among ``jobs`` (a forecast per datacenter,
    reused while nothing in it changed state)."""
    by_datacenter: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        if job.state in WAITING_STATES:
            by_datacenter[job.datacenter_id].append(job)
    out: dict[int, Prediction] = {}
    # A datacenter's forecast is kept a while (PADDLECLOUD_FORECAST_CACHE_SECONDS), for as long
    # as no job of it changed state: a page of jobs, or paddlectl asking again, costs a cache
    # read. (What no job's event records — a quota or a capacity changed — shows within it.)
    keep = settings.PADDLECLOUD_FORECAST_CACHE_SECONDS
    for waiting in by_datacenter.values():
        datacenter = waiting[0].datacenter  # the lists read it with their jobs
        owners = sorted({job.owner_id for job in waiting})
        key = predicted = None
        if keep:
            key = forecast_key(datacenter, owners)
            predicted = _cache_call(cache.get, key)
        if predicted is None or any(job.pk not in predicted for job in waiting) \
                or _passed(predicted.values()):
            _, predicted = datacenter_forecast(datacenter, owners)
            if keep:
                _cache_call(cache.set, key, predicted, keep)
        out.update({job.pk: predicted[job.pk] for job in waiting if job.pk in predicted})
    return out
