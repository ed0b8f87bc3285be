"""Management commands report a PaddleCloudError as a one-line CommandError (exit 1), and a
quantity they cannot read as argparse's usage error."""

import argparse
from contextlib import contextmanager

from django.core.management.base import CommandError

from kernel.errors import PaddleCloudError
from paddlecloud_core.quantity import QuantityError


def quantity_argument(parse):
    """An argparse type: the text as ``parse`` (``parse_cpu``, ``parse_bytes``) reads it."""
    def convert(value):
        try:
            return parse(value)
        except QuantityError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


@contextmanager
def user_errors():
    try:
        yield
    except PaddleCloudError as exc:
        raise CommandError(exc.message) from None
