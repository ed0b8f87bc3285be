"""The config file: which datacenter is used, and what each mistake in it says."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from paddlecloud_client.config import (
    MASK,
    config_load,
    config_parse,
    config_path,
    config_use_datacenter,
)
from paddlecloud_client.errors import ConfigError

TWO = """\
# my datacenters
datacenters:
- name: datacenter1
  username: alice
  password: secret
  endpoint: http://one.example.com/
- name: datacenter2
  username: alice@example.com
  password: "0123"
  endpoint: https://two.example.com
current-datacenter: datacenter1
"""


def write(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "config"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_current_datacenter_unless_one_is_named(tmp_path):
    config = config_load(write(tmp_path, TWO))
    assert config.datacenter().name == "datacenter1"
    assert config.datacenter().endpoint == "http://one.example.com"  # no trailing slash
    second = config.datacenter("datacenter2")
    assert (second.username, second.password) == ("alice@example.com", "0123")


def test_the_only_datacenter_needs_no_current_datacenter(tmp_path):
    text = TWO.split("- name: datacenter2")[0]
    assert config_load(write(tmp_path, text)).datacenter().name == "datacenter1"


def test_path_flag_then_environment_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PADDLE_CONFIG", raising=False)
    assert config_path() == tmp_path / ".paddle" / "config"
    monkeypatch.setenv("PADDLE_CONFIG", "/etc/paddle.yaml")
    assert config_path() == Path("/etc/paddle.yaml")
    assert config_path("~/other") == tmp_path / "other"


@pytest.mark.parametrize(("text", "expected"), [
    ("datacenters: [\n", "is not valid YAML at line 2"),
    ("just words\n", "has no `datacenters` list"),
    ("datacenters: []\n", "has no `datacenters` list"),
    ("datacenters:\n- name: dc\n  username: a\n  password: p\n",
     "datacenter 'dc' has no `endpoint`"),
    ("datacenters:\n- username: a\n", "datacenter #1 has no `name`"),
    ("datacenters:\n- name: dc\n  username: a\n  password: 0123\n  endpoint: http://x\n",
     "`password` must be a string; put it in quotes"),
    ("datacenters:\n- name: dc\n  username: a\n  password: p\n  endpoint: example.com\n",
     "endpoint 'example.com' must be a URL"),
    ("datacenters:\n- name: dc\n  username: a\n  password: p\n  endpoint: http://x\n"
     "- name: dc\n  username: b\n  password: p\n  endpoint: http://y\n", "'dc' is listed twice"),
])
def test_each_mistake_is_named_with_the_file(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config_load(path)
    assert expected in caught.value.message
    assert str(path) in caught.value.message
    assert "\n" not in caught.value.message


def test_a_missing_config_says_where_and_how(tmp_path):
    with pytest.raises(ConfigError) as caught:
        config_load(tmp_path / "nope")
    assert caught.value.message == (f"no config at {tmp_path / 'nope'}: create it as in "
                                    "`paddlectl help config`")


def test_an_unknown_datacenter_lists_the_known_ones(tmp_path):
    config = config_load(write(tmp_path, TWO.replace("current-datacenter: datacenter1",
                                                     "current-datacenter: gone")))
    with pytest.raises(ConfigError, match=r"current-datacenter: no datacenter named 'gone' .*"
                                          r"it has: datacenter1, datacenter2"):
        config.datacenter()
    with pytest.raises(ConfigError, match=r"^--datacenter: no datacenter named 'dc9'"):
        config.datacenter("dc9")


def test_several_datacenters_and_no_current_one(tmp_path):
    config = config_load(write(tmp_path, TWO.replace("current-datacenter: datacenter1", "")))
    with pytest.raises(ConfigError, match="use-datacenter NAME"):
        config.datacenter()


def test_a_password_others_can_read_is_warned_about(tmp_path):
    warnings: list[str] = []
    path = write(tmp_path, TWO, mode=0o644)
    config_load(path, warn=warnings.append)
    assert warnings == [f"{path} holds a password and is readable by others; "
                        f"run chmod 600 {path}"]
    warnings.clear()
    path.chmod(0o600)
    config_load(path, warn=warnings.append)
    assert warnings == []


def test_masked_hides_every_password_and_keeps_the_rest(tmp_path):
    masked = config_load(write(tmp_path, TWO)).masked()
    assert [dc["password"] for dc in masked["datacenters"]] == [MASK, MASK]
    assert masked["datacenters"][1]["username"] == "alice@example.com"
    assert masked["current-datacenter"] == "datacenter1"


def test_use_datacenter_changes_only_that_line(tmp_path):
    path = write(tmp_path, TWO, mode=0o644)
    config_use_datacenter(config_load(path), "datacenter2")
    assert path.read_text() == TWO.replace("current-datacenter: datacenter1",
                                           "current-datacenter: datacenter2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_use_datacenter_adds_the_line_when_missing(tmp_path):
    path = write(tmp_path, TWO.replace("current-datacenter: datacenter1\n", ""))
    config_use_datacenter(config_load(path), "datacenter2")
    assert config_load(path).current == "datacenter2"
    assert path.read_text().startswith("# my datacenters\n")


def test_use_datacenter_rewrites_an_unusual_layout(tmp_path):
    flow = yaml.safe_dump(yaml.safe_load(TWO), default_flow_style=True)
    path = write(tmp_path, flow)
    config_use_datacenter(config_load(path), "datacenter2")
    assert config_parse(path.read_text(), path).current == "datacenter2"


def test_use_datacenter_refuses_an_unknown_name(tmp_path):
    path = write(tmp_path, TWO)
    with pytest.raises(ConfigError, match="no datacenter named 'dc9'"):
        config_use_datacenter(config_load(path), "dc9")
    assert path.read_text() == TWO
