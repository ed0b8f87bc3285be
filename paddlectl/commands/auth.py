"""``login`` and ``logout``: get a fresh API token for the current datacenter, or revoke it."""

from __future__ import annotations

from paddlectl.output import format_time


def setup_login(parser) -> None:
    parser.add_argument(
        "--web", action="store_true",
        help="log in in the browser (single sign-on users): paddlectl shows a page and a code, "
             "you approve the code there, paddlectl gets its token")


def run_login(ctx, args) -> None:
    dc = ctx.datacenter
    if getattr(args, "web", False) and not dc.token:
        def show(started: dict) -> None:  # shown even with -q: nothing happens without it
            ctx.stdout.write(f"To log in to {dc.name} as {dc.username}, open\n\n    "
                             f"{started['verification_uri_complete']}\n\nin a browser where "
                             f"you are logged in to PaddleCloud (or open "
                             f"{started['verification_uri']} and enter the code "
                             f"{started['user_code']}), and approve it. Waiting…\n")
            ctx.stdout.flush()
        issued = ctx.client.device_login(show)
        ctx.info(f"Logged in to {dc.name} ({dc.endpoint}) as {dc.username}; the token expires "
                 f"{format_time(issued.get('expires_at'))}")
        return
    if dc.token:
        ctx.client.me()  # the token works (else the error says what to do)
        ctx.info(f"{dc.name} ({dc.endpoint}): the config holds an API token for {dc.username}, "
                 "used until it expires; there is no password to log in with. For a new "
                 f"token, make one on the Tokens page ({dc.endpoint}/tokens/) and put it in "
                 "the config as `token:`")
        return
    issued = ctx.client.login()
    ctx.info(f"Logged in to {dc.name} ({dc.endpoint}) as {dc.username}; the token expires "
             f"{format_time(issued.get('expires_at'))}")


def setup_logout(parser) -> None:
    pass


def run_logout(ctx, args) -> None:
    dc = ctx.datacenter
    if dc.token:
        ctx.info(f"{dc.name} ({dc.endpoint}): the config holds an API token; revoke it on the "
                 f"Tokens page ({dc.endpoint}/tokens/) and take it out of the config")
        return
    if ctx.client.logout():
        ctx.info(f"Logged out of {dc.name} ({dc.endpoint}) as {dc.username}")
    else:
        ctx.info(f"Not logged in to {dc.name} ({dc.endpoint}) as {dc.username}")
