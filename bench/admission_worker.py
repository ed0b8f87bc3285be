"""The Celery app of ``bench/admission.py``'s workers: the portal's own (``celery -A paddlecloud
worker`` runs the same tasks, configured the same way), with one line of the benchmark's
configuration: the start of an admitted job (``jobs.tasks.job_start``) is routed to a queue that
no worker consumes, ``STARTS_QUEUE``. The benchmark plays the nodes instead (as Kueue's
performance test does with fake nodes): it ends each admitted job itself, through the engine's
transitions. So the workers do admission and nothing else. See bench/README.md.

    PYTHONPATH=bench celery -A admission_worker worker -P solo
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project: manage.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernel.celery import app  # noqa: E402
from kernel.queue import JOB_START  # noqa: E402

STARTS_QUEUE = "bench-admission-starts"

app.conf.task_routes = {JOB_START: {"queue": STARTS_QUEUE}}
