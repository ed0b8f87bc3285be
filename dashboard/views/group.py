"""The group page: the user's group (team) in the dashboard's datacenter — its weight, its
members, its quota and what their jobs hold of it — and its members' jobs, to look at
(``jobs.services.group_report``, ``group_jobs``). Changing a job stays its owner's: only the
user's own rows link to their job pages."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.shortcuts import render
from django.utils import timezone

from jobs import services
from kernel.errors import NotFoundError
from scheduling.admission import queue_position
from scheduling.forecasts import job_predictions

from ..meters import meter
from ..scheduling import prediction_shown
from .jobs import PAGE_SIZE, age, dashboard_page

METERS = (("cpu", "CPU"), ("memory", "Memory"), ("gpu", "GPUs"), ("jobs", "Running jobs"))


def _meter(resource: str, label: str, figures: dict) -> dict:
    """A resource of the group's quota as the quota page's bars show one (no limit: no bar)."""
    limited = figures["limit_value"] is not None
    return {"resource": resource, "label": label, "used": figures["used"],
            "limit": figures["limit"] if limited else "no limit", "limited": limited,
            **meter(figures["used_value"], figures["limit_value"] if limited else 0)}


@dashboard_page
def group(request, datacenter):
    try:
        report = services.group_report(request.user, datacenter)
    except NotFoundError as exc:
        # The service's words without the field it names ("group: you are in no group …").
        said = (exc.fields or {}).get("group") or [exc.message]
        return render(request, "dashboard/group.html", {"no_group": said[0]})
    jobs = services.group_jobs(request.user, datacenter)
    page = Paginator(jobs.values_list("pk", flat=True), PAGE_SIZE).get_page(
        request.GET.get("page"))
    page_jobs = list(jobs.filter(pk__in=list(page)))
    predictions = job_predictions(page_jobs)  # one forecast for the page
    now = timezone.now()
    return render(request, "dashboard/group.html", {
        "group": report,
        "meters": [_meter(resource, label, report["quota"][resource])
                   for resource, label in METERS if resource in report["quota"]],
        "page": page,
        "rows": [(job, age(job.created_at, now), queue_position(job),
                  prediction_shown(predictions.get(job.pk), now)) for job in page_jobs],
    })
