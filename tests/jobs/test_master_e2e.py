"""The master with real processes: a job's trainers (local backend, sandboxed, Celery worker)
read a dataset through ``paddlecloud_sdk.master`` from the portal over HTTP, one of them is
killed mid-task and restarted, the portal's worker is restarted mid-pass — and every record is
delivered by a task completed exactly once per pass (the scenario: master_scenario.py; on
Kubernetes: test_master_on_kubernetes.py)."""

from __future__ import annotations

import os
import signal

import pytest

from .master_scenario import dataset_job, trainer_killed_mid_task, worker_restarted_mid_pass


@pytest.fixture
def job_with_dataset(live_portal, settings):
    """1000 records in 5 RecordIO files, cut into 50 tasks of 20, 2 passes, 3 trainers."""
    settings.PADDLECLOUD_PORTAL_URL = live_portal.url
    return dataset_job(live_portal)


@pytest.mark.django_db(transaction=True)
def test_a_trainer_killed_mid_task_loses_no_record(job_with_dataset, celery_worker):
    job = job_with_dataset(SLOW_TRAINER="1", SLOW="0.05")  # trainer 1: 1 s a task

    def kill():
        pid = int(job.replicas.get(role="trainer", index=1).backend_ref.split(":")[1])
        os.killpg(pid, signal.SIGKILL)  # its whole process group, mid-task

    trainer_killed_mid_task(job, kill)
    assert job.replicas.get(role="trainer", index=1).restarts == 1


@pytest.mark.django_db(transaction=True)
def test_the_portals_worker_restarted_mid_pass_loses_no_record(job_with_dataset):
    worker_restarted_mid_pass(job_with_dataset)
