"""The few pages the project itself serves: the home page and the health checks.

``/healthz`` (liveness) answers 200 while this process answers, whatever its dependencies;
``/readyz`` (readiness) answers 503 with Retry-After while one of them does not. Both say
what each dependency answered: ``{"status": "ok" | "degraded", "checks": {"database": {"ok":
true}, "redis": {"ok": false, "error": "…"}}}`` (redis only with REDIS_URL: without it, the
embedded default keeps the queue in this process).
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET

from kernel.errors import UnavailableError

CHECK_TIMEOUT = 1  # seconds a dependency has to answer a check


@login_required
def home(request):
    """The dashboard starts at the jobs list (quota and the paddlectl config have their own
    pages)."""
    return redirect("dashboard:jobs")


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _redis() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=CHECK_TIMEOUT,
                                  socket_timeout=CHECK_TIMEOUT)
    try:
        client.ping()
    finally:
        client.close()


def _checks() -> dict[str, dict]:
    checks = {"database": _database}
    if settings.REDIS_URL:
        checks["redis"] = _redis
    results = {}
    for name, check in checks.items():
        try:
            check()
        except Exception as exc:  # any failure of a dependency is its "not ok"
            line = " ".join(str(exc).split()) or type(exc).__name__
            results[name] = {"ok": False, "error": line[:300]}
        else:
            results[name] = {"ok": True}
    return results


def _answer(*, ready: bool) -> JsonResponse:
    checks = _checks()
    ok = all(check["ok"] for check in checks.values())
    response = JsonResponse({"status": "ok" if ok else "degraded", "checks": checks},
                            status=200 if ok or not ready else 503)
    if response.status_code == 503:
        response["Retry-After"] = str(UnavailableError.retry_after)
    return response


@require_GET
def healthz(request):
    """Liveness: 200 while the process answers (a restart brings no dependency back)."""
    return _answer(ready=False)


@require_GET
def readyz(request):
    """Readiness: 200 when every dependency answers, else 503 with Retry-After."""
    return _answer(ready=True)
