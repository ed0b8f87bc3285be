"""The token cache file: private, keyed per endpoint, datacenter and user, expiry-aware."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta

from paddlecloud_client.tokens import TokenCache, token_key


def entry(token: str = "pct_a", minutes: float = 60) -> dict:  # noqa: S107
    expires = datetime.now(UTC) + timedelta(minutes=minutes)
    return {"token": token, "id": 1, "expires_at": expires.isoformat().replace("+00:00", "Z")}


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_token_is_kept_in_a_private_file(tmp_path):
    cache = TokenCache(tmp_path / ".paddle" / "tokens.json")
    cache.put("k", entry())
    assert mode(cache.path) == 0o600
    assert cache.get("k")["token"] == "pct_a"
    assert json.loads(cache.path.read_text())["k"]["token"] == "pct_a"


def test_a_cache_others_can_read_is_made_private(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"k": entry()}))
    path.chmod(0o644)
    assert TokenCache(path).get("k") is not None
    assert mode(path) == 0o600


def test_keys_separate_endpoints_datacenters_and_users(tmp_path):
    cache = TokenCache(tmp_path / "tokens.json")
    keys = {token_key("http://a/", "dc1", "alice"), token_key("http://a", "dc2", "alice"),
            token_key("http://a", "dc1", "bob"), token_key("http://b", "dc1", "alice")}
    assert len(keys) == 4
    assert token_key("http://a/", "dc1", "alice") == token_key("http://a", "dc1", "alice")
    for index, key in enumerate(sorted(keys)):
        cache.put(key, entry(f"pct_{index}"))
    assert sorted(cache.get(key)["token"] for key in keys) == [f"pct_{i}" for i in range(4)]


def test_expired_or_nearly_expired_tokens_are_not_used(tmp_path):
    cache = TokenCache(tmp_path / "tokens.json")
    cache.put("old", entry(minutes=-1))
    cache.put("closing", entry(minutes=0.1))
    assert cache.get("old") is None
    assert cache.get("closing") is None


def test_a_damaged_cache_is_ignored_and_replaced(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_text("{not json")
    cache = TokenCache(path)
    assert cache.get("k") is None
    cache.put("k", entry())
    assert cache.get("k")["token"] == "pct_a"


def test_drop_forgets_one_token(tmp_path):
    cache = TokenCache(tmp_path / "tokens.json")
    cache.put("a", entry("pct_a"))
    cache.put("b", entry("pct_b"))
    assert cache.drop("a")["token"] == "pct_a"
    assert cache.get("a") is None and cache.get("b") is not None
    assert cache.drop("a") is None
