"""Throttling of failed logins, shared by every way to present a password, and the per-user
limits of costly requests (``rate_take``: dry runs) and of open WebSockets (``slot_take``).

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

from kernel.errors import ThrottledError


def _keys(scope: str, *parts: str) -> tuple[str, str]:
    ident = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"{scope}:{ident}", f"{scope}:{ident}:since"


def _counters(username: str, address: str):
    pair_limit = settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT
    address_limit = settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT_PER_ADDRESS
    return (
        (_keys("login-failures:pair", username.strip().lower(), address), pair_limit,
         "for this username"),
        (_keys("login-failures:address", address), address_limit, "from your address"),
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


def _take_within(keys: tuple[str, str], limit: int, window: int) -> int | None:
    """Take one of the ``limit`` a window allows: None when taken, else (nothing taken) the
    seconds until the window ends."""
    count_key, since_key = keys
    if _take(count_key, since_key, window) <= limit:
        return None
    _give_back(count_key, window)
    since = cache.get(since_key) or time.time()
    return max(1, int(since + window - time.time()))


def login_attempt_reserve(username: str, address: str) -> None:
    """Count a login attempt as a failure before its password is checked; raise ThrottledError
    (counting nothing) when that would be one failure too many. Call login_success_record
    once the password is right."""
    window = settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    taken: list[str] = []
    for keys, limit, what in _counters(username, address):
        retry_after = _take_within(keys, limit, window)
        if retry_after is not None:
            for key in taken:
                _give_back(key, window)
            raise ThrottledError(
                f"too many failed logins {what}; try again in {retry_after} seconds",
                retry_after=retry_after,
            )
        taken.append(keys[0])


def login_success_record(username: str, address: str) -> None:
    """The password was right: clear the pair's failures, give back the address's count."""
    window = settings.PADDLECLOUD_LOGIN_FAILURE_WINDOW
    ((pair_count, pair_since), _, _), ((address_count, _), _, _) = _counters(username, address)
    cache.delete_many([pair_count, pair_since])
    _give_back(address_count, window)


def client_address(request) -> str:
    """The client's address: the connection's, or behind a trusted proxy the one it forwarded
    (``kernel.security.ForwardedHeaders`` made it the request's REMOTE_ADDR)."""
    return request.META.get("REMOTE_ADDR") or "unknown"


def _slug(what: str) -> str:
    return what.replace(" ", "-")  # (a cache key has no spaces)


def rate_take(what: str, user, *, limit: int, window: int) -> None:
    """One more of ``what`` (a costly request, e.g. "dry runs") for ``user``, who may make
    ``limit`` per ``window`` seconds (a fixed window from the first); ThrottledError (429, with
    Retry-After) for one over."""
    retry_after = _take_within(_keys(f"rate:{_slug(what)}", str(user.pk)), limit, window)
    if retry_after is not None:
        raise ThrottledError(
            f"too many {what}: at most {limit} in {window} seconds; try again in "
            f"{retry_after} seconds", retry_after=retry_after)


SLOT_LEASE = 60  # seconds a slot is held unless renewed: a process that died frees its own


def slot_take(what: str, user, *, limit: int, holder: str, retry_after: int) -> str:
    """One of the ``limit`` slots of ``what`` (e.g. "open WebSockets") that ``user`` may hold
    at once, for ``holder`` (renew it within SLOT_LEASE seconds: ``slot_renew``; give it back:
    ``slot_release``); its key. ThrottledError when all are held. Each slot is a key of its
    own, taken with the cache's atomic add(): in Redis, slots are shared by every process."""
    prefix = f"slot:{_slug(what)}:{user.pk}"
    keys = [f"{prefix}:{index}" for index in range(limit)]
    held = cache.get_many(keys)
    for key in keys:
        if key not in held and cache.add(key, holder, timeout=SLOT_LEASE):
            return key
    raise ThrottledError(f"too many {what}: at most {limit} per user; close one (a page open "
                         "in another tab or browser) and try again", retry_after=retry_after)


def slot_renew(key: str) -> None:
    cache.touch(key, SLOT_LEASE)


def slot_release(key: str, holder: str) -> None:
    if cache.get(key) == holder:  # (not one that expired and went to another)
        cache.delete(key)
