"""Sending the outbox: at least once, each notification with its id, retried with back-off
for a day (``PADDLECLOUD_NOTIFY_RETRY_HOURS``); an endpoint failing for
``PADDLECLOUD_NOTIFY_DISABLE_DAYS`` is disabled and its owner told by e-mail.

A notification is claimed (``claimed_until``) before it is sent, so two workers never send it
together; a worker killed while sending leaves its claim to run out, and the next sweep sends
it again (the receiver drops the repeat by its id)."""

from __future__ import annotations

import logging
import smtplib
import time
from datetime import timedelta

import urllib3
from django.conf import settings
from django.core.mail import EmailMessage, send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.notify import notification_shown
from registries import crypto

from .models import Notification, Subscription
from .webhooks import (
    EVENT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMEOUT_SECONDS,
    DestinationError,
    body_of,
    signature,
    webhook_post,
)

log = logging.getLogger(__name__)

# Longer than a webhook's (and an SMTP server's) timeout: a claim runs out only when its
# worker is gone.
CLAIM_SECONDS = TIMEOUT_SECONDS + 5
BATCH = 50
BACKOFF_MAX_SECONDS = 3600


class DeliveryError(Exception):
    """The endpoint answered, but not with a success."""


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: doubling from
    ``PADDLECLOUD_NOTIFY_RETRY_SECONDS``, an hour at most."""
    return min(settings.PADDLECLOUD_NOTIFY_RETRY_SECONDS * 2 ** (attempts - 1),
               BACKOFF_MAX_SECONDS)


def notifications_send(ids: list[str] | None = None) -> int:
    """Send the due notifications (of ``ids``, or all), a batch at a time; how many were
    tried."""
    tried = 0
    while True:
        claimed = _claim(ids)
        for notification in claimed:
            _send(notification)
        tried += len(claimed)
        if len(claimed) < BATCH:
            return tried


def _claim(ids) -> list[Notification]:
    now = timezone.now()
    with transaction.atomic():
        due = (Notification.objects.select_for_update(skip_locked=True, of=("self",))
               .filter(sent_at__isnull=True, given_up_at__isnull=True, due_at__lte=now)
               .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)))
        if ids is not None:
            due = due.filter(pk__in=ids)
        claimed = list(due.select_related("subscription__owner", "subscription__datacenter")
                       .order_by("due_at")[:BATCH])
        Notification.objects.filter(pk__in=[n.pk for n in claimed]).update(
            claimed_until=now + timedelta(seconds=CLAIM_SECONDS))
    return claimed


def _send(notification: Notification) -> None:
    subscription = notification.subscription
    if subscription.disabled_at is not None:
        Notification.objects.filter(pk=notification.pk).update(
            given_up_at=timezone.now(), last_error="its subscription is disabled")
        return
    try:
        if subscription.channel == Subscription.Channel.WEBHOOK:
            _webhook(subscription, notification.payload)
        elif subscription.channel == Subscription.Channel.EMAIL:
            _email(subscription, notification.payload)
        else:  # the dashboard's: shown on open job lists, listed on the notifications page
            notification_shown(subscription.owner_id, subscription.datacenter_id,
                               str(notification.pk), notification.payload["text"])
    except (DeliveryError, DestinationError, OSError, smtplib.SMTPException,
            urllib3.exceptions.HTTPError) as exc:
        _failed(notification, f"{type(exc).__name__}: {exc}"[:500])
        return
    now = timezone.now()
    Notification.objects.filter(pk=notification.pk).update(
        sent_at=now, attempts=notification.attempts + 1, claimed_until=None, last_error="")
    Subscription.objects.filter(pk=subscription.pk, failing_since__isnull=False).update(
        failing_since=None)


def _webhook(subscription: Subscription, payload: dict) -> None:
    body = body_of(payload, subscription.format)
    secret = crypto.decrypt(subscription.secret_encrypted)
    status = webhook_post(subscription.target, body, {
        SIGNATURE_HEADER: signature(secret, int(time.time()), body),
        ID_HEADER: payload["id"], EVENT_HEADER: payload["event"]})
    if not 200 <= status < 300:
        raise DeliveryError(f"{subscription.target} answered {status}")


def _email(subscription: Subscription, payload: dict) -> None:
    lines = [payload["text"], "", f"datacenter: {payload['datacenter']}",
             f"event: {payload['event']}", f"time: {payload['time']}"]
    if (job := payload.get("job")) and job.get("url"):
        lines.append(f"job: {job['url']}")
    lines += ["", f"notification id: {payload['id']}",
              "(paddlectl notify ls shows your subscriptions; paddlectl notify rm ID removes one)"]
    EmailMessage(
        subject=f"[PaddleCloud] {payload['text']}"[:200], body="\n".join(lines),
        from_email=settings.DEFAULT_FROM_EMAIL, to=[subscription.target],
        headers={"Message-ID": f"<{payload['id']}@paddlecloud>",
                 "X-PaddleCloud-Notification-Id": payload["id"],
                 "X-PaddleCloud-Event": payload["event"]},
    ).send()


def _failed(notification: Notification, error: str) -> None:
    now = timezone.now()
    attempts = notification.attempts + 1
    changes = {"attempts": attempts, "claimed_until": None, "last_error": error}
    if now - notification.created_at >= timedelta(hours=settings.PADDLECLOUD_NOTIFY_RETRY_HOURS):
        changes["given_up_at"] = now
    else:
        changes["due_at"] = now + timedelta(seconds=backoff(attempts))
    Notification.objects.filter(pk=notification.pk).update(**changes)
    log.info("notification %s to subscription %s failed (attempt %d): %s", notification.pk,
             notification.subscription_id, attempts, error)
    _endpoint_failing(notification.subscription, now, error)


def _endpoint_failing(subscription: Subscription, now, error: str) -> None:
    """The subscription has failed since when it first did (kept); past
    PADDLECLOUD_NOTIFY_DISABLE_DAYS it is disabled and its owner told."""
    Subscription.objects.filter(pk=subscription.pk, failing_since__isnull=True).update(
        failing_since=now)
    since = Subscription.objects.values_list("failing_since", flat=True).get(pk=subscription.pk)
    if now - since < timedelta(days=settings.PADDLECLOUD_NOTIFY_DISABLE_DAYS):
        return
    reason = (f"failing since {since:%Y-%m-%d %H:%M} UTC (more than "
              f"{settings.PADDLECLOUD_NOTIFY_DISABLE_DAYS:g} days); last: {error}")[:500]
    if not Subscription.objects.filter(pk=subscription.pk, disabled_at__isnull=True).update(
            disabled_at=now, disabled_reason=reason):
        return  # another worker disabled it
    owner = subscription.owner
    if owner.email:
        try:
            send_mail(f"[PaddleCloud] notifications to {subscription.target} disabled",
                      f"Your subscription {subscription.pk} ({subscription.channel} to "
                      f"{subscription.target}, datacenter {subscription.datacenter.name}) was "
                      f"disabled: {reason}.\n\nFix the endpoint, then add it again "
                      "(paddlectl notify add) and remove this one (paddlectl notify rm "
                      f"{subscription.pk}).",
                      settings.DEFAULT_FROM_EMAIL, [owner.email])
        except (OSError, smtplib.SMTPException):
            log.warning("could not tell %s that subscription %s was disabled", owner,
                        subscription.pk, exc_info=True)
