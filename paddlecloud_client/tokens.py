"""The token cache: one JSON file beside the config (``~/.paddle/tokens.json``), mode 0600.

Entries are keyed by ``endpoint|datacenter|username``, so switching datacenter or user never
reuses another's token::

    {"http://127.0.0.1:8000|datacenter1|alice":
        {"token": "pct_...", "id": 7, "expires_at": "2026-12-21T10:02:00Z"}}
"""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

from paddlecloud_client.config import private_write

FILENAME = "tokens.json"
# A token this close to its expiry is replaced rather than used.
EXPIRY_MARGIN = timedelta(seconds=30)


def token_key(endpoint: str, datacenter: str, username: str) -> str:
    return f"{endpoint.rstrip('/')}|{datacenter}|{username}"


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class TokenCache:
    def __init__(self, path: Path):
        self.path = path

    def get(self, key: str) -> dict | None:
        """The cached token, unless it is missing, malformed or (about to be) expired."""
        entry = self._load().get(key)
        try:
            expires_at = parse_time(entry["expires_at"])
            token = entry["token"]
        except (TypeError, KeyError, ValueError):
            return None
        if not isinstance(token, str) or expires_at - EXPIRY_MARGIN <= datetime.now(UTC):
            return None
        return entry

    def put(self, key: str, entry: dict) -> None:
        entries = self._load()
        entries[key] = entry
        self._save(entries)

    def drop(self, key: str) -> dict | None:
        entries = self._load()
        entry = entries.pop(key, None)
        if entry is not None:
            self._save(entries)
        return entry

    def _load(self) -> dict:
        try:
            if stat.S_IMODE(self.path.stat().st_mode) & 0o077:
                os.chmod(self.path, 0o600)
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # missing or damaged: start afresh, the next save replaces it
        return entries if isinstance(entries, dict) else {}

    def _save(self, entries: dict) -> None:
        private_write(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
