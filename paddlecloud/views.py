"""The few pages the project itself serves: the home page and the health check."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET


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
