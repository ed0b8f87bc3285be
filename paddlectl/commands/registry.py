"""Registry credentials for private images: ``registry``, and the registry part of ``get`` and
``delete``. The server keeps them encrypted and never sends a password back."""

from __future__ import annotations

import getpass
import sys

from paddlecloud_client.errors import UsageError
from paddlectl.args import flag
from paddlectl.output import REGISTRY_COLUMNS

# -- registry ---------------------------------------------------------------------------------


def setup_registry(parser) -> None:
    parser.description = (
        "Add the credentials of a private Docker registry, for jobs whose -image is there\n"
        "(paddlectl submit -image IMAGE -registry NAME).")
    flag(parser, "name", metavar="NAME", help="your name for these credentials")
    flag(parser, "server", metavar="SERVER", help="the registry, e.g. registry.example.com")
    flag(parser, "username", metavar="USERNAME", help="your user name at the registry")
    flag(parser, "password", metavar="PASSWORD",
         help="your password at the registry (asked for when left out on a terminal)")


def run_registry(ctx, args) -> None:
    missing = [f"-{key}" for key in ("name", "server", "username")
               if not getattr(args, key)]
    if missing:
        raise UsageError(f"registry: {', '.join(missing)} required (see `paddlectl help "
                         "registry`)")
    password = args.password
    if password is None:
        if not sys.stdin.isatty():
            raise UsageError("registry: -password required")
        password = getpass.getpass(f"password for {args.username} at {args.server}: ")
    added = ctx.client.registry_create(args.name, args.server, args.username, password)
    if ctx.output_format() in ("json", "yaml"):
        ctx.emit(added)
        return
    ctx.stdout.write(f"registry {args.name} added ({args.username} at {args.server})\n")


# -- get registry, delete registry ------------------------------------------------------------

def registry_get(ctx, names: list[str]) -> None:
    """``get registry [NAME...]``: the registries the server keeps for you."""
    if names:
        found = [ctx.client.registry_get(name) for name in names]
        data = found[0] if len(found) == 1 else found
    else:
        data = found = ctx.client.registry_list()
    if ctx.output_format() in ("table", "wide") and not found:
        ctx.info(f"no registries in datacenter {ctx.datacenter.name}")
        return
    ctx.emit(data, found, REGISTRY_COLUMNS)


def registry_delete(ctx, names: list[str]) -> None:
    """``delete registry NAME...``."""
    for name in names:
        ctx.client.registry_delete(name)
        ctx.info(f"registry {name} deleted")
