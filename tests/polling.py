"""The tests' one poll loop: waiting for what another thread or process makes true."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait(predicate: Callable, timeout: float = 30.0,
         message: str | Callable[[], str] = "condition", every: float = 0.05):
    """``predicate()``'s first true value, asked every ``every`` seconds; after ``timeout``
    seconds the test fails with ``message`` (or what it returns, said then)."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, message() if callable(message) else message
        time.sleep(every)
    return result
