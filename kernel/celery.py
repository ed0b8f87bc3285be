"""The Celery app: queued work is sent through it (``kernel.queue``) and the workers run it.
Configured from Django settings (the ``CELERY_`` names); ``celery -A paddlecloud`` finds it as
``paddlecloud.celery_app``."""

from celery import Celery

from . import metrics

app = Celery("paddlecloud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Every task this process runs is timed; a worker started with PADDLECLOUD_METRICS_PORT serves
# its metrics there (kernel.metrics, README "Metrics").
metrics.celery_signals_connect()
metrics.worker_signals_connect()
