"""The Celery app of ``bench/admission.py``'s workers: the portal's own (``celery -A paddlecloud
worker`` runs the same tasks, configured the same way), with one line of the benchmark's
configuration: the start of an admitted job (``jobs.tasks.job_start``), and the keeping of an
ended job's metrics (``jobs.tasks.job_metrics_keep``), are routed to a queue that no worker
consumes, ``STARTS_QUEUE``. The benchmark plays the nodes instead (as Kueue's
performance test does with fake nodes): it ends each admitted job itself, through the engine's
transitions. So the workers do admission and nothing else. See bench/README.md.

    PYTHONPATH=bench celery -A admission_worker worker -P solo
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project: manage.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")
import django  # noqa: E402

# Django set up before the portal's modules are imported: they read its settings (the error
# shapes, through kernel.queue) as they are.
django.setup()

from kernel.celery import app  # noqa: E402
from kernel.queue import JOB_METRICS_KEEP, JOB_START  # noqa: E402

STARTS_QUEUE = "bench-admission-starts"

# The start of an admitted job, and the keeping of an ended job's metrics (a parse of its
# metrics file, issue 40's): the nodes' work, not admission's.
app.conf.task_routes = {JOB_START: {"queue": STARTS_QUEUE},
                        JOB_METRICS_KEEP: {"queue": STARTS_QUEUE}}

if os.environ.get("BENCH_ADMISSION_PROFILE"):  # a profile of the worker, written as it exits
    import atexit
    import cProfile

    _profile = cProfile.Profile()
    _profile.enable()
    atexit.register(lambda: _profile.dump_stats(
        f"{os.environ['BENCH_ADMISSION_PROFILE']}.{os.getpid()}"))
