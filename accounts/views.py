"""API views for authentication and the current user: validate, call a service, serialize."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from kernel.api import (
    FORMAT_PARAMETER,
    CsvExport,
    query_time,
    query_whole,
    time_parameter,
    validated,
)
from kernel.errors import ValidationError
from paddlecloud_core import __version__

from . import device, selectors, services
from .api import DatacenterAPIView
from .audit import AUDIT_COLUMNS, audit_rows, audit_visible
from .models import ApiToken, AuditEntry
from .serializers import (
    ApiTokenSerializer,
    DatacenterSerializer,
    DeviceLoginRequestSerializer,
    DeviceLoginSerializer,
    DevicePollSerializer,
    ErrorSerializer,
    IssuedTokenSerializer,
    MeSerializer,
    TokenCreateSerializer,
    TokenRequestSerializer,
    VersionSerializer,
)
from .throttling import client_address

AUDIT_LIMIT = 500
AUDIT_MAX = 10_000
ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 429)}


def _issued(issued: services.IssuedToken, request) -> dict:
    return IssuedTokenSerializer(issued.token, context={"request": request, "raw": issued.raw}).data


class VersionView(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses={200: VersionSerializer}, summary="Server version")
    def get(self, request):
        return Response({"server": __version__, "api": "v1"})


class TokenView(APIView):
    """Log in for a token (POST, no authentication) and revoke the token in use (DELETE)."""

    def _logging_in(self) -> bool:
        # Schema generation asks without a request.
        return getattr(self.request, "method", None) == "POST"

    def get_permissions(self):
        return [AllowAny()] if self._logging_in() else super().get_permissions()

    def get_authenticators(self):
        # Logging in needs no credentials beyond the body: a stale token or a session
        # cookie (and its CSRF check) must not get in the way.
        return [] if self._logging_in() else super().get_authenticators()

    @extend_schema(request=TokenRequestSerializer,
                   responses={201: IssuedTokenSerializer, **ERRORS},
                   summary="Exchange username and password for an API token")
    def post(self, request):
        data = validated(TokenRequestSerializer, request)
        issued = services.token_issue(
            username=data["username"],
            password=data["password"],
            datacenter_name=data.get("datacenter") or None,
            name=data.get("name", ""),
            address=client_address(request),
        )
        return Response(_issued(issued, request), status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None, **ERRORS}, summary="Revoke the token of this request")
    def delete(self, request):
        if not isinstance(request.auth, ApiToken):
            raise ValidationError(
                "this request was not made with a token; revoke a token by its id with "
                "DELETE /api/v1/auth/tokens/{id}/", code="no_token",
            )
        services.token_revoke(request.user, request.auth.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeviceLoginView(APIView):
    """``paddlectl login --web``: start a login that the user approves in the browser."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=DeviceLoginRequestSerializer,
                   responses={201: DeviceLoginSerializer, **ERRORS},
                   summary="Start a login approved in the browser (device code)")
    def post(self, request):
        data = validated(DeviceLoginRequestSerializer, request)
        login, device_code = device.device_login_start(
            username=data["username"], datacenter_name=data.get("datacenter") or "",
            name=data.get("name") or "", address=client_address(request))
        page = request.build_absolute_uri("/device/")
        return Response({
            "device_code": device_code, "user_code": login.user_code,
            "verification_uri": page,
            "verification_uri_complete": f"{page}?code={login.user_code}",
            "expires_in": device.DEVICE_TTL, "interval": device.POLL_INTERVAL,
        }, status=status.HTTP_201_CREATED)


class DeviceTokenView(APIView):
    """Poll for the token of a login started with ``DeviceLoginView``."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=DevicePollSerializer,
                   responses={201: IssuedTokenSerializer, **ERRORS},
                   summary="The token of an approved browser login; 400 authorization_pending "
                           "until then")
    def post(self, request):
        data = validated(DevicePollSerializer, request)
        issued = device.device_login_poll(data["device_code"])
        return Response(_issued(issued, request), status=status.HTTP_201_CREATED)


class TokenListView(APIView):
    @extend_schema(responses={200: ApiTokenSerializer(many=True), **ERRORS},
                   summary="Your API tokens")
    def get(self, request):
        tokens = selectors.token_list(request.user)
        return Response(ApiTokenSerializer(tokens, many=True, context={"request": request}).data)

    @extend_schema(request=TokenCreateSerializer,
                   responses={201: IssuedTokenSerializer, **ERRORS},
                   summary="Create another API token (for scripts, CI, …)")
    def post(self, request):
        data = validated(TokenCreateSerializer, request)
        issued = services.token_create(
            request.user,
            datacenter_name=data.get("datacenter") or None,
            name=data.get("name", ""),
            ttl_days=data.get("expires_in_days"),
        )
        return Response(_issued(issued, request), status=status.HTTP_201_CREATED)


class TokenDetailView(APIView):
    @extend_schema(responses={204: None, **ERRORS}, summary="Revoke one of your tokens")
    def delete(self, request, token_id: int):
        services.token_revoke(request.user, token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AuditView(CsvExport, APIView):
    csv_columns = AUDIT_COLUMNS

    @extend_schema(parameters=[
        OpenApiParameter("action", str, description="comma-separated, e.g. job.kill,"
                         "token.create"),
        time_parameter("since", "from this"), time_parameter("until", "before this"),
        OpenApiParameter("user", str, description="only what this user did or was done to "
                                                  "what is theirs"),
        OpenApiParameter("limit", int, description=f"at most this many, newest first "
                                                   f"(default {AUDIT_LIMIT})"),
        FORMAT_PARAMETER],
        responses={200: OpenApiTypes.OBJECT, (200, "text/csv"): OpenApiTypes.STR, **ERRORS},
        summary="The audit trail you may read, newest first: what you did and what was done "
                "to what is yours; your group's as its lead; everything as an admin. Read "
                "only: entries are never changed or deleted")
    def get(self, request):
        return Response(audit_rows(_audit_entries(request)))


def _audit_entries(request):
    actions = [a for a in request.GET.get("action", "").split(",") if a]
    if unknown := sorted(set(actions) - set(AuditEntry.Action.values)):
        raise ValidationError.for_field("action", f"{unknown[0]} is none of "
                                                  + ", ".join(AuditEntry.Action.values))
    limit = query_whole(request, "limit", 1, AUDIT_MAX, AUDIT_LIMIT)
    return audit_visible(request.user, actions=actions, since=query_time(request, "since"),
                         until=query_time(request, "until"),
                         username=request.GET.get("user") or None)[:limit]


class MeView(DatacenterAPIView):
    @extend_schema(responses={200: MeSerializer, **ERRORS},
                   summary="You, your datacenters and your quota in the current one")
    def get(self, request):
        datacenter, user = self.datacenter, request.user
        return Response({
            "username": user.username,
            "email": user.email,
            "is_staff": user.is_staff,
            "datacenter": DatacenterSerializer(datacenter).data,
            "datacenters": DatacenterSerializer(
                selectors.user_datacenters(user), many=True).data,
            "quota": selectors.quota_get(user, datacenter).limits(),
        })
