"""``celery -A paddlecloud worker`` with one step of the portal made slow, for a test to kill
the worker -9 in the middle of it (tests/jobs/test_lost_starts.py).

    python tests/jobs/slow_worker.py STEP MARK [celery worker options]

STEP is ``launch`` (a job's start: ``engine.job_launch``), ``send`` (the send of a job's
start, once the admission committed: ``kernel.queue._send`` of ``JOB_START``) or ``none``.
As the worker enters the step it appends a line to the file MARK, then waits a minute before
doing it (``launch``) or forever (``send``: the process dies before the message leaves).
Every reconciler run appends ``reconcile <start> <end>`` (``time.time()``) to MARK too.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")

import django  # noqa: E402

django.setup()

from celery.bin.celery import main  # noqa: E402

from jobs import engine, tasks  # noqa: E402
from kernel import queue  # noqa: E402

step, mark = sys.argv[1], Path(sys.argv[2])


def say(line: str) -> None:
    with mark.open("a") as file:
        file.write(f"{line}\n")


if step == "launch":
    launch = engine.job_launch

    def slow_launch(job_id: int) -> None:
        say(f"launch {job_id} {os.getpid()}")
        time.sleep(float(os.environ.get("SLOW_SECONDS", "60")))
        launch(job_id)

    engine.job_launch = slow_launch
elif step == "send":
    send = queue._send

    def lost_send(name, args, countdown=None):
        if name == queue.JOB_START:
            say(f"send {args[0]}")
            time.sleep(3600)
        send(name, args, countdown)

    queue._send = lost_send

reconcile = tasks._reconcile


def timed_reconcile(*args, **kwargs):
    began = time.time()
    try:
        return reconcile(*args, **kwargs)
    finally:
        say(f"reconcile {began} {time.time()}")


tasks._reconcile = timed_reconcile

sys.argv = ["celery", "-A", "paddlecloud", "worker", *sys.argv[3:]]
main()
