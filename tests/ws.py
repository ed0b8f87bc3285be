"""A WebSocket client for an ASGI app in the test's own event loop (Channels' communicator
lives in a package that needs daphne; this is the part the tests use), and ``ws_messages``,
what a logged-in browser's socket to a live portal is sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import unquote, urlparse

from asgiref.testing import ApplicationCommunicator


class WebsocketCommunicator(ApplicationCommunicator):
    opened: list[WebsocketCommunicator] = []  # held until hung up (__del__ would cancel it)

    def __init__(self, application, path: str, headers=None):
        parsed = urlparse(path)
        headers = list(headers or [])
        if not any(name == b"host" for name, _value in headers):  # as a browser sends it
            headers.append((b"host", b"testserver"))
        super().__init__(application, {
            "type": "websocket", "path": unquote(parsed.path),
            "query_string": parsed.query.encode(), "headers": headers,
            "subprotocols": []})
        WebsocketCommunicator.opened.append(self)

    async def connect(self, timeout: float = 1) -> tuple[bool, int | None]:
        """(True, None) when accepted, (False, close code) when refused at the handshake."""
        await self.send_input({"type": "websocket.connect"})
        response = await self.receive_output(timeout)
        if response["type"] == "websocket.close":
            return False, response.get("code", 1000)
        assert response["type"] == "websocket.accept", response
        return True, None

    async def receive_json_from(self, timeout: float = 1):
        response = await self.receive_output(timeout)
        assert response["type"] == "websocket.send", response
        return json.loads(response["text"])

    async def disconnect(self, code: int = 1000, timeout: float = 1) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": code})
        await self.wait(timeout)

    @classmethod
    async def hang_up_all(cls) -> None:
        """What a server does for every socket whose client has gone (one still open, or one the
        app closed): ``websocket.disconnect`` sent, the app's end awaited (cancelled past 10 s).
        Run before the channel layer closes its pools: an instance left waiting on the layer
        would be cancelled only as the test's event loop closes, after the pools, and a
        channels-redis receive cancelled there can wait on Redis for its socket timeout (30 s,
        retried) past the test's timeout. An app ends once its layer's receive returns: at
        most channels-redis's BZPOPMIN timeout (5 s)."""
        sockets, cls.opened[:] = list(cls.opened), []
        running = [socket for socket in sockets
                   if socket._future is not None and not socket._future.done()]
        for socket in running:
            socket.input_queue.put_nowait({"type": "websocket.disconnect", "code": 1001})
        await asyncio.gather(*(socket.wait(timeout=10) for socket in running),
                             return_exceptions=True)

def ws_messages(portal, path: str) -> list[dict]:
    """Every message a socket of the live portal's user's logged-in browser to ``path`` is
    sent, until the portal closes it."""
    from django.test import Client
    from websockets.sync.client import connect

    client = Client()
    client.force_login(portal.user)
    got = []
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    with connect(f"{portal.url.replace('http', 'ws', 1)}{path}", open_timeout=10,
                 additional_headers={"Cookie": cookie, "Origin": portal.url}) as ws, \
            contextlib.suppress(Exception):  # until the portal closes it
        while True:
            got.append(json.loads(ws.recv(timeout=10)))
    return got
