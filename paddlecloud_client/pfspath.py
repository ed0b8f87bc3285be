"""PFS paths as written on the command line and given to the SDK:
``/pfs/{datacenter}/home/{user}/...``. Where things are below a home is
``paddlecloud_core.layout``'s; this module reads and joins what users type.

Every remote path is absolute and starts with ``/pfs/``; a trailing slash means a directory.
"""

from __future__ import annotations

from paddlecloud_client.errors import UsageError
from paddlecloud_core.layout import PFS_PREFIX


def is_remote(path: str) -> bool:
    return path.startswith(PFS_PREFIX)


def require_remote(path: str, home: str) -> str:
    """``path`` if it is a PFS path, else a ``UsageError`` that shows what one looks like."""
    if is_remote(path):
        return path
    relative = path.removeprefix("./")
    plain = relative and not relative.startswith("/") and ".." not in relative.split("/")
    hint = f"{home}/{relative}" if plain else f"{home}/..."
    raise UsageError(f"{path!r} is not a PFS path: remote paths are absolute and start with "
                     f"/pfs/, e.g. {hint}")


def clean(path: str) -> str:
    """Without trailing slashes."""
    return path.rstrip("/") or "/"


def join(base: str, name: str) -> str:
    return f"{clean(base)}/{name}"


def basename(path: str) -> str:
    return clean(path).rsplit("/", 1)[-1]


def is_inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (no ``..`` or ``.`` tricks)."""
    path = clean(path)
    parts = path.split("/")
    if ".." in parts or "." in parts:
        return False
    return path == root or path.startswith(root + "/")
