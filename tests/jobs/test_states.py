"""The job and replica state machine: the rule table, and applying it in the database."""

from __future__ import annotations

import threading
from datetime import timedelta
from itertools import pairwise

import pytest
from django.db import connection

from jobs.models import Job, JobEvent, Replica
from jobs.states import (
    FINAL_JOB_STATES,
    FINAL_REPLICA_STATES,
    JOB_TRANSITIONS,
    REPLICA_TRANSITIONS,
    IllegalTransitionError,
    JobState,
    ReplicaState,
    transition_check,
)
from jobs.transitions import job_transition, replica_transition
from kernel.errors import ConflictError
from tests.factories import job_row

# ---------------------------------------------------------------------------------------------
# The tables (no database)


def test_every_state_has_an_entry():
    assert set(JOB_TRANSITIONS) == set(JobState.values)
    assert set(REPLICA_TRANSITIONS) == set(ReplicaState.values)
    for table in (JOB_TRANSITIONS, REPLICA_TRANSITIONS):
        for allowed in table.values():
            assert allowed <= set(table), allowed


def test_final_states_allow_nothing():
    assert {str(s) for s in FINAL_JOB_STATES} == {"succeeded", "failed", "killed"}
    assert {str(s) for s in FINAL_REPLICA_STATES} == {"succeeded", "failed", "killed"}
    for final in FINAL_JOB_STATES:
        assert JOB_TRANSITIONS[final] == frozenset()
        for target in JobState.values:
            with pytest.raises(IllegalTransitionError) as info:
                transition_check("job", JOB_TRANSITIONS, final, target)
            assert "nothing: it has ended" in info.value.message
    for final in FINAL_REPLICA_STATES:
        assert REPLICA_TRANSITIONS[final] == frozenset()


def test_non_final_states_can_fail_or_be_killed():
    for state in set(JobState.values) - FINAL_JOB_STATES:
        transition_check("job", JOB_TRANSITIONS, state, "failed")
        transition_check("job", JOB_TRANSITIONS, state, "killed")


def test_the_happy_chain_is_allowed():
    chain = ["pending", "queued", "starting", "running", "succeeded"]
    for current, target in pairwise(chain):
        transition_check("job", JOB_TRANSITIONS, current, target)  # does not raise


@pytest.mark.parametrize(
    ("current", "target"),
    [("starting", "succeeded"), ("pending", "starting"), ("queued", "starting"),
     ("running", "queued")],  # stopped for its budget: back in its queue
)
def test_shortcuts_are_allowed(current, target):
    transition_check("job", JOB_TRANSITIONS, current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        ("running", "starting"),
        ("succeeded", "running"),
        ("killed", "failed"),
        ("running", "pending"),
        ("queued", "running"),
        ("pending", "succeeded"),
        ("failed", "failed"),
    ],
)
def test_illegal_job_transitions_are_refused(current, target):
    with pytest.raises(IllegalTransitionError) as info:
        transition_check("job", JOB_TRANSITIONS, current, target)
    error = info.value
    assert isinstance(error, ConflictError)
    assert error.status == 409
    assert error.code == "illegal_transition"
    assert f"from {current} to {target}" in error.message


def test_refusal_says_what_is_allowed():
    with pytest.raises(IllegalTransitionError) as info:
        transition_check("job", JOB_TRANSITIONS, "running", "pending")
    assert "failed, killed, queued, succeeded" in info.value.message


def test_replica_restart_transitions():
    transition_check("replica", REPLICA_TRANSITIONS, "running", "starting")
    transition_check("replica", REPLICA_TRANSITIONS, "starting", "starting")
    with pytest.raises(IllegalTransitionError):
        transition_check("replica", REPLICA_TRANSITIONS, "failed", "starting")
    with pytest.raises(IllegalTransitionError):
        transition_check("replica", REPLICA_TRANSITIONS, "pending", "running")


@pytest.mark.parametrize("target", ["finished", "", "RUNNING", "queued-ish"])
def test_unknown_target_is_a_programming_error(target):
    with pytest.raises(ValueError, match="unknown job state") as info:
        transition_check("job", JOB_TRANSITIONS, "running", target)
    assert not isinstance(info.value, IllegalTransitionError)


def test_replicas_have_no_queued_state():
    with pytest.raises(ValueError, match="unknown replica state"):
        transition_check("replica", REPLICA_TRANSITIONS, "pending", "queued")


# ---------------------------------------------------------------------------------------------
# job_transition


@pytest.fixture
def job(alice, datacenter):
    return job_row(alice, datacenter, "j1", image="img")


def events(job):
    return [(e.replica_id, e.from_state, e.to_state, e.reason)
            for e in JobEvent.objects.filter(job=job).order_by("time", "id")]


def test_a_new_job_is_pending_with_no_events(job):
    assert job.state == "pending"
    assert events(job) == []


def test_job_transition_records_an_event_per_change(job):
    assert job_transition(job, "queued", "quota in use") is True
    assert job_transition(job, "starting", "quota free") is True
    assert events(job) == [
        (None, "pending", "queued", "quota in use"),
        (None, "queued", "starting", "quota free"),
    ]
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "starting"
    assert stored.state_reason == "quota free"
    event = JobEvent.objects.filter(job=job).last()
    assert event.time == stored.updated_at


def test_job_transition_updates_the_object_in_memory(job):
    job_transition(job, "starting", "go")
    assert job.state == "starting"
    assert job.state_reason == "go"
    job_transition(job, "running")
    assert job.state == "running"
    assert job.started_at is not None
    assert job.started_at == Job.objects.get(pk=job.pk).started_at


def test_job_transition_to_the_same_state_changes_nothing(job):
    assert job_transition(job, "queued", "first") is True
    before = Job.objects.get(pk=job.pk)
    assert job_transition(job, "queued", "again") is False
    after = Job.objects.get(pk=job.pk)
    assert after.state_reason == "first"
    assert after.updated_at == before.updated_at
    assert len(events(job)) == 1


def test_job_transition_same_state_refreshes_a_stale_object(job):
    stale = Job.objects.get(pk=job.pk)
    job_transition(job, "queued")
    assert stale.state == "pending"
    assert job_transition(stale, "queued") is False
    assert stale.state == "queued"


def test_starting_sets_started_at_once(job):
    assert Job.objects.get(pk=job.pk).started_at is None
    job_transition(job, "starting")  # its replicas are being started
    started = Job.objects.get(pk=job.pk).started_at
    assert started is not None
    # Running, or repeating a change (a retried task), keeps the first start.
    job_transition(job, "running")
    job_transition(job, "running")
    job_transition(job, "succeeded")
    stored = Job.objects.get(pk=job.pk)
    assert stored.started_at == started
    assert stored.finished_at is not None
    assert stored.finished_at >= started


@pytest.mark.parametrize("final", ["succeeded", "failed", "killed"])
def test_final_state_sets_finished_at(job, final):
    job_transition(job, "starting")
    assert Job.objects.get(pk=job.pk).finished_at is None
    job_transition(job, final, f"it {final}")
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == final
    assert stored.finished_at is not None
    assert job.finished_at == stored.finished_at
    assert events(job)[-1] == (None, "starting", final, f"it {final}")


@pytest.mark.parametrize("final", ["failed", "killed"])
def test_a_pending_job_can_end_without_starting(job, final):
    job_transition(job, final)
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == final
    assert stored.started_at is None
    assert stored.finished_at is not None


def test_illegal_job_transition_changes_nothing(job):
    job_transition(job, "starting", "go")
    job_transition(job, "running", "all up")
    before = Job.objects.get(pk=job.pk)
    with pytest.raises(IllegalTransitionError) as info:
        job_transition(job, "pending", "nope")
    assert "from running to pending" in info.value.message
    after = Job.objects.get(pk=job.pk)
    assert after.state == "running"
    assert after.state_reason == "all up"
    assert after.updated_at == before.updated_at
    assert job.state == "running"
    assert job.state_reason == "all up"
    assert [e[2] for e in events(job)] == ["starting", "running"]


def test_an_ended_job_stays_ended(job):
    job_transition(job, "killed", "by alice")
    for target in ("failed", "running", "pending", "succeeded"):
        with pytest.raises(IllegalTransitionError):
            job_transition(job, target)
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "killed"
    assert stored.state_reason == "by alice"
    assert len(events(job)) == 1


def test_job_transition_checks_the_database_not_a_stale_object(job):
    stale = Job.objects.get(pk=job.pk)
    job_transition(job, "killed")
    assert stale.state == "pending"
    with pytest.raises(IllegalTransitionError, match="from killed to starting"):
        job_transition(stale, "starting")
    assert Job.objects.get(pk=job.pk).state == "killed"


def test_job_transition_unknown_target(job):
    with pytest.raises(ValueError, match="unknown job state"):
        job_transition(job, "exploded")
    assert Job.objects.get(pk=job.pk).state == "pending"
    assert events(job) == []


def test_job_events_come_back_in_order(job):
    for target in ("queued", "starting", "running", "succeeded"):
        job_transition(job, target, f"to {target}")
    assert [(e.from_state, e.to_state, e.reason) for e in job.events.all()] == [
        ("pending", "queued", "to queued"),
        ("queued", "starting", "to starting"),
        ("starting", "running", "to running"),
        ("running", "succeeded", "to succeeded"),
    ]


def test_job_events_are_ordered_by_time_then_id(job):
    job_transition(job, "starting")
    written = JobEvent.objects.get(job=job)
    # Written later but dated earlier (a clock step): comes first.
    earlier = JobEvent.objects.create(job=job, time=written.time - timedelta(seconds=1),
                                      from_state="pending", to_state="queued")
    # Written in the same instant (a coarse clock): comes after, in the order written.
    same_time = JobEvent.objects.create(job=job, time=written.time, from_state="starting",
                                        to_state="running")
    assert list(job.events.all()) == [earlier, written, same_time]


# ---------------------------------------------------------------------------------------------
# replica_transition


@pytest.fixture
def replica(job):
    return Replica.objects.create(job=job, role="trainer", index=0)


def test_replica_lifecycle_with_a_restart(job, replica):
    assert replica.state == "pending"
    assert replica_transition(replica, "starting", "scheduled",
                              backend_ref="pid-1", host="node1") is True
    assert replica_transition(replica, "running", "up", endpoint="node1:7164") is True
    first_start = Replica.objects.get(pk=replica.pk).started_at
    assert first_start is not None
    assert replica_transition(replica, "starting", "exit 1, restarting", restart=True,
                              exit_code=1, backend_ref="pid-2") is True

    stored = Replica.objects.get(pk=replica.pk)
    assert stored.state == "starting"
    assert stored.restarts == 1
    assert stored.exit_code == 1
    assert stored.reason == "exit 1, restarting"
    assert stored.host == "node1"
    assert stored.endpoint == "node1:7164"
    assert stored.backend_ref == "pid-2"
    assert stored.finished_at is None
    assert replica.restarts == 1
    assert replica.state == "starting"

    assert events(job) == [
        (replica.pk, "pending", "starting", "scheduled"),
        (replica.pk, "starting", "running", "up"),
        (replica.pk, "running", "starting", "exit 1, restarting"),
    ]
    # The events are the replica's, and also the job's.
    assert [e.to_state for e in replica.events.all()] == ["starting", "running", "starting"]
    assert [e.replica_id for e in job.events.all()] == [replica.pk] * 3
    # The job itself did not move.
    assert Job.objects.get(pk=job.pk).state == "pending"


def test_replica_restarts_count_up(replica):
    replica_transition(replica, "starting")
    for expected in (1, 2, 3):
        assert replica_transition(replica, "starting", "crash loop", restart=True) is True
        assert Replica.objects.get(pk=replica.pk).restarts == expected
    assert JobEvent.objects.filter(replica=replica).count() == 4


def test_replica_same_state_without_restart_changes_nothing(replica):
    replica_transition(replica, "starting", "first")
    assert replica_transition(replica, "starting", "again") is False
    stored = Replica.objects.get(pk=replica.pk)
    assert stored.reason == "first"
    assert stored.restarts == 0
    assert JobEvent.objects.filter(replica=replica).count() == 1


@pytest.mark.parametrize("target", ["running", "failed", "succeeded", "pending"])
def test_restart_to_anything_but_starting_is_a_programming_error(replica, target):
    replica_transition(replica, "starting")
    replica_transition(replica, "running")
    with pytest.raises(ValueError, match="starting"):
        replica_transition(replica, target, restart=True)
    stored = Replica.objects.get(pk=replica.pk)
    assert stored.state == "running"
    assert stored.restarts == 0
    assert JobEvent.objects.filter(replica=replica).count() == 2


def test_replica_exit_code_and_final_state(replica):
    replica_transition(replica, "starting")
    replica_transition(replica, "running", host="node2", endpoint="node2:8000")
    assert Replica.objects.get(pk=replica.pk).finished_at is None
    replica_transition(replica, "succeeded", "exited 0", exit_code=0)
    stored = Replica.objects.get(pk=replica.pk)
    assert stored.state == "succeeded"
    assert stored.exit_code == 0
    assert stored.host == "node2"
    assert stored.endpoint == "node2:8000"
    assert stored.finished_at is not None
    assert stored.finished_at >= stored.started_at
    assert replica.finished_at == stored.finished_at


def test_a_failed_replica_cannot_restart(job, replica):
    replica_transition(replica, "starting")
    replica_transition(replica, "running")
    replica_transition(replica, "failed", "exit 2", exit_code=2)
    before = Replica.objects.get(pk=replica.pk)
    with pytest.raises(IllegalTransitionError, match="from failed to starting"):
        replica_transition(replica, "starting", "try again", restart=True)
    after = Replica.objects.get(pk=replica.pk)
    assert after.state == "failed"
    assert after.restarts == 0
    assert after.reason == "exit 2"
    assert after.finished_at == before.finished_at
    assert JobEvent.objects.filter(replica=replica).count() == 3


def test_replica_illegal_transition_changes_nothing(replica):
    with pytest.raises(IllegalTransitionError, match="replica cannot go from pending to running"):
        replica_transition(replica, "running", host="node9")
    stored = Replica.objects.get(pk=replica.pk)
    assert stored.state == "pending"
    assert stored.host == ""
    assert stored.started_at is None
    assert not JobEvent.objects.filter(replica=replica).exists()


# ---------------------------------------------------------------------------------------------
# Concurrency: a worker and a kill racing for the same running job (real PostgreSQL)


@pytest.mark.django_db(transaction=True)
def test_racing_final_transitions_are_serialized(alice, datacenter):
    job = job_row(alice, datacenter, "race", image="img")
    job_transition(job, "starting")
    job_transition(job, "running")

    barrier = threading.Barrier(2, timeout=30)
    outcomes: dict[str, object] = {}

    def attempt(target):
        try:
            copy = Job.objects.get(pk=job.pk)
            assert copy.state == "running"
            barrier.wait()
            outcomes[target] = job_transition(copy, target, f"race to {target}")
        except Exception as exc:  # recorded and checked below
            outcomes[target] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(target,))
               for target in ("succeeded", "killed")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)

    winners = [target for target, result in outcomes.items() if result is True]
    losers = [target for target, result in outcomes.items()
              if isinstance(result, IllegalTransitionError)]
    assert len(winners) == 1, outcomes
    assert len(losers) == 1, outcomes
    winner, loser = winners[0], losers[0]
    assert f"from {winner} to {loser}" in outcomes[loser].message

    stored = Job.objects.get(pk=job.pk)
    assert stored.state == winner
    assert stored.finished_at is not None
    final_events = JobEvent.objects.filter(job=job, to_state__in=["succeeded", "killed"])
    assert [(e.from_state, e.to_state) for e in final_events] == [("running", winner)]


def test_a_restarted_replica_gets_new_start_times(replica):
    replica_transition(replica, "starting")
    replica_transition(replica, "running")
    first_start = Replica.objects.get(pk=replica.pk).started_at
    replica_transition(replica, "starting", "exit 1, restarting", restart=True, exit_code=1)
    assert Replica.objects.get(pk=replica.pk).started_at is None
    replica_transition(replica, "running", "up again")
    second_start = Replica.objects.get(pk=replica.pk).started_at
    assert second_start is not None and second_start > first_start


def test_a_replica_that_never_started_cannot_restart(replica):
    with pytest.raises(IllegalTransitionError, match="has not started"):
        replica_transition(replica, "starting", restart=True)
    stored = Replica.objects.get(pk=replica.pk)
    assert (stored.state, stored.restarts) == ("pending", 0)
    assert not JobEvent.objects.filter(replica=replica).exists()
