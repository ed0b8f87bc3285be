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
from kernel.queue import (
    HOME_MEASURE,
    JOBS_ADMIT,
    task_claim,
    task_claim_members,
)
from pfs.services import storage_problems, usage_measure

from .admission import (
    admission_request,
    owners_with_work,
    queues_admit,
    quota_admit,
    waiting_queues,
)


@shared_task(name=JOBS_ADMIT, acks_late=True, ignore_result=True)
def jobs_admit(user_id: int, datacenter_id: int | None = None) -> int:
    """Admit what the user's quota has room for now, in one datacenter, with the queues of
    every other user asked for there since this task was queued (``admission_request``: one
    pass admits them all); or, without a datacenter, in each where the user has jobs waiting.
    Returns how many jobs were admitted."""
    if datacenter_id is not None:
        # Before reading the queues: a job that ends from now on asks for another admission
        # (``admission.admission_request``), as this one may not see it.
        task_claim(JOBS_ADMIT, user_id, datacenter_id)
        owner_ids, datacenter = owners_with_work(
            {user_id} | task_claim_members(JOBS_ADMIT, datacenter_id), datacenter_id)
        return len(queues_admit(owner_ids, datacenter_id, datacenter)) if owner_ids else 0
    return sum(len(quota_admit(owner_id, dc_id))
               for owner_id, dc_id in waiting_queues(owner_id=user_id))


@shared_task(name=HOME_MEASURE, acks_late=True, ignore_result=True)
def home_measure(owner_id: int, datacenter_id: int) -> None:
    """Measure a home its jobs wrote into (as they end, and while they run), with the homes in
    the datacenter asked for since this task was queued (``admission.job_ended_measure``: one
    task for a burst of ends), then admit their owners' queues as the measures allow: a home
    over its storage quota, or that cannot be measured, starts no job
    (``pfs.services.storage_problems``). Only the queues whose home's problem changed are
    admitted again (their jobs' end asked for their admission already)."""
    task_claim(HOME_MEASURE, owner_id, datacenter_id)
    owner_ids = {owner_id} | task_claim_members(HOME_MEASURE, datacenter_id)
    memberships = list(Membership.objects.select_related("user", "datacenter").filter(
        user_id__in=owner_ids, datacenter_id=datacenter_id).order_by("user_id"))
    if not memberships:
        return
    datacenter = memberships[0].datacenter
    measured = [membership.user_id for membership in memberships]
    before = storage_problems(datacenter, measured)
    for membership in memberships:
        usage_measure(membership.user, membership.datacenter)
    after = storage_problems(datacenter, measured)
    for user_id in measured:
        if before.get(user_id) != after.get(user_id):
            admission_request(user_id, datacenter_id)


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
