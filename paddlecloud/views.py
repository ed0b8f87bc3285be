"""The few pages the project itself serves: the home page and the health check."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts import selectors


@login_required
def home(request):
    """Who you are, where you can run, your quota, and how to point paddlectl here."""
    memberships = request.user.memberships.select_related("datacenter")
    rows = [(m.datacenter, selectors.quota_get(request.user, m.datacenter).limits())
            for m in memberships]
    endpoint = request.build_absolute_uri("/").rstrip("/")
    return render(request, "home.html", {"rows": rows, "endpoint": endpoint})


@require_GET
def healthz(request):
    """Liveness and database reachability, for load balancers and compose health checks."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means "not healthy"
        return JsonResponse({"status": "unhealthy", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})

