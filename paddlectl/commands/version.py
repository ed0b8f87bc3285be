"""``version``: the client's version, and the server's."""

from __future__ import annotations

from paddlecloud_client.errors import PaddlectlError
from paddlectl import __version__


def setup_version(parser) -> None:
    pass


def run_version(ctx, args) -> int:
    """The client's version always; the server's, or why it could not be had (exit != 0)."""
    fmt = ctx.output_format(default="text")
    if fmt == "text":
        ctx.stdout.write(f"paddlectl {__version__}\n")
        ctx.stdout.flush()
    try:
        server = ctx.client.server_version()
    except PaddlectlError as exc:
        if fmt != "text":
            ctx.emit({"client": __version__, "server": None})
        ctx.stderr.write(f"paddlectl: {exc.message}\n")
        return exc.exit_code
    if fmt == "text":
        ctx.stdout.write(f"server {server.get('server')} (API {server.get('api')}) at "
                         f"{ctx.datacenter.endpoint}\n")
    else:
        ctx.emit({"client": __version__, "server": server})
    return 0
