"""The Django admin for datacenters, users, quotas and tokens, and the browser pages."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken, Quota
from accounts.services import token_create, user_upsert
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _pfs_root(settings, tmp_path):
    """Pages that show a user's files make their home: under the test's own directory."""
    settings.PADDLECLOUD_PFS_ROOT = tmp_path / "pfs"

GiB = 2**30


def page(response) -> str:
    return html.unescape(response.content.decode())


# ---------------------------------------------------------------------------------------------
# Admin


@pytest.mark.parametrize("model", ["user", "datacenter", "quota", "apitoken"])
def test_admin_changelists_open(admin_browser, alice, token_client, model):
    response = admin_browser.get(f"/admin/accounts/{model}/")
    assert response.status_code == 200
    # Each list shows alice's rows: her user, her datacenter, her quota, her token.
    assert ("datacenter1" if model == "datacenter" else "alice") in page(response)


@pytest.mark.parametrize("model", ["user", "datacenter", "quota"])
def test_admin_add_pages_open(admin_browser, model):
    response = admin_browser.get(f"/admin/accounts/{model}/add/")
    assert response.status_code == 200
    assert '<form' in response.content.decode()


def test_admin_tokens_cannot_be_added(admin_browser, token_client):
    assert admin_browser.get("/admin/accounts/apitoken/add/").status_code == 403
    changelist = page(admin_browser.get("/admin/accounts/apitoken/"))
    assert "/admin/accounts/apitoken/add/" not in changelist
    # ...but they can be looked at, without the digest.
    token = token_client.issued.token
    detail = admin_browser.get(f"/admin/accounts/apitoken/{token.pk}/change/")
    assert detail.status_code == 200
    assert token.prefix in page(detail)
    assert token.digest not in page(detail)


def test_admin_user_page_has_membership_and_quota_inlines(admin_browser, alice):
    Quota.objects.filter(user=alice).update(cpu=500, memory=16 * GiB)
    response = admin_browser.get(f"/admin/accounts/user/{alice.pk}/change/")
    assert response.status_code == 200
    body = page(response)
    assert 'name="memberships-TOTAL_FORMS"' in body
    assert 'name="quotas-TOTAL_FORMS"' in body
    # The quota is shown as users write it, not in millicores and bytes.
    assert 'name="quotas-0-cpu" value="500m"' in body
    assert 'name="quotas-0-memory" value="16Gi"' in body


def quota_post(user, datacenter, **changes) -> dict:
    data = {"user": user.pk, "datacenter": datacenter.pk, "cpu": "4", "memory": "8Gi",
            "gpu": "0", "jobs": "2", "queued": "", "storage": "10Gi"}
    data.update(changes)
    return data


def test_admin_quota_form_reads_quantities(admin_browser, datacenter):
    bob = user_upsert("bob", password=PASSWORD)[0]
    response = admin_browser.post("/admin/accounts/quota/add/", quota_post(
        bob, datacenter, cpu="500m", memory="8Gi", storage="1.5Ti", gpu="1"))
    assert response.status_code == 302, page(response)
    quota = Quota.objects.get(user=bob, datacenter=datacenter)
    assert (quota.cpu, quota.memory, quota.storage, quota.gpu) == (
        500, 8 * GiB, 3 * 2**39, 1)

    listing = page(admin_browser.get("/admin/accounts/quota/"))
    assert "500m" in listing
    assert "1536Gi" in listing

    change = page(admin_browser.get(f"/admin/accounts/quota/{quota.pk}/change/"))
    assert 'name="cpu" value="500m"' in change
    assert 'name="memory" value="8Gi"' in change


DATACENTER_FORM = {"name": "datacenter1", "backend": "local", "namespace_prefix": "paddle-",
                   "pfs_storage": "posix", "kube_scheduler": "default", "start_timeout": "300",
                   "start_tries": "3", "kube_gpu_tolerations": "[]",
                   "kube_gpu_node_selector": "{}", "budget_spent": "stop",
                   "budget_grace_seconds": "600"}


def test_admin_sets_a_datacenters_cluster_choices(admin_browser, datacenter):
    """Scheduler, volume, uid, GPU nodes and the start timeout are the admin's to choose; a
    choice that cannot work is refused, naming the field."""
    url = f"/admin/accounts/datacenter/{datacenter.pk}/change/"
    shown = page(admin_browser.get(url))
    for choice in ('value="kueue"', 'value="volcano"', 'name="kube_run_as_user"',
                   'name="kube_gpu_tolerations"', 'name="start_timeout"'):
        assert choice in shown, choice
    form = {**DATACENTER_FORM, "backend": "kubernetes", "quotas-TOTAL_FORMS": "0",
            "quotas-INITIAL_FORMS": "0"}
    claim = '{"persistentVolumeClaim": {"claimName": "pfs"}}'
    refused = admin_browser.post(url, {**form, "kube_scheduler": "kueue", "kube_volume": claim})
    assert refused.status_code == 200
    text = page(refused)
    assert "required with Kueue" in text and "seen in its own namespace only" in text
    response = admin_browser.post(url, {
        **form, "kube_scheduler": "volcano", "kube_queue": "research",
        "kube_run_as_user": "2000", "kube_run_as_group": "2000", "start_timeout": "600",
        "kube_volume": '{"persistentVolume": {"csi": {"driver": "cephfs.csi.ceph.com", '
                       '"volumeHandle": "pfs"}}}',
        "kube_gpu_tolerations": '[{"key": "nvidia.com/gpu", "operator": "Exists"}]',
        "kube_gpu_node_selector": '{"gpu": "true"}'})
    assert response.status_code == 302, page(response)
    datacenter.refresh_from_db()
    kube = datacenter.backend_settings
    assert (kube["kube_scheduler"], kube["kube_queue"], kube["kube_run_as_user"],
            datacenter.start_timeout) == ("volcano", "research", 2000, 600)
    assert kube["kube_gpu_tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert kube["kube_volume"]["persistentVolume"]["csi"]["driver"] == "cephfs.csi.ceph.com"


def test_admin_offers_the_portal_builder(admin_browser, datacenter):
    """GKE Autopilot's choice: the portal builds its images (buildah is on this machine)."""
    url = f"/admin/accounts/datacenter/{datacenter.pk}/change/"
    assert 'value="portal"' in page(admin_browser.get(url))
    response = admin_browser.post(url, {**DATACENTER_FORM, "backend": "kubernetes",
                                        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
                                        "kube_builder": "portal"})
    assert response.status_code == 302, page(response)
    datacenter.refresh_from_db()
    assert datacenter.backend_settings["kube_builder"] == "portal"


def test_admin_refuses_a_namespace_prefix_another_datacenter_uses_on_its_cluster(
        admin_browser, datacenter, other_datacenter, tmp_path):
    """datacenter2 is on the cluster datacenter1 is on (another kubeconfig naming the same
    API server): moving it there with datacenter1's prefix is refused on its field, naming
    datacenter1; with a prefix apart it is saved."""
    from tests.k8s_api_server.kubeconfig import write_kubeconfig
    from tests.kube import datacenter_set

    server = "https://10.1.2.3:6443"
    datacenter_set(datacenter, backend="kubernetes", kubeconfig=str(write_kubeconfig(
        tmp_path / "one.kubeconfig", server, "t")))
    url = f"/admin/accounts/datacenter/{other_datacenter.pk}/change/"
    form = {**DATACENTER_FORM, "name": "datacenter2", "backend": "kubernetes",
            "kubeconfig": str(write_kubeconfig(tmp_path / "two.kubeconfig", server, "u")),
            "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0"}
    refused = admin_browser.post(url, form)
    assert refused.status_code == 200
    assert "'paddle-' would share users' namespaces with datacenter datacenter1 on the same " \
           f"cluster ({server})" in page(refused)
    other_datacenter.refresh_from_db()
    assert other_datacenter.backend != "kubernetes"
    saved = admin_browser.post(url, {**form, "namespace_prefix": "dc2-"})
    assert saved.status_code == 302, page(saved)
    other_datacenter.refresh_from_db()
    assert (other_datacenter.backend, other_datacenter.namespace_prefix) == ("kubernetes",
                                                                             "dc2-")


def test_admin_sets_the_queued_jobs_cap_on_the_user_page_and_as_the_default(
        admin_browser, alice, datacenter):
    own = Quota.objects.get(user=alice, datacenter=datacenter)
    user_page = page(admin_browser.get(f"/admin/accounts/user/{alice.pk}/change/"))
    assert 'name="quotas-0-queued"' in user_page
    form = {"username": "alice", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
            "is_active": "on",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
            "sso_identities-TOTAL_FORMS": "0", "sso_identities-INITIAL_FORMS": "0",
            "quotas-TOTAL_FORMS": "1", "quotas-INITIAL_FORMS": "1",
            "quotas-0-id": own.pk, "quotas-0-user": alice.pk,
            "quotas-0-datacenter": datacenter.pk, "quotas-0-queued": "5"}
    response = admin_browser.post(f"/admin/accounts/user/{alice.pk}/change/", form)
    assert response.status_code == 302, page(response)
    own.refresh_from_db()
    assert own.queued == 5

    dc_page = page(admin_browser.get(f"/admin/accounts/datacenter/{datacenter.pk}/change/"))
    assert 'name="quotas-0-queued"' in dc_page
    response = admin_browser.post(f"/admin/accounts/datacenter/{datacenter.pk}/change/", {
        **DATACENTER_FORM, "quotas-TOTAL_FORMS": "1", "quotas-INITIAL_FORMS": "0",
        "quotas-0-queued": "40"})
    assert response.status_code == 302, page(response)
    assert Quota.objects.get(user=None, datacenter=datacenter).queued == 40
    listing = page(admin_browser.get("/admin/accounts/quota/"))
    assert '<td class="field-queued">5</td>' in listing
    log = page(admin_browser.get("/admin/accounts/auditentry/"))
    assert "queued" in log


def test_admin_lists_a_datacenters_allowed_package_indexes(admin_browser, datacenter):
    """Issue 33, item 5: the indexes installs and builds may reach are the admin's to list, one
    URL a line; a line that is not an index's URL is refused, naming the field."""
    url = f"/admin/accounts/datacenter/{datacenter.pk}/change/"
    assert 'name="package_indexes"' in page(admin_browser.get(url))
    form = {**DATACENTER_FORM, "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0"}
    refused = admin_browser.post(url, {**form, "package_indexes": "https://pypi.org/simple\n"
                                                                  "file:///etc/pip"})
    assert refused.status_code == 200
    assert "file:///etc/pip: each line an http:// or https:// URL" in page(refused)
    datacenter.refresh_from_db()
    assert datacenter.package_indexes == ""
    listed = "https://pypi.example.com/simple\r\nhttps://files.example.com"
    response = admin_browser.post(url, {**form, "package_indexes": listed})
    assert response.status_code == 302, page(response)
    datacenter.refresh_from_db()
    assert datacenter.package_indexes.split() == ["https://pypi.example.com/simple",
                                                  "https://files.example.com"]


def test_admin_quota_form_edits_an_existing_quota(admin_browser, alice, datacenter):
    quota = Quota.objects.get(user=alice, datacenter=datacenter)
    response = admin_browser.post(f"/admin/accounts/quota/{quota.pk}/change/",
                                  quota_post(alice, datacenter, cpu="2.5", memory="512Mi"))
    assert response.status_code == 302, page(response)
    quota.refresh_from_db()
    assert (quota.cpu, quota.memory) == (2500, 512 * 2**20)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("memory", "lots", "'lots' is not an amount of bytes"),
        ("storage", "1.5", "'1.5' is not a whole number of bytes"),
        ("cpu", "1Gi", "'1Gi' is not a CPU amount"),
        ("cpu", "0.0001", "finer than one millicore"),
        ("cpu", "3000000", "less than or equal to 2147483647"),
    ],
)
def test_admin_quota_form_shows_what_is_wrong(admin_browser, datacenter, field, value,
                                              message):
    bob = user_upsert("bob", password=PASSWORD)[0]
    response = admin_browser.post("/admin/accounts/quota/add/",
                                  quota_post(bob, datacenter, **{field: value}))
    assert response.status_code == 200
    body = page(response)
    assert "Please correct the error below." in body
    assert message in body
    assert not Quota.objects.filter(user=bob).exists()


def test_admin_revoke_action_revokes_the_selected_tokens(admin_browser, alice):
    first = token_create(alice, datacenter_name="datacenter1", name="laptop").token
    second = token_create(alice, datacenter_name="datacenter1", name="ci").token
    kept = token_create(alice, datacenter_name="datacenter1", name="desktop").token
    earlier = timezone.now() - timedelta(days=1)
    ApiToken.objects.filter(pk=second.pk).update(revoked_at=earlier)

    response = admin_browser.post("/admin/accounts/apitoken/", {
        "action": "revoke", "_selected_action": [first.pk, second.pk]}, follow=True)
    assert response.status_code == 200
    # The one already revoked is not counted again, and keeps when it was revoked.
    assert "Revoked 1 token(s)." in page(response)
    for token in (first, second, kept):
        token.refresh_from_db()
    assert first.state == "revoked"
    assert second.revoked_at == earlier
    assert kept.state == "active"


def test_a_revoked_token_no_longer_authenticates(admin_browser, token_client):
    assert token_client.get("/api/v1/me").status_code == 200
    admin_browser.post("/admin/accounts/apitoken/", {
        "action": "revoke", "_selected_action": [token_client.issued.token.pk]})
    assert token_client.get("/api/v1/me").status_code == 401


def test_admin_is_for_staff_only(alice):
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert client.get("/admin/accounts/user/").status_code == 302


def test_admin_is_not_for_anonymous_users(db):
    response = Client().get("/admin/accounts/quota/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


# ---------------------------------------------------------------------------------------------
# Browser login, the home page and the pages that took over what it showed


def test_login_page_shows_a_form(db):
    response = Client().get("/login/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'name="username"' in body
    assert 'name="password"' in body
    assert 'type="password"' in body


def test_anonymous_home_redirects_to_login(db):
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def logged_in(client: Client) -> bool:
    """Whether the client's session is logged in (a page that needs it is shown)."""
    response = client.get("/quota/")
    assert response.status_code in (200, 302)
    return response.status_code == 200


def test_login_then_home_leads_to_jobs_quota_and_config_have_pages(alice):
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"

    home = client.get("/")
    assert home.status_code == 302
    assert home["Location"] == "/jobs/"

    quota = page(client.get("/quota/"))
    assert "<strong>datacenter1</strong>" in quota
    assert '<td class="num">4</td>' in quota  # CPU
    assert '<td class="num">8Gi</td>' in quota  # memory
    assert '<td class="num">10Gi</td>' in quota  # storage

    tokens = page(client.get("/tokens/"))
    assert ('<pre id="snippet-config">datacenters:\n- name: datacenter1\n  username: alice\n'
            in tokens)
    assert "  endpoint: http://testserver\n" in tokens
    assert "current-datacenter: datacenter1\n</pre>" in tokens
    assert PASSWORD not in quota + tokens


def test_the_quota_page_shows_the_quota_set_by_an_administrator(alice):
    Quota.objects.filter(user=alice).update(cpu=500, memory=16 * GiB, gpu=2, jobs=7,
                                            queued=30)
    client = Client()
    client.force_login(alice)
    body = page(client.get("/quota/"))
    assert '<td class="num">500m</td><td class="num">16Gi</td><td class="num">2</td>' in body
    assert '<td class="num">7</td><td class="num">30</td>' in body
    assert "0 of 30" in body  # the queued jobs' meter: none waits


def test_a_user_of_no_datacenter_is_told_so(db):
    bob = user_upsert("bob", password=PASSWORD)[0]
    client = Client()
    client.force_login(bob)
    for path in ("/quota/", "/tokens/"):
        body = page(client.get(path))
        assert "not a member of any datacenter" in body
        assert "snippet-config" not in body


def test_login_with_a_wrong_password_is_refused(alice):
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": "wrong password"})
    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()
    assert not logged_in(client)


def login_failures(client: Client, count: int) -> None:
    for _ in range(count):
        response = client.post("/login/", {"username": "alice", "password": "wrong password"})
        assert response.status_code == 200
        assert "too many failed logins" not in page(response)


def test_login_succeeds_below_the_failure_limit(alice):
    client = Client()
    login_failures(client, django_settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT - 1)
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert logged_in(client)


def test_too_many_failed_logins_refuse_even_the_right_password(alice):
    assert django_settings.PADDLECLOUD_LOGIN_FAILURE_LIMIT == 5
    client = Client()
    login_failures(client, 5)
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 200
    body = page(response)
    assert "too many failed logins for this username" in body
    assert "try again in" in body
    assert not logged_in(client)

    # The API's token endpoint shares the counters.
    api = client.post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD},
                      content_type="application/json")
    assert api.status_code == 429


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_checks_say_what_each_dependency_answered(db, path, settings):
    settings.REDIS_URL = None  # the embedded default: the queue is this process's own
    response = Client().get(path)
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": {"ok": True}}}
    assert Client().post(path).status_code == 405


def test_logged_in_user_is_taken_home_from_the_login_page(alice):
    client = Client()
    client.force_login(alice)
    response = client.get("/login/")
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_logout_ends_the_session(alice):
    client = Client()
    client.force_login(alice)
    response = client.post("/logout/")
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    assert not logged_in(client)


def test_staff_see_the_admin_link_and_others_do_not(admin_browser, alice):
    assert 'href="/admin/"' in page(admin_browser.get("/quota/"))
    client = Client()
    client.force_login(alice)
    assert 'href="/admin/"' not in page(client.get("/quota/"))
