"""Work queued by name from below the tasks' layer (paddlecloud/queue.py) reaches real tasks."""

from __future__ import annotations

import pytest

import jobs.tasks  # noqa: F401 - registers the tasks
import registries.tasks  # noqa: F401
from paddlecloud.celery import app
from paddlecloud.queue import TASKS, task_later


def test_every_name_queued_is_a_registered_task():
    assert set(app.tasks) >= TASKS, TASKS - set(app.tasks)


@pytest.mark.django_db
def test_work_is_sent_when_the_transaction_commits_and_only_then(
        monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args: sent.append((name, args)))
    with django_capture_on_commit_callbacks() as callbacks:
        task_later("jobs.tasks.jobs_admit", 7, 3)
        assert sent == []  # not before the commit
    assert len(callbacks) == 1
    for callback in callbacks:
        callback()
    assert sent == [("jobs.tasks.jobs_admit", (7, 3))]


def test_an_unknown_name_is_refused_at_once():
    with pytest.raises(ValueError, match=r"jobs\.tasks\.job_strat"):
        task_later("jobs.tasks.job_strat", 1)
