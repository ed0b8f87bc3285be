"""The catalogue of events a subscription may name: adding a kind is one line here (and the
code of the feature that emits it, with ``outbox.notifications_record``)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.states import JobState


@dataclass(frozen=True)
class Event:
    kind: str
    summary: str
    # The subscription's setting that says when it fires (None: it just does).
    threshold: str | None = None


EVENTS: dict[str, Event] = {event.kind: event for event in (
    Event("job.started", "a job's replicas are all running"),
    Event("job.succeeded", "a job succeeded"),
    Event("job.failed", "a job failed"),
    Event("job.killed", "a job was killed"),
    Event("job.waiting", "a job has waited longer than -wait-minutes", "wait_minutes"),
    Event("job.earlier", "a job's predicted start moved earlier by more than -earlier-minutes",
          "earlier_minutes"),
    Event("job.resumed", "a job's run resumed from a checkpoint"),
    Event("budget.warning", "a budget is 80 % used"),
    Event("budget.spent", "a budget is spent"),
)}
# The test a user sends to a subscription (paddlectl notify test): no one subscribes to it.
TEST = "test"

# The job states whose reaching is an event.
JOB_STATE_EVENTS = {JobState.RUNNING: "job.started", JobState.SUCCEEDED: "job.succeeded",
                    JobState.FAILED: "job.failed", JobState.KILLED: "job.killed"}
