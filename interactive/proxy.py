"""The portal's proxy to the ports of running jobs: one origin per route
(``{key}.{PADDLECLOUD_SESSIONS_DOMAIN}``, ``interactive.services``), mounted in front of the
portal (``paddlecloud/asgi.py``) and chosen by the request's Host.

- ``/_paddlecloud/enter?ticket=…&next=…`` takes a one-time ticket the portal gave and answers
  with the route's own cookie (HttpOnly, SameSite=Lax, host-only; ``__Host-`` and Secure on
  https) and a redirect to ``next``.
- Anything else passes only with that cookie, for the job's owner (or an admin) while the job
  runs (``services.route_pass``); anyone else is told "Not found" (404), as for a route that
  does not exist. A request another site's page makes with the cookie (Sec-Fetch-Site, or an
  Origin that is not the route's own, on anything but a top-level GET) is refused (403): the
  route adds the session's token, which would let such a request do what the user may.
- HTTP goes upstream with httpcore (HTTP/1.1, both bodies streamed, connections kept per
  route) and WebSockets with the ``websockets`` package's protocol, over the replica's port
  (``Backend.port_open``). Upstream, the request's Host and Origin are the app's own
  (``127.0.0.1:PORT``), the route's cookie is taken out of the Cookie header and the route's
  headers are added; an app's redirect to its own address comes back as the route's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import weakref
from urllib.parse import parse_qs

import httpcore
from channels.db import database_sync_to_async
from django.conf import settings
from websockets.client import ClientProtocol
from websockets.frames import Close, Opcode
from websockets.http11 import Response as WsResponse
from websockets.protocol import State
from websockets.typing import Origin
from websockets.uri import parse_uri

from jobs.backends import backend_for
from jobs.backends.base import BackendError

from . import services
from .upstream import CONNECT_SECONDS, PortBackend

HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
              b"te", b"trailer", b"transfer-encoding", b"upgrade", b"host"}
KEY = re.compile(f"[a-z0-9]{{{services.KEY_LENGTH}}}")
KEEPALIVE_SECONDS = 5.0  # an idle upstream connection is kept this long for the next request
CHUNK = 65536


def header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def route_key(scope) -> str | None:
    """The key of the route a request's Host names, or None: the portal's own request."""
    host = (header(scope, b"host") or "").strip().lower().rstrip(".")
    domain = settings.PADDLECLOUD_SESSIONS_DOMAIN
    if ":" not in domain:
        host = re.sub(r":\d+$", "", host)
    label, dot, rest = host.partition(".")
    if dot and rest == domain and KEY.fullmatch(label):
        return label
    return None


def cookie_name(scope) -> str:
    """The route's cookie: ``__Host-`` on https (Secure, host-only, Path=/ by the browser's
    own rule)."""
    return f"__Host-{services.COOKIE_NAME}" if _secure(scope) else services.COOKIE_NAME


def _secure(scope) -> bool:
    return scope.get("scheme") in ("https", "wss")


def _cookies(scope) -> list[tuple[str, str]]:
    pairs = []
    for key, value in scope.get("headers", ()):
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                name, eq, val = part.strip().partition("=")
                if eq:
                    pairs.append((name, val))
    return pairs


def _ours(name: str) -> bool:
    return name in (services.COOKIE_NAME, f"__Host-{services.COOKIE_NAME}")


def own_origin(scope) -> str:
    """The route's origin as the browser names it: the request's scheme and Host."""
    scheme = "https" if _secure(scope) else "http"
    return f"{scheme}://{(header(scope, b'host') or '').lower()}"


def cross_site(scope, method: str) -> bool:
    """Whether another site's page (another route's included) made the request: only a
    top-level GET (or HEAD) may come from elsewhere, as a link followed."""
    fetch_site = header(scope, b"sec-fetch-site")
    navigation = (method in ("GET", "HEAD") and header(scope, b"sec-fetch-mode")
                  in (None, "navigate"))
    if fetch_site is not None and fetch_site not in ("same-origin", "none") and not navigation:
        return True
    origin = header(scope, b"origin")
    return (origin is not None and origin != own_origin(scope)
            and (method not in ("GET", "HEAD") or scope["type"] == "websocket"))


def upstream_headers(scope, passed: services.Pass) -> list[tuple[bytes, bytes]]:
    """The request's headers as the app gets them."""
    port = passed.route.port
    out = [(b"host", f"127.0.0.1:{port}".encode())]
    added = {name.lower().encode(): value.encode("latin-1")
             for name, value in passed.headers.items()}
    for name, value in scope.get("headers", ()):
        if name in HOP_BY_HOP or name in added:
            continue
        if name == b"cookie":
            kept = "; ".join(f"{n}={v}" for n, v in _cookies({"headers": [(name, value)]})
                             if not _ours(n))
            if not kept:
                continue
            value = kept.encode("latin-1")
        elif name == b"origin":
            value = f"http://127.0.0.1:{port}".encode()
        out.append((name, value))
    out.extend(added.items())
    return out


async def plain(send, status: int, text: str, headers=()) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"), *headers]})
    await send({"type": "http.response.body", "body": body})


NOT_FOUND = "Not found."


# --- upstream connections ------------------------------------------------------------------

class RoutePool:
    """A route's upstream connections (kept a little while between requests)."""

    def __init__(self):
        self.network = PortBackend()
        self.pool = httpcore.AsyncConnectionPool(network_backend=self.network,
                                                 max_connections=32,
                                                 keepalive_expiry=KEEPALIVE_SECONDS)
        self.used = time.monotonic()


# The routes' pools by event loop (a test's portal runs its own), dropped when idle.
_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
POOL_IDLE_SECONDS = 300.0


async def route_pool(route) -> RoutePool:
    pools = _pools.setdefault(asyncio.get_running_loop(), {})
    now = time.monotonic()
    for key, idle in list(pools.items()):
        if now - idle.used > POOL_IDLE_SECONDS:
            del pools[key]
            await idle.pool.aclose()
    pool = pools.get(route.key)
    if pool is None:
        pool = pools[route.key] = RoutePool()
    pool.used = now
    pool.network.target = (backend_for(route.job.datacenter), route.job, route.replica,
                           route.port)
    return pool


# --- the ASGI app -------------------------------------------------------------------------

class RouteProxy:
    """In front of the portal: a request whose Host is a route's goes to the route; any other
    to the portal (``application``)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and (key := route_key(scope)) is not None:
            if scope["type"] == "http":
                return await self.http(scope, receive, send, key)
            return await self.websocket(scope, receive, send, key)
        return await self.application(scope, receive, send)

    async def http(self, scope, receive, send, key: str) -> None:
        if scope["path"] == services.ENTER_PATH:
            return await self.enter(scope, send, key)
        cookie = next((v for n, v in _cookies(scope) if n == cookie_name(scope)), None)
        passed = await database_sync_to_async(services.route_pass)(key, cookie)
        if passed is None:
            return await plain(send, 404, NOT_FOUND)
        method = scope["method"]
        if cross_site(scope, method):
            return await plain(send, 403, "Refused: a request from another site's page.")
        pool = await route_pool(passed.route)
        headers = upstream_headers(scope, passed)
        body = None
        if header(scope, b"content-length") is not None or header(
                scope, b"transfer-encoding") is not None:
            if header(scope, b"content-length") is None:
                headers.append((b"transfer-encoding", b"chunked"))
            body = _request_body(receive)
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        # A kept connection the app closed meanwhile fails at once: a request without a body
        # is sent again, once, on a new one.
        for attempt in (0, 1):
            try:
                return await self.forward(scope, receive, send, passed, pool, method, target,
                                          headers, body)
            except _Stale:
                if body is not None or attempt:
                    return await plain(send, 502, f"Bad gateway: the app at port "
                                                  f"{passed.route.port} closed the connection")
        return None

    async def forward(self, scope, receive, send, passed, pool, method, target, headers,
                      body) -> None:
        started = False
        try:
            async with pool.pool.stream(
                    method.encode(), httpcore.URL(scheme=b"http", host=b"127.0.0.1",
                                                  port=passed.route.port, target=target),
                    headers=headers, content=body,
                    extensions={"timeout": {"connect": CONNECT_SECONDS, "pool": CONNECT_SECONDS,
                                            "read": None, "write": None}}) as response:
                await send({"type": "http.response.start", "status": response.status,
                            "headers": self.response_headers(scope, passed, response.headers)})
                started = True
                # The request's body was all sent: the browser's next word is that it went,
                # which ends an answer still coming (a stream, a long poll) there and then.
                pump = asyncio.create_task(_body_pump(response, send))
                gone = asyncio.create_task(_disconnected(receive))
                try:
                    await asyncio.wait((pump, gone), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (pump, gone):
                        task.cancel()
                    await asyncio.gather(pump, gone, return_exceptions=True)
                if not pump.cancelled() and pump.exception() is not None:
                    raise pump.exception()
        except _ClientGone:
            return None
        except httpcore.ConnectError as exc:
            if not started:
                await plain(send, 502, f"Bad gateway: {exc}")
        except httpcore.RemoteProtocolError as exc:
            if not started and "without sending" in str(exc):
                raise _Stale from None
            if not started:
                await plain(send, 502, f"Bad gateway: the app at port {passed.route.port} "
                                       f"answered no HTTP ({exc})")
        except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.TimeoutException) as exc:
            if not started:
                await plain(send, 502, f"Bad gateway: the app at port {passed.route.port} "
                                       f"answered no HTTP ({type(exc).__name__})")
        return None

    def response_headers(self, scope, passed, headers) -> list[tuple[bytes, bytes]]:
        app = f"http://127.0.0.1:{passed.route.port}".encode()
        out = []
        for name, value in headers:
            name = name.lower()
            if name in HOP_BY_HOP:
                continue
            if name == b"set-cookie" and _ours(value.split(b"=", 1)[0].strip().decode(
                    "latin-1")):
                continue
            if name == b"location" and value.startswith(app):
                value = own_origin(scope).encode() + value[len(app):]
            out.append((name, value))
        return out

    async def enter(self, scope, send, key: str) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        ticket = (query.get("ticket") or [""])[-1]
        cookie = await database_sync_to_async(services.ticket_take)(key, ticket)
        if cookie is None:
            return await plain(send, 404, NOT_FOUND)
        attributes = "Path=/; HttpOnly; SameSite=Lax" + ("; Secure" if _secure(scope) else "")
        landing = services.safe_next((query.get("next") or ["/"])[-1])
        await send({"type": "http.response.start", "status": 302, "headers": [
            (b"location", landing.encode()),
            (b"set-cookie", f"{cookie_name(scope)}={cookie}; {attributes}".encode()),
            (b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer"),
            (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return None

    async def websocket(self, scope, receive, send, key: str) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        cookie = next((v for n, v in _cookies(scope) if n == cookie_name(scope)), None)
        passed = await database_sync_to_async(services.route_pass)(key, cookie)
        if passed is None:
            return await _refuse(scope, send, 404, NOT_FOUND)
        if cross_site(scope, "GET"):
            return await _refuse(scope, send, 403, "Refused: a WebSocket from another site's "
                                                   "page.")
        route = passed.route
        try:
            stream = await asyncio.wait_for(
                backend_for(route.job.datacenter).port_open(route.job, route.replica,
                                                            route.port), CONNECT_SECONDS)
        except (BackendError, TimeoutError) as exc:
            return await _refuse(scope, send, 502, f"Bad gateway: {exc or 'timed out'}")
        try:
            await WebSocketRelay(scope, receive, send, passed, stream).run()
        finally:
            await stream.close()


async def _body_pump(response, send) -> None:
    async for chunk in response.aiter_stream():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Stale(Exception):
    """The app closed a kept connection before it answered anything on it."""


class _ClientGone(Exception):
    """The browser went away while its request's body was being sent on."""


async def _request_body(receive):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            return


async def _refuse(scope, send, status: int, text: str) -> None:
    """A WebSocket handshake refused: with an HTTP answer where the server can send one, else
    closed before it was accepted (403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = (text + "\n").encode()
        await send({"type": "websocket.http.response.start", "status": status, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close"})


class WebSocketRelay:
    """A browser's WebSocket (ASGI) and the app's (the ``websockets`` protocol over the
    port's stream), message by message, until either closes."""

    def __init__(self, scope, receive, send, passed: services.Pass, stream):
        self.scope, self.receive, self.send = scope, receive, send
        self.passed, self.stream = passed, stream
        self.lock = asyncio.Lock()
        self.early = []
        self.seen = time.monotonic()
        port = passed.route.port
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        self.protocol = ClientProtocol(
            parse_uri(f"ws://127.0.0.1:{port}{target.decode('latin-1')}"),
            origin=Origin(f"http://127.0.0.1:{port}"),
            subprotocols=scope.get("subprotocols") or None, max_size=None)

    async def flush(self) -> None:
        async with self.lock:
            for data in self.protocol.data_to_send():
                if data:
                    await self.stream.write(data)

    async def receive_more(self) -> tuple[bytes, list]:
        """What the app sends next (b"" once it has closed), and what the protocol made of
        it: the handshake's answer, frames."""
        data = await self.stream.read(CHUNK)
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        return data, self.protocol.events_received()

    async def handshake(self) -> WsResponse | None:
        request = self.protocol.connect()
        for name, value in upstream_headers(self.scope, self.passed):
            if name in (b"host", b"origin") or name.startswith(b"sec-websocket-"):
                continue
            request.headers[name.decode("latin-1")] = value.decode("latin-1")
        self.protocol.send_request(request)
        await self.flush()
        while True:
            data, events = await self.receive_more()
            if events:
                response, self.early = events[0], events[1:]
                if self.protocol.state is State.OPEN and isinstance(response, WsResponse):
                    return response
                return None
            if not data:
                return None

    async def run(self) -> None:
        port = self.passed.route.port
        response = await self.handshake()
        if response is None:
            return await _refuse(self.scope, self.send, 502,
                                 f"Bad gateway: the app at port {port} refused the WebSocket")
        await self.send({"type": "websocket.accept",
                         "subprotocol": response.headers.get("Sec-WebSocket-Protocol")})
        tasks = [asyncio.create_task(self.upstream()), asyncio.create_task(self.downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        return None

    async def touch(self) -> None:
        """Traffic passes: the route was seen (written at most every ``SEEN_EVERY``)."""
        now = time.monotonic()
        if now - self.seen >= services.SEEN_EVERY.total_seconds():
            self.seen = now
            await database_sync_to_async(services.route_seen)(self.passed.route)

    async def downstream(self) -> None:
        """The app's messages to the browser; its close closes the browser's socket."""
        kind, parts = None, []
        events = self.early
        while True:
            for frame in events:
                if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                    kind, parts = frame.opcode, [frame.data]
                elif frame.opcode is Opcode.CONT:
                    parts.append(frame.data)
                elif frame.opcode is Opcode.CLOSE:
                    await self.flush()  # the answer to it
                    code = Close.parse(frame.data).code if frame.data else 1000
                    await self.send({"type": "websocket.close",
                                     "code": code if code not in (1005, 1006, 1015) else 1000})
                    return
                else:
                    continue
                if frame.fin:
                    data = b"".join(parts)
                    if kind is Opcode.TEXT:
                        await self.send({"type": "websocket.send", "text": data.decode()})
                    else:
                        await self.send({"type": "websocket.send", "bytes": data})
                    kind, parts = None, []
                    await self.touch()
            await self.flush()  # pongs
            if self.protocol.state is State.CLOSED:  # the app went without a word
                await self.send({"type": "websocket.close", "code": 1011})
                return
            _, events = await self.receive_more()

    async def upstream(self) -> None:
        """The browser's messages to the app; its close closes the app's."""
        while True:
            message = await self.receive()
            if message["type"] == "websocket.receive":
                if message.get("bytes") is not None:
                    self.protocol.send_binary(message["bytes"])
                else:
                    self.protocol.send_text((message.get("text") or "").encode())
                await self.flush()
                await self.touch()
            elif message["type"] == "websocket.disconnect":
                if self.protocol.state is State.OPEN:
                    self.protocol.send_close(1000)
                    with contextlib.suppress(OSError):
                        await self.flush()
                return
