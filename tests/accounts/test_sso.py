"""Single sign-on against a real OpenID provider: panva's oidc-provider (OpenID Certified, from
npm; tests/oidc/provider.mjs) in a Node process, the portal live (uvicorn), logins over HTTP
with ``requests`` through the provider's own login and consent pages."""

from __future__ import annotations

import base64
import html
import json
import re
import secrets
from io import StringIO
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import jwt
import pytest
import requests
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import SuspiciousOperation

from accounts.models import AuditEntry, Membership, SsoGroupMapping, SsoIdentity, User
from accounts.services import datacenter_upsert, user_upsert
from accounts.sso import SsoBackend, sso_discovery_forget
from tests.conftest import PASSWORD
from tests.oidc_provider import CLIENT_ID, CLIENT_SECRET, oidc_provider, web_login
from tests.paddlectl.conftest import Cli

pytestmark = pytest.mark.django_db(transaction=True)



def get(url, **kwargs) -> requests.Response:
    return requests.get(url, timeout=30, **kwargs)


def post(url, **kwargs) -> requests.Response:
    return requests.post(url, timeout=30, **kwargs)


@pytest.fixture
def provider(live_portal, settings, tmp_path):
    """The provider, its client registered with the live portal's callback, and the portal
    configured for it."""
    with oidc_provider(live_portal, settings, tmp_path) as running:
        yield running


def _form(page: requests.Response) -> tuple[str, dict]:
    """The provider page's form: where it posts, and its hidden fields."""
    action = re.search(r'<form[^>]*action="([^"]+)"', page.text)
    assert action, f"no form on {page.url}: {page.text[:500]}"
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
    return urljoin(page.url, html.unescape(action.group(1))), fields


def provider_pages(session: requests.Session, page: requests.Response, sub: str,
                   portal_url: str, stop_at_portal: bool = False) -> requests.Response:
    """Log in at the provider as ``sub`` (any password) and consent, until the provider sends
    the browser back to the portal."""
    for _ in range(4):
        if page.url.startswith(portal_url) or (stop_at_portal and page.is_redirect):
            return page
        url, fields = _form(page)
        if fields.get("prompt") == "login":
            fields.update(login=sub, password="anything")
        page = session.post(url, data=fields, allow_redirects=not stop_at_portal)
        while stop_at_portal and page.is_redirect:
            target = urljoin(page.url, page.headers["Location"])
            if target.startswith(portal_url):
                return page
            page = session.get(target, allow_redirects=False)
    raise AssertionError(f"the provider never sent the browser back: {page.url}")


def sso_login(portal, sub: str, next_path: str = "") -> tuple[requests.Session,
                                                              requests.Response]:
    """A browser's login with single sign-on, from the portal's button to the page after."""
    session = requests.Session()
    login_page = session.get(f"{portal.url}/login/")
    button = re.search(r'<a class="btn wide" id="sso-login" href="([^"]+)">([^<]+)</a>',
                       login_page.text)
    assert button, login_page.text
    url = urljoin(login_page.url, html.unescape(button.group(1)))
    if next_path:
        url += "?" + urlencode({"next": next_path})
    page = provider_pages(session, session.get(url), sub, portal.url)
    return session, page


def messages_of(page: requests.Response) -> list[str]:
    return [html.unescape(m) for m in re.findall(r'<li class="[^"]*" role="[a-z]+">([^<]*)</li>',
                                                 page.text)]


@pytest.fixture
def datacenters(live_portal):
    names = ["datacenter2", "datacenter3", "datacenter4"]
    for name in names:
        datacenter_upsert(name)
    SsoGroupMapping.objects.create(group="ml", datacenter=live_portal.datacenter)
    for group, name in (("gpu", "datacenter2"), ("ops", "datacenter4")):
        SsoGroupMapping.objects.create(group=group, datacenter_id=datacenter_upsert(name)[0].pk)
    return names


def members(user) -> dict[str, bool]:
    """The user's datacenters, each with whether single sign-on granted it."""
    return {m.datacenter.name: m.granted_by_sso
            for m in Membership.objects.filter(user=user).select_related("datacenter")}


def test_first_login_creates_the_user_and_the_next_finds_them_by_subject(
        live_portal, provider, datacenters):
    provider.account("sub-7f3a", preferred_username="Bob Smith", email="bob@example.org",
                     email_verified=True, groups=["ml", "unmapped"])
    login_page = get(f"{live_portal.url}/login/")
    assert "Log in with TestID" in login_page.text and 'name="password"' in login_page.text

    session, page = sso_login(live_portal, "sub-7f3a", next_path="/quota/")
    assert page.status_code == 200 and page.url == f"{live_portal.url}/quota/"
    assert '<span class="who">bob-smith</span>' in page.text

    user = User.objects.get(username="bob-smith")
    assert user.email == "bob@example.org" and not user.has_usable_password()
    assert SsoIdentity.objects.get(user=user).subject == "sub-7f3a"
    assert SsoIdentity.objects.get(user=user).issuer == provider.issuer
    assert members(user) == {"datacenter1": True}
    audit = list(AuditEntry.objects.filter(target="bob-smith").order_by("id")
                 .values_list("action", "datacenter", "details"))
    assert audit == [
        ("sso.user_create", "", {"issuer": provider.issuer, "subject": "sub-7f3a"}),
        ("sso.membership_add", "datacenter1", {"groups": ["ml"]}),
    ]

    # Logging out ends the portal's session.
    tokens = session.get(f"{live_portal.url}/tokens/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', tokens.text).group(1)
    out = session.post(f"{live_portal.url}/logout/", data={"csrfmiddlewaretoken": csrf})
    assert out.url.startswith(f"{live_portal.url}/login/")
    assert session.get(f"{live_portal.url}/jobs/").url.startswith(f"{live_portal.url}/login/")

    # The provider renamed them and added a group: the same user, a new membership.
    provider.account("sub-7f3a", preferred_username="robert", email="bob@example.org",
                     email_verified=True, groups=["ml", "gpu"])
    _, page = sso_login(live_portal, "sub-7f3a")
    assert page.url == f"{live_portal.url}/jobs/"
    assert '<span class="who">bob-smith</span>' in page.text
    assert User.objects.count() == 2  # alice and bob-smith
    assert members(user) == {"datacenter1": True, "datacenter2": True}

    # Another subject with the same preferred username gets a username of its own.
    provider.account("sub-other", preferred_username="bob.smith!", groups=[])
    sso_login(live_portal, "sub-other")
    assert User.objects.filter(username="bob.smith").exists()
    provider.account("sub-third", preferred_username="Bob.Smith", groups=[])
    sso_login(live_portal, "sub-third")
    assert User.objects.filter(username="bob.smith-2").exists()


def test_memberships_follow_the_group_claim_but_never_an_admins(
        live_portal, provider, datacenters):
    provider.account("sub-carol", preferred_username="carol", groups=["ml", "gpu", "ops"])
    sso_login(live_portal, "sub-carol")
    carol = User.objects.get(username="carol")
    assert members(carol) == {"datacenter1": True, "datacenter2": True, "datacenter4": True}
    # An admin adds her to datacenter3 by hand; and had added her to datacenter4 by hand
    # (marking it theirs, as the admin's inline does).
    user_upsert("carol", datacenter_names=["datacenter3"])
    Membership.objects.filter(user=carol, datacenter__name="datacenter4").update(
        granted_by_sso=False)

    provider.account("sub-carol", preferred_username="carol", groups=["gpu"])
    _, page = sso_login(live_portal, "sub-carol")
    assert page.status_code == 200
    assert members(carol) == {"datacenter2": True, "datacenter3": False,
                              "datacenter4": False}
    removed = AuditEntry.objects.get(action="sso.membership_remove", target="carol")
    assert removed.datacenter == "datacenter1" and removed.actor is None

    provider.account("sub-carol", preferred_username="carol", groups=[])
    sso_login(live_portal, "sub-carol")
    assert members(carol) == {"datacenter3": False, "datacenter4": False}


def test_a_user_without_a_mapped_group_is_told_they_have_no_datacenter(
        live_portal, provider, datacenters):
    provider.account("sub-dave", preferred_username="dave", groups=["sales"])
    session, page = sso_login(live_portal, "sub-dave")
    # The jobs page's answer to a user of no datacenter (as for any such user): a 403 page.
    assert page.status_code == 403 and page.url == f"{live_portal.url}/jobs/"
    assert "You are not a member of any datacenter yet." in page.text
    assert "none of your groups at the identity provider gives you a datacenter" in page.text
    for path in ("/tokens/", "/quota/", "/files/"):
        assert session.get(f"{live_portal.url}{path}").status_code == 200
    me = session.get(f"{live_portal.url}/api/v1/me")
    assert me.status_code == 403 and me.json()["code"] == "not_a_member"


def test_a_forged_state_is_refused(live_portal, provider, datacenters):
    provider.account("sub-erin", preferred_username="erin", groups=["ml"])
    session = requests.Session()
    to_provider = session.get(f"{live_portal.url}/oidc/authenticate/", allow_redirects=False)
    assert to_provider.status_code == 302
    back = provider_pages(session, session.get(to_provider.headers["Location"]), "sub-erin",
                          live_portal.url, stop_at_portal=True)
    callback = urljoin(back.url, back.headers["Location"])
    query = parse_qs(urlsplit(callback).query)
    assert set(query) >= {"code", "state"}

    forged = f"{live_portal.url}/oidc/callback/?" + urlencode(
        {"code": query["code"][0], "state": "forged-" + secrets.token_urlsafe(8)})
    page = session.get(forged)
    assert page.url == f"{live_portal.url}/login/"
    assert messages_of(page) == ["Single sign-on failed: the answer of the identity provider "
                                 "was refused; log in again"]
    # A browser that never started a login (no state in its session) is refused too.
    stranger = get(callback)
    assert stranger.url == f"{live_portal.url}/login/"
    assert "Single sign-on failed" in stranger.text
    assert not User.objects.filter(username="erin").exists()
    # The real state still works once: the code is good.
    page = session.get(callback)
    assert page.url == f"{live_portal.url}/jobs/" and '<span class="who">erin</span>' in page.text
    # and never twice.
    replayed = requests.Session()
    replayed.cookies.update(session.cookies)
    assert "Single sign-on failed" in replayed.get(callback).text


def _real_id_token(live_portal, provider, sub: str, nonce: str) -> str:
    """An ID token the provider issued to the portal's client (the code flow by hand)."""
    discovery = get(f"{provider.issuer}/.well-known/openid-configuration").json()
    session = requests.Session()
    redirect_uri = f"{live_portal.url}/oidc/callback/"
    start = session.get(discovery["authorization_endpoint"], params={
        "response_type": "code", "client_id": CLIENT_ID, "redirect_uri": redirect_uri,
        "scope": "openid email profile groups", "state": "s", "nonce": nonce})
    back = provider_pages(session, start, sub, live_portal.url, stop_at_portal=True)
    code = parse_qs(urlsplit(back.headers["Location"]).query)["code"][0]
    answer = post(discovery["token_endpoint"], data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
        "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
    assert answer.status_code == 200, answer.text
    return answer.json()["id_token"]


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_a_tampered_or_forged_id_token_is_refused(live_portal, provider):
    provider.account("sub-frank", preferred_username="frank", groups=[])
    token = _real_id_token(live_portal, provider, "sub-frank", nonce="n-1")
    backend = SsoBackend()
    backend.configure()
    assert backend.verify_token(token, nonce="n-1")["sub"] == "sub-frank"

    with pytest.raises(SuspiciousOperation, match="Nonce"):
        backend.verify_token(token, nonce="another")
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    tampered = ".".join([header, _b64({**claims, "sub": "sub-admin"}), signature])
    with pytest.raises(SuspiciousOperation, match="verification failed"):
        backend.verify_token(tampered, nonce="n-1")
    # Signed with another key that claims the provider's key id.
    kid = jwt.get_unverified_header(token)["kid"]
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode({**claims, "sub": "sub-admin"}, other_key, algorithm="RS256",
                        headers={"kid": kid})
    with pytest.raises(SuspiciousOperation, match="verification failed"):
        backend.verify_token(forged, nonce="n-1")
    # Unsigned, or signed with the client secret (HS256): the algorithm is refused.
    unsigned = ".".join([_b64({"alg": "none", "kid": kid}), _b64(claims), ""])
    with pytest.raises(SuspiciousOperation, match="Could not find a valid JWKS"):
        backend.verify_token(unsigned, nonce="n-1")
    hs256 = jwt.encode(claims, CLIENT_SECRET, algorithm="HS256", headers={"kid": kid})
    with pytest.raises(SuspiciousOperation, match="Could not find a valid JWKS"):
        backend.verify_token(hs256, nonce="n-1")


def test_id_tokens_of_another_issuer_or_audience_are_refused(live_portal, provider, settings):
    provider.account("sub-gina", preferred_username="gina", groups=[])
    token = _real_id_token(live_portal, provider, "sub-gina", nonce="n-2")
    backend = SsoBackend()
    backend.configure()
    settings.PADDLECLOUD_OIDC_CLIENT_ID = "another-client"
    with pytest.raises(SuspiciousOperation, match="not for this portal"):
        backend.verify_token(token, nonce="n-2")
    settings.PADDLECLOUD_OIDC_CLIENT_ID = CLIENT_ID
    settings.PADDLECLOUD_OIDC_ISSUER = provider.issuer + "/elsewhere"
    with pytest.raises(SuspiciousOperation, match="another issuer"):
        backend.verify_token(token, nonce="n-2")


def test_sso_user_uses_paddlectl_with_a_token_from_the_tokens_page(
        live_portal, provider, datacenters, tmp_path):
    provider.account("sub-hana", preferred_username="hana", groups=["ml"])
    session, _ = sso_login(live_portal, "sub-hana")
    page = session.get(f"{live_portal.url}/tokens/")
    assert "You log in with single sign-on and have no password" in page.text
    fields = dict(re.findall(r'name="(csrfmiddlewaretoken|once)" value="([^"]*)"', page.text))
    created = session.post(f"{live_portal.url}/tokens/", data={
        **fields, "action": "create", "name": "laptop", "datacenter": "datacenter1",
        "expires_in_days": "7"})
    assert created.status_code == 200 and "Copy it now" in created.text, created.text[:3000]
    config_text = html.unescape(re.search(r'<pre id="snippet-config">(.*?)</pre>',
                                          created.text, re.S).group(1))
    config = yaml.safe_load(config_text)
    entry = config["datacenters"][0]
    assert set(entry) == {"name", "username", "token", "endpoint"}
    assert entry["username"] == "hana" and entry["token"].startswith("pct_")

    cli = Cli(tmp_path / "home")
    cli.config.parent.mkdir(parents=True)
    cli.config.write_text(config_text)
    cli.config.chmod(0o600)
    jobs = cli("get", "jobs")
    assert jobs.returncode == 0, jobs.stderr
    assert jobs.stderr == ""
    login = cli("login")
    assert login.returncode == 0, login.stderr
    assert "the config holds an API token for hana" in login.stdout + login.stderr
    assert "/tokens/" in login.stdout + login.stderr
    assert not cli.tokens_file.exists()  # nothing cached: the config's token is used as is

    # Revoked on the Tokens page, the token is refused, and paddlectl says where to get one.
    token_id = re.search(r'name="token" value="(\d+)"', created.text).group(1)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', created.text).group(1)
    session.post(f"{live_portal.url}/tokens/", data={
        "csrfmiddlewaretoken": csrf, "action": "revoke", "token": token_id, "confirm": "yes"})
    refused = cli("get", "jobs")
    assert refused.returncode != 0
    assert "the token was revoked" in refused.stderr and "Tokens page" in refused.stderr
    assert f"{live_portal.url}/tokens/" in refused.stderr


def test_password_login_is_refused_for_an_sso_user(live_portal, provider, datacenters,
                                                   tmp_path):
    provider.account("sub-ivan", preferred_username="ivan", groups=["ml"])
    sso_login(live_portal, "sub-ivan")
    answer = post(f"{live_portal.url}/api/v1/auth/token/",
                           json={"username": "ivan", "password": PASSWORD})
    assert answer.status_code == 401
    assert answer.json()["code"] == "sso_user"
    assert answer.json()["message"] == (
        "ivan logs in with single sign-on and has no password: make an API token on the "
        "dashboard's Tokens page and put it in ~/.paddle/config as `token:` in place of "
        "`password:`")
    cli = Cli(tmp_path / "home")
    cli.write_config([{"name": "datacenter1", "username": "ivan", "password": "guess",
                       "endpoint": live_portal.url}])
    result = cli("login")
    assert result.returncode != 0
    assert "ivan logs in with single sign-on and has no password" in result.stderr
    # The browser's password form says it too.
    browser = requests.Session()
    form = browser.get(f"{live_portal.url}/login/", timeout=30)
    answer = browser.post(f"{live_portal.url}/login/", timeout=30, data={
        "csrfmiddlewaretoken": _csrf(form), "username": "ivan", "password": "guess"})
    assert ("ivan logs in with single sign-on and has no password: use the “Log in with "
            "TestID” button") in html.unescape(answer.text)
    # A password user is not affected.
    ok = post(f"{live_portal.url}/api/v1/auth/token/",
                       json={"username": "alice", "password": PASSWORD})
    assert ok.status_code == 201


def test_single_sign_on_is_off_unless_configured(live_portal):
    page = get(f"{live_portal.url}/login/")
    assert "Log in with" not in page.text and 'name="password"' in page.text
    assert get(f"{live_portal.url}/oidc/authenticate/").status_code == 404
    assert get(f"{live_portal.url}/oidc/callback/?code=a&state=b").status_code == 404


def test_sso_only_hides_the_password_form(live_portal, provider, settings):
    settings.PADDLECLOUD_OIDC_ONLY = True
    page = get(f"{live_portal.url}/login/")
    assert "Log in with TestID" in page.text and 'name="password"' not in page.text


def test_a_provider_that_cannot_be_reached_is_a_message(live_portal, provider, settings):
    settings.PADDLECLOUD_OIDC_ISSUER = "http://127.0.0.1:9"
    sso_discovery_forget()
    page = get(f"{live_portal.url}/oidc/authenticate/")
    assert page.url == f"{live_portal.url}/login/"
    assert messages_of(page) == ["Single sign-on failed: the identity provider cannot be "
                                 "reached; try again later"]




# -- what a login does, without the provider ---------------------------------------------------

ISSUER = "https://login.example.org"


def test_usernames_made_from_claims(db):
    from accounts.sso import sso_username

    user_upsert("taken", password=PASSWORD)
    cases = {
        "Zoë Müller": "zoe-muller", "..dots..and//slashes": "dots.and-slashes",
        "TAKEN": "taken-2", "a" * 80: "a" * 64, "ユーザー": "mail", "-_.": "mail",
    }
    for preferred, expected in cases.items():
        assert sso_username({"preferred_username": preferred, "email": "mail@x.org",
                             "sub": "s"}) == expected, preferred
    assert sso_username({"sub": "ABC 123"}) == "user-abc-123"


def test_an_existing_user_is_matched_by_verified_email_only_if_the_admin_allows(db, settings):
    from accounts.sso import sso_user_login

    alice = user_upsert("alice", password=PASSWORD, email="alice@example.org")[0]
    claims = {"sub": "a-1", "preferred_username": "alice", "email": "Alice@example.org",
              "email_verified": True}
    settings.PADDLECLOUD_OIDC_MATCH_EMAIL = False
    assert sso_user_login(ISSUER, claims).username == "alice-2"

    settings.PADDLECLOUD_OIDC_MATCH_EMAIL = True
    unverified = {**claims, "sub": "a-2", "email_verified": False}
    assert sso_user_login(ISSUER, unverified).username == "alice-3"
    assert sso_user_login(ISSUER, {**claims, "sub": "a-3"}) == alice
    assert alice.has_usable_password()  # she keeps her password
    assert sso_user_login(ISSUER, {**claims, "sub": "a-3", "email": "new@example.org"}) == alice
    alice.refresh_from_db()
    assert alice.email == "alice@example.org"  # a password user's e-mail is theirs to change
    assert AuditEntry.objects.filter(action="sso.user_link", target="alice").count() == 1
    # The same subject at another issuer is someone else.
    assert sso_user_login("https://other.example.org", {**claims, "sub": "a-3",
                                                        "email_verified": False}) != alice


def test_ssogroup_command(db, datacenter):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = StringIO()
    call_command("ssogroup", "ml", "datacenter1", stdout=out)
    call_command("ssogroup", "ml", "datacenter1", stdout=out)
    call_command("ssogroup", "--list", stdout=out)
    call_command("ssogroup", "ml", "datacenter1", "--remove", stdout=out)
    assert out.getvalue().splitlines() == [
        "Mapped group 'ml' to datacenter datacenter1.",
        "Already mapped: group 'ml' to datacenter datacenter1.",
        "ml\tdatacenter1",
        "Removed the mapping of group 'ml' to datacenter1.",
    ]
    with pytest.raises(CommandError, match="no datacenter named 'nowhere'"):
        call_command("ssogroup", "ml", "nowhere")


# -- paddlectl login --web ----------------------------------------------------------------------


def _csrf(page: requests.Response) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)


def test_paddlectl_login_web_approved_in_the_browser(live_portal, provider, datacenters,
                                                     tmp_path):
    provider.account("sub-jo", preferred_username="jo", groups=["ml"])
    session, _ = sso_login(live_portal, "sub-jo")
    cli = Cli(tmp_path / "home")
    cli.write_config([{"name": "datacenter1", "username": "jo",
                       "endpoint": live_portal.url}])
    # Without a password, a plain login says what to do.
    plain = cli("get", "jobs")
    assert plain.returncode != 0 and "run `paddlectl login --web`" in plain.stderr

    with web_login(cli) as (process, url):
        code = parse_qs(urlsplit(url).query)["code"][0]
        assert re.fullmatch(r"[B-Z]{4}-[B-Z]{4}", code)
        page = session.get(url)
        assert "asks to log in as <strong>jo</strong> to <strong>datacenter1</strong>" in page.text
        # The approval is a POST that needs the CSRF token of the page.
        forged = session.post(f"{live_portal.url}/device/", data={"code": code,
                                                                  "action": "approve"})
        assert forged.status_code == 403
        approved = session.post(f"{live_portal.url}/device/", data={
            "csrfmiddlewaretoken": _csrf(page), "code": code, "action": "approve"})
        assert "paddlectl is logged in as <strong>jo</strong>" in approved.text
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Logged in to datacenter1" in out
    assert list(cli.tokens()) == [f"{live_portal.url}|datacenter1|jo"]
    jobs = cli("get", "jobs")
    assert jobs.returncode == 0, jobs.stderr
    # The code is spent.
    again = session.get(url)
    assert "no login waits for this code" in again.text


def test_paddlectl_login_web_refusals(live_portal, provider, datacenters, tmp_path):
    provider.account("sub-kim", preferred_username="kim", groups=["ml"])
    session, _ = sso_login(live_portal, "sub-kim")
    cli = Cli(tmp_path / "home")
    # Another user's paddlectl: kim cannot approve it.
    cli.write_config([{"name": "datacenter1", "username": "alice",
                       "endpoint": live_portal.url}])
    with web_login(cli) as (process, url):
        page = session.get(url)
        refused = session.post(f"{live_portal.url}/device/", data={
            "csrfmiddlewaretoken": _csrf(page), "code": parse_qs(urlsplit(url).query)["code"][0],
            "action": "approve"})
        assert refused.status_code == 400
        assert "this paddlectl logs in as &#x27;alice&#x27;, and you are &#x27;kim&#x27;" \
            in refused.text
        # kim denies it: paddlectl stops, saying so.
        denied = session.post(f"{live_portal.url}/device/", data={
            "csrfmiddlewaretoken": _csrf(page), "code": parse_qs(urlsplit(url).query)["code"][0],
            "action": "deny"})
        assert "Denied" in denied.text
        _, err = process.communicate(timeout=30)
    assert process.returncode != 0 and "the login was denied in the browser" in err
    assert not cli.tokens()

    # A wrong code is an error on the page, and counts as a failed login.
    wrong = session.get(f"{live_portal.url}/device/?code=BBBB-BBBB")
    assert "no login waits for this code" in wrong.text
    # Polling: pending, then unknown codes.
    start = post(f"{live_portal.url}/api/v1/auth/device/", json={"username": "kim"})
    assert start.status_code == 201
    poll = post(f"{live_portal.url}/api/v1/auth/device/token/",
                json={"device_code": start.json()["device_code"]})
    assert poll.status_code == 400 and poll.json()["code"] == "authorization_pending"
    unknown = post(f"{live_portal.url}/api/v1/auth/device/token/",
                   json={"device_code": "made-up"})
    assert unknown.status_code == 400 and unknown.json()["code"] == "invalid_device_code"
    # At most ten logins wait for approval per address.
    answers = [post(f"{live_portal.url}/api/v1/auth/device/", json={"username": "kim"})
               for _ in range(10)]
    # (the denied one does not wait; the one above does: nine more fit)
    assert [a.status_code for a in answers] == [201] * 9 + [429]
    assert "too many logins waiting for approval" in answers[-1].json()["message"]


def test_the_device_page_asks_for_a_login_first(live_portal, provider, datacenters):
    provider.account("sub-lee", preferred_username="lee", groups=["ml"])
    start = post(f"{live_portal.url}/api/v1/auth/device/", json={"username": "lee"}).json()
    page = get(start["verification_uri_complete"])
    assert page.url.startswith(f"{live_portal.url}/login/?next=")
    # Logging in with single sign-on from there comes back to the code.
    _, page = sso_login(live_portal, "sub-lee",
                              next_path=urlsplit(start["verification_uri_complete"]).path
                              + "?" + urlsplit(start["verification_uri_complete"]).query)
    assert page.url == start["verification_uri_complete"]
    assert "asks to log in as <strong>lee</strong>" in page.text


def test_the_admin_maps_groups_to_datacenters(admin_browser, datacenter):
    assert admin_browser.get("/admin/accounts/ssogroupmapping/add/").status_code == 200
    response = admin_browser.post("/admin/accounts/ssogroupmapping/add/",
                                  {"group": "ml-team", "datacenter": datacenter.pk})
    assert response.status_code == 302
    assert SsoGroupMapping.objects.get().datacenter == datacenter
    listing = admin_browser.get("/admin/accounts/ssogroupmapping/")
    assert listing.status_code == 200 and "ml-team" in listing.content.decode()
