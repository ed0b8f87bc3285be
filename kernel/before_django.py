"""Answering some HTTP requests on the raw ASGI interface, before Django.

Two kinds of request are: the PFS byte streams (``pfs.transfer``), which Django would spool or
collect whole, and a job master's task calls (``jobs.master.app``), which come many times a
second from every trainer and need none of Django's middleware. ``BeforeDjango`` does for them
what Django's middleware does for every other answer — the Host checked against ALLOWED_HOSTS,
plain HTTP sent to HTTPS (SECURE_SSL_REDIRECT), the security headers, every error in the API's
one shape — and hands everything else to Django.
"""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

from asgiref.sync import sync_to_async
from django.core import signals
from django.db import connection

from kernel import metrics
from kernel.errors import LengthRequiredError, ValidationError, render_error
from kernel.security import asgi_request, https_redirect, security_headers
from kernel.storable import request_problem

BUFFER = 1 << 20
IDLE_CHECK_SECONDS = 30  # a kept database connection idle longer is checked before use


class ClientGone(Exception):
    """The client went away before the body was complete."""


def is_number(text: str | None) -> bool:
    return text is not None and text.isascii() and text.isdigit()


class Exchange:
    """One HTTP request/response on the raw ASGI interface."""

    def __init__(self, scope, receive, send):
        self.scope, self.receive, self.send = scope, receive, send
        self.started = False
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                        for k, v in scope.get("headers", [])}

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def length(self) -> int:
        text = self.header("content-length")
        if not is_number(text):
            raise LengthRequiredError.for_field("Content-Length", "required: the size of the body")
        return int(text)

    async def body(self, limit: int) -> bytes:
        """The whole (small) request body; more than ``limit`` bytes is refused."""
        parts, size, more = [], 0, True
        while more:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            data = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(data)
            if size > limit:
                raise ValidationError.for_field("body", f"longer than {limit} bytes",
                                                code="too_long")
            parts.append(data)
        return b"".join(parts)

    async def start(self, status: int, headers: dict[str, str]) -> None:
        self.started = True
        self.status = status
        await self.send({"type": "http.response.start", "status": status, "headers": [
            (k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items()
        ]})

    async def json(self, status: int, body: dict, headers: dict[str, str] | None = None):
        data = json.dumps(body, default=str).encode()
        await self.start(status, {"Content-Type": "application/json",
                                  "Content-Length": str(len(data)), **(headers or {})})
        await self.send({"type": "http.response.body", "body": data})

    async def stream(self, status: int, headers: dict[str, str], chunks: Iterator[bytes],
                     *, head: bool = False) -> None:
        """Send what a (blocking) iterator yields, read on a worker thread in ~1 MiB pieces."""
        await self.start(status, headers)
        if head:
            await self.send({"type": "http.response.body", "body": b""})
            return
        try:
            while piece := await asyncio.to_thread(_gather, chunks):
                await self.send({"type": "http.response.body", "body": piece,
                                 "more_body": True})
        finally:
            close = getattr(chunks, "close", None)
            if close:
                await asyncio.to_thread(close)
        await self.send({"type": "http.response.body", "body": b""})


def _gather(chunks: Iterator[bytes]) -> bytes:
    """The next ~1 MiB of a stream of (possibly tiny) chunks; b"" at the end."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size >= BUFFER:
            break
    return b"".join(parts)


def _with_headers(send, headers: dict[str, str]):
    """``send``, adding ``headers`` to the answer's own (where it has none of that name)."""
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def sending(message):
        if message["type"] == "http.response.start":
            own = {name for name, _value in message["headers"]}
            message = {**message, "headers": [
                *message["headers"], *((k, v) for k, v in extra if k not in own)]}
        await send(message)

    return sending


def _settle(future: asyncio.Future, result, error: BaseException | None) -> None:
    if not future.done():  # the client went away: nobody waits for it
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


def _settle_all(settled: list) -> None:
    for future, result, error in settled:
        _settle(future, result, error)


class DatabaseThreads:
    """Threads that run blocking database work for coroutines, each with its own connection
    kept from call to call; started at the first call, stopped (connections closed) by
    ``stop``.

    Django's ASGI handler runs each request's database work on a thread of its own, which
    must open a connection and close it at the end (SQLite: the file opened, its WAL
    checkpointed and removed, every request). Work given to these threads pays only for its
    statements. A connection that saw an error, or sat idle a while, is checked first."""

    batch = 1  # calls a thread takes at once (``_run`` runs them)

    def __init__(self, size: int, name: str):
        self.size, self.name = size, name
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    async def run(self, function, *args, **kwargs):
        """``function(*args, **kwargs)`` on one of the threads; its result."""
        if kwargs:
            function = functools.partial(function, **kwargs)
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
                                          name=f"{self.name}-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        used = time.monotonic()
        try:
            while (call := self._calls.get()) is not None:
                calls = self._more([call])
                if connection.connection is not None and (
                        connection.errors_occurred
                        or time.monotonic() - used > IDLE_CHECK_SECONDS):
                    connection.close_if_unusable_or_obsolete()
                    connection.close_if_health_check_failed()
                outcomes = self._run([(function, args) for function, args, _loop, _future
                                      in calls])
                used = time.monotonic()
                answers: dict = {}  # event loop → its calls' answers: one wake-up each
                for (_function, _args, loop, future), (result, error) in zip(
                        calls, outcomes, strict=True):
                    answers.setdefault(loop, []).append((future, result, error))
                for loop, settled in answers.items():
                    loop.call_soon_threadsafe(_settle_all, settled)
        finally:
            connection.close()

    def _more(self, calls: list) -> list:
        """``calls`` and the calls already waiting, up to ``batch`` in all (a stop put back
        for the thread it is meant for)."""
        while len(calls) < self.batch:
            try:
                more = self._calls.get_nowait()
            except queue.Empty:
                break
            if more is None:  # a thread's stop: its own, or another's
                self._calls.put(None)
                break
            calls.append(more)
        return calls

    def _run(self, calls: list[tuple]) -> list[tuple]:
        """Each ``(function, args)``'s ``(result, error)``, one after the other; a subclass
        taking batches may run them together."""
        outcomes = []
        for function, args in calls:
            try:
                outcomes.append((function(*args), None))
            except BaseException as exc:  # the caller's to raise
                outcomes.append((None, exc))
        return outcomes

    def stop(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._calls.put(None)
        for thread in threads:
            thread.join()


Handler = Callable[[Exchange], Awaitable[None]]


class BeforeDjango:
    """ASGI middleware: the requests ``route`` gives a handler are answered here, everything
    else goes on to ``app`` (Django)."""

    exchange_class: type[Exchange] = Exchange
    threads: DatabaseThreads | None = None  # the database threads of a subclass that has them
    # Send Django's request_started/request_finished around each answer (on Django's database
    # thread): what closes the request's database connections. A subclass whose handlers keep
    # connections of their own, on threads of their own, turns it off.
    request_signals = True

    def __init__(self, app):
        self.app = app

    def route(self, scope) -> Handler | None:
        raise NotImplementedError

    def stop(self) -> None:
        """At the server's stop: stop the database threads (closing their connections) of
        this app and of the apps it wraps."""
        if self.threads is not None:
            self.threads.stop()
        inner = getattr(self.app, "stop", None)
        if callable(inner):
            inner()

    def error_body(self, exc: Exception, body: dict) -> dict:
        """The error answer's body for ``exc`` (a subclass may add to it)."""
        return body

    async def __call__(self, scope, receive, send):
        handler = self.route(scope) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        request = asgi_request(scope)
        send = _with_headers(send, security_headers(request))
        exchange = self.exchange_class(scope, receive, send)
        if self.request_signals:
            await sync_to_async(signals.request_started.send)(sender=type(self), scope=scope)
        try:
            request.get_host()  # raises DisallowedHost: a 400
            unstorable = request_problem(request)  # Django's middleware would refuse it
            if unstorable is not None:
                raise unstorable
            redirect = https_redirect(request)
            if redirect is not None:
                await exchange.start(redirect.status_code, dict(redirect.items()))
                await exchange.send({"type": "http.response.body", "body": b""})
                return
            await handler(exchange)
        except ClientGone:
            pass
        except Exception as exc:  # every error in the API's one shape
            status, body, headers = render_error(exc, type(self).__module__)
            if not exchange.started:
                await exchange.json(status, self.error_body(exc, body), headers)
        finally:
            if self.request_signals:
                await sync_to_async(signals.request_finished.send)(sender=type(self))
            # By the handler's name ("pfs.transfer.download"), never the path; a client gone
            # before any answer: 499, as nginx says.
            metrics.http_observed(f"{type(self).__module__}.{handler.__name__}",
                                  scope["method"], getattr(exchange, "status", 499),
                                  time.perf_counter() - began)
