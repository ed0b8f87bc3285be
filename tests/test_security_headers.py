"""The answers' security headers: the PFS byte streams (answered before Django) check the Host
and send what Django's middleware sends; users' files cannot run in the portal's origin; the
pages send a Content-Security-Policy their own scripts and styles satisfy."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import requests
from django.conf import settings as django_settings
from django.test import Client

from tests.factories import HOME

CONTENT = "/api/v1/pfs/content"
# What Django's SecurityMiddleware and XFrameOptionsMiddleware add (HSTS only over HTTPS).
SECURITY = ("X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy",
            "Cross-Origin-Opener-Policy")
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


@pytest.fixture
def portal(live_portal, settings):
    """The live portal, answering for 127.0.0.1 only (as a deployment names its hosts)."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    return live_portal


def byte_requests(portal) -> list[tuple[str, str, dict]]:
    """(method, url, keyword arguments) for each of the three byte endpoints."""
    data = b"planted"
    checksum = {"X-Checksum-Sha256": hashlib.sha256(data).hexdigest()}
    upload = portal.http.post(f"{portal.url}/api/v1/pfs/uploads",
                              json={"path": f"{HOME}/r.bin", "size": 8})
    assert upload.status_code == 201, upload.text
    return [
        ("GET", f"{portal.url}{CONTENT}?path={HOME}/a.txt", {}),
        ("PUT", f"{portal.url}{CONTENT}?path={HOME}/planted.txt",
         {"data": data, "headers": checksum}),
        ("PATCH", f"{portal.url}/api/v1/pfs/uploads/{upload.json()['id']}",
         {"data": b"1234", "headers": {"Upload-Offset": "0"}}),
    ]


def test_the_byte_endpoints_refuse_a_host_not_allowed(portal):
    (portal.home / "a.txt").write_text("hello")
    for method, url, extra in byte_requests(portal):
        headers = {"Host": "evil.example", **extra.pop("headers", {})}
        response = portal.http.request(method, url, headers=headers, **extra)
        assert response.status_code == 400, (method, response.text)
        body = response.json()
        assert body["code"] == "disallowed_host", body
        assert body["message"].startswith("Host: "), body
        assert set(body["fields"]) == {"Host"}
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert not (portal.home / "planted.txt").exists()
    # The rest of the API answers such a Host in the same shape.
    response = portal.http.get(f"{portal.url}/api/v1/me", headers={"Host": "evil.example"})
    assert (response.status_code, response.json()["code"]) == (400, "disallowed_host")


def test_the_byte_endpoints_send_the_headers_django_sends(portal):
    (portal.home / "a.txt").write_text("hello")
    django_answer = portal.http.get(f"{portal.url}/api/v1/me")
    expected = {name: django_answer.headers[name] for name in SECURITY}
    assert expected["X-Frame-Options"] == "DENY"
    for method, url, extra in byte_requests(portal):
        answer = portal.http.request(method, url, **extra)
        assert answer.status_code < 300, answer.text
        assert {name: answer.headers.get(name) for name in SECURITY} == expected, method
    refused = requests.get(f"{portal.url}{CONTENT}?path={HOME}/a.txt", timeout=10)  # no token
    assert refused.status_code == 401
    assert {name: refused.headers.get(name) for name in SECURITY} == expected
    assert "Strict-Transport-Security" not in refused.headers  # plain HTTP


# (The live portal's Django built its middleware when it started: Django's side of these two
# is asked of a test client, which builds it anew.)


@pytest.fixture
def test_client_too(settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]


def test_over_https_the_byte_endpoints_send_hsts_as_django_does(portal, settings,
                                                               test_client_too):
    settings.TRUSTED_PROXIES = 1
    settings.SECURE_HSTS_SECONDS = 3600
    (portal.home / "a.txt").write_text("hello")
    django_answer = Client().get("/api/v1/version", secure=True)
    assert django_answer.status_code == 200
    answer = portal.http.get(f"{portal.url}{CONTENT}?path={HOME}/a.txt",
                             headers={"X-Forwarded-Proto": "https"})
    assert answer.status_code == 200
    assert django_answer["Strict-Transport-Security"] == "max-age=3600"
    assert answer.headers["Strict-Transport-Security"] == "max-age=3600"
    plain = portal.http.get(f"{portal.url}{CONTENT}?path={HOME}/a.txt")
    assert "Strict-Transport-Security" not in plain.headers


def test_plain_http_is_sent_to_https_as_by_django(portal, settings, test_client_too):
    settings.SECURE_SSL_REDIRECT = True
    (portal.home / "a.txt").write_text("hello")
    django_answer = Client().get("/api/v1/version")
    assert django_answer.status_code == 301
    assert django_answer["Location"] == "https://testserver/api/v1/version"
    path = f"{CONTENT}?path={HOME}/a.txt"
    answer = portal.http.get(f"{portal.url}{path}", allow_redirects=False)
    assert answer.status_code == 301, answer.text
    assert answer.headers["Location"] == f"https://{portal.url.removeprefix('http://')}{path}"
    assert not answer.content


@pytest.mark.parametrize(("name", "content_type"), [
    ("page.html", "application/octet-stream"),
    ("page.htm", "application/octet-stream"),
    ("page.xhtml", "application/octet-stream"),
    ("picture.svg", "application/octet-stream"),
    ("feed.xml", "application/octet-stream"),
    ("style.xsl", "application/octet-stream"),
    ("app.js", "application/octet-stream"),
    ("app.mjs", "application/octet-stream"),
    ("no-extension", "application/octet-stream"),
    ("notes.txt", "text/plain"),
    ("loss.png", "image/png"),
    ("metrics.json", "application/json"),
])
def test_a_users_file_is_an_attachment_that_cannot_run(portal, name, content_type):
    (portal.home / name).write_text("<script>alert(document.cookie)</script>")
    answer = portal.http.get(f"{portal.url}{CONTENT}", params={"path": f"{HOME}/{name}"})
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == content_type
    assert answer.headers["Content-Disposition"].startswith("attachment;")
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Content-Security-Policy"] == "sandbox; default-src 'none'"


def test_a_directory_downloads_as_a_sandboxed_tar(portal):
    (portal.home / "d").mkdir()
    (portal.home / "d" / "page.html").write_text("<script>alert(1)</script>")
    answer = portal.http.get(f"{portal.url}{CONTENT}", params={"path": f"{HOME}/d"})
    assert answer.headers["Content-Type"] == "application/x-tar"
    assert answer.headers["Content-Disposition"].startswith("attachment;")
    assert answer.headers["Content-Security-Policy"] == "sandbox; default-src 'none'"


# --- the pages' Content-Security-Policy -----------------------------------------------------

PAGES = ["/jobs/", "/jobs/new/", "/files/", "/registries/", "/quota/", "/tokens/",
         "/notifications/"]


def directives(policy: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in policy.split(";"))


@pytest.mark.django_db
def test_every_page_sends_the_policy(alice, pfs_home):
    client = Client()
    pages = {"/login/": client.get("/login/")}
    client.force_login(alice)
    pages.update({path: client.get(path) for path in PAGES})
    for path, response in pages.items():
        assert response.status_code == 200, path
        policy = directives(response["Content-Security-Policy"])
        assert policy == django_settings.PADDLECLOUD_CSP, path
        for directive in ("script-src", "style-src"):
            assert policy[directive] == "'self'", (path, directive)
        assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"


@pytest.mark.django_db
def test_the_policy_is_sent_with_html_only(alice, api):
    assert "Content-Security-Policy" not in api.get("/api/v1/version")


@pytest.mark.django_db
def test_with_debug_on_djangos_error_pages_go_without(settings):
    settings.DEBUG = True
    assert "Content-Security-Policy" in Client().get("/login/")
    missing = Client().get("/no-such-page/")
    assert missing.status_code == 404
    assert "Content-Security-Policy" not in missing
    settings.DEBUG = False
    assert "Content-Security-Policy" in Client().get("/no-such-page/")


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/admin/", "/admin/accounts/user/", "/api/docs/",
                                  "/api/redoc/"])
def test_the_admin_and_the_api_docs_run_no_inline_script(admin_browser, path):
    response = admin_browser.get(path)
    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["script-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    html = response.content.decode()
    assert not re.findall(r"<script(?![^>]*\ssrc=)[^>]*>\s*\S", html), "an inline script"


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>"), "a <script> without src"),
    (re.compile(r"<style\b"), "a <style> element"),
    (re.compile(r"\sstyle="), "a style attribute"),
    (re.compile(r"\son[a-z]+\s*="), "an event handler attribute"),
    (re.compile(r"javascript:", re.IGNORECASE), "a javascript: URL"),
]


@pytest.mark.parametrize("template", sorted(str(p.relative_to(TEMPLATES))
                                            for p in TEMPLATES.rglob("*.html")))
def test_no_template_has_anything_inline(template):
    text = (TEMPLATES / template).read_text()
    for pattern, what in INLINE:
        assert not pattern.search(text), f"{template} has {what}"


@pytest.mark.django_db
def test_the_bars_are_drawn_without_a_style_attribute(alice, pfs_home):
    from accounts.models import Quota
    from pfs.models import Usage

    Quota.objects.filter(user=alice).update(storage=4096)
    Usage.objects.update_or_create(user=alice, datacenter=alice.memberships.get().datacenter,
                                   defaults={"used": 1024})
    client = Client()
    client.force_login(alice)
    html = client.get("/quota/").content.decode()
    assert '<rect width="25%" height="100%"/>' in html
    assert " style=" not in html
