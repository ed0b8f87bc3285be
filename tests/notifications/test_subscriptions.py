"""Subscriptions through the API: what is checked (each mistake named by its field and rule),
where a webhook may point (no way into the portal's network), the secret shown once and
stored encrypted, a group's subscription its lead's or an administrator's."""

from __future__ import annotations

import pytest

from accounts.models import Membership, Team
from notifications.models import Notification, Subscription
from registries import crypto
from tests.conftest import assert_error

pytestmark = pytest.mark.django_db
URL = "/api/v1/notifications/subscriptions/"


def add(client, **fields):
    return client.post(URL, fields, format="json")


def test_a_webhook_is_added_with_its_secret_shown_once_and_stored_encrypted(
        token_client, webhook_receiver, held_tasks):
    response = add(token_client, events=["job.failed", "job.succeeded"], channel="webhook",
                   target=webhook_receiver.url("/a"), format="slack")
    assert response.status_code == 201, response.content
    created = response.json()
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) > 30
    stored = Subscription.objects.get(pk=created["id"])
    assert secret.encode() not in bytes(stored.secret_encrypted)
    assert crypto.decrypt(stored.secret_encrypted) == secret
    listed = token_client.get(URL).json()
    assert [s["id"] for s in listed] == [created["id"]]
    assert "secret" not in listed[0] and "secret" not in token_client.get(
        f"{URL}{created['id']}/").json()
    assert listed[0]["events"] == ["job.failed", "job.succeeded"]
    assert listed[0]["format"] == "slack"

    assert token_client.delete(f"{URL}{created['id']}/").status_code == 204
    assert not Subscription.objects.exists()
    assert_error(token_client.delete(f"{URL}{created['id']}/"), 404, "not_found",
                 "subscription")
    # Both are in her audit trail, naming the webhook's host only (a Slack URL's path is a
    # secret), never the signing secret.
    trail = token_client.get("/api/v1/audit").json()
    entries = [(e["action"], e["target"]) for e in trail]
    assert entries[:2] == [
        ("notify.remove", f"subscription {created['id']} (webhook 127.0.0.1)"),
        ("notify.add", f"subscription {created['id']} (webhook 127.0.0.1)")]
    assert secret not in str(trail) and "/a" not in str(entries)


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"events": [], "channel": "email"}, "events", "required"),
    ({"events": ["job.exploded"], "channel": "email"}, "events", "unknown event 'job.exploded'"),
    ({"events": ["job.failed"], "channel": "pigeon"}, "channel", "one of email, webhook"),
    ({"events": ["job.failed"], "channel": "email", "target": "nobody"}, "target",
     "not an e-mail address"),
    ({"events": ["job.failed"], "channel": "dashboard", "target": "x@example.com"}, "target",
     "take no target"),
    ({"events": ["job.failed"], "channel": "email", "format": "slack"}, "format",
     "only a webhook"),
    ({"events": ["job.waiting"], "channel": "dashboard"}, "wait_minutes",
     "required with event job.waiting"),
    ({"events": ["job.waiting"], "channel": "dashboard", "wait_minutes": 0}, "wait_minutes",
     "from 1 to"),
    ({"events": ["job.failed"], "channel": "dashboard", "earlier_minutes": 5},
     "earlier_minutes", "only with event job.earlier"),
    ({"events": ["job.failed"], "channel": "dashboard", "colour": "red"}, "colour",
     "unknown field"),
    ({"events": ["job.failed"], "channel": "dashboard", "group": "nope"}, "group",
     "no group 'nope'"),
])
def test_a_mistake_is_refused_naming_the_field_and_the_rule(token_client, fields, field, says):
    body = assert_error(add(token_client, **fields), 400, "invalid", field)
    assert says in body["fields"][field][0]
    assert not Subscription.objects.exists()


@pytest.mark.parametrize(("target", "says"), [
    ("http://127.0.0.1:8000/hook", "must be https://"),
    ("https://127.0.0.1:8000/hook", "private or reserved network"),
    ("https://10.0.0.7/hook", "private or reserved network"),
    ("https://169.254.169.254/latest/meta-data", "private or reserved network"),
    ("https://[::1]/hook", "private or reserved network"),
    ("https://localhost/hook", "private or reserved network"),
    ("https://user:pw@hooks.example.com/x", "user name or password"),
    ("ftp://hooks.example.com/x", "not an http:// or https:// URL"),
    ("https://no-such-host.invalid/x", "does not resolve"),
])
def test_a_webhook_may_not_point_into_the_portals_network(token_client, target, says):
    """Without the administrator's PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS, only public
    addresses (and only https)."""
    body = assert_error(add(token_client, events=["job.failed"], channel="webhook",
                            target=target), 400, "invalid", "target")
    assert says in body["fields"]["target"][0]


def test_the_administrators_networks_let_a_webhook_reach_an_address_inside(
        token_client, settings):
    settings.PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    assert add(token_client, events=["job.failed"], channel="webhook",
               target="https://127.0.0.1:9/hook").status_code == 201
    body = assert_error(add(token_client, events=["job.failed"], channel="webhook",
                            target="https://10.0.0.7/hook"), 400, "invalid", "target")
    assert "PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS" in body["fields"]["target"][0]


def test_email_goes_to_the_users_own_address_unless_another_is_given(token_client, alice):
    alice.email = "alice@example.com"
    alice.save()
    created = add(token_client, events="job.failed,job.killed", channel="email").json()
    assert (created["target"], created["events"]) == ("alice@example.com",
                                                      ["job.failed", "job.killed"])
    assert created["secret"] is None


def test_a_groups_subscription_is_its_leads_or_an_administrators(token_client, alice,
                                                                    datacenter, make_user):
    team = Team.objects.create(datacenter=datacenter, name="vision")
    Membership.objects.filter(user=alice).update(team=team)
    assert_error(add(token_client, events=["job.failed"], channel="dashboard", group="vision"),
                 403, "permission_denied", "group")
    Membership.objects.filter(user=alice).update(lead=True)  # the admin made her its lead
    created = add(token_client, events=["job.failed"], channel="dashboard", group="vision")
    assert created.status_code == 201, created.content
    assert created.json()["group"] == "vision"
    Membership.objects.filter(user=alice).update(lead=False)
    alice.is_staff = True
    alice.save()
    created = add(token_client, events=["job.killed"], channel="dashboard", group="vision")
    assert created.status_code == 201, created.content


def test_a_test_notification_goes_through_the_outbox(token_client, held_tasks,
                                                     django_capture_on_commit_callbacks):
    created = add(token_client, events=["job.failed"], channel="dashboard").json()
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client.post(f"{URL}{created['id']}/test")
    assert response.status_code == 202, response.content
    notification = Notification.objects.get()
    assert notification.kind == "test" and notification.payload["id"] == str(notification.pk)
    assert held_tasks.sent == [("notifications.tasks.notifications_send",
                                ([str(notification.pk)],))]


def test_the_list_and_the_page_take_as_many_queries_for_5_as_for_1(
        token_client, browser, alice, datacenter, assert_queries_flat):
    Team.objects.create(datacenter=datacenter, name="vision")

    def grow():
        for team in ("vision", None, None, None):
            Subscription.objects.create(owner=alice, datacenter=datacenter, channel="dashboard",
                                        events=["job.failed"],
                                        team=Team.objects.filter(name=team).first())

    Subscription.objects.create(owner=alice, datacenter=datacenter, channel="dashboard",
                                events=["job.failed"])
    small, large = assert_queries_flat(lambda: token_client.get(URL), grow)
    assert (len(small.json()), len(large.json())) == (1, 5)
    small, large = assert_queries_flat(lambda: browser.get("/notifications/"), grow)
    assert (len(small.context["subscriptions"]), len(large.context["subscriptions"])) == (5, 9)


def test_webhook_secrets_rotate_with_the_credential_keys(token_client, settings,
                                                         webhook_receiver):
    from cryptography.fernet import Fernet
    from django.core.management import call_command

    old_key = settings.PADDLECLOUD_CREDENTIAL_KEYS[0]
    secret = add(token_client, events=["job.failed"], channel="webhook",
                 target=webhook_receiver.url("/a")).json()["secret"]
    add(token_client, events=["job.failed"], channel="dashboard")  # no secret to rotate
    new_key = Fernet.generate_key().decode()
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [new_key, old_key]
    call_command("rotate_credential_keys")
    settings.PADDLECLOUD_CREDENTIAL_KEYS = [new_key]  # the old key can go now
    stored = Subscription.objects.get(channel="webhook").secret_encrypted
    assert crypto.decrypt(stored) == secret


def test_a_webhook_is_checked_again_at_each_sending(token_client, settings, webhook_receiver,
                                                    held_tasks):
    """Where its host points now counts (a name may resolve elsewhere later, an
    administrator may take an allowance back): nothing is sent to a refused address."""
    from notifications.delivery import notifications_send

    created = add(token_client, events=["job.failed"], channel="webhook",
                  target=webhook_receiver.url("/a")).json()
    settings.PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS = []
    token_client.post(f"{URL}{created['id']}/test")
    assert notifications_send() == 1
    notification = Notification.objects.get()
    assert (notification.attempts, notification.sent_at) == (1, None)
    assert "private or reserved network" in notification.last_error
    assert notification.due_at > notification.created_at  # to be tried again later
    assert webhook_receiver.requests == 0


def test_a_webhook_over_https_is_sent_to_the_checked_address_with_its_certificate_checked(
        token_client, settings, tmp_path, monkeypatch, held_tasks):
    """The request goes to the address the check found, and TLS still checks the
    certificate against the URL's host: trusted, it arrives; untrusted, nothing is sent."""
    from notifications.delivery import notifications_send
    from tests.notify_receivers import WebhookReceiver, loopback_certificate

    settings.PADDLECLOUD_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    cert, key = loopback_certificate(tmp_path)
    receiver = WebhookReceiver(tls=(cert, key))
    try:
        created = add(token_client, events=["job.failed"], channel="webhook",
                      target=receiver.url("/tls")).json()
        receiver.secrets["/tls"] = created["secret"]
        token_client.post(f"{URL}{created['id']}/test")
        assert notifications_send() == 1
        untrusted = Notification.objects.get()
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.last_error
        assert receiver.received == {}

        monkeypatch.setenv("SSL_CERT_FILE", cert)  # the portal trusts it now
        Notification.objects.update(due_at=untrusted.created_at)
        assert notifications_send() == 1
        assert receiver.events() == ["test"] and not receiver.refused
        assert Notification.objects.get().sent_at is not None
    finally:
        receiver.stop()
