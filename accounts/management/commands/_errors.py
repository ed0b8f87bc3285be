"""Management commands report a PaddleCloudError as a one-line CommandError (exit 1)."""

from contextlib import contextmanager

from django.core.management.base import CommandError

from paddlecloud.errors import PaddleCloudError


@contextmanager
def user_errors():
    try:
        yield
    except PaddleCloudError as exc:
        raise CommandError(exc.message) from None
