"""PaddleCloud: a multi-user portal for distributed PaddlePaddle training.

This package is the portal's wiring: its settings, URLs, ASGI and WSGI apps, WebSocket routes,
the embedded worker and HTTP server, and the ``paddlecloud`` command. What the apps build on is
``kernel``; no app imports this package (the ``wiring`` contract in pyproject.toml).
"""

import os

from paddlecloud_core import __version__

# What `pip install "paddlecloud[server]"` adds to the client (see pyproject.toml).
SERVER_PACKAGES = ("celery", "django", "prometheus_client")

# `celery -A paddlecloud` finds the app here, and its settings by this default: set before the
# app is made, which is when Celery decides to set Django up in its workers (and so to find the
# apps' tasks).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddlecloud.settings")

try:
    # The Celery app is created when Django starts, so that @shared_task binds to it.
    from kernel.celery import app as celery_app
except ModuleNotFoundError as missing:  # the client install: paddlectl and the SDK, no portal
    if missing.name not in SERVER_PACKAGES:
        raise
    celery_app = None

__all__ = ["__version__", "celery_app"]
