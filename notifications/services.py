"""What users do with their subscriptions: add (a webhook's secret is returned this once), list,
remove, test. A group's subscription is made by its lead or an administrator."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import transaction

from accounts.audit import audit_record
from accounts.models import AuditEntry, Membership, Team
from kernel.errors import ForbiddenError, NotFoundError, ValidationError
from registries import crypto

from .events import EVENTS
from .models import Notification, Subscription
from .outbox import test_record
from .webhooks import DestinationError, destination

SUBSCRIPTIONS_MAX = 50  # a user's, in a datacenter
THRESHOLD_MAX = 7 * 24 * 60  # minutes
FIELDS = ("events", "channel", "target", "format", "wait_minutes", "earlier_minutes", "group")


def _events_problem(events) -> str | None:
    if isinstance(events, str):
        events = [e.strip() for e in events.split(",") if e.strip()]
    if not isinstance(events, list) or not events:
        return f"required: a list of events, of {', '.join(EVENTS)}"
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        return f"unknown event {unknown[0]!r}: each is one of {', '.join(EVENTS)}"
    return None


def _threshold_problem(value, field: str, events: list[str]) -> str | None:
    wanted = [kind for kind, event in EVENTS.items() if event.threshold == field]
    named = [kind for kind in wanted if kind in events]
    if value is None:
        return f"required with event {named[0]}: a number of minutes" if named else None
    if not named:
        return f"only with event {wanted[0]}"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= THRESHOLD_MAX:
        return f"a whole number of minutes from 1 to {THRESHOLD_MAX}"
    return None


def _check(user, datacenter, data) -> dict:
    """Every field checked at once; one error naming each bad one."""
    if not isinstance(data, dict):
        raise ValidationError("the subscription must be a JSON object")
    errors = {key: ["unknown field"] for key in sorted(set(data) - set(FIELDS))}
    events = data.get("events")
    if (problem := _events_problem(events)) is not None:
        errors["events"] = [problem]
        events = []
    elif isinstance(events, str):
        events = [e.strip() for e in events.split(",") if e.strip()]
    events = list(dict.fromkeys(events))
    channel = data.get("channel")
    target = data.get("target") or ""
    fmt = data.get("format") or Subscription.Format.JSON
    if channel not in Subscription.Channel.values:
        errors["channel"] = [f"one of {', '.join(Subscription.Channel.values)}"]
    elif not isinstance(target, str):
        errors["target"] = ["a string"]
    elif channel == Subscription.Channel.EMAIL:
        target = target or user.email
        try:
            validate_email(target)
        except DjangoValidationError:
            errors["target"] = [f"{target!r} is not an e-mail address" if target else
                                "required: an e-mail address (your account has none)"]
    elif channel == Subscription.Channel.WEBHOOK:
        try:
            destination(target)
        except DestinationError as exc:
            errors["target"] = [str(exc)]
    elif target:
        errors["target"] = ["the dashboard's notifications take no target"]
    if fmt not in Subscription.Format.values:
        errors["format"] = [f"one of {', '.join(Subscription.Format.values)}"]
    elif fmt != Subscription.Format.JSON and channel != Subscription.Channel.WEBHOOK:
        errors["format"] = ["only a webhook has a format"]
    for field in ("wait_minutes", "earlier_minutes"):
        if (problem := _threshold_problem(data.get(field), field, events)) is not None:
            errors[field] = [problem]
    team = None
    if (group := data.get("group")) is not None:
        team = Team.objects.filter(datacenter=datacenter, name=group).first() \
            if isinstance(group, str) else None
        if team is None:
            errors["group"] = [f"no group {group!r} in datacenter {datacenter.name!r}"]
        elif not user.is_staff and not Membership.objects.filter(
                user=user, team=team, lead=True).exists():
            raise ForbiddenError.for_field(
                "group", f"only group {group!r}'s lead or an administrator subscribes for it")
    if errors:
        raise ValidationError("; ".join(f"{k}: {v[0]}" for k, v in errors.items()),
                              fields=errors)
    return {"events": events, "channel": channel, "target": target, "format": fmt,
            "wait_minutes": data.get("wait_minutes"),
            "earlier_minutes": data.get("earlier_minutes"), "team": team}


def subscription_list(user, datacenter):
    return (Subscription.objects.filter(owner=user, datacenter=datacenter)
            .select_related("team"))


def subscription_get(user, datacenter, pk) -> Subscription:
    found = subscription_list(user, datacenter).filter(pk=pk).first() \
        if str(pk).isdigit() else None
    if found is None:
        raise NotFoundError.for_field(
            "subscription", f"you have no subscription {pk} in datacenter "
                            f"{datacenter.name!r} (paddlectl notify ls lists them)")
    return found


def subscription_create(user, datacenter, data) -> tuple[Subscription, str | None]:
    """Add a subscription; a webhook's is returned with its secret, which nothing shows
    again."""
    values = _check(user, datacenter, data)
    if subscription_list(user, datacenter).count() >= SUBSCRIPTIONS_MAX:
        raise ValidationError(f"you have {SUBSCRIPTIONS_MAX} subscriptions in datacenter "
                              f"{datacenter.name!r}, the most there may be: remove one first")
    secret = None
    if values["channel"] == Subscription.Channel.WEBHOOK:
        secret = "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        subscription = Subscription.objects.create(
            owner=user, datacenter=datacenter,
            secret_encrypted=crypto.encrypt(secret) if secret else None, **values)
        audit_record(user, AuditEntry.Action.NOTIFY_ADD, _audited(subscription),
                     datacenter=datacenter, events=subscription.events)
    return subscription, secret


def subscription_delete(user, datacenter, pk) -> None:
    subscription = subscription_get(user, datacenter, pk)
    with transaction.atomic():
        audit_record(user, AuditEntry.Action.NOTIFY_REMOVE, _audited(subscription),
                     datacenter=datacenter)
        subscription.delete()


def _audited(subscription: Subscription) -> str:
    """A subscription as its audit entries name it: where it sends — of a webhook only its
    host, for its URL's path may be a secret (Slack's incoming webhooks)."""
    where = subscription.target or "your open pages"
    if subscription.channel == Subscription.Channel.WEBHOOK:
        where = urlsplit(subscription.target).hostname or "?"
    group = f" for group {subscription.team.name}" if subscription.team_id else ""
    return f"subscription {subscription.pk} ({subscription.channel} {where}{group})"


def subscription_test(user, datacenter, pk) -> Notification:
    """Send a test notification through the outbox, as an event's would go."""
    subscription = subscription_get(user, datacenter, pk)
    if subscription.disabled_at is not None:
        raise ValidationError.for_field(
            "subscription", f"subscription {pk} is disabled ({subscription.disabled_reason}): "
                            "add it again once its endpoint works")
    with transaction.atomic():
        return test_record(subscription)


def subscription_rotate_keys() -> int:
    """Encrypt every webhook's secret again with the newest key (``rotate_credential_keys``).
    Returns how many."""
    return crypto.rows_rotate(Subscription, "secret_encrypted")


def dashboard_notifications(user, datacenter, limit: int = 20):
    """The latest notifications of the user's dashboard subscriptions in the datacenter."""
    return (Notification.objects.filter(subscription__owner=user,
                                        subscription__datacenter=datacenter,
                                        subscription__channel=Subscription.Channel.DASHBOARD)
            .order_by("-created_at")[:limit])
