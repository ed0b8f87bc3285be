"""The scheduling app's Celery tasks: admitting a queue, and measuring the homes jobs write
into (a home over its storage quota starts no job). Each may safely run twice.

Their names are the ones they had in ``jobs.tasks``: a name is what ``kernel.queue``
sends and what a broker holds, not where the code lives, so work queued by a portal before
the move (an upgrade's old web process, a message waiting in Redis) finds the same code, and
the names, ``TASKS`` and the beat schedule stay as they were.
"""

from __future__ import annotations

from celery import shared_task

from accounts.models import Membership
from jobs.models import Job
from jobs.states import ACTIVE_STATES
from kernel.queue import HOME_MEASURE, JOBS_ADMIT, task_claim
from pfs.services import usage_measure

from .admission import admission_request, quota_admit, waiting_queues


@shared_task(name=JOBS_ADMIT, acks_late=True, ignore_result=True)
def jobs_admit(user_id: int, datacenter_id: int | None = None) -> int:
    """Admit what the user's quota has room for now (in one datacenter, or in each where they
    have jobs waiting). Returns how many jobs were admitted."""
    if datacenter_id is not None:
        # Before reading the queue: a job that ends from now on asks for another admission
        # (``admission.admission_request``), as this one may not see it.
        task_claim(JOBS_ADMIT, user_id, datacenter_id)
    places = {"datacenter_id": datacenter_id} if datacenter_id is not None else {}
    return sum(len(quota_admit(owner_id, dc_id))
               for owner_id, dc_id in waiting_queues(owner_id=user_id, **places))


@shared_task(name=HOME_MEASURE, acks_late=True, ignore_result=True)
def home_measure(owner_id: int, datacenter_id: int) -> None:
    """Measure a home its jobs wrote into (as they end, and while they run), then admit its
    owner's queue as the measure allows: a home over its storage quota, or that cannot be
    measured, starts no job (``pfs.services.storage_problems``)."""
    task_claim(HOME_MEASURE, owner_id, datacenter_id)
    membership = Membership.objects.select_related("user", "datacenter").filter(
        user_id=owner_id, datacenter_id=datacenter_id).first()
    if membership is None:
        return
    usage_measure(membership.user, membership.datacenter)
    admission_request(owner_id, datacenter_id)


@shared_task(name="jobs.tasks.homes_measure", ignore_result=True)
def homes_measure() -> int:
    """While jobs run they write into their owners' homes behind the file service's back:
    each such home is measured (celery beat, every PADDLECLOUD_PFS_RUNNING_USAGE_INTERVAL), so
    a job writing past the storage quota stops its owner's uploads, submissions and starts
    within that time. Returns how many homes were measured."""
    homes = set(Job.objects.filter(state__in=ACTIVE_STATES).order_by()
                .values_list("owner_id", "datacenter_id"))
    for owner_id, datacenter_id in homes:
        home_measure(owner_id, datacenter_id)
    return len(homes)
