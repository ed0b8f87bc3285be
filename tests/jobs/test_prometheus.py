"""The portal's metrics that jobs/ records (kernel/metrics.py): the admission wait and the
start latency where a job's state changes, replica restarts, WebSocket followers. Recorded
once the change is committed, never for one rolled back."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from jobs.models import Job
from jobs.states import JobState, ReplicaState
from jobs.transitions import job_transition, replica_transition
from kernel import metrics
from tests.factories import job_row
from tests.jobs.test_consumers import connect


def read(metric, name: str, **labels) -> float:
    return sum(sample.value for family in metric.collect() for sample in family.samples
               if sample.name == name and sample.labels == labels)


def make_job(alice, datacenter, *, age: timedelta, state=JobState.PENDING) -> Job:
    return job_row(alice, datacenter, "train", image="img", entry="python t.py", state=state,
                   created_at=timezone.now() - age, replicas={"state": ReplicaState.PENDING})


def admissions() -> tuple[float, float]:
    name = "paddlecloud_job_admission_wait_seconds"
    return (read(metrics.ADMISSION_WAIT, f"{name}_count", datacenter="datacenter1"),
            read(metrics.ADMISSION_WAIT, f"{name}_sum", datacenter="datacenter1"))


def starts() -> float:
    return read(metrics.START_LATENCY, "paddlecloud_job_start_latency_seconds_count",
                datacenter="datacenter1")


@pytest.mark.django_db
def test_the_first_admission_and_the_start_are_observed_once_committed(
        alice, datacenter, django_capture_on_commit_callbacks):
    job = make_job(alice, datacenter, age=timedelta(minutes=10))
    count, total = admissions()
    started = starts()
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(job, JobState.STARTING, "admitted")
    assert admissions()[0] == count + 1
    assert admissions()[1] - total >= 600  # submitted ten minutes ago
    # A start that timed out and a second admission: the wait was counted at the first.
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(job, JobState.QUEUED, "start timed out")
        job_transition(job, JobState.STARTING, "admitted again")
    assert admissions()[0] == count + 1
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(job, JobState.RUNNING, "all running")
    assert starts() == started + 1


@pytest.mark.django_db
def test_nothing_is_observed_for_a_change_rolled_back(alice, datacenter,
                                                      django_capture_on_commit_callbacks):
    job = make_job(alice, datacenter, age=timedelta(minutes=1))
    count, _ = admissions()
    with (django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError),
          transaction.atomic()):
        job_transition(job, JobState.STARTING, "admitted")
        raise RuntimeError("the task died half way")
    assert admissions()[0] == count


@pytest.mark.django_db
def test_replica_restarts_are_counted_by_role_and_kind(alice, datacenter,
                                                       django_capture_on_commit_callbacks):
    job = make_job(alice, datacenter, age=timedelta(0), state=JobState.RUNNING)
    replica = job.replicas.get()

    def restarts(kind):
        return read(metrics.REPLICA_RESTARTS, "paddlecloud_replica_restarts_total",
                    role="trainer", kind=kind)

    failures, disruptions = restarts("failure"), restarts("disruption")
    with django_capture_on_commit_callbacks(execute=True):
        replica_transition(replica, ReplicaState.STARTING)
        replica_transition(replica, ReplicaState.RUNNING)
        replica_transition(replica, ReplicaState.STARTING, "exit 1", restart=True)
        replica_transition(replica, ReplicaState.STARTING, "node drained", restart=True,
                           counted=False)
    assert (restarts("failure"), restarts("disruption")) == (failures + 1, disruptions + 1)


def followers(consumer: str) -> float:
    return read(metrics.WEBSOCKETS, "paddlecloud_websocket_followers", consumer=consumer)


async def followers_become(count: float) -> None:
    """A socket is a follower once its consumer has opened (after the handshake)."""
    deadline = asyncio.get_running_loop().time() + 10
    while followers("JobListConsumer") != count:
        assert asyncio.get_running_loop().time() < deadline, followers("JobListConsumer")
        await asyncio.sleep(0.02)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
async def test_websocket_followers_are_counted_while_open(app, alice, datacenter):
    before = followers("JobListConsumer")
    first = await connect(app, "/ws/jobs/", alice)
    second = await connect(app, "/ws/jobs/", alice)
    await followers_become(before + 2)
    await first.disconnect()
    await followers_become(before + 1)
    await second.disconnect()
    await followers_become(before)
    refused = await connect(app, "/ws/jobs/")  # not logged in: accepted, told, closed
    assert (await refused.receive_json_from(timeout=10))["code"] == "not_authenticated"
    assert (await refused.receive_output(timeout=10))["type"] == "websocket.close"
    assert followers("JobListConsumer") == before
    await refused.disconnect()
    assert followers("JobListConsumer") == before


@pytest.mark.django_db
def test_the_jobs_are_counted_with_one_query_however_many(alice, datacenter, other_datacenter,
                                                         django_assert_num_queries):
    from jobs.collector import JobsCollector

    def collected() -> dict:
        with django_assert_num_queries(1):
            return {(family.name, tuple(sorted(s.labels.items()))): s.value
                    for family in JobsCollector().collect() for s in family.samples}

    empty = collected()
    assert empty[("paddlecloud_jobs", (("datacenter", other_datacenter.name),
                                       ("state", "queued")))] == 0
    for index, state in enumerate([JobState.QUEUED, JobState.QUEUED, JobState.RUNNING,
                                   JobState.SUCCEEDED, JobState.PENDING]):
        job_row(alice, datacenter, f"j{index}", image="img", entry="python t.py", state=state,
                created_at=timezone.now() - timedelta(minutes=index))
    found = collected()
    assert set(found) == set(empty)  # the same series, other values

    def jobs(state, where=datacenter):
        return found[("paddlecloud_jobs", (("datacenter", where.name), ("state", state)))]

    assert (jobs("queued"), jobs("running"), jobs("succeeded"), jobs("pending")) == (2, 1, 1, 1)
    assert jobs("queued", other_datacenter) == 0
    queue = ("paddlecloud_queue_length", (("datacenter", datacenter.name),))
    assert found[queue] == 3  # pending and queued
    oldest = ("paddlecloud_queue_oldest_wait_seconds", (("datacenter", datacenter.name),))
    assert found[oldest] >= 4 * 60  # j4, pending since four minutes
    assert found[("paddlecloud_queue_oldest_wait_seconds",
                  (("datacenter", other_datacenter.name),))] == 0
