"""Throttling of failed logins, shared by the token endpoint and the browser login form.

Failures are counted in the cache over a fixed window that starts with the first failure:
per (username, address) pair — so one user's password cannot be guessed from one place — and
per address across every username — so one place cannot spray passwords over many users.
A successful login clears its pair's count. Someone else failing against your username from
another address does not lock you out.
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


def login_throttle_check(username: str, address: str) -> None:
    """Raise ThrottledError if this username/address has failed too often lately."""
    window = settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    for (count_key, since_key), limit, what in _counters(username, address):
        count = cache.get(count_key, 0)
        if count >= limit:
            since = cache.get(since_key) or time.time()
            retry_after = max(1, int(since + window - time.time()))
            raise ThrottledError(
                f"too many failed logins {what}; try again in {retry_after} seconds",
                retry_after=retry_after,
            )


def login_failure_record(username: str, address: str) -> None:
    window = settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    for (count_key, since_key), _limit, _what in _counters(username, address):
        if cache.add(count_key, 1, timeout=window):
            cache.set(since_key, time.time(), timeout=window)
        else:
            try:
                cache.incr(count_key)
            except ValueError:  # expired between add() and incr()
                cache.set(count_key, 1, timeout=window)
                cache.set(since_key, time.time(), timeout=window)


def login_success_record(username: str, address: str) -> None:
    (pair_keys, _limit, _what), _address = _counters(username, address)
    cache.delete_many(list(pair_keys))


def client_address(request) -> str:
    """The client's address; behind TRUSTED_PROXIES proxies, from X-Forwarded-For."""
    proxies = settings.TRUSTED_PROXIES
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if proxies and forwarded:
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            return hops[-min(proxies, len(hops))]
    return request.META.get("REMOTE_ADDR") or "unknown"
