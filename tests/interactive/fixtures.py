"""A real local job serving HTTP and a WebSocket (``apps.SERVING_TRAINER``) under the live
portal and a real Celery worker; the ``submit`` clean-up is the portal's own: the job is killed
at the end of the test (its processes and network go with it)."""

from __future__ import annotations

import contextlib

import pytest

from jobs.backends import backend_for
from jobs.files import log_file
from jobs.models import Job, Replica
from jobs.states import ReplicaState
from tests.factories import home, package_write
from tests.polling import wait

from .apps import SERVING_TRAINER


def said(job, replica) -> bytes:
    """What the replica's log says so far."""
    with contextlib.suppress(OSError):
        log = log_file(job, replica).open()
        if log is not None:
            with log:
                return log.read()
    return b""


@pytest.fixture
def serving_job(live_portal, celery_worker):
    """alice's job ``web``, its trainer running, submitted over the API."""
    package_write(live_portal.home, SERVING_TRAINER, name="web")
    response = live_portal.job_post("web", package=f"{home()}/web")
    assert response.status_code == 201, response.text
    job = Job.objects.select_related("datacenter", "owner").get(name="web")
    wait(lambda: Replica.objects.get(job=job, role="trainer").state == ReplicaState.RUNNING,
         timeout=60, message="the trainer to run")
    trainer = Replica.objects.get(job=job, role="trainer")
    wait(lambda: b"serving" in said(job, trainer), timeout=60,
         message=lambda: f"the trainer to serve; its log: {said(job, trainer)!r}")
    yield job
    if Job.objects.filter(pk=job.pk).exists():
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)
