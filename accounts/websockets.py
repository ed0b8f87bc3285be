"""Who opens a WebSocket: a client (paddlectl, the SDK) with its API token, or a page with
its session.

A handshake that carries ``Authorization: Bearer <token>`` is the token's user's
(``authentication.token_user``), acting in the token's datacenter only
(``selectors.acting_datacenter``), and needs no Origin: a browser never sends a token on its
own, so no other site's page can borrow it. A handshake with a token that is not valid is
refused before it is accepted (a 403). Any other handshake goes to ``pages``: the session's
user, from this site's pages only (``paddlecloud.asgi.SameOrigin``).
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from rest_framework.exceptions import AuthenticationFailed

from .authentication import ApiTokenAuthentication, token_user


def bearer(scope) -> str | None:
    """The token of a handshake's ``Authorization: Bearer`` (or ``Token``) header, if any."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            parts = value.split()
            if len(parts) == 2 and parts[0].lower() in ApiTokenAuthentication.keywords:
                try:
                    return parts[1].decode()
                except UnicodeDecodeError:
                    return ""
            return ""
    return None


class ClientTokens:
    """``clients`` for a handshake with a token (its scope's ``user`` and ``auth``, the
    ApiToken, filled in), ``pages`` for any other."""

    def __init__(self, clients, pages):
        self.clients, self.pages = clients, pages

    async def __call__(self, scope, receive, send):
        raw = bearer(scope)
        if raw is None:
            return await self.pages(scope, receive, send)
        try:
            user, token = await database_sync_to_async(token_user)(raw)
        except AuthenticationFailed:
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close"})  # closed before accepted: a 403
            return None
        return await self.clients({**scope, "user": user, "auth": token}, receive, send)
