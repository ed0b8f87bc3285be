"""The records a backend reads and writes (``jobs.backends.base.Records``): given to the
backends when Django starts (``jobs.apps``), so that no backend imports a record itself (the
``backends-records`` contract) and a new backend needs nothing of the jobs app's models."""

from __future__ import annotations

from accounts.selectors import quota_get
from registries.services import registry_password

from .backends.base import Records
from .models import Job, JobEvent
from .states import FINAL_JOB_STATES


class JobRecords(Records):
    def quota(self, user, datacenter):
        return quota_get(user, datacenter)

    def registry_password(self, registry) -> str:
        return registry_password(registry)

    def environment_use(self, job, digest: str) -> None:
        if job.environment != digest:
            job.environment = digest
            Job.objects.filter(pk=job.pk).update(environment=digest)

    def environment_in_use(self, digest: str) -> bool:
        return Job.objects.filter(environment=digest).exclude(
            state__in=FINAL_JOB_STATES).exists()

    def event(self, job, reason: str) -> None:
        JobEvent.objects.create(job=job, from_state=job.state, to_state=job.state, reason=reason)
