"""What the SDK raises: its own classes, named here (a traceback says
``paddlecloud_sdk.errors.ApiError``), each also the class of the same name in
``paddlecloud_client.errors`` (what paddlectl raises), so code written against either catches
them.

    try:
        job.submit()
    except ApiError as exc:            # the server refused: exc.status, exc.code, exc.fields
        ...
    except PaddleCloudError as exc:    # anything else the SDK reports on purpose
        ...

``ConfigError``: the config file (``~/.paddle/config``, ``$PADDLE_CONFIG``) is missing or
wrong. ``NetworkError``: the endpoint cannot be reached. ``JobSpecError`` (also a
``ValueError``): a ``PaddleJob`` argument is wrong, found before anything is sent.
``JobTimeoutError`` (also a ``TimeoutError``): ``wait()`` gave up. ``UsageError``: a call
that cannot be made (a job submitted twice).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TypeVar

from paddlecloud_client import errors as _cli
from paddlecloud_client.errors import PaddlectlError

T = TypeVar("T")


class PaddleCloudError(PaddlectlError):
    """Every error the SDK raises on purpose: ``message``, one line a user can act on."""


Error = PaddleCloudError


class UsageError(_cli.UsageError, PaddleCloudError):
    """A call that cannot be made as it is."""


class ConfigError(_cli.ConfigError, PaddleCloudError):
    """The config file is missing, unreadable or wrong."""


class NetworkError(_cli.NetworkError, PaddleCloudError):
    """Connection refused, unknown host, timeout, connection lost."""


class ApiError(_cli.ApiError, PaddleCloudError):
    """A non-2xx answer: ``status``, and the server's ``code``, ``message`` and ``fields``."""


class JobSpecError(UsageError, ValueError):
    """Wrong ``PaddleJob`` arguments, every one named: ``fields`` maps each to its problems."""

    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields
        super().__init__("; ".join(f"{name}: {problems[0]}"
                                   for name, problems in fields.items()))


class JobTimeoutError(PaddleCloudError, TimeoutError):
    """A job did not end within ``wait()``'s timeout; it goes on running."""

    def __init__(self, name: str, state: str, timeout: float):
        self.name, self.state, self.timeout = name, state, timeout
        super().__init__(f"job {name!r} is still {state} after {timeout:g}s")


# The client's class -> the SDK's, most specific first.
_OWN = ((_cli.ApiError, ApiError), (_cli.NetworkError, NetworkError),
        (_cli.ConfigError, ConfigError), (_cli.UsageError, UsageError))


def own(exc: PaddlectlError) -> PaddleCloudError:
    """``exc`` (raised by ``paddlecloud_client``) as the SDK's class of the same name."""
    if isinstance(exc, PaddleCloudError):
        return exc
    for theirs, ours in _OWN:
        if isinstance(exc, theirs):
            if ours is ApiError:
                return ApiError(exc.status, exc.code, exc.message, exc.fields)
            return ours(exc.message)
    return PaddleCloudError(exc.message)


def raises_own(function: Callable[..., T]) -> Callable[..., T]:
    """``function``, raising the SDK's classes where ``paddlecloud_client`` raised its own."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except PaddlectlError as exc:
            if isinstance(exc, PaddleCloudError):
                raise
            raise own(exc).with_traceback(exc.__traceback__) from None

    return call


def iterates_own(lines: Iterator[T]) -> Iterator[T]:
    """``lines``, raising the SDK's classes as it is consumed."""
    try:
        yield from lines
    except PaddlectlError as exc:
        if isinstance(exc, PaddleCloudError):
            raise
        raise own(exc).with_traceback(exc.__traceback__) from None


__all__ = ["ApiError", "ConfigError", "Error", "JobSpecError", "JobTimeoutError",
           "NetworkError", "PaddleCloudError", "PaddlectlError", "UsageError"]
