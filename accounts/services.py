"""What can be done to accounts. Views, management commands, tasks and the admin call these."""

from __future__ import annotations

import secrets
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from kernel.errors import (
    AuthenticationError,
    NotFoundError,
    ValidationError,
)

from .audit import audit_record
from .execution import backend_kind, backend_settings_fields
from .models import (
    QUOTA_RESOURCES,
    ApiToken,
    AuditEntry,
    Datacenter,
    Quota,
    Team,
    membership_grant,
)
from .selectors import member_datacenter
from .signals import quota_changed
from .sso import sso_only

User = get_user_model()

MAX_TOKEN_TTL_DAYS = 366


@dataclass(frozen=True)
class IssuedToken:
    """A token as issued: ``raw`` is shown to the user once and never stored."""

    token: ApiToken
    raw: str


@transaction.atomic
def token_create(user, *, datacenter_name: str | None = None, name: str = "",
                 ttl_days: int | None = None) -> IssuedToken:
    """A new token for ``user`` in one of their datacenters."""
    ttl_days = settings.PADDLECLOUD_TOKEN_TTL_DAYS if ttl_days is None else ttl_days
    if not 1 <= ttl_days <= MAX_TOKEN_TTL_DAYS:
        raise ValidationError.for_field(
            "expires_in_days", f"must be between 1 and {MAX_TOKEN_TTL_DAYS}"
        )
    datacenter = member_datacenter(user, datacenter_name)
    raw = ApiToken.PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        datacenter=datacenter,
        name=name,
        prefix=raw[: len(ApiToken.PREFIX) + 6],
        digest=ApiToken.digest_of(raw),
        expires_at=timezone.now() + timedelta(days=ttl_days),
    )
    audit_record(user, AuditEntry.Action.TOKEN_CREATE, f"{user.username}/{token.prefix}",
                 datacenter=datacenter, name=name, expires_at=token.expires_at.isoformat())
    return IssuedToken(token=token, raw=raw)


def token_bound(user, datacenter, raw: str, *, name: str, expires_at) -> ApiToken:
    """A token of ``user``'s in ``datacenter`` whose text ``raw`` the caller made (a session's,
    ``paddlecloud_core.contract.session_api_token``: derived, never stored): only its digest
    is kept, as of every token."""
    token = ApiToken.objects.create(
        user=user, datacenter=datacenter, name=name, prefix=raw[: len(ApiToken.PREFIX) + 6],
        digest=ApiToken.digest_of(raw), expires_at=expires_at)
    audit_record(user, AuditEntry.Action.TOKEN_CREATE, f"{user.username}/{token.prefix}",
                 datacenter=datacenter, name=name, expires_at=expires_at.isoformat())
    return token


def token_issue(*, username: str, password: str, address: str,
                datacenter_name: str | None = None, name: str = "") -> IssuedToken:
    """Exchange a username and password for a token (``paddlectl login``)."""
    # Counted as a failed login until it proves right (accounts.authentication.PasswordBackend).
    user = authenticate(username=username, password=password, address=address)
    if user is None:
        sso_user = User.objects.filter(username=username).first()
        if sso_user is not None and sso_only(sso_user):
            raise AuthenticationError(
                f"{username} logs in with single sign-on and has no password: make an API "
                "token on the dashboard's Tokens page and put it in ~/.paddle/config as "
                "`token:` in place of `password:`", code="sso_user")
        raise AuthenticationError(
            "username or password is incorrect", code="invalid_credentials"
        )
    return token_create(user, datacenter_name=datacenter_name, name=name)


@transaction.atomic
def token_revoke(user, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens; another user's token is not found."""
    token = ApiToken.objects.filter(user=user, pk=token_id).first()
    if token is None:
        raise NotFoundError(f"you have no token with id {token_id}")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(user, AuditEntry.Action.TOKEN_REVOKE, f"{user.username}/{token.prefix}",
                     datacenter=token.datacenter, name=token.name)
    return token


def token_purge(*, older_than_days: int = 30) -> int:
    """Delete tokens that expired or were revoked more than ``older_than_days`` ago."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    expired = ApiToken.objects.filter(expires_at__lt=cutoff)
    revoked = ApiToken.objects.filter(revoked_at__lt=cutoff)
    deleted, _ = (expired | revoked).delete()
    return deleted


# ---------------------------------------------------------------------------------------------
# Datacenters and users (management commands and the admin)

DATACENTER_FIELDS = {
    "description", "backend", "namespace_prefix", "pfs_root", "public_dir", "default_image",
    "gpu_image", "pfs_storage", "s3_bucket", "s3_endpoint_url", "s3_region", "start_timeout",
    "start_tries",
    "build_registry", "build_registry_insecure", "builder_image",
    "capacity_cpu", "capacity_memory", "capacity_gpu", "capacity_from_cluster", "preempt_after",
}
QUOTA_FIELDS = set(QUOTA_RESOURCES)


def _full_clean(instance, **kwargs) -> None:
    try:
        instance.full_clean(**kwargs)
    except DjangoValidationError as exc:
        fields = {name: [str(m) for m in msgs] for name, msgs in exc.message_dict.items()}
        first = next(iter(fields.items()))
        raise ValidationError(f"{first[0]}: {first[1][0]}", fields=fields) from None


def datacenter_upsert(name: str, *, check=None, **changes) -> tuple[Datacenter, bool]:
    """Create the datacenter, or update the fields given: its own and its backend's settings
    (``accounts.execution``). Returns (datacenter, created). ``check(datacenter)``, if given,
    sees it valid and not yet saved, and may refuse it."""
    backend_fields = backend_settings_fields()
    unknown = set(changes) - DATACENTER_FIELDS - set(backend_fields)
    if unknown:
        raise ValueError(f"unknown datacenter fields: {sorted(unknown)}")
    datacenter = Datacenter.objects.filter(name=name).first()
    created = datacenter is None
    if created:
        datacenter = Datacenter(name=name)
    given = {field: value for field, value in changes.items() if value is not None}
    for field in given.keys() & DATACENTER_FIELDS:
        setattr(datacenter, field, given[field])
    if settings_given := {k: v for k, v in given.items() if k in backend_fields}:
        with suppress(ValueError):  # an unknown backend: full_clean names it
            kind = backend_kind(datacenter.backend)
            if foreign := sorted(settings_given.keys() - kind.settings_fields.keys()):
                raise ValidationError.for_field(
                    foreign[0], f"not a setting of the {kind.name} backend")
        datacenter.backend_settings = {**datacenter.backend_settings, **settings_given}
    _full_clean(datacenter, validate_unique=created)
    if check is not None:
        check(datacenter)
    datacenter.save()
    return datacenter, created


@transaction.atomic
def user_upsert(username: str, *, password: str | None = None,
                datacenter_names: list[str] | tuple[str, ...] = (),
                quota: dict[str, int] | None = None, email: str | None = None,
                staff: bool | None = None, superuser: bool | None = None) -> tuple[User, bool]:
    """Create the user or update what is given; add them to the datacenters, set the quota.

    ``quota`` (cpu in millicores, memory and storage in bytes, gpu, jobs, queued) applies in every
    datacenter named; resources not given keep their value (defaults for a new membership).
    """
    quota = quota or {}
    unknown = set(quota) - QUOTA_FIELDS
    if unknown:
        raise ValueError(f"unknown quota fields: {sorted(unknown)}")
    datacenters = []
    for dc_name in datacenter_names:
        datacenter = Datacenter.objects.filter(name=dc_name).first()
        if datacenter is None:
            raise NotFoundError.for_field(
                "datacenter", f"no datacenter named {dc_name!r} (create it with adddatacenter)"
            )
        datacenters.append(datacenter)

    user = User.objects.filter(username=username).first()
    created = user is None
    if created:
        if not password:
            raise ValidationError.for_field("password", "a new user needs a password")
        user = User(username=username)
    if email is not None:
        user.email = email
    if staff is not None:
        user.is_staff = staff
    if superuser is not None:
        user.is_superuser = superuser
        user.is_staff = user.is_staff or superuser
    _full_clean(user, exclude=["password"], validate_unique=created)
    if password:
        try:
            validate_password(password, user)
        except DjangoValidationError as exc:
            raise ValidationError.for_field("password", " ".join(exc.messages)) from None
        user.set_password(password)
    user.save()

    for datacenter in datacenters:
        membership_grant(user, datacenter)
        if quota:
            quota_set(None, datacenter, user, **quota)
    return user, created


def _quota_values(quota: Quota | None) -> dict:
    return {name: getattr(quota, name) if quota else None for name in QUOTA_FIELDS}


def quota_change_record(actor, datacenter, user, before: dict, after: dict) -> None:
    """Audit a quota change (``before``/``after``: each resource, None for the default) and,
    once it is committed, tell the jobs app, which admits what now fits."""
    changes = {name: [before.get(name), after.get(name)] for name in sorted(QUOTA_FIELDS)
               if before.get(name) != after.get(name)}
    if not changes:
        return
    audit_record(actor, AuditEntry.Action.QUOTA_CHANGE,
                 user.username if user is not None else "(datacenter default)",
                 datacenter=datacenter, whose=user, changes=changes)
    transaction.on_commit(lambda: quota_changed.send(
        sender=Quota, user=user, datacenter=datacenter))


def share_change_record(actor, datacenter, target: str, before: dict, after: dict) -> None:
    """Audit a change of how a datacenter is shared — a group's quota or weight, a member's
    group or weight (``target`` names whose) — and, once committed, admit what now may start
    (everyone's queue in the datacenter: one member's change may be another's turn)."""
    changes = {name: [before.get(name), after.get(name)] for name in sorted(after)
               if before.get(name) != after.get(name)}
    if not changes:
        return
    audit_record(actor, AuditEntry.Action.QUOTA_CHANGE, target, datacenter=datacenter,
                 changes=changes)
    transaction.on_commit(lambda: quota_changed.send(sender=Team, user=None,
                                                     datacenter=datacenter))


@transaction.atomic
def quota_set(actor, datacenter, user=None, **values) -> Quota:
    """Set some resources of the user's quota (or, with no user, the datacenter's default);
    None puts a resource back to the default."""
    unknown = set(values) - QUOTA_FIELDS
    if unknown:
        raise ValueError(f"unknown quota fields: {sorted(unknown)}")
    quota = Quota.objects.select_for_update().filter(user=user, datacenter=datacenter).first()
    before = _quota_values(quota)
    quota = quota or Quota(user=user, datacenter=datacenter)
    for field, value in values.items():
        setattr(quota, field, value)
    _full_clean(quota, validate_unique=False)  # range of each resource
    quota.save()
    quota_change_record(actor, datacenter, user, before, _quota_values(quota))
    return quota
