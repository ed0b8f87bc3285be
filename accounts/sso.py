"""Single sign-on with OpenID Connect: the authentication backend (mozilla-django-oidc's, made
strict) and what a login does to accounts.

A login is matched to its user by the pair (issuer, ``sub``) in ``SsoIdentity``, never by the
e-mail or the preferred username, which a provider lets people change. A first login links a
user with the same verified e-mail only if the admin allows it
(``PADDLECLOUD_OIDC_MATCH_EMAIL``), else creates one: its username from ``preferred_username``,
made valid and unique, and no usable password. At every login the memberships that single
sign-on granted follow the group claim (``SsoGroupMapping``); those an admin granted are never
touched. Users made, linked and memberships added or removed are audited.

The provider's endpoints come from its discovery document, read at the first login and again
after ``DISCOVERY_TTL``; settings never hold them.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import unicodedata

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from kernel.errors import NotFoundError, ValidationError

from .audit import audit_record
from .models import (
    AuditEntry,
    Datacenter,
    Membership,
    SsoGroupMapping,
    SsoIdentity,
    membership_grant,
)

logger = logging.getLogger(__name__)

DISCOVERY_TTL = 3600.0
# mozilla-django-oidc's endpoint settings, and where the discovery document has each.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
# A username single sign-on makes: what a PFS home (/pfs/{dc}/home/{user}) and a namespace
# take without surprise — lower-case ASCII letters, digits, '.', '_' and '-', starting and
# ending with a letter or digit.
USERNAME_MAX = 64
USERNAME_RULE = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")


class SsoError(Exception):
    """Single sign-on cannot go on: the message is for the user (no secret in it)."""


def sso_enabled() -> bool:
    return bool(settings.PADDLECLOUD_OIDC_ISSUER and settings.PADDLECLOUD_OIDC_CLIENT_ID)


def _issuer() -> str:
    return settings.PADDLECLOUD_OIDC_ISSUER.rstrip("/")


_discovered: dict[str, tuple[float, dict]] = {}
_discovered_lock = threading.Lock()


def sso_discovery() -> dict:
    """The provider's discovery document (cached for ``DISCOVERY_TTL``); ``SsoError`` when it
    cannot be read or is not the configured issuer's."""
    issuer = _issuer()
    with _discovered_lock:
        cached = _discovered.get(issuer)
    if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL:
        return cached[1]
    url = issuer + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.PADDLECLOUD_OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        logger.warning("single sign-on: cannot read %s: %s", url, exc)
        raise SsoError("the identity provider cannot be reached; try again later") from None
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        logger.warning("single sign-on: %s is not the discovery document of %s", url, issuer)
        raise SsoError("the identity provider is misconfigured; tell an administrator")
    missing = [key for key in ENDPOINTS.values() if not isinstance(document.get(key), str)]
    if missing:
        logger.warning("single sign-on: %s has no %s", url, ", ".join(missing))
        raise SsoError("the identity provider is misconfigured; tell an administrator")
    with _discovered_lock:
        _discovered[issuer] = (time.monotonic(), document)
    return document


def sso_discovery_forget() -> None:
    with _discovered_lock:
        _discovered.clear()


# mozilla-django-oidc's settings that are PaddleCloud's under another name.
ALIASES = {
    "OIDC_RP_CLIENT_ID": "PADDLECLOUD_OIDC_CLIENT_ID",
    "OIDC_RP_CLIENT_SECRET": "PADDLECLOUD_OIDC_CLIENT_SECRET",
    "OIDC_RP_SCOPES": "PADDLECLOUD_OIDC_SCOPES",
    "OIDC_TIMEOUT": "PADDLECLOUD_OIDC_TIMEOUT",
}


def oidc_setting(attr: str, *args):
    """mozilla-django-oidc's settings: its endpoints from the discovery document, the client
    from PaddleCloud's settings."""
    if attr in ENDPOINTS:
        return sso_discovery()[ENDPOINTS[attr]]
    if attr in ALIASES:
        return getattr(settings, ALIASES[attr])
    return import_from_settings(attr, *args)


class SsoBackend(OIDCAuthenticationBackend):
    """Answers the callback of the code flow only (``SsoCallbackView`` passes the nonce);
    any other ``authenticate()`` (a password) is not its business."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        # The parent reads the endpoints here; that waits for a login (the discovery).
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if request is None or "nonce" not in kwargs or not sso_enabled():
            return None
        self.configure()
        return super().authenticate(request, **kwargs)

    def configure(self) -> None:
        """Read the settings and the provider's endpoints (what the parent's __init__ does)."""
        super().__init__()

    def verify_token(self, token, **kwargs):
        """The signature (RS256, a key of the provider's JWKS), the expiry and the nonce (the
        parent), then what it leaves out: the issuer and the audience."""
        payload = super().verify_token(token, **kwargs)
        if str(payload.get("iss", "")).rstrip("/") != _issuer():
            raise SuspiciousOperation("the ID token was issued by another issuer")
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience or []
        client_id = settings.PADDLECLOUD_OIDC_CLIENT_ID
        if client_id not in audiences or (len(audiences) > 1
                                          and payload.get("azp") != client_id):
            raise SuspiciousOperation("the ID token is not for this portal")
        if not isinstance(payload.get("sub"), str) or not payload["sub"] \
                or not isinstance(payload.get("exp"), int | float):
            raise SuspiciousOperation("the ID token has no subject or no expiry")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        claims = dict(payload)
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload["sub"]:
            raise SuspiciousOperation("the userinfo answer is about another subject")
        claims.update({key: value for key, value in userinfo.items()
                       if key not in ("iss", "aud", "exp", "iat", "nonce")})
        return sso_user_login(_issuer(), claims)


# ---------------------------------------------------------------------------------------------
# What a login does


def sso_groups(claims: dict) -> list[str]:
    """The groups the claims name (a list of names, or one name)."""
    value = claims.get(settings.PADDLECLOUD_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [group for group in value if isinstance(group, str) and group]


def _username_base(text) -> str:
    if not isinstance(text, str):
        return ""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    name = re.sub(r"[^a-z0-9._-]+", "-", ascii_text.lower())
    name = re.sub(r"([._-])[._-]+", r"\1", name)  # no '..' and the like
    name = name[:USERNAME_MAX].strip("._-")
    return name if USERNAME_RULE.match(name) else ""


def sso_username(claims: dict) -> str:
    """A free username from ``preferred_username`` (else the e-mail's local part, else the
    subject), valid by ``USERNAME_RULE``; ``-2``, ``-3``, … added while it is taken."""
    email = claims.get("email") if isinstance(claims.get("email"), str) else ""
    base = (_username_base(claims.get("preferred_username"))
            or _username_base(email.partition("@")[0])
            or _username_base(f"user-{claims.get('sub', '')}")[:USERNAME_MAX] or "user")
    User = get_user_model()
    name, number = base, 1
    while User.objects.filter(username__iexact=name).exists():
        number += 1
        suffix = f"-{number}"
        name = base[:USERNAME_MAX - len(suffix)].rstrip("._-") + suffix
    return name


def _verified_email(claims: dict) -> str:
    email = claims.get("email")
    if isinstance(email, str) and "@" in email and claims.get("email_verified") is True:
        return email
    return ""


def sso_user_login(issuer: str, claims: dict):
    """The user these claims (already verified: ``sub`` is the provider's) log in as, made or
    linked on their first login; their single sign-on memberships brought in line with the
    group claim."""
    try:
        with transaction.atomic():
            return _user_login(issuer, claims)
    except IntegrityError:
        # Two first logins of one subject at once (two tabs): the other made the user (or
        # took the username) first; this one finds it now.
        with transaction.atomic():
            return _user_login(issuer, claims)


def _user_login(issuer: str, claims: dict):
    User = get_user_model()
    subject = claims["sub"]
    identity = (SsoIdentity.objects.select_for_update().select_related("user")
                .filter(issuer=issuer, subject=subject).first())
    email = _verified_email(claims)
    if identity is None:
        user = None
        if settings.PADDLECLOUD_OIDC_MATCH_EMAIL and email:
            # Users single sign-on knows already are found by their subject, never by this.
            matches = list(User.objects.filter(email__iexact=email,
                                               sso_identities__isnull=True)[:2])
            if len(matches) == 1:
                user = matches[0]
                audit_record(user, AuditEntry.Action.SSO_USER_LINK, user.username,
                             issuer=issuer, subject=subject)
        if user is None:
            user = User(username=sso_username(claims), email=email,
                        first_name=str(claims.get("given_name") or "")[:150],
                        last_name=str(claims.get("family_name") or "")[:150])
            user.set_unusable_password()
            user.save()
            audit_record(user, AuditEntry.Action.SSO_USER_CREATE, user.username,
                         issuer=issuer, subject=subject)
        identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if email and email != user.email and not user.has_usable_password():
        user.email = email
        user.save(update_fields=["email"])
    identity.last_login_at = timezone.now()
    identity.save(update_fields=["last_login_at"])
    if user.is_active:
        sso_memberships_sync(user, sso_groups(claims))
    return user


def sso_memberships_sync(user, groups: list[str]) -> None:
    """Add the memberships the user's groups map to; remove those single sign-on granted that
    no group maps to any more. A membership an admin granted stays as it is."""
    mapped: dict[int, list[str]] = {}
    datacenters: dict[int, Datacenter] = {}
    for mapping in SsoGroupMapping.objects.select_related("datacenter").filter(group__in=groups):
        mapped.setdefault(mapping.datacenter_id, []).append(mapping.group)
        datacenters[mapping.datacenter_id] = mapping.datacenter
    current = {m.datacenter_id: m for m in
               Membership.objects.select_related("datacenter").filter(user=user)}
    for datacenter_id, mapped_groups in mapped.items():
        if datacenter_id in current:
            continue
        membership, _ = membership_grant(user, datacenters[datacenter_id], granted_by_sso=True)
        audit_record(None, AuditEntry.Action.SSO_MEMBERSHIP_ADD, user.username,
                     datacenter=membership.datacenter, whose=user,
                     groups=sorted(mapped_groups))
    for datacenter_id, membership in current.items():
        if membership.granted_by_sso and datacenter_id not in mapped:
            membership.delete()
            audit_record(None, AuditEntry.Action.SSO_MEMBERSHIP_REMOVE, user.username,
                         datacenter=membership.datacenter, whose=user, groups=groups)


def sso_only(user) -> bool:
    """The user logs in with single sign-on only: they have an identity and no password."""
    return not user.has_usable_password() and SsoIdentity.objects.filter(user=user).exists()


# ---------------------------------------------------------------------------------------------
# The admin's mappings (the Django admin edits the model; `paddlecloud ssogroup` calls these)


def sso_group_map(group: str, datacenter_name: str) -> tuple[SsoGroupMapping, bool]:
    """Members of ``group`` become members of the datacenter at their next login."""
    group = group.strip()
    if not group:
        raise ValidationError.for_field("group", "a group name, as the groups claim writes it")
    datacenter = Datacenter.objects.filter(name=datacenter_name).first()
    if datacenter is None:
        raise NotFoundError.for_field(
            "datacenter", f"no datacenter named {datacenter_name!r} (create it with adddatacenter)")
    return SsoGroupMapping.objects.get_or_create(group=group, datacenter=datacenter)


def sso_group_unmap(group: str, datacenter_name: str) -> bool:
    """Remove the mapping (memberships it granted go at each user's next login)."""
    deleted, _ = SsoGroupMapping.objects.filter(
        group=group.strip(), datacenter__name=datacenter_name).delete()
    return bool(deleted)
