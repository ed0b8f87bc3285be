"""``paddlectl login --web``: a login approved in the browser (``DeviceLogin``).

1. paddlectl: ``device_login_start`` — a device code (kept by paddlectl, secret) and a user
   code (shown to the user, ``BCDF-GHJK``), valid ``DEVICE_TTL`` seconds.
2. The user, logged in to the dashboard, enters or follows the user code on /device/ and
   approves it (``device_login_approve``, a CSRF-protected POST) — or denies it.
3. paddlectl polls ``device_login_poll`` every ``POLL_INTERVAL`` seconds; once approved, the
   first poll gets an API token for the approving user, and the codes are spent.

The user code has 20^8 (about 2.6e10) values and lives ten minutes; wrong codes count against
the user's login failures (``accounts.throttling``), and each address may have at most
``MAX_PENDING_PER_ADDRESS`` codes waiting.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from kernel.errors import ForbiddenError, NotFoundError, ThrottledError, ValidationError

from .models import DeviceLogin
from .selectors import membership_get
from .services import IssuedToken, token_create
from .throttling import login_attempt_reserve, login_success_record

DEVICE_TTL = 600
POLL_INTERVAL = 2
MAX_PENDING_PER_ADDRESS = 10
ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # no vowels (no words), nothing that looks like a digit


def _digest(device_code: str) -> str:
    return hashlib.sha256(device_code.encode()).hexdigest()


def user_code_normal(text: str) -> str:
    """A user code as typed (any case, spaces or a dash anywhere) in its stored form."""
    letters = "".join(c for c in text.upper() if c.isalnum())
    return f"{letters[:4]}-{letters[4:]}" if len(letters) == 8 else letters


def device_login_start(*, username: str, address: str, datacenter_name: str = "",
                       name: str = "") -> tuple[DeviceLogin, str]:
    """A new pending login and its device code (returned once, never stored)."""
    now = timezone.now()
    DeviceLogin.objects.filter(expires_at__lt=now - timedelta(days=1)).delete()
    pending = DeviceLogin.objects.filter(address=address, expires_at__gt=now,
                                         approved_at=None, denied_at=None)
    if pending.count() >= MAX_PENDING_PER_ADDRESS:
        oldest = pending.order_by("expires_at").first()
        retry = max(1, int((oldest.expires_at - now).total_seconds()))
        raise ThrottledError(f"too many logins waiting for approval from your address; try "
                             f"again in {retry} seconds", retry_after=retry)
    device_code = secrets.token_urlsafe(32)
    for _ in range(5):
        user_code = user_code_normal("".join(secrets.choice(ALPHABET) for _ in range(8)))
        try:
            with transaction.atomic():
                login = DeviceLogin.objects.create(
                    user_code=user_code, device_digest=_digest(device_code),
                    username=username, datacenter=datacenter_name, name=name,
                    address=address[:64], expires_at=now + timedelta(seconds=DEVICE_TTL))
            return login, device_code
        except IntegrityError:  # that user code is taken (by a login not yet purged)
            continue
    raise ThrottledError("no free login code; try again in a minute", retry_after=60)


def _pending(user_code: str, *, for_update: bool = False) -> DeviceLogin:
    logins = DeviceLogin.objects.select_for_update() if for_update else DeviceLogin.objects
    login = logins.filter(user_code=user_code_normal(user_code)).first()
    if (login is None or login.expires_at <= timezone.now() or login.approved_at
            or login.denied_at or login.used_at):
        raise NotFoundError.for_field(
            "code", "no login waits for this code: it is wrong, expired or used already; "
                    "run `paddlectl login --web` again for a new one", code="unknown_code")
    return login


def device_login_lookup(user, user_code: str, address: str) -> DeviceLogin:
    """The pending login of ``user_code``, for the user to approve; a wrong code counts as a
    failed login of theirs."""
    key = f"device-code:{user.pk}"
    login_attempt_reserve(key, address)
    login = _pending(user_code)
    login_success_record(key, address)
    return login


@transaction.atomic
def device_login_approve(user, user_code: str, address: str) -> DeviceLogin:
    """The user lets the paddlectl that shows ``user_code`` log in as them."""
    device_login_lookup(user, user_code, address)
    login = _pending(user_code, for_update=True)
    if login.username.lower() != user.username.lower():
        raise ForbiddenError.for_field(
            "code", f"this paddlectl logs in as {login.username!r}, and you are "
                    f"{user.username!r}: set `username: {user.username}` in its "
                    "~/.paddle/config and run `paddlectl login --web` again",
            code="wrong_user")
    if login.datacenter:
        membership_get(user, login.datacenter)
    login.approved_by, login.approved_at = user, timezone.now()
    login.save(update_fields=["approved_by", "approved_at"])
    return login


@transaction.atomic
def device_login_deny(user, user_code: str, address: str) -> DeviceLogin:
    device_login_lookup(user, user_code, address)
    login = _pending(user_code, for_update=True)
    login.denied_at = timezone.now()
    login.save(update_fields=["denied_at"])
    return login


def _poll_error(code: str, message: str) -> ValidationError:
    return ValidationError(message, code=code)


def device_login_poll(device_code: str) -> IssuedToken:
    """paddlectl asks whether its login was approved: the token, once; else a 400 whose code
    says why not (RFC 8628's: authorization_pending, slow_down, access_denied,
    expired_token)."""
    with transaction.atomic():
        outcome = _poll(device_code)
        if isinstance(outcome, IssuedToken):
            return outcome
    raise outcome  # after the commit: the time of this poll is kept


def _poll(device_code: str) -> IssuedToken | ValidationError:
    login = (DeviceLogin.objects.select_for_update()
             .filter(device_digest=_digest(device_code)).first())
    if login is None:
        return _poll_error("invalid_device_code", "no such login; run `paddlectl login --web` "
                                                  "again")
    now = timezone.now()
    if login.used_at is not None or login.expires_at <= now:
        return _poll_error("expired_token", "the login code expired or was used; run "
                                            "`paddlectl login --web` again")
    if login.denied_at is not None:
        return _poll_error("access_denied", "the login was denied in the browser")
    too_soon = (login.last_poll_at is not None
                and now - login.last_poll_at < timedelta(seconds=POLL_INTERVAL * 0.8))
    login.last_poll_at = now
    if login.approved_at is None:
        login.save(update_fields=["last_poll_at"])
        if too_soon:
            return _poll_error("slow_down", f"poll at most every {POLL_INTERVAL} seconds")
        return _poll_error("authorization_pending", "waiting for the login to be approved in "
                                                    "the browser")
    login.used_at = now
    login.save(update_fields=["last_poll_at", "used_at"])
    return token_create(login.approved_by, datacenter_name=login.datacenter or None,
                        name=login.name or "paddlectl")
