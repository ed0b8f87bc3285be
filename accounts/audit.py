"""The audit log: one call per thing worth knowing who did (see ``AuditEntry``), and who may
read which entries (``audit_visible``)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from .models import AuditEntry, Membership

ACTORS = object()  # ``audit_record``'s default ``whose``: what the actor did is their own


def audit_record(actor, action: str, target: str, *, datacenter=None, whose=ACTORS,
                 **details) -> AuditEntry:
    """Record that ``actor`` (a user, or None for the system) did ``action`` to ``target``,
    which is ``whose`` (a user; None: nobody's, e.g. a datacenter's default quota).
    ``details`` must never carry a secret: callers pass names and numbers only."""
    subject = actor if whose is ACTORS else whose
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.username if actor is not None else "system",
        subject=subject if subject is not None and subject.pk else None,
        action=action, target=target,
        datacenter=datacenter.name if datacenter is not None else "",
        details=details)


def led_members(user) -> dict[str, list[int]]:
    """The members of each group ``user`` leads, by the group's datacenter's name."""
    teams = list(Membership.objects.filter(user=user, lead=True, team__isnull=False)
                 .values_list("team_id", "datacenter__name"))
    out: dict[str, list[int]] = {}
    for team, datacenter in teams:
        out.setdefault(datacenter, []).extend(
            Membership.objects.filter(team_id=team).values_list("user_id", flat=True))
    return out


def audit_visible(user, *, actions: list[str] | None = None, since: datetime | None = None,
                  until: datetime | None = None, username: str | None = None) -> QuerySet:
    """The audit entries ``user`` may read, newest first: an admin all of them; a group lead
    those of their group's members (done by them or to what is theirs) in the group's
    datacenter, beside their own; anyone what they did and what was done to what is theirs.
    Narrowed to ``actions``, to ``since`` (inclusive) and ``until`` (exclusive), and to the
    entries done by or to ``username``."""
    entries = AuditEntry.objects.all()
    if not user.is_staff:
        mine = Q(actor=user) | Q(subject=user)
        for datacenter, members in led_members(user).items():
            mine |= Q(datacenter=datacenter) & (Q(actor_id__in=members)
                                                | Q(subject_id__in=members))
        entries = entries.filter(mine)
    entries = entries.select_related("subject")
    if actions:
        entries = entries.filter(action__in=actions)
    if since is not None:
        entries = entries.filter(time__gte=since)
    if until is not None:
        entries = entries.filter(time__lt=until)
    if username:
        entries = entries.filter(Q(actor_name=username) | Q(subject__username=username))
    return entries


AUDIT_COLUMNS = ("time", "actor", "whose", "action", "datacenter", "target", "details")


def audit_rows(entries) -> list[dict]:
    """Entries as the API, the exports and the page show them."""
    return [{"time": e.time.isoformat(), "actor": e.actor_name,
             "whose": e.subject.username if e.subject_id else "",
             "action": e.action, "datacenter": e.datacenter, "target": e.target,
             "details": e.details} for e in entries]
