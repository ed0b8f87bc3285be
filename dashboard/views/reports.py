"""The Usage page (``scheduling.reports.usage_report``: GPU-hours, CPU-hours, jobs and the
median wait period by period, with a chart) and the Audit page (``accounts.audit``: the
entries the user may read). Both show what the API gives, and export it through the API
(``?format=csv`` or ``json``): the same figures, whoever asks."""

from __future__ import annotations

from urllib.parse import urlencode

from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from accounts.audit import audit_rows, audit_visible
from accounts.models import AuditEntry, Membership
from kernel.api import query_time
from kernel.errors import ForbiddenError, ValidationError
from scheduling.reports import PER, PERIODS, usage_report

from .jobs import dashboard_page

AUDIT_SHOWN = 200  # the page's newest entries; the export takes more


def _export_links(name: str, query: dict) -> dict:
    base = reverse(name)
    kept = {k: v for k, v in query.items() if v}
    return {fmt: f"{base}?{urlencode({**kept, 'format': fmt})}" for fmt in ("csv", "json")}


def _chart(report: dict, resource: str, label: str) -> dict:
    """The periods' totals of ``resource`` as SVG bars (the Quota page's kind of chart)."""
    totals = dict.fromkeys(report["periods"], 0.0)
    for row in report["rows"]:
        totals[row["period"]] += row[resource]
    top = max(totals.values(), default=0.0) or 1.0
    return {"label": label, "resource": resource, "count": max(len(totals), 1),
            "bars": [{"x": i + 0.1, "height": round(100 * value / top, 1),
                      "y": round(100 - 100 * value / top, 1),
                      "title": f"{period}: {value:.2f} {label}"}
                     for i, (period, value) in enumerate(totals.items())]}


@require_http_methods(["GET", "HEAD"])
@dashboard_page
def usage(request, datacenter):
    query = {name: request.GET.get(name, "") for name in ("since", "until", "by", "per",
                                                           "group", "user")}
    leads = Membership.objects.filter(user=request.user, datacenter=datacenter, lead=True,
                                      team__isnull=False).exists()
    context = {"query": query, "periods": PERIODS, "pers": PER, "error": None,
               "wide": request.user.is_staff or leads,
               "exports": _export_links("api-usage", {**query, "datacenter": datacenter.name})}
    try:
        report = usage_report(request.user, datacenter, since=query_time(request, "since"),
                              until=query_time(request, "until"), by=query["by"] or "day",
                              per=query["per"] or "user", group=query["group"] or None,
                              username=query["user"] or None)
    except (ValidationError, ForbiddenError) as exc:
        context["error"] = exc.message
        return render(request, "dashboard/usage.html", context, status=exc.status)
    context.update(report=report, charts=[_chart(report, "gpu_hours", "GPU-hours"),
                                          _chart(report, "cpu_hours", "CPU-hours")])
    return render(request, "dashboard/usage.html", context)


@require_http_methods(["GET", "HEAD"])  # read only: nothing here changes an entry
@dashboard_page
def audit(request, datacenter):
    query = {name: request.GET.get(name, "") for name in ("action", "since", "until", "user")}
    context = {"query": query, "actions": AuditEntry.Action.choices, "error": None,
               "exports": _export_links("api-audit", query),
               "leads": sorted(Membership.objects.filter(user=request.user, lead=True,
                                                         team__isnull=False)
                               .values_list("team__name", flat=True))}
    try:
        if query["action"] and query["action"] not in AuditEntry.Action.values:
            raise ValidationError.for_field("action", "one of the actions listed")
        entries = audit_visible(request.user, actions=[query["action"]] if query["action"]
                                else None, since=query_time(request, "since"),
                                until=query_time(request, "until"),
                                username=query["user"] or None)
    except ValidationError as exc:
        context["error"] = exc.message
        return render(request, "dashboard/audit.html", context, status=exc.status)
    context["entries"] = audit_rows(entries[:AUDIT_SHOWN])
    context["shown"] = AUDIT_SHOWN
    return render(request, "dashboard/audit.html", context)
