""""You would start sooner if…" for a job that would wait (a dry run's) or waits (its page, the
API's job, ``paddlectl get job``): ``paddlecloud_core.sooner``'s search on the pool its forecast
reads (``forecasts.forecast_pool``), and on those of the other datacenters its owner has an
account in (at most ``OTHER_DATACENTERS``: each costs a pool's reading and a simulation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Count, Max
from django.utils import timezone

from accounts.models import Datacenter
from jobs.models import Job
from paddlecloud_core.contract import trainers_elastic, trainers_least
from paddlecloud_core.scheduling import Vec
from paddlecloud_core.sooner import EXPECTED_WINDOW, Ask, Expected, alternatives, start_of

from .forecasts import forecast_pool
from .pool import run_history, shared, waiting_of

OTHER_DATACENTERS = 3


def job_ask(job: Job) -> Ask:
    """A job's request as the search varies it (an elastic job's trainers are not varied: it
    asks for its MIN, and takes more as they fit)."""
    least = trainers_least(job)
    return Ask(trainers=least, cpu=job.cpu, memory=job.memory, gpu=job.gpu,
               rest=Vec(cpu=job.pservers * job.pscpu, memory=job.pservers * job.psmemory,
                        jobs=1),
               deadline=job.deadline_seconds,
               trainers_least=least if trainers_elastic(job) else 1)


def expected_load(datacenter: Datacenter, owner_id: int, now: datetime) -> list[Expected]:
    """What each user is expected to submit to ``datacenter`` meanwhile (only ``owner_id``
    where the datacenter has no capacity: others' jobs do not compete there): their rate over
    the last ``EXPECTED_WINDOW`` seconds, each job like their last (two queries, and the run
    history of those who submitted)."""
    jobs = Job.objects.filter(datacenter=datacenter,
                              created_at__gt=now - timedelta(seconds=EXPECTED_WINDOW))
    if not shared(datacenter):
        jobs = jobs.filter(owner_id=owner_id)
    recent = {owner: (n, last) for owner, n, last in
              jobs.order_by().values("owner_id").annotate(n=Count("id"), last=Max("id"))
              .values_list("owner_id", "n", "last")}
    if not recent:
        return []
    history = run_history(datacenter.pk, recent)
    return [Expected(recent[job.owner_id][0] / EXPECTED_WINDOW, waiting_of(job, history))
            for job in Job.objects.filter(pk__in=[last for _, last in recent.values()])]


def sooner_find(job: Job) -> list[dict]:
    """The changes that would start ``job`` sooner (a waiting job, or an unsaved one of a dry
    run: ``created_at`` set), the earliest first, each with its predicted start and the words
    the pages and ``paddlectl`` show ("would start in 4 min with -trainers 2 (now: in
    1.2 h)")."""
    pool = forecast_pool(job.datacenter, [job.owner_id], extra=job if job.pk is None else None)
    waiting = next((w for w in pool.waiting if w.id == (job.pk or 0)), None)
    if waiting is None:  # beyond what a forecast reads of the queue
        return []
    moment = timezone.now()
    now = moment.timestamp()
    others = {
        other.name: forecast_pool(other, [job.owner_id])
        for other in Datacenter.objects.filter(memberships__user_id=job.owner_id)
        .exclude(pk=job.datacenter_id).order_by("name")[:OTHER_DATACENTERS]}
    before = start_of(pool, waiting, now)
    return [{"change": {a.field: a.value}, "flag": a.flag,
             "start": datetime.fromtimestamp(a.start, tz=UTC).isoformat(),
             "message": a.message(now, before)}
            for a in alternatives(pool, waiting, job_ask(job), now, before=before,
                                  others=others,
                                  expected=expected_load(job.datacenter, job.owner_id,
                                                         moment))]
