"""What the SDK raises: paddlectl's error classes (one family for the CLI and the SDK), and a
few of the SDK's own, all ``PaddlectlError`` subclasses.

    try:
        job.submit()
    except ApiError as exc:            # the server refused: exc.status, exc.code, exc.fields
        ...
    except PaddlectlError as exc:      # anything else the SDK reports on purpose
        ...

``ConfigError``: the config file (``~/.paddle/config``, ``$PADDLE_CONFIG``) is missing or
wrong. ``NetworkError``: the endpoint cannot be reached. ``JobSpecError`` (also a
``ValueError``): a ``PaddleJob`` argument is wrong, found before anything is sent.
``JobTimeoutError`` (also a ``TimeoutError``): ``wait()`` gave up.
"""

from __future__ import annotations

from paddlectl.errors import (
    ApiError,
    ConfigError,
    NetworkError,
    PaddlectlError,
    UsageError,
)

Error = PaddlectlError


class JobSpecError(UsageError, ValueError):
    """Wrong ``PaddleJob`` arguments, every one named: ``fields`` maps each to its problems."""

    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields
        super().__init__("; ".join(f"{name}: {problems[0]}"
                                   for name, problems in fields.items()))


class JobTimeoutError(PaddlectlError, TimeoutError):
    """A job did not end within ``wait()``'s timeout; it goes on running."""

    def __init__(self, name: str, state: str, timeout: float):
        self.name, self.state, self.timeout = name, state, timeout
        super().__init__(f"job {name!r} is still {state} after {timeout:g}s")


__all__ = ["ApiError", "ConfigError", "Error", "JobSpecError", "JobTimeoutError",
           "NetworkError", "PaddlectlError", "UsageError"]
