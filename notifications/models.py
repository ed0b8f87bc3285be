"""Subscriptions (who hears which events, where) and the outbox of notifications to send.

A notification is written in the transaction of the change it tells of (a job's transition,
a budget crossing a line), so a change that commits is told and one rolled back is not; the
workers send it (``delivery``) at least once, with its ``id`` for receivers to drop a
repeat."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Subscription(models.Model):
    """Events of a user's jobs (or of a group's members' jobs) in a datacenter, sent to one
    place. A webhook's secret is kept encrypted (``registries.crypto``) and shown once, as the
    subscription is made."""

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"
        DASHBOARD = "dashboard"

    class Format(models.TextChoices):
        JSON = "json", "generic JSON"
        SLACK = "slack", "Slack/Mattermost"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="subscriptions",
                              help_text="Who made it: told when its endpoint is disabled.")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="subscriptions")
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, null=True, blank=True,
                             related_name="subscriptions", verbose_name="group",
                             help_text="Events of the group's members' jobs (made by an "
                                       "admin); empty: the owner's own jobs.")
    events = models.JSONField(help_text="The kinds of events (notifications.events.EVENTS).")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=2000, blank=True,
                              help_text="An e-mail address or a webhook's URL.")
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.JSON)
    secret_encrypted = models.BinaryField(editable=False, null=True)
    wait_minutes = models.PositiveIntegerField(null=True, blank=True)
    earlier_minutes = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    failing_since = models.DateTimeField(
        null=True, blank=True, help_text="The first failed delivery since the last success.")
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["datacenter", "owner"], name="subscription_owner")]

    def __str__(self) -> str:
        return f"{self.channel} {self.target or self.owner} ({', '.join(self.events)})"

    def __repr__(self) -> str:  # never the secret, not even encrypted
        return f"<Subscription {self.pk} {self.channel} owner={self.owner_id}>"


class Notification(models.Model):
    """One event for one subscription, until it is sent (or given up on a day later)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False,
                          help_text="Sent with it: receivers drop one they have seen.")
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE,
                                     related_name="notifications")
    kind = models.CharField(max_length=32)
    payload = models.JSONField()
    # What the event is about (a job, a budget's window): an event told once per subscription
    # (a job waited too long) is not written twice.
    once_key = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField()
    due_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    given_up_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["due_at"], name="notification_due",
                                condition=models.Q(sent_at__isnull=True,
                                                   given_up_at__isnull=True))]
        constraints = [models.UniqueConstraint(
            fields=["subscription", "once_key"], name="notification_once",
            condition=models.Q(once_key__isnull=False))]

    def __str__(self) -> str:
        return f"{self.kind} {self.pk}"
