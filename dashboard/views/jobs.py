"""The job pages: list, submit, detail (workers, events, logs, training curves), kill and
delete. Each view calls one of ``jobs.services``; the live parts come over the WebSockets of
``jobs.consumers`` (``static/js/jobs.js`` and ``static/js/job.js``)."""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import prefetch_related_objects
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_http_methods

from jobs import services
from jobs.backends import backend_for
from jobs.compare import MAX_JOBS
from jobs.documents import to_yaml
from jobs.files import log_file
from jobs.folds import fold_rows
from jobs.logs.lines import lines_tail
from jobs.logs.source import log_archived_blocks
from jobs.master import dispatch
from jobs.metrics import metrics_last
from jobs.resumes import checkpoints_report
from jobs.serializers import JobSerializer
from jobs.states import FINAL_JOB_STATES, JobState
from kernel.errors import ConflictError, NotFoundError, PaddleCloudError
from paddlecloud_core.layout import is_output, output_path, pfs_home
from paddlecloud_core.placement import (
    AUTO,
    NowherePlaced,
    Option,
    admission_option,
    placement_choose,
    spec_in,
)
from paddlecloud_core.spec import rerun_submission
from pfs.services import pfs_list
from registries.services import registry_list
from scheduling.admission import queue_position
from scheduling.forecasts import job_predictions

from ..context import SESSION_KEY, dashboard_datacenter, dashboard_datacenters
from ..forms import JobSubmitForm
from ..scheduling import admission_shown, prediction_shown, waiting_report
from ..service_errors import form_error_add

PAGE_SIZE = 50
LOG_TAIL = 1000  # lines of a log the page is rendered with (before any script runs)
LOG_KEEP = 20_000  # lines the log panel keeps; the script starts this far back
PACKAGE_DIRS = 200  # directories of the home offered as packages
PACKAGE_DEPTH = 3  # /home/u/jobs/NAME/pkg, where paddlectl uploads a local package
PACKAGE_LISTINGS = 50  # directories listed to find them

ACTIVE = [s for s in JobState.values if s not in FINAL_JOB_STATES]
ENDED = [s for s in JobState.values if s in FINAL_JOB_STATES]
STATE_FILTERS = {"all": [], "active": ACTIVE, "ended": ENDED,
                 **{state: [state] for state in JobState.values}}


def dashboard_page(view):
    """Logged in (else to the login page and back), in the dashboard's datacenter (passed
    to the view); a job that is not the user's is the normal 404 page."""

    @login_required
    @wraps(view)
    def page(request, *args, **kwargs):
        datacenter = dashboard_datacenter(request)
        if datacenter is None:
            return render(request, "dashboard/jobs/no_datacenter.html", status=403)
        try:
            return view(request, datacenter, *args, **kwargs)
        except NotFoundError as exc:  # the styled page, with DEBUG on too
            return render(request, "404.html", {"message": exc.message}, status=404)

    return page


def age(since, now=None) -> str:
    """How long ago, as the list shows it (``static/js/jobs.js`` ticks it the same way)."""
    seconds = max(0, int(((now or timezone.now()) - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# -- list -------------------------------------------------------------------------------------

@dashboard_page
def job_list(request, datacenter):
    chosen = request.GET.get("state") or "all"
    search = request.GET.get("q", "").strip()
    states = STATE_FILTERS.get(chosen)
    if states is None:
        messages.error(request, f"unknown state filter {chosen!r}: showing all jobs")
        chosen, states = "all", []
    sweep = request.GET.get("sweep", "").strip()  # its trials, each a job's row
    jobs = services.job_rows(request.user, datacenter, state=",".join(states), name=search,
                             within={"sweep": sweep} if sweep else None)
    # The page's ids first (from the index, however deep the page), then only those jobs with
    # what each row shows (the queue position is a subquery a row: not for the rows skipped).
    page = Paginator(jobs.values_list("pk", flat=True), PAGE_SIZE).get_page(
        request.GET.get("page"))
    now = timezone.now()
    page_jobs = list(jobs.filter(pk__in=list(page)))
    folded = {} if sweep else fold_rows(page_jobs)  # a sweep's row where its trials are
    plain = [job for job in page_jobs if job.pk not in folded]
    predictions = job_predictions(plain)  # one forecast for the page, not one a row
    rows = []
    for job in page_jobs:
        if (row := folded.get(job.pk)) is not None:
            created = parse_datetime(row["created_at"])
            rows.append(({"created_at": created}, age(created, now), None,
                         _sweep_end(row, now), row))
        else:
            rows.append((job, age(job.created_at, now), queue_position(job),
                         prediction_shown(predictions.get(job.pk), now), None))
    return render(request, "dashboard/jobs/list.html", {
        "page": page, "rows": rows, "sweep": sweep,
        "state": chosen, "states": states, "q": search, "max_compare": MAX_JOBS,
        "filters": [("all", "All"), ("active", "Active"), ("ended", "Ended")]
        + [(state, state.capitalize()) for state in JobState.values],
    })


def _sweep_end(row: dict, now) -> str:
    """When a sweep's row says it ends (``predicted_end``, from its trials' forecasts)."""
    if row["state"] != "running":
        return ""
    end = row["predicted_end"]
    if not end["at"]:
        return f"end unknown: {end['unknown']}"
    at = parse_datetime(end["at"])
    return f"ends ~{at:%Y-%m-%d %H:%M} UTC (in {age(now, at)})"


# -- submit -----------------------------------------------------------------------------------

@dashboard_page
def job_submit(request, datacenter):
    template = _template(request)
    form = JobSubmitForm(
        request.POST or None,
        initial=_rerun_initial(request, datacenter) or _template_initial(template),
        default_image=datacenter.image,
        registries=registry_list(request.user, datacenter).values_list("name", flat=True))
    plan, dry_run = None, "dry_run" in request.POST
    placed = ""
    if request.method == "POST":
        data = form.submission()
        if template is not None:
            data["template"] = template.name
        mistaken = bool(form.errors)  # then the service only checks the rest: all at once
        if request.POST.get("datacenter") == AUTO and not mistaken:
            try:
                datacenter, placed = _placed(request, data)
            except NowherePlaced as exc:
                form.add_error(None, f"datacenter: auto: {exc}")
                mistaken = True
            else:
                data = {**spec_in(data, datacenter.name), "placement": placed}
                request.session[SESSION_KEY] = datacenter.name  # the job's page is there
        try:
            job, spec, objects, admission, _ = services.job_submit(
                request.user, datacenter, {**data, "dry_run": dry_run or mistaken})
        except PaddleCloudError as exc:
            form_error_add(form, exc)
        else:
            if not (mistaken or dry_run):
                messages.success(request, f"job {job.name} submitted"
                                 + (f"; {placed}" if placed else ""))
                return redirect("dashboard:job", name=job.name)
            if not mistaken:
                plan = {"job": services.job_spec_display(spec, datacenter),
                        "replicas": services.job_plan(spec), "objects": objects,
                        "yaml": to_yaml(objects) if objects else "",
                        "admission": admission_shown(admission)}
    return render(request, "dashboard/jobs/submit.html", {
        "form": form, "plan": plan, "plan_asked": dry_run, "placed": placed,
        "auto": request.POST.get("datacenter") == AUTO,
        "templates": services.template_list(), "template": template,
        "package_dirs": package_dirs(request.user, datacenter),
        "home": pfs_home(datacenter.name, request.user.username),
    })


def _placed(request, data: dict):
    """The datacenter ``auto`` chooses among the user's memberships (where the job would start
    first, paddlecloud_core.placement) and why: a dry run in each, as the session may act in
    any of them (paddlectl asks each datacenter's API instead: a token is bound to one)."""
    now, options = timezone.now(), []
    datacenters = dashboard_datacenters(request)
    for datacenter in datacenters:
        try:
            admission = services.job_submit(request.user, datacenter,
                                            {**spec_in(data, datacenter.name),
                                             "dry_run": True})[3]
        except PaddleCloudError as exc:
            options.append(Option(datacenter.name, refused=exc.message))
        else:
            options.append(admission_option(datacenter.name, admission, now))
    chosen, why = placement_choose(options, now)
    return next(dc for dc in datacenters if dc.name == chosen), why


def _template(request):
    """The template the form starts from (``?template=NAME``, then a hidden field)."""
    name = request.POST.get("template") or request.GET.get("template")
    if not name:
        return None
    template = services.template_list().filter(name=name).first()
    if template is None:
        raise NotFoundError(f"there is no template named {name!r}")
    return template


def _template_initial(template) -> dict:
    """The form filled in from a template's values ("Start from template")."""
    if template is None:
        return {}
    initial = dict(template.spec)
    if isinstance(initial.get("env"), dict):
        initial["env"] = "\n".join(f"{key}={value}" for key, value in initial["env"].items())
    return initial


def _rerun_initial(request, datacenter) -> dict:
    """The form filled in from the job of ``?from=JOB`` ("Run again…" on its page): its spec
    as submitted, its package the snapshot it ran and its image pinned to the digest it ran
    (``rerun_submission``), ``rerun_of`` naming it, a new name left to choose."""
    origin = request.GET.get("from")
    if request.method == "POST" or not origin:
        return {}
    job = services.job_get(request.user, datacenter, origin)
    initial = rerun_submission(JobSerializer(job, context={"predictions": {}}).data)
    initial.pop("name", None)
    initial["env"] = "\n".join(f"{key}={value}" for key, value in job.env.items())
    return {**initial, "rerun_of": job.name}


def package_dirs(user, datacenter) -> list[str]:
    """Directories of the user's home that can be trainer packages, nearest first (job
    outputs and hidden directories left out), within a bounded number of listings."""
    try:
        target, _, entries = pfs_list(user, datacenter, pfs_home(datacenter.name, user.username))
    except (PaddleCloudError, OSError):
        return []
    storage, found, listings = target.storage, [], 1

    def candidates(children):
        return [e for e in children if e.type == "dir" and not e.name.startswith(".")
                and not is_output(e.name)]

    queue = candidates(entries)
    while queue and len(found) < PACKAGE_DIRS:
        entry = queue.pop(0)
        found.append(storage.display(entry.rel))
        if len(entry.rel) < PACKAGE_DEPTH and listings < PACKAGE_LISTINGS:
            listings += 1
            try:
                queue.extend(candidates(storage.listdir(entry.rel)))
            except (PaddleCloudError, OSError):
                continue
    return found


# -- detail -----------------------------------------------------------------------------------

@dashboard_page
def job_detail(request, datacenter, name: str):
    job = services.job_get(request.user, datacenter, name)
    prefetch_related_objects([job], "replicas")  # one query for the table and job_worker
    workers = list(job.replicas.all())
    try:
        shown = services.job_worker(job, request.GET.get("worker"))
    except NotFoundError:
        shown = services.job_worker(job, None)
    metrics_replica = services.job_worker(job, None, building=False)
    log_error = ""
    try:
        first, lines = lines_tail(log_file(job, shown), LOG_TAIL)
    except PaddleCloudError as exc:  # a link or a FIFO where the log is: not read
        first, lines, log_error = 0, [], exc.message
    waiting, prediction = waiting_report(job)  # one forecast, for the box and the spec
    spec = JobSerializer(job, context={"predictions": {job.pk: prediction} if prediction
                                       else {}}).data
    events, older_events = services.job_events_shown(job)
    return render(request, "dashboard/jobs/detail.html", {
        "job": job, "spec": spec, "queue_position": queue_position(job),
        "waiting": waiting, "prediction": waiting["prediction"] if waiting else None,
        "workers": workers, "events": events, "older_events": older_events,
        "active": job.state not in FINAL_JOB_STATES,
        # Warned that its budget is spent: the warning, while it runs on in its grace.
        "budget_warning": job.events.filter(time=job.budget_warned_at).values_list(
            "reason", flat=True).first() if job.budget_warned_at
        and job.state not in FINAL_JOB_STATES else None,
        "questions": [question(job, "kill"), question(job, "delete")],
        "log_workers": ([job.build] if job.build_id else []) + workers,
        "log_worker": shown.name, "log_first": first, "log_lines": lines,
        "log_error": log_error,
        "log_from": max(0, first + len(lines) - LOG_KEEP),
        "runs_images": backend_for(datacenter).runs_images,
        "metrics_worker": metrics_replica.name,
        "metrics_last": metrics_last(job, metrics_replica),
        "dataset": dispatch.tasks_report(job) if job.dataset else None,
        "checkpoints": _checkpoints(job),
    })


def _checkpoints(job) -> dict:
    """The job's checkpoints as its page lists them, and the runs that resumed from one."""
    report = checkpoints_report(job)
    return {"directory": report["directory"],
            "checkpoints": [{**c, "saved": parse_datetime(c["time"]) if c["time"] else None}
                            for c in report["checkpoints"]],
            "resumed": [r for r in report["runs"] if r["resumed_from"] is not None]}


@dashboard_page
def job_events(request, datacenter, name: str):
    """A job's events before one (the oldest its page shows), EVENTS_SHOWN at a time: what the
    job's page leaves out when its job has many."""
    job = services.job_get(request.user, datacenter, name)
    events, older = services.job_events_shown(job, request.GET.get("before", ""))
    return render(request, "dashboard/jobs/events.html",
                  {"job": job, "events": events, "older_events": older})


# -- kill, delete, log download ---------------------------------------------------------------

@require_http_methods(["GET", "POST"])
@dashboard_page
def job_kill(request, datacenter, name: str):
    return _confirmed(request, datacenter, name, "kill")


@require_http_methods(["GET", "POST"])
@dashboard_page
def job_delete(request, datacenter, name: str):
    return _confirmed(request, datacenter, name, "delete")


def _confirmed(request, datacenter, name: str, verb: str):
    """GET: the confirmation page (without scripts; the job page asks in a dialog).
    POST: do it; a job that has ended (kill) or not yet (delete) says why on the job page."""
    job = services.job_get(request.user, datacenter, name)
    if request.method == "GET":
        return render(request, "dashboard/confirm_action.html", question(job, verb))
    try:
        if verb == "kill":
            services.job_kill(request.user, datacenter, name)
        else:
            services.job_delete(request.user, datacenter, name)
    except ConflictError as exc:
        messages.error(request, exc.message)
        return redirect("dashboard:job", name=name)
    if verb == "kill":
        messages.success(request, f"job {name} killed: its workers are being stopped")
        return redirect("dashboard:job", name=name)
    messages.success(request, f"job {name} deleted (its output stays in PFS)")
    return redirect("dashboard:jobs")


def question(job, verb: str) -> dict:
    """What is asked before a kill or a delete: on the job page's dialog and on the
    confirmation page (templates/dashboard/confirm_action.html)."""
    output = output_path(pfs_home(job.datacenter.name, job.owner.username), job.name)
    if verb == "kill":
        message = (f"Every worker is stopped and the job ends as killed. Its output and logs "
                   f"stay in {output}.")
    else:
        message = (f"The job and its events are removed from your history. Its output and "
                   f"logs stay in {output}.")
    return {"verb": verb, "title": f"{verb.capitalize()} job {job.name}?", "message": message,
            "button": f"{verb.capitalize()} {job.name}", "fields": [],
            "action": reverse(f"dashboard:job-{verb}", args=[job.name]),
            "cancel_url": reverse("dashboard:job", args=[job.name])}


@dashboard_page
def job_log_download(request, datacenter, name: str, worker: str):
    """A worker's whole archived log as an attachment, streamed block by block (an async
    iterator: the ASGI server would read a sync one into memory first)."""
    job = services.job_get(request.user, datacenter, name)
    replica = services.job_worker(job, worker)
    try:
        blocks = log_archived_blocks(job, replica)
    except PaddleCloudError as exc:  # a link or a FIFO in its place: refused, nothing sent
        return HttpResponse(exc.message, status=exc.status,
                            content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(blocks, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=True, filename=f"{job.name}-{replica.name}.log")
    return response
