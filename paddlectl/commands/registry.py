"""Registry credentials for private images: ``registry``, and the registry part of ``get`` and
``delete``.

The server keeps them at ``/api/v1/registries/``. A server without that API answers 404 "no
API endpoint"; that is said in one line: ``get registry`` succeeds with the note, adding or
deleting one fails (exit 1).
"""

from __future__ import annotations

import getpass
import sys
from urllib.parse import quote

from paddlectl.args import flag
from paddlectl.errors import ApiError, UsageError
from paddlectl.output import REGISTRY_COLUMNS

REGISTRIES = "/api/v1/registries/"
NOT_KEPT = "this PaddleCloud server does not keep registry credentials yet"


def no_registry_api(exc: ApiError) -> bool:
    """Whether the server answered that it has no registries API at all."""
    return exc.status == 404 and "no API endpoint" in exc.message


# -- the registries API (thin helpers until ApiClient has these methods) ----------------------

def _registry_path(name: str) -> str:
    return f"{REGISTRIES}{quote(name, safe='')}/"


def _require_api(ctx) -> None:
    """A UsageError when the server has no registries API. Asked with a GET: a POST or DELETE
    to an API path the server does not know is refused by its CSRF check (403), not 404."""
    try:
        ctx.client.call("GET", REGISTRIES, params={"limit": 1})
    except ApiError as exc:
        if no_registry_api(exc):
            raise UsageError(NOT_KEPT) from None
        raise


def _call(ctx, method: str, path: str, **kwargs):
    _require_api(ctx)
    return ctx.client.call(method, path, **kwargs)


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
    added = _call(ctx, "POST", REGISTRIES, json={
        "name": args.name, "server": args.server, "username": args.username,
        "password": password})
    if ctx.output_format() in ("json", "yaml"):
        ctx.emit(added)
        return
    ctx.stdout.write(f"registry {args.name} added ({args.username} at {args.server})\n")


# -- get registry, delete registry ------------------------------------------------------------

def registry_get(ctx, names: list[str]) -> None:
    """``get registry [NAME...]``: the registries the server keeps for you."""
    try:
        if names:
            found = [ctx.client.call("GET", _registry_path(name)) for name in names]
            data = found[0] if len(found) == 1 else found
        else:
            data = found = ctx.client.call("GET", REGISTRIES)
            if isinstance(found, dict):  # a paginated answer
                found = found.get("results", [])
    except ApiError as exc:
        if not no_registry_api(exc):
            raise
        ctx.stderr.write(f"paddlectl: {NOT_KEPT}\n")
        return
    if ctx.output_format() in ("table", "wide") and not found:
        ctx.info(f"no registries in datacenter {ctx.datacenter.name}")
        return
    ctx.emit(data, found, REGISTRY_COLUMNS)


def registry_delete(ctx, names: list[str]) -> None:
    """``delete registry NAME...``."""
    for name in names:
        _call(ctx, "DELETE", _registry_path(name))
        ctx.info(f"registry {name} deleted")
