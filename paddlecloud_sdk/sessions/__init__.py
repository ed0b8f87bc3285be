"""A session's launcher: what runs in the one replica of a session job (``interactive``'s
notebooks and VisualDL), as ``python -m paddlecloud_sdk.sessions KIND [ARGS…]``.

Each kind is a module here with ``main(args: list[str]) -> int`` (``notebook``; ``visualdl``).
What they share, from the replica's environment (``paddlecloud_core.contract``,
``SESSION_VARIABLES``):

- ``session_token()``: the token the server asks of every request; only the portal's proxy
  (and its idle check) sends it, so only its owner, logged in to the portal, reaches it;
- ``session_port()``: where it listens, on the replica's own loopback (the proxy reaches it
  there through ``Backend.port_open``; nothing else can);
- ``client_config()``: a paddlectl/SDK config for its owner in its datacenter, with the
  session's API token, written where only the session reads it, so that ``PaddleJob(…)
  .submit()`` and ``dist_train`` (``PADDLE_NOTEBOOK=YES``) submit from inside as its owner.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from paddlecloud_client.config import ENV_VAR, config_dump, private_write
from paddlecloud_core.contract import (
    API_TOKEN_VARIABLE,
    PORTAL_URL_VARIABLE,
    SESSION_PORT,
    SESSION_PORT_VARIABLE,
    SESSION_TOKEN_VARIABLE,
    USER_VARIABLE,
)

KINDS = ("notebook", "visualdl")


class LaunchError(Exception):
    """The session cannot start here; the message says why (it is its log's last line)."""


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise LaunchError(f"{name} is not set: a session runs as a job the portal starts "
                          "(paddlectl notebook start), which sets it")
    return value


def session_token() -> str:
    return _required(SESSION_TOKEN_VARIABLE)


def session_port() -> int:
    value = os.environ.get(SESSION_PORT_VARIABLE, "").strip()
    return int(value) if value.isdigit() else SESSION_PORT


def private_dir() -> Path:
    """A directory only the session reads (in a sandbox or a pod, its own /tmp), for its
    client config and its server's runtime files."""
    return Path(tempfile.mkdtemp(prefix="paddlecloud-session-"))


def client_config(where: Path) -> Path:
    """A config (``paddlecloud_client.config``) for the session's owner in its datacenter,
    with the session's API token, in ``where`` (mode 0600); its path, for ``PADDLE_CONFIG``."""
    datacenter = _required("PADDLE_CLOUD_CURRENT_DATACENTER")
    entry = {"name": datacenter, "username": _required(USER_VARIABLE),
             "token": _required(API_TOKEN_VARIABLE),
             "endpoint": _required(PORTAL_URL_VARIABLE)}
    path = where / "config"
    private_write(path, config_dump([entry], datacenter))
    return path


def server_env(where: Path) -> dict[str, str]:
    """The environment of the session's server and what it runs (a notebook's kernels): the
    replica's, with the client config in place of the API token itself."""
    env = dict(os.environ)
    env[ENV_VAR] = str(client_config(where))
    env.pop(API_TOKEN_VARIABLE, None)
    return env
