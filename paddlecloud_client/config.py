"""``~/.paddle/config``: the datacenters a user can talk to, and the current one.

    datacenters:
    - name: datacenter1
      username: alice
      password: secret
      endpoint: http://127.0.0.1:8000
    current-datacenter: datacenter1

In place of ``password``, an entry may hold ``token``: an API token made on the dashboard's
Tokens page, the way in for users who log in with single sign-on (and have no password). An
entry with neither logs in with ``paddlectl login --web`` (approved in the browser).

The path is ``--config``, else ``$PADDLE_CONFIG``, else ``~/.paddle/config``. Every problem is
a ``ConfigError`` saying what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from paddlecloud_client.errors import ConfigError
from paddlecloud_core.layout import pfs_home

ENV_VAR = "PADDLE_CONFIG"
DEFAULT_PATH = "~/.paddle/config"
KEYS = ("name", "username", "password", "endpoint")
SECRETS = ("password", "token")  # an entry has one of these
MASK = "********"
FIX = "see `paddlectl help config`"

EXAMPLE = """\
datacenters:
- name: datacenter1
  username: alice
  password: secret
  endpoint: http://cloud.example.com
current-datacenter: datacenter1
"""


@dataclass(frozen=True)
class Datacenter:
    name: str
    username: str
    password: str
    endpoint: str
    token: str = ""  # an API token made on the Tokens page, used instead of logging in

    @property
    def home(self) -> str:
        """The user's PFS home in this datacenter."""
        return pfs_home(self.name, self.username)


@dataclass(frozen=True)
class Config:
    path: Path
    datacenters: tuple[Datacenter, ...]
    current: str | None
    data: dict  # the file as parsed

    def datacenter(self, name: str | None = None) -> Datacenter:
        """The one named, else ``current-datacenter``, else the only one."""
        wanted = name or self.current
        if wanted is None:
            if len(self.datacenters) == 1:
                return self.datacenters[0]
            raise ConfigError(
                f"{self.path} lists {len(self.datacenters)} datacenters and no "
                "current-datacenter: pick one with --datacenter NAME or "
                "`paddlectl config use-datacenter NAME`")
        for datacenter in self.datacenters:
            if datacenter.name == wanted:
                return datacenter
        known = ", ".join(dc.name for dc in self.datacenters)
        source = "--datacenter" if name else "current-datacenter"
        raise ConfigError(
            f"{source}: no datacenter named {wanted!r} in {self.path} (it has: {known}); "
            "use one of these or add it to the file")

    def masked(self) -> dict:
        """The file's data with every password replaced by ``********``."""
        data = dict(self.data)
        data["datacenters"] = [
            {**entry, **{key: MASK for key in SECRETS if key in entry}}
            for entry in self.data["datacenters"]
        ]
        return data


def config_path(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get(ENV_VAR) or DEFAULT_PATH).expanduser()


def config_load(path: Path, warn: Callable[[str], None] | None = None) -> Config:
    """Read and check the config; ``warn`` hears about a password others can read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no config at {path}: create it as in `paddlectl help config`") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"cannot read the config {path}: {reason}") from None
    config = config_parse(text, path)
    if warn and os.name == "posix" and any(dc.password or dc.token
                                           for dc in config.datacenters):
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o044:
            what = "a password" if any(dc.password for dc in config.datacenters) else "a token"
            warn(f"{path} holds {what} and is readable by others; run chmod 600 {path}")
    return config


def config_parse(text: str, path: Path) -> Config:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}; {FIX}") from None
    if not isinstance(data, dict) or not isinstance(data.get("datacenters"), list) \
            or not data["datacenters"]:
        raise ConfigError(f"{path} has no `datacenters` list; {FIX}")
    datacenters = tuple(_datacenter(entry, index, path)
                        for index, entry in enumerate(data["datacenters"], 1))
    names = [dc.name for dc in datacenters]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"{path}: datacenter {duplicates[0]!r} is listed twice")
    current = data.get("current-datacenter")
    if current is not None and not isinstance(current, str):
        raise ConfigError(f"{path}: current-datacenter must be a name; {FIX}")
    return Config(path, datacenters, current or None, data)


def _datacenter(entry, index: int, path: Path) -> Datacenter:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: datacenter #{index} is not a mapping of "
                          f"{', '.join(KEYS)}; {FIX}")
    label = f"datacenter {entry['name']!r}" if entry.get("name") else f"datacenter #{index}"
    if entry.get("token") not in (None, ""):
        if not isinstance(entry["token"], str):
            raise ConfigError(f"{path}: {label}: `token` must be a string; put it in quotes")
        if entry.get("password") not in (None, ""):
            raise ConfigError(f"{path}: {label} has both `password` and `token`: keep one "
                              f"(a token from the Tokens page, or your password; {FIX})")
        entry = {**entry, "password": ""}
    if entry.get("password") is None and entry.get("token") in (None, ""):
        # Neither: a single sign-on user who logs in with `paddlectl login --web`.
        entry = {**entry, "password": ""}
    for key in KEYS:
        if key == "password" and entry.get(key) == "":
            continue
        if entry.get(key) in (None, ""):
            raise ConfigError(f"{path}: {label} has no `{key}`; add it ({FIX})")
        if not isinstance(entry[key], str):
            raise ConfigError(f"{path}: {label}: `{key}` must be a string; put it in quotes")
    endpoint = entry["endpoint"].rstrip("/")
    if not re.match(r"^https?://[^/\s]+", endpoint):
        raise ConfigError(f"{path}: {label}: endpoint {entry['endpoint']!r} must be a URL "
                          "such as http://cloud.example.com")
    return Datacenter(entry["name"], entry["username"], entry["password"], endpoint,
                      entry.get("token") or "")


def config_use_datacenter(config: Config, name: str) -> None:
    """Set ``current-datacenter`` in the file, keeping the rest as written; mode 0600."""
    config.datacenter(name)  # it must exist
    line = yaml.safe_dump({"current-datacenter": name}, default_flow_style=False).rstrip("\n")
    text = config.path.read_text(encoding="utf-8")
    pattern = re.compile(r"^current-datacenter[ \t]*:.*$", re.MULTILINE)
    if pattern.search(text):
        updated = pattern.sub(lambda _: line, text, count=1)
    else:
        updated = text + ("" if text.endswith("\n") else "\n") + line + "\n"
    if _current_in(updated, config.path) != name:  # an unusual layout: rewrite it all
        updated = yaml.safe_dump({**config.data, "current-datacenter": name},
                                 default_flow_style=False, sort_keys=False)
    private_write(config.path, updated)


def _current_in(text: str, path: Path) -> str | None:
    try:
        return config_parse(text, path).current
    except ConfigError:
        return None


def config_dump(datacenters: list[dict], current: str | None) -> str:
    """A config file's text: ``datacenters`` (each with name, username, password or token,
    endpoint) and the current one."""
    return yaml.safe_dump({
        "datacenters": [{key: entry[key] for key in ("name", "username", "password", "token",
                                                     "endpoint") if key in entry}
                        for entry in datacenters],
        "current-datacenter": current}, default_flow_style=False, sort_keys=False)


def private_write(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a file only its owner can read (mode 0600)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
