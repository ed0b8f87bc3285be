"""Watch streams: replay of the retained history after a resourceVersion, then live changes,
filtered by namespace and selectors (an object leaving the selection is DELETED, entering
it is ADDED), bookmarks, and the in-stream 410 ERROR a real server sends for versions it no
longer has."""

from __future__ import annotations

import copy
import time

from . import errors
from .api import parse_resource_version
from .store import Expired


class WatchDropped(Exception):
    """All watches were dropped on purpose (fault injection) or the server is stopping."""


def watch_events(api, rt, namespace: str | None, query: dict, *, is_stopping):
    """Check the request (bad selectors and future versions are plain HTTP errors), then return
    the stream of event dicts; it ends at the timeout and raises WatchDropped when cut off."""
    matches = api.matcher(rt, namespace, query)
    settings, store = api.settings, api.store
    timeout = min(float(query.get("timeoutSeconds") or settings.watch_timeout_seconds),
                  settings.watch_timeout_seconds)
    deadline = time.monotonic() + timeout
    requested = query.get("resourceVersion") or ""
    with store.lock:
        generation = store.watch_generation
        if requested in ("", "0") or query.get("sendInitialEvents") == "true":
            initial = [_event("ADDED", obj) for obj in store.list(rt.key) if matches(obj)]
            cursor = store.rv
        else:
            initial, cursor = [], parse_resource_version(requested)
            api.check_not_future(cursor)
    if query.get("sendInitialEvents") == "true":
        initial.append(_bookmark(rt, cursor, initial_events_end=True))
    return _stream(api, rt, initial, cursor, generation, matches, deadline=deadline,
                   bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
                   is_stopping=is_stopping)


def _stream(api, rt, initial: list[dict], cursor: int, generation: int, matches, *,
            deadline: float, bookmarks: bool, is_stopping):
    settings, store = api.settings, api.store
    yield from initial
    next_bookmark = time.monotonic() + settings.bookmark_seconds
    while True:
        try:
            changes, cursor = _wait_for_changes(store, cursor, generation,
                                                min(deadline, next_bookmark), is_stopping)
        except Expired as exc:
            yield {"type": "ERROR", "object": errors.expired(exc.requested, exc.oldest).status()}
            return
        for change in changes:
            if change.resource == rt.key and (event := _filtered(change, matches)):
                yield event
        if time.monotonic() >= deadline:
            return
        if time.monotonic() >= next_bookmark:
            if bookmarks:
                yield _bookmark(rt, cursor)
            next_bookmark = time.monotonic() + settings.bookmark_seconds


def _wait_for_changes(store, cursor: int, generation: int, until: float, is_stopping):
    """Block until something was written after ``cursor`` or ``until``; returns the changes
    and the new cursor. Events are yielded by the caller, never while holding the lock."""
    with store.lock:
        while (store.rv == cursor and store.watch_generation == generation
               and not is_stopping() and time.monotonic() < until):
            store.changed.wait(until - time.monotonic())
        if store.watch_generation != generation or is_stopping():
            raise WatchDropped
        return store.changes_after(cursor), store.rv


def _filtered(change, matches) -> dict | None:
    now = matches(change.obj) if change.type != "DELETED" else False
    before = change.old is not None and matches(change.old)
    if change.type == "DELETED":
        return _event("DELETED", change.obj) if before else None
    if now and before:
        return _event("MODIFIED", change.obj)
    if now:
        return _event("ADDED", change.obj)
    if before:
        gone = copy.deepcopy(change.old)
        gone["metadata"]["resourceVersion"] = change.obj["metadata"]["resourceVersion"]
        return _event("DELETED", gone)
    return None


def _event(type_: str, obj: dict) -> dict:
    return {"type": type_, "object": obj}


def _bookmark(rt, rv: int, *, initial_events_end: bool = False) -> dict:
    meta = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                           "metadata": meta}}
