"""VisualDL for one job or several (``interactive.visualdl``): "Open in VisualDL" on a job's
page and on the jobs ticked in the list starts (or finds) the user's VisualDL session for
them; its page waits, looking again every few seconds, until VisualDL answers, then sends the
browser through the portal's proxy to it."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from interactive.sessions import idle_parse, idle_shown
from interactive.visualdl import (
    visualdl_enter,
    visualdl_find,
    visualdl_get,
    visualdl_jobs,
    visualdl_open,
)
from kernel.errors import ConflictError, PaddleCloudError

from .jobs import dashboard_page

WAIT_SECONDS = 2  # the waiting page looks again this often


@require_http_methods(["GET", "POST"])
@dashboard_page
def visualdl_start(request, datacenter):
    """POST ``jobs`` (one or more names): to the page of the user's VisualDL for them, started
    if need be. GET (the jobs list's button without scripts): to that page if it runs already,
    else a page that asks before starting one."""
    names = (request.POST if request.method == "POST" else request.GET).getlist("jobs")
    try:
        if request.method == "GET":
            wanted = visualdl_jobs(names)
            session, started = visualdl_find(request.user, datacenter, wanted), False
            if session is None:
                return render(request, "dashboard/visualdl.html", {
                    "jobs": wanted, "idle": idle_shown(idle_parse(
                        settings.PADDLECLOUD_VISUALDL_IDLE))})
        else:
            session, started = visualdl_open(request.user, datacenter, names)
    except PaddleCloudError as exc:  # none ticked, not theirs, over the quota, …
        messages.error(request, f"VisualDL: {exc.message}")
        if len(names) == 1 and names[0]:
            return redirect("dashboard:job", name=names[0])
        return redirect("dashboard:jobs")
    if not started:
        messages.info(request, f"your VisualDL for {', '.join(session.jobs)} is "
                               f"{session.job.name}, already started")
    return redirect("dashboard:visualdl", name=session.job.name)


@dashboard_page
def visualdl_page(request, datacenter, name: str):
    """To the session's VisualDL once it answers; until then a page that says why not and
    looks again. A session that has ended says how, and offers to open VisualDL again."""
    try:
        entry = visualdl_enter(request.user, datacenter, name, request)
    except ConflictError as exc:
        session = visualdl_get(request.user, datacenter, name)
        return render(request, "dashboard/visualdl.html", {
            "session": session, "job": session.job, "jobs": session.jobs, "ended": exc.message,
            "idle": idle_shown(session.idle_seconds)})
    if entry.url:
        return redirect(entry.url)
    return render(request, "dashboard/visualdl.html", {
        "session": entry.session, "job": entry.session.job, "jobs": entry.session.jobs,
        "waiting": entry.waiting,
        "refresh": WAIT_SECONDS, "idle": idle_shown(entry.session.idle_seconds)})
