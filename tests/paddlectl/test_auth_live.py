"""Logging in against the live portal: tokens cached privately, reused, renewed, separated
per datacenter and user, revoked by logout; failures by class of exit code."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta

import pytest

import paddlectl
from accounts.models import ApiToken
from accounts.services import datacenter_upsert, user_upsert
from tests.conftest import PASSWORD

from .conftest import datacenter_entry

pytestmark = pytest.mark.django_db(transaction=True)


def active_tokens(user, datacenter=None):
    tokens = ApiToken.objects.active().filter(user=user)
    if datacenter is not None:
        tokens = tokens.filter(datacenter__name=datacenter)
    return list(tokens)


def key(cli, datacenter="datacenter1", username="alice") -> str:
    return f"{cli.portal.url}|{datacenter}|{username}"


def test_version_shows_client_and_server(live_cli):
    result = live_cli("version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"paddlectl {paddlectl.__version__}\n"
                             f"server {paddlectl.__version__} (API v1) at {live_cli.portal.url}\n")
    as_json = json.loads(live_cli("version", "-o", "json").stdout)
    assert as_json == {"client": paddlectl.__version__,
                       "server": {"server": paddlectl.__version__, "api": "v1"}}


def test_login_caches_a_private_token_that_later_commands_reuse(live_cli):
    result = live_cli("login")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Logged in to datacenter1 ({live_cli.portal.url}) as "
                                     "alice; the token expires ")
    assert stat.S_IMODE(live_cli.tokens_file.stat().st_mode) == 0o600
    cached = live_cli.tokens()[key(live_cli)]
    [token] = active_tokens(live_cli.portal.user)
    assert (cached["id"], cached["token"][:4]) == (token.pk, "pct_")
    for _ in range(2):
        assert live_cli("ls").returncode == 0
    assert active_tokens(live_cli.portal.user) == [token]


def test_the_first_command_logs_in_by_itself(live_cli):
    assert not live_cli.tokens_file.exists()
    assert live_cli("ls").returncode == 0
    assert len(active_tokens(live_cli.portal.user)) == 1
    assert key(live_cli) in live_cli.tokens()


def test_login_again_replaces_and_revokes_the_old_token(live_cli):
    live_cli("login")
    first = live_cli.tokens()[key(live_cli)]["id"]
    live_cli("login")
    [token] = active_tokens(live_cli.portal.user)
    assert token.pk != first
    assert ApiToken.objects.get(pk=first).revoked_at is not None


def test_an_expired_cached_token_is_replaced(live_cli):
    live_cli("login")
    tokens = live_cli.tokens()
    old = tokens[key(live_cli)]
    old["expires_at"] = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    live_cli.tokens_file.write_text(json.dumps(tokens))
    assert live_cli("ls").returncode == 0
    new = live_cli.tokens()[key(live_cli)]
    assert new["token"] != old["token"]
    assert datetime.fromisoformat(new["expires_at"]) > datetime.now(UTC) + timedelta(days=1)


def test_a_token_revoked_on_the_server_is_replaced_once(live_cli):
    live_cli("login")
    old = live_cli.tokens()[key(live_cli)]
    ApiToken.objects.filter(pk=old["id"]).update(revoked_at=datetime.now(UTC))
    result = live_cli("ls")
    assert result.returncode == 0, result.stderr
    assert live_cli.tokens()[key(live_cli)]["id"] != old["id"]
    assert len(active_tokens(live_cli.portal.user)) == 1


def test_tokens_are_kept_per_datacenter_and_per_user(live_cli):
    datacenter_upsert("datacenter2")
    user_upsert("alice", password=PASSWORD, datacenter_names=["datacenter1", "datacenter2"])
    bob = user_upsert("bob", password=PASSWORD, datacenter_names=["datacenter1"])[0]
    url = live_cli.portal.url
    live_cli.write_config([datacenter_entry(endpoint=url),
                           datacenter_entry("datacenter2", endpoint=url)])
    assert live_cli("login").returncode == 0
    assert live_cli("--datacenter", "datacenter2", "login").returncode == 0
    assert live_cli("-datacenter", "datacenter2", "logout").returncode == 0
    live_cli.write_config([datacenter_entry(username="bob", endpoint=url)])
    assert live_cli("login").returncode == 0
    assert set(live_cli.tokens()) == {key(live_cli), key(live_cli, "datacenter1", "bob")}
    assert [t.datacenter.name for t in active_tokens(live_cli.portal.user)] == ["datacenter1"]
    assert len(active_tokens(bob)) == 1
    assert active_tokens(bob)[0].pk == live_cli.tokens()[key(live_cli, username="bob")]["id"]


def test_a_wrong_password_exits_2_with_the_servers_message(live_cli):
    live_cli.write_config([datacenter_entry(password="wrong", endpoint=live_cli.portal.url)])
    for args in (("login",), ("ls",)):
        result = live_cli(*args)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == "paddlectl: username or password is incorrect\n"
    assert not live_cli.tokens()


def test_a_datacenter_the_user_is_not_in_exits_1(live_cli):
    datacenter_upsert("datacenter2")
    live_cli.write_config([datacenter_entry("datacenter2", endpoint=live_cli.portal.url)],
                          current="datacenter2")
    result = live_cli("login")
    assert result.returncode in (1, 2)
    assert "datacenter2" in result.stderr


def test_logout_revokes_the_token_and_forgets_it(live_cli):
    live_cli("login")
    token_id = live_cli.tokens()[key(live_cli)]["id"]
    result = live_cli("logout")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Logged out of datacenter1 ({live_cli.portal.url}) as alice\n"
    assert ApiToken.objects.get(pk=token_id).revoked_at is not None
    assert live_cli.tokens() == {}
    again = live_cli("logout")
    assert again.stdout == f"Not logged in to datacenter1 ({live_cli.portal.url}) as alice\n"
