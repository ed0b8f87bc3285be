"""Throttling of failed logins, shared by the token endpoint and the browser login form.

Failures are counted in the cache over a fixed window that starts with the first failure:
per (username, address) pair — so one user's password cannot be guessed from one place — and
per address across every username — so one place cannot spray passwords over many users.
Someone else failing against your username from another address does not lock you out.

Each attempt is counted *before* its password is checked (an atomic increment in the cache:
Redis, or the embedded default's in-process cache), so parallel attempts cannot all pass a
check that none of them has yet recorded. An attempt over the limit is refused unchecked and
counts nothing; a successful login clears its pair's count and gives back its address count.
"""

from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.core.cache import cache

from paddlecloud.errors import ThrottledError


def _keys(scope: str, *parts: str) -> tuple[str, str]:
    ident = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"login-failures:{scope}:{ident}", f"login-failures:{scope}:{ident}:since"


def _counters(username: str, address: str):
    pair_limit = settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT
    address_limit = settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT_PER_ADDRESS
    return (
        (_keys("pair", username.strip().lower(), address), pair_limit, "for this username"),
        (_keys("address", address), address_limit, "from your address"),
    )


def _take(count_key: str, since_key: str, window: int) -> int:
    """Add one to a counter atomically; the count including this one."""
    while True:
        cache.add(count_key, 0, timeout=window)
        try:
            count = cache.incr(count_key)
        except ValueError:  # expired between add() and incr(): start again
            continue
        if count == 1:  # the first of a window (touch: incr() may have made the key anew)
            cache.touch(count_key, window)
            cache.set(since_key, time.time(), timeout=window)
        return count


def _give_back(count_key: str, window: int) -> None:
    try:
        if cache.decr(count_key) < 1:
            cache.touch(count_key, window)  # decr() may have made the key anew
    except ValueError:  # expired or cleared meanwhile: nothing to give back
        pass


def login_attempt_reserve(username: str, address: str) -> None:
    """Count a login attempt as a failure before its password is checked; raise ThrottledError
    (counting nothing) when that would be one failure too many. Call login_success_record
    once the password is right."""
    window = settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    taken: list[str] = []
    for (count_key, since_key), limit, what in _counters(username, address):
        if _take(count_key, since_key, window) > limit:
            for key in (*taken, count_key):
                _give_back(key, window)
            since = cache.get(since_key) or time.time()
            retry_after = max(1, int(since + window - time.time()))
            raise ThrottledError(
                f"too many failed logins {what}; try again in {retry_after} seconds",
                retry_after=retry_after,
            )
        taken.append(count_key)


def login_success_record(username: str, address: str) -> None:
    """The password was right: clear the pair's failures, give back the address's count."""
    window = settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    ((pair_count, pair_since), _, _), ((address_count, _), _, _) = _counters(username, address)
    cache.delete_many([pair_count, pair_since])
    _give_back(address_count, window)


def client_address(request) -> str:
    """The client's address: the connection's, or behind a trusted proxy the one it forwarded
    (``paddlecloud.security.ForwardedHeaders`` made it the request's REMOTE_ADDR)."""
    return request.META.get("REMOTE_ADDR") or "unknown"
