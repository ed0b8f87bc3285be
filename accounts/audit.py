"""The audit log: one call per thing worth knowing who did (see ``AuditEntry``)."""

from __future__ import annotations

from .models import AuditEntry


def audit_record(actor, action: str, target: str, *, datacenter=None,
                 **details) -> AuditEntry:
    """Record that ``actor`` (a user, or None for the system) did ``action`` to ``target``.
    ``details`` must never carry a secret: callers pass names and numbers only."""
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.username if actor is not None else "system",
        action=action, target=target,
        datacenter=datacenter.name if datacenter is not None else "",
        details=details)
