"""The few pages the project itself serves (the home page and the health check), and what
every app's API views build on: ``DatacenterAPIView`` for a view that acts in a datacenter,
``validated`` for a request's body, ``query_flag`` for a boolean query parameter."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET
from drf_spectacular.utils import OpenApiParameter
from rest_framework.views import APIView

from accounts.models import Datacenter
from accounts.selectors import request_datacenter
from kernel.env import FALSE_WORDS, TRUE_WORDS
from kernel.errors import ValidationError

FLAG_RULE = (f"a boolean: {', '.join(TRUE_WORDS[:-1])} or {TRUE_WORDS[-1]} for true; "
             f"{', '.join(FALSE_WORDS[:-1])} or {FALSE_WORDS[-1]} for false (any case)")


@login_required
def home(request):
    """The dashboard starts at the jobs list (quota and the paddlectl config have their own
    pages)."""
    return redirect("dashboard:jobs")


@require_GET
def healthz(request):
    """Liveness and database reachability, for load balancers and compose health checks."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means "not healthy"
        return JsonResponse({"status": "unhealthy", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})


class DatacenterAPIView(APIView):
    """An API view that acts in one datacenter: ``self.datacenter``, resolved once a request
    by ``accounts.selectors.request_datacenter`` (the token's datacenter, else the one the
    request names, checked against the user's memberships).

    It is resolved after authentication and the permission checks, before the handler: a
    request without credentials is still a 401, and a user who is not a member gets the 403
    that names the datacenter before anything else is looked at.
    """

    datacenter: Datacenter

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.datacenter = request_datacenter(request)


def validated(serializer_class, request) -> dict:
    """The request's body as ``serializer_class`` validates it; else the 400 that names each
    field and its rule."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def query_flag(request, name: str, default: bool = False) -> bool:
    """The boolean query parameter ``name``: ``default`` when absent; else one of
    ``TRUE_WORDS`` or ``FALSE_WORDS`` in any case; anything else (an empty value too) is a
    400 that names the parameter and the rule. For DRF's requests and Django's alike."""
    value = request.GET.get(name)
    if value is None:
        return default
    word = value.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValidationError.for_field(name, FLAG_RULE)


def query_whole(request, name: str, low: int, high: int, default: int | None
                ) -> int | None:
    """The whole-number query parameter ``name`` from ``low`` to ``high``: ``default`` when
    absent; anything else is a 400 that names the parameter and the rule."""
    value = request.GET.get(name)
    if value is None:
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise ValidationError.for_field(name, f"a whole number from {low} to {high}")
    return int(value)


def flag_parameter(name: str, description: str) -> OpenApiParameter:
    """A boolean query parameter read with ``query_flag``, for ``extend_schema``."""
    return OpenApiParameter(name, bool, description=f"{description}; {FLAG_RULE}")
