"""A WebSocket client for an ASGI app in the test's own event loop (Channels' communicator
lives in a package that needs daphne; this is the part the tests use), and ``ws_messages``,
what a logged-in browser's socket to a live portal is sent."""

from __future__ import annotations

import contextlib
import json
from urllib.parse import unquote, urlparse

from asgiref.testing import ApplicationCommunicator


class WebsocketCommunicator(ApplicationCommunicator):
    def __init__(self, application, path: str, headers=None):
        parsed = urlparse(path)
        headers = list(headers or [])
        if not any(name == b"host" for name, _value in headers):  # as a browser sends it
            headers.append((b"host", b"testserver"))
        super().__init__(application, {
            "type": "websocket", "path": unquote(parsed.path),
            "query_string": parsed.query.encode(), "headers": headers,
            "subprotocols": []})

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
