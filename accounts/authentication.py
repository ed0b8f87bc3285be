"""``Authorization: Bearer <token>`` authentication for the API."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from .models import ApiToken

LAST_USED_RESOLUTION = timedelta(minutes=1)
RELOGIN = "run `paddlectl login` for a new one"


class ApiTokenAuthentication(BaseAuthentication):
    keywords = (b"bearer", b"token")

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in self.keywords:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "malformed Authorization header: expected 'Bearer <token>'"
            )
        try:
            raw = parts[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("the token is not valid") from None
        return token_user(raw)

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


def token_user(raw: str) -> tuple:
    """The user of the API token ``raw`` and the token, or AuthenticationFailed saying why
    not (the API's and the clients' WebSockets': ``accounts.websockets``)."""
    token = (
        ApiToken.objects.select_related("user", "datacenter")
        .filter(digest=ApiToken.digest_of(raw))
        .first()
    )
    if token is None:
        raise exceptions.AuthenticationFailed(
            f"the token is not valid; {RELOGIN}", code="invalid_token"
        )
    now = timezone.now()
    if token.revoked_at is not None:
        raise exceptions.AuthenticationFailed(
            f"the token was revoked; {RELOGIN}", code="token_revoked"
        )
    if token.expires_at <= now:
        raise exceptions.AuthenticationFailed(
            f"the token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC; {RELOGIN}",
            code="token_expired",
        )
    if not token.user.is_active:
        raise exceptions.AuthenticationFailed(
            "the user account is disabled", code="user_disabled"
        )
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token.user, token
