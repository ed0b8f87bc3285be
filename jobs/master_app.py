"""A job master's task calls (docs/master.md), answered on the raw ASGI interface, before
Django: every trainer of every job calls several times a second, and a call needs none of
Django's middleware, sessions or users — the token names the job. The answer is
``master.master_call``'s, the same the API view gives elsewhere.

The calls' database work runs on a few threads of their own (``PADDLECLOUD_MASTER_THREADS``),
each keeping its connection between calls, as a pool would: a call costs its statements and
nothing more (no connection made, checked out or health-checked). A connection that saw an
error, or sat idle a while, is checked before it is used again."""

from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
import time

from django.conf import settings
from django.db import connection

from paddlecloud.before_django import BeforeDjango, Exchange
from paddlecloud.errors import ValidationError

from . import master

# jobs/urls.py's paths for the master's views (a uuid as Django's converter takes it).
CALL_RE = re.compile(r"^/api/v1/master/(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                     r"[0-9a-f]{4}-[0-9a-f]{12})/(?:next|tasks/(?P<task>[0-9]{1,18})/"
                     r"(?P<action>[^/]+))$")
BODY_LIMIT = 64 * 1024  # a call's body is a few dozen bytes; a reason at most 500 characters
IDLE_CHECK_SECONDS = 30  # a connection idle longer is checked before it is used


def _settle(future: asyncio.Future, result, error: BaseException | None) -> None:
    if not future.done():  # the client went away: nobody waits for it
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class DatabaseThreads:
    """Threads that run blocking database work for coroutines, each with its own connection
    kept from call to call; started at the first call, stopped (connections closed) by
    ``stop``."""

    def __init__(self, size: int):
        self.size = size
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    async def run(self, function, *args):
        if len(self._threads) < self.size:
            self._start()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._calls.put((function, args, loop, future))
        return await future

    def _start(self) -> None:
        with self._lock:
            while len(self._threads) < self.size:
                thread = threading.Thread(target=self._serve, daemon=True,
                                          name=f"master-db-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        used = time.monotonic()
        try:
            while (call := self._calls.get()) is not None:
                function, args, loop, future = call
                if connection.connection is not None and (
                        connection.errors_occurred
                        or time.monotonic() - used > IDLE_CHECK_SECONDS):
                    connection.close_if_unusable_or_obsolete()
                    connection.close_if_health_check_failed()
                result, error = None, None
                try:
                    result = function(*args)
                except BaseException as exc:  # the caller's to raise
                    error = exc
                used = time.monotonic()
                loop.call_soon_threadsafe(_settle, future, result, error)
        finally:
            connection.close()

    def stop(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._calls.put(None)
        for thread in threads:
            thread.join()


class MasterApp(BeforeDjango):
    """ASGI middleware: ``POST /api/v1/master/…`` here, everything else to ``app``."""

    request_signals = False  # its threads keep their own connections

    def __init__(self, app):
        super().__init__(app)
        self.threads = DatabaseThreads(settings.PADDLECLOUD_MASTER_THREADS)

    def route(self, scope):
        if scope["method"] == "POST" and CALL_RE.match(scope["path"]):
            return self.call
        return None

    async def call(self, exchange: Exchange) -> None:
        found = CALL_RE.match(exchange.scope["path"])
        body = await exchange.body(BODY_LIMIT)
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            raise ValidationError.for_field("body", f"not JSON: {exc}") from None
        task = found["task"]
        result = await self.threads.run(
            master.master_call, found["uid"], master.bearer(exchange.header("authorization")),
            found["action"] or "next", int(task) if task else None, data)
        await exchange.json(200, result)
