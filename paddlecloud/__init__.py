"""PaddleCloud: a multi-user portal for distributed PaddlePaddle training."""

__version__ = "0.1.0"

# The Celery app is created when Django starts, so that @shared_task binds to it.
from .celery import app as celery_app

__all__ = ["__version__", "celery_app"]
