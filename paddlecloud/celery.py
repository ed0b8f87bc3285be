"""The Celery app. Configured from Django settings (the ``CELERY_`` names)."""

import os

from celery import Celery

from . import metrics

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")

app = Celery("paddlecloud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Every task this process runs is timed; a worker started with PADDLECLOUD_METRICS_PORT serves
# its metrics there (paddlecloud.metrics, README "Metrics").
metrics.celery_signals_connect()
metrics.worker_signals_connect()
