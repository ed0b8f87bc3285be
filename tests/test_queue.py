"""Work queued by name from below the tasks' layer (kernel/queue.py) reaches real tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from kernel.celery import app
from kernel.queue import TASKS, task_later, task_now

# What a worker does as it starts (`celery -A paddlecloud worker`, and the embedded one of
# runportal alike): it finds the app as `-A paddlecloud` names it, then the apps' tasks modules
# (autodiscovery), which no module imports.
WORKER_TASKS = """
import json
from celery.bin.celery import find_app
app = find_app("paddlecloud")
app.loader.import_default_modules()
print(json.dumps(sorted(app.tasks)))
"""


def test_every_name_queued_is_a_task_a_worker_finds():
    # In a process of its own (here, tests have imported the tasks modules already), with no
    # DJANGO_SETTINGS_MODULE, as the image's `celery -A paddlecloud worker` starts.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    found = subprocess.run([sys.executable, "-c", WORKER_TASKS], capture_output=True,
                           text=True, timeout=60, check=True, env=env)
    assert set(json.loads(found.stdout)) >= TASKS, TASKS - set(json.loads(found.stdout))


@pytest.mark.django_db
def test_work_is_sent_when_the_transaction_commits_and_only_then(
        monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args, countdown, **_: sent.append(
        (name, args, countdown)))
    with django_capture_on_commit_callbacks() as callbacks:
        task_later("jobs.tasks.jobs_admit", 7, 3)
        task_later("jobs.tasks.job_sync", "a-uid", countdown=2.5)
        assert sent == []  # not before the commit
    assert len(callbacks) == 2
    for callback in callbacks:
        callback()
    assert sent == [("jobs.tasks.jobs_admit", (7, 3), None),
                    ("jobs.tasks.job_sync", ("a-uid",), 2.5)]


def test_work_sent_now_is_sent_at_once_and_opens_no_database_connection(monkeypatch):
    """A backend's change feed queues from a thread of its own, with no database."""
    sent = []
    monkeypatch.setattr(app, "send_task", lambda name, args, countdown, **_: sent.append(
        (name, args, countdown)))
    opened = []

    def feed():
        from django.db import connection

        task_now("jobs.tasks.job_sync", "a-uid", countdown=0.1)
        opened.append(connection.connection)
        connection.close()

    thread = threading.Thread(target=feed)
    thread.start()
    thread.join(5)
    assert sent == [("jobs.tasks.job_sync", ("a-uid",), 0.1)]
    assert opened == [None]
    with pytest.raises(ValueError, match=r"jobs\.tasks\.job_snyc"):
        task_now("jobs.tasks.job_snyc", 1)


def test_an_unknown_name_is_refused_at_once():
    with pytest.raises(ValueError, match=r"jobs\.tasks\.job_strat"):
        task_later("jobs.tasks.job_strat", 1)


@pytest.mark.redis
def test_queued_work_keeps_no_result_subscription_on_redis(monkeypatch):
    """Nothing reads a queued task's result, so none is waited for: with Redis as the result
    backend, each task sent used to subscribe the sender to its result's channel (and its
    worker to store the result) — one subscription per job sync, held until the garbage
    collector came by, and an error then if Redis had gone meanwhile."""
    import redis
    from django.conf import settings

    sent = []
    send = app.send_task
    monkeypatch.setattr(app, "send_task", lambda *args, **options: sent.append(
        send(*args, **options)) or sent[-1])
    try:
        task_now("jobs.tasks.job_sync", "00000000-0000-4000-8000-000000000000",
                 countdown=3600)
        (result,) = sent
        client = redis.Redis.from_url(settings.REDIS_URL)
        try:
            channel = app.backend.get_key_for_task(result.id)
            assert client.pubsub_channels(channel) == []
        finally:
            client.close()
    finally:
        app.control.purge()  # not for a later test's worker
