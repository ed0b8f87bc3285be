"""The errors of the client, and paddlectl's exit status for each failure class.

paddlectl's ``main()`` catches every ``PaddlectlError``, prints ``paddlectl: <message>`` on
stderr and exits with the error's ``exit_code``; no traceback for any of them. The SDK raises
its own subclass of each (``paddlecloud_sdk.errors``).
"""

from __future__ import annotations

OK = 0
USAGE = 1  # usage, validation and config errors; 4xx answers not listed below
AUTH = 2  # 401: wrong password, expired or revoked token
NOT_FOUND = 3  # 404
SERVER = 4  # 5xx
NETWORK = 5  # the endpoint cannot be reached, or did not answer in time
INTERRUPTED = 130  # Ctrl-C

EXIT_CODES = (
    (OK, "success"),
    (USAGE, "usage, validation or config error; a request the server refused "
            "(400, 403, 409, 413, 422, ...)"),
    (AUTH, "authentication failed (401): wrong username or password, expired or revoked token"),
    (NOT_FOUND, "not found (404)"),
    (SERVER, "server error (5xx)"),
    (NETWORK, "network error: the endpoint cannot be reached or did not answer in time"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)


class PaddlectlError(Exception):
    """An error a user can act on: one line of message and an exit code."""

    exit_code = USAGE

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UsageError(PaddlectlError):
    """Bad arguments or flags."""


class ConfigError(PaddlectlError):
    """The config file is missing, unreadable or wrong."""


class NetworkError(PaddlectlError):
    """Connection refused, unknown host, timeout, connection lost."""

    exit_code = NETWORK


class ApiError(PaddlectlError):
    """A non-2xx answer: the server's ``{"code", "message", "fields"}``."""

    def __init__(self, status: int, code: str, message: str, fields: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.fields = fields or {}
        self.retry_after: int | None = None  # seconds, when the server said (503, 429)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        if self.status == 401:
            return AUTH
        if self.status == 404:
            return NOT_FOUND
        if self.status >= 500:
            return SERVER
        return USAGE
