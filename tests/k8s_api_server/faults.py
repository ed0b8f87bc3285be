"""Fault injection: the next N requests matching a method and a path regex answer an error
status, or hang before being served, as an overloaded or partitioned API server does."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from .errors import ApiError

_FAULT_STATUSES = {
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try "
                             "again later"),
    500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout - context "
                     "deadline exceeded"),
}


@dataclass
class Fault:
    method: str | None  # None: any method
    path: re.Pattern  # searched in the request path (no query string)
    remaining: int
    status: int | None = None  # answer this error …
    hang_seconds: float = 0.0  # … or first sleep this long, then serve the request normally
    retry_after: int | None = None

    def error(self) -> ApiError:
        reason, message = _FAULT_STATUSES.get(self.status, ("", f"injected HTTP {self.status}"))
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        details = {"retryAfterSeconds": self.retry_after} if self.retry_after is not None else None
        return ApiError(self.status, reason, message, details=details, headers=headers)


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, *, count: int, method: str | None, path: str, status: int | None = None,
            hang_seconds: float = 0.0, retry_after: int | None = None) -> Fault:
        fault = Fault(method.upper() if method else None, re.compile(path), count, status,
                      hang_seconds, retry_after)
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, method: str, path: str) -> Fault | None:
        """The first armed fault matching this request, used up by one."""
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.method in (None, method) and \
                        fault.path.search(path):
                    fault.remaining -= 1
                    return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
