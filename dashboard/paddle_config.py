"""What to paste to point ``paddlectl`` at this portal.

``~/.paddle/config`` (``paddlecloud_client.config``) names each datacenter's endpoint,
username and password; it has no place for a token. ``paddlectl`` keeps its tokens beside it
in ``~/.paddle/tokens.json`` (``paddlecloud_client.tokens``) and uses a token found there until
it expires, logging in with the password only then. So a token created in the browser is used
by pasting both: the config, and the token's entry in ``tokens.json``.

A user who logs in with single sign-on has no password: their config holds the token itself
(``token:`` in place of ``password:``), which ``paddlectl`` uses until it expires, or nothing
in its place: ``paddlectl login --web`` gets a token approved in the browser.
"""

from __future__ import annotations

import json

from paddlecloud_client.config import config_dump
from paddlecloud_client.tokens import token_key

PASSWORD_PLACEHOLDER = "YOUR-PASSWORD"  # noqa: S105 - what the user replaces


def config_snippet(username: str, endpoint: str, datacenters, current: str | None,
                   tokens: dict[str, str] | None = None) -> str:
    """A whole ``~/.paddle/config`` for the user's datacenters at this portal; with
    ``tokens`` (a single sign-on user: no password), the entry of a datacenter with a token
    just issued holds it, the others nothing (``paddlectl login --web``)."""
    def secret(dc) -> dict:
        if tokens is None:
            return {"password": PASSWORD_PLACEHOLDER}
        return {"token": tokens[dc.name]} if dc.name in tokens else {}
    return config_dump([{"name": dc.name, "username": username, **secret(dc),
                         "endpoint": endpoint} for dc in datacenters], current)


def tokens_snippet(endpoint: str, issued) -> str:
    """``~/.paddle/tokens.json`` holding the token just issued."""
    token = issued.token
    key = token_key(endpoint, token.datacenter.name, token.user.username)
    entry = {"token": issued.raw, "id": token.pk,
             "expires_at": token.expires_at.isoformat().replace("+00:00", "Z")}
    return json.dumps({key: entry}, indent=2) + "\n"
