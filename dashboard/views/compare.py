"""The compare page (issue 39): up to 20 of the user's jobs side by side — one metric's curves
(``static/js/compare.js`` draws them on a canvas; the first metric's come with the page),
each metric's final and best value per job, and what differs in their specs and environments.
The jobs list's checkboxes open it (``?jobs=a&jobs=b``). All but the curves is in the page as
served."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render

from jobs.compare import MAX_JOBS, jobs_compare
from kernel.errors import ValidationError

from .jobs import dashboard_page


@dashboard_page
def compare(request, datacenter):
    try:
        data = jobs_compare(request.user, datacenter, request.GET.getlist("jobs"),
                            default=True)
    except ValidationError as exc:
        messages.error(request, f"Compare: {exc.message} (tick them in the list)")
        return redirect("dashboard:jobs")
    names = [job["name"] for job in data["jobs"]]
    metrics = data["metrics"]
    by_metric = {metric: [row for row in data["table"] if row["metric"] == metric]
                 for metric in metrics}
    return render(request, "dashboard/jobs/compare.html", {
        "data": data, "names": names, "max_jobs": MAX_JOBS,
        "metric": data["metric"] or "", "max_points": data["max_points"],
        "by_metric": [(metric, rows, _best_of(rows)) for metric, rows in by_metric.items()],
        "diff": [(row["field"], row["secret"], [row["values"].get(name) for name in names])
                 for row in data["diff"]],
    })


def _best_of(rows: list[dict]) -> str | None:
    """The job whose best value of a metric is the best of all."""
    if not rows:
        return None
    pick = min if rows[0]["goal"] == "min" else max
    return pick(rows, key=lambda row: row["best"])["job"]
