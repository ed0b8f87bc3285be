"""A real OpenID provider for tests: panva's oidc-provider (OpenID Certified, from npm) run by
``tests/oidc/provider.mjs`` in a Node process, with one confidential client whose redirect URI
is a live portal's callback, and the portal configured for it (``oidc_provider``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from accounts.sso import sso_discovery_forget
from tests.processes import process_stop

OIDC_DIR = Path(__file__).resolve().parent / "oidc"
CLIENT_ID = "paddlecloud"
CLIENT_SECRET = "test-client-secret-" + "x" * 20


def npm_ready() -> None:
    """tests/oidc/node_modules as package-lock.json says (npm ci, once)."""
    marker = OIDC_DIR / "node_modules" / ".package-lock.json"
    lock = OIDC_DIR / "package-lock.json"
    if marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime:
        return
    npm = shutil.which("npm")
    assert npm, "npm is not installed (./dev test installs nodejs and npm)"
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=OIDC_DIR,
                   check=True, timeout=300)


class Provider:
    def __init__(self, issuer: str, accounts: Path):
        self.issuer, self.accounts_file = issuer, accounts
        self.accounts: dict[str, dict] = {}

    def account(self, sub: str, **claims) -> None:
        """What the provider says of ``sub`` at its next login (any password logs in)."""
        self.accounts[sub] = claims
        self.accounts_file.write_text(json.dumps(self.accounts))


START_SECONDS = 30  # it starts in well under a second; one start hung in CI (never reproduced)
START_TRIES = 2


def _start(node: str, accounts: Path, live_portal, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """The provider's process and the line it prints once it listens. A start that prints
    nothing in ``START_SECONDS`` is killed and tried again; the last try's stderr is the
    failure's message."""
    for attempt in range(1, START_TRIES + 1):
        log = tmp_path / f"oidc-provider-{attempt}.log"
        with log.open("w") as stderr:
            process = subprocess.Popen(
                [node, str(OIDC_DIR / "provider.mjs")], cwd=OIDC_DIR, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={"PATH": os.environ.get("PATH", ""), "OIDC_CLIENT_ID": CLIENT_ID,
                     "OIDC_CLIENT_SECRET": CLIENT_SECRET, "OIDC_ACCOUNTS": str(accounts),
                     "OIDC_REDIRECT_URI": f"{live_portal.url}/oidc/callback/"})
        ready, _, _ = select.select([process.stdout], [], [], START_SECONDS)
        line = process.stdout.readline() if ready else ""
        if line:
            return process, line
        _stop(process)
    raise AssertionError(f"the provider did not start in {START_SECONDS} s, {START_TRIES} "
                         f"times; its stderr: {log.read_text()!r}")


def _stop(process: subprocess.Popen) -> None:
    process.stdin.close()  # the provider exits when its stdin closes, or on SIGTERM
    process_stop(process, timeout=5)
    process.stdout.close()


@contextlib.contextmanager
def oidc_provider(live_portal, settings, tmp_path: Path,
                  name: str = "TestID") -> Iterator[Provider]:
    """The provider running, the portal's settings pointing at it; stopped on the way out,
    whatever happened."""
    npm_ready()
    node = shutil.which("node")
    assert node, "node is not installed (./dev test installs nodejs and npm)"
    accounts = tmp_path / "oidc-accounts.json"
    accounts.write_text("{}")
    process, line = _start(node, accounts, live_portal, tmp_path)
    try:
        issuer = json.loads(line)["issuer"]
        settings.PADDLECLOUD_OIDC_ISSUER = issuer
        settings.PADDLECLOUD_OIDC_CLIENT_ID = CLIENT_ID
        settings.PADDLECLOUD_OIDC_CLIENT_SECRET = CLIENT_SECRET
        settings.PADDLECLOUD_OIDC_PROVIDER_NAME = name
        sso_discovery_forget()
        yield Provider(issuer, accounts)
    finally:
        sso_discovery_forget()
        _stop(process)


@contextlib.contextmanager
def web_login(cli) -> Iterator[tuple[subprocess.Popen, str]]:
    """``paddlectl login --web`` running (``cli.start``), with the page it asks the user to
    open; stopped on the way out should it still run, whatever the test did."""
    process = cli.start("login", "--web")
    try:
        lines: list[str] = []
        while not any("/device/?code=" in line for line in lines):
            line = process.stdout.readline()
            assert line, f"paddlectl said: {''.join(lines)} {process.stderr.read()}"
            lines.append(line)
        yield process, next(line.strip() for line in lines if "/device/?code=" in line)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
