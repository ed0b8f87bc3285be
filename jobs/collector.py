"""The jobs as Prometheus sees them, counted from the database when it scrapes (README
"Metrics"): one GROUP BY over datacenters and their jobs, by datacenter and state. Right in
whichever portal process answers, however many there are (nothing is counted twice).

Registered by ``jobs.apps`` in ``kernel.metrics.DATABASE``, which the portal's ``GET
/metrics`` serves (and a worker's port does not: the web pods have these).
"""

from __future__ import annotations

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from accounts.models import Datacenter
from kernel.metrics import DATABASE

from .states import JobState

WAITING = (JobState.PENDING, JobState.QUEUED)


class JobsCollector(Collector):
    def describe(self):
        # Without describe(), registering would collect: a query as Django starts.
        return list(self._families())

    def collect(self):
        jobs, queue, oldest = self._families()
        counts: dict[tuple[str, str], int] = {}
        waiting_since: dict[str, object] = {}
        # Every datacenter, those without jobs too (a row with no state): each state of each
        # is a series from the start, 0 until a job is in it.
        rows = (Datacenter.objects.values_list("name", "jobs__state")
                .annotate(count=Count("jobs"), since=Min("jobs__created_at")).order_by())
        for datacenter, state, count, since in rows:
            for known in JobState.values:
                counts.setdefault((datacenter, known), 0)
            if state is None:
                continue
            counts[datacenter, state] = count
            if state in WAITING and since is not None:
                earlier = waiting_since.get(datacenter)
                waiting_since[datacenter] = since if earlier is None else min(earlier, since)
        for (datacenter, state), count in sorted(counts.items()):
            jobs.add_metric([datacenter, state], count)
        now = timezone.now()
        for datacenter in sorted({datacenter for datacenter, _ in counts}):
            queue.add_metric([datacenter], sum(counts[datacenter, s] for s in WAITING))
            since = waiting_since.get(datacenter)
            oldest.add_metric([datacenter],
                              0.0 if since is None else (now - since).total_seconds())
        yield from (jobs, queue, oldest)

    @staticmethod
    def _families():
        return (
            GaugeMetricFamily("paddlecloud_jobs", "Jobs kept by the portal, by datacenter and "
                              "state (finished ones until deleted or past their TTL).",
                              labels=["datacenter", "state"]),
            GaugeMetricFamily("paddlecloud_queue_length", "Jobs waiting to be admitted "
                              "(pending or queued for quota), by datacenter.",
                              labels=["datacenter"]),
            GaugeMetricFamily("paddlecloud_queue_oldest_wait_seconds", "How long the job "
                              "waiting longest has waited since it was submitted (0: none "
                              "waits), by datacenter.", labels=["datacenter"]),
        )


_registered: list[JobsCollector] = []


def collector_register() -> None:
    """Register the collector in the portal's registry of database gauges, once a process."""
    if not _registered:
        _registered.append(JobsCollector())
        DATABASE.register(_registered[0])
