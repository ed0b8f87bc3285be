"""``login`` and ``logout``: get a fresh API token for the current datacenter, or revoke it."""

from __future__ import annotations

from paddlectl.output import format_time


def setup_login(parser) -> None:
    pass


def run_login(ctx, args) -> None:
    issued = ctx.client.login()
    dc = ctx.datacenter
    ctx.info(f"Logged in to {dc.name} ({dc.endpoint}) as {dc.username}; the token expires "
             f"{format_time(issued.get('expires_at'))}")


def setup_logout(parser) -> None:
    pass


def run_logout(ctx, args) -> None:
    dc = ctx.datacenter
    if ctx.client.logout():
        ctx.info(f"Logged out of {dc.name} ({dc.endpoint}) as {dc.username}")
    else:
        ctx.info(f"Not logged in to {dc.name} ({dc.endpoint}) as {dc.username}")
