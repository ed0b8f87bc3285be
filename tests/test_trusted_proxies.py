"""Forwarded headers (X-Forwarded-For, X-Forwarded-Proto) are taken only from the proxies of
TRUSTED_PROXY_ADDRESSES, and never from a job's relay: a sandboxed replica that forges its
address gets no fresh failed-login counter per guess. The live portal, served as runportal
serves it, and a real job in its sandbox."""

from __future__ import annotations

import http.client
import json

import pytest

from jobs.backends.local.relay import RELAY_PORT
from jobs.backends.local.sandbox import sandbox_problem
from paddlecloud_core.contract import RELAY_SOURCE_ADDRESS
from tests.conftest import PASSWORD
from tests.jobs.master_scenario import one_trainer_job
from tests.processes import run_python

TOKEN_URL = "/api/v1/auth/token/"

# A replica that guesses alice's password through its job's relay, each guess "forwarded"
# for another client, and says what the portal answered.
GUESSER = f'URL = "http://127.0.0.1:{RELAY_PORT}{TOKEN_URL}"\n' + """\
import json, urllib.error, urllib.request
answers = []
for guess in range(8):
    request = urllib.request.Request(
        URL, data=json.dumps({"username": "alice", "password": f"guess {guess}"}).encode(),
        headers={"Content-Type": "application/json",
                 "X-Forwarded-For": f"203.0.113.{guess}", "X-Forwarded-Proto": "https"})
    try:
        answers.append(urllib.request.urlopen(request, timeout=30).status)
    except urllib.error.HTTPError as exc:
        answers.append(exc.code)
print("ANSWERS " + json.dumps(answers), flush=True)
"""


def login(portal, password: str, *, source: str = "127.0.0.1",
          forwarded: str | None = None) -> int:
    """The token endpoint's status for alice's ``password``, sent from ``source`` (an address
    of this machine's loopback) with ``X-Forwarded-For: forwarded``."""
    host, port = portal.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30,
                                            source_address=(source, 0))
    headers = {"Content-Type": "application/json"}
    if forwarded:
        headers["X-Forwarded-For"] = forwarded
    try:
        connection.request("POST", TOKEN_URL, headers=headers,
                           body=json.dumps({"username": "alice", "password": password}))
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.skipif(sandbox_problem() is not None,
                    reason=f"no sandbox here: {sandbox_problem()}")
def test_a_job_cannot_forge_its_address_through_its_relay(live_portal, held_tasks, settings):
    settings.TRUSTED_PROXIES = 1  # a proxy in front, on this machine (127.0.0.1)
    settings.PADDLECLOUD_LOCAL_SANDBOX = "bwrap"
    with one_trainer_job(live_portal, GUESSER) as (job, log):
        assert job.state == "succeeded", (job.state_reason, log)
    answers = json.loads(log.split("ANSWERS ", 1)[1].splitlines()[0])
    # Five guesses, then the counter of (alice, the relay's address) is full.
    assert answers == [401] * 5 + [429] * 3, log
    # The proxy's own clients are not counted with the job's guesses.
    assert login(live_portal, PASSWORD, forwarded="198.51.100.7") == 201


def test_only_a_trusted_proxy_forwards_the_clients_address(live_portal, settings):
    settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT = 1
    # No proxy in front (the default): the header is anyone's, and ignored.
    assert login(live_portal, "wrong", forwarded="192.0.2.1") == 401
    assert login(live_portal, PASSWORD, forwarded="192.0.2.2") == 429
    assert login(live_portal, PASSWORD, source="127.0.0.3") == 201  # another address

    settings.TRUSTED_PROXIES = 1  # a proxy on 127.0.0.1: its clients are told apart
    assert login(live_portal, "wrong", forwarded="192.0.2.3") == 401
    assert login(live_portal, PASSWORD, forwarded="192.0.2.3") == 429
    assert login(live_portal, PASSWORD, forwarded="192.0.2.4") == 201
    # From an address that is not the proxy's, forging is no use.
    assert login(live_portal, "wrong", source="127.0.0.5", forwarded="192.0.2.5") == 401
    assert login(live_portal, PASSWORD, source="127.0.0.5", forwarded="192.0.2.6") == 429
    # A network of proxies that takes in the relay's address still does not trust it.
    settings.TRUSTED_PROXY_ADDRESSES = ["127.0.0.0/8"]
    assert login(live_portal, "wrong", source=RELAY_SOURCE_ADDRESS, forwarded="192.0.2.7") == 401
    assert login(live_portal, PASSWORD, source=RELAY_SOURCE_ADDRESS, forwarded="192.0.2.8") == 429
    assert login(live_portal, PASSWORD, source="127.0.0.6", forwarded="192.0.2.8") == 201


def test_https_is_believed_from_a_trusted_proxy_only(live_portal, settings):
    settings.TRUSTED_PROXIES = 1
    settings.SECURE_HSTS_SECONDS = 3600
    (live_portal.home / "a.txt").write_text("hello")
    token = live_portal.token()

    def hsts(source: str) -> str | None:
        """The HSTS header of a PFS download (sent over HTTPS only), claimed to be HTTPS."""
        host, port = live_portal.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30,
                                                source_address=(source, 0))
        try:
            connection.request(
                "GET", "/api/v1/pfs/content?path=/pfs/datacenter1/home/alice/a.txt",
                headers={"X-Forwarded-Proto": "https", "Authorization": f"Bearer {token}"})
            response = connection.getresponse()
            assert response.status == 200
            return response.getheader("Strict-Transport-Security")
        finally:
            connection.close()

    assert hsts("127.0.0.1") == "max-age=3600"  # the proxy's: served over HTTPS
    assert hsts("127.0.0.5") is None  # anyone else's: plain HTTP, whatever it says
    assert hsts(RELAY_SOURCE_ADDRESS) is None  # a job's relay's


def test_trusted_proxy_addresses_must_be_addresses(tmp_path):
    result = run_python(["-c", "import django; django.setup()"], tmp_path / "var",
                        TRUSTED_PROXY_ADDRESSES="127.0.0.1,proxy.example.com")
    assert result.returncode != 0
    assert ("TRUSTED_PROXY_ADDRESSES: 'proxy.example.com' is not an IP address or network"
            in result.stderr)
