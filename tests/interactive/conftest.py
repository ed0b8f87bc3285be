"""A real local job serving HTTP and a WebSocket (``apps.SERVING_TRAINER``), running under the
live portal and a real Celery worker; stopped (and gone) at the end of the test."""

from __future__ import annotations

import pytest

from jobs.models import Job, Replica
from jobs.states import ReplicaState
from tests.factories import home, package_write
from tests.polling import wait

from .apps import SERVING_TRAINER


@pytest.fixture
def serving_job(live_portal, celery_worker):
    """alice's job ``web``, its trainer serving (its log says so), over the API."""
    package_write(live_portal.home, SERVING_TRAINER, name="web")
    response = live_portal.job_post("web", package=f"{home()}/web")
    assert response.status_code == 201, response.text
    job = Job.objects.get(name="web")
    wait(lambda: Replica.objects.get(job=job, role="trainer").state == ReplicaState.RUNNING,
         timeout=60, message="the trainer to run")
    return job
