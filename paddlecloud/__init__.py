"""PaddleCloud: a multi-user portal for distributed PaddlePaddle training."""

from paddlecloud_core import __version__

# What `pip install "paddlecloud[server]"` adds to the client (see pyproject.toml).
SERVER_PACKAGES = ("celery", "django", "prometheus_client")

try:
    # The Celery app is created when Django starts, so that @shared_task binds to it.
    from .celery import app as celery_app
except ModuleNotFoundError as missing:  # the client install: paddlectl and the SDK, no portal
    if missing.name not in SERVER_PACKAGES:
        raise
    celery_app = None

__all__ = ["__version__", "celery_app"]
