"""Reads about accounts: memberships, the datacenter a request acts in, quotas, tokens."""

from __future__ import annotations

from django.db.models import Q

from kernel.errors import ForbiddenError

from .models import BUILTIN_QUOTA, QUOTA_RESOURCES, ApiToken, Datacenter, Membership, Quota

DATACENTER_HEADER = "HTTP_X_PADDLE_DATACENTER"


def membership_get(user, datacenter_name: str) -> Membership:
    """The user's membership of the named datacenter, or a 403 that names it.

    An unknown datacenter gets the same answer as one the user is not a member of, so the
    names of datacenters are not given away.
    """
    membership = (
        Membership.objects.select_related("datacenter")
        .filter(user=user, datacenter__name=datacenter_name)
        .first()
    )
    if membership is None:
        raise ForbiddenError.for_field(
            "datacenter", f"you are not a member of datacenter {datacenter_name!r}",
            code="not_a_member",
        )
    return membership


def request_datacenter(request) -> Datacenter:
    """The datacenter a request acts in, checked against the user's memberships.

    A token is bound to its datacenter. A browser session acts in the datacenter named by the
    ``X-Paddle-Datacenter`` header or ``?datacenter=``, else in the user's first datacenter.
    Membership is checked on every request, so removing a member takes effect at once.
    """
    asked = request.META.get(DATACENTER_HEADER) or request.GET.get("datacenter")
    return acting_datacenter(request.user, request.auth, asked)


def acting_datacenter(user, auth, asked: str | None) -> Datacenter:
    """``request_datacenter``'s rule for a user authenticated with ``auth`` (an ApiToken, or
    anything else for a browser's session) who asks for ``asked``: a WebSocket's too."""
    token = auth if isinstance(auth, ApiToken) else None
    if token is not None:
        if asked and asked != token.datacenter.name:
            raise ForbiddenError.for_field(
                "datacenter",
                f"this token is for datacenter {token.datacenter.name!r}, not {asked!r}; "
                "log in to that datacenter for a token of its own",
                code="wrong_datacenter",
            )
        return membership_get(user, token.datacenter.name).datacenter
    return member_datacenter(user, asked)


def member_datacenter(user, asked: str | None = None) -> Datacenter:
    """The datacenter named ``asked`` (else the user's first) if the user is a member of it."""
    if asked:
        return membership_get(user, asked).datacenter
    membership = Membership.objects.select_related("datacenter").filter(user=user).first()
    if membership is None:
        raise ForbiddenError.for_field(
            "datacenter", "you are not a member of any datacenter; ask an administrator",
            code="not_a_member",
        )
    return membership.datacenter


def quota_get(user, datacenter: Datacenter) -> Quota:
    """The user's quota in the datacenter, every resource filled in: the user's own number,
    else the datacenter's default, else the built-in one. (Not saved: an effective quota.)"""
    rows = {row.user_id: row for row in Quota.objects.filter(
        Q(user=user) | Q(user__isnull=True), datacenter=datacenter)}
    return _effective(rows.get(user.pk), rows.get(None), user=user, datacenter=datacenter)


def quotas_get(datacenter: Datacenter, user_ids) -> dict[int, Quota]:
    """``quota_get`` of each of ``user_ids`` in the datacenter, in one query."""
    user_ids = list(user_ids)
    rows = {row.user_id: row for row in Quota.objects.filter(
        Q(user_id__in=user_ids) | Q(user__isnull=True), datacenter=datacenter)}
    return {user_id: _effective(rows.get(user_id), rows.get(None), user_id=user_id,
                                datacenter=datacenter) for user_id in user_ids}


def _effective(own: Quota | None, default: Quota | None, **fields) -> Quota:
    effective = Quota(**fields)
    for name in QUOTA_RESOURCES:
        for source in (own, default):
            if source is not None and getattr(source, name) is not None:
                setattr(effective, name, getattr(source, name))
                break
        else:
            setattr(effective, name, BUILTIN_QUOTA[name])
    return effective


def token_list(user):
    """The user's API tokens, newest first, revoked and expired ones too (until purged),
    each with its datacenter."""
    return ApiToken.objects.filter(user=user).select_related("datacenter")


def user_datacenters(user) -> list[Datacenter]:
    return list(Datacenter.objects.filter(memberships__user=user).order_by("memberships__id"))
