"""``paddlectl``: the command line as a user runs it against the live portal (the console
script in a process of its own, with the user's config: ``tests.paddlectl.conftest.Cli``),
with bytes in and out."""

from __future__ import annotations

import subprocess

import pytest

from tests.paddlectl.conftest import Cli, datacenter_entry, paddlectl_path


class Paddlectl:
    def __init__(self, endpoint: str, root):
        self.endpoint, self.root, self.clis = endpoint, root, {}

    def cli(self, user: str) -> Cli:
        if user not in self.clis:
            home = self.root / f"home-{user}"
            home.mkdir()
            self.clis[user] = Cli(home)
            self.clis[user].write_config([datacenter_entry(username=user,
                                                           endpoint=self.endpoint)])
        return self.clis[user]

    def argv(self, *args: str) -> list[str]:
        return [paddlectl_path(), *args]

    def __call__(self, *args: str, user: str = "alice",
                 input: bytes = b"") -> subprocess.CompletedProcess:
        cli = self.cli(user)
        return subprocess.run(self.argv(*args), input=input, capture_output=True,
                              env=cli.environ(), cwd=cli.cwd, timeout=60, check=False)


@pytest.fixture
def paddlectl(live_portal, tmp_path) -> Paddlectl:
    """``paddlectl(*args, user="alice", input=b"")``: its completed process (bytes);
    ``paddlectl.cli(user)``, ``paddlectl.argv(*args)``: how it is run, for a terminal."""
    return Paddlectl(live_portal.url, tmp_path)
