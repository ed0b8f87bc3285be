"""The jobs API: validate, call a service, serialize. Nothing here talks to a backend."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer
from kernel.api import (
    FORMAT_PARAMETER,
    CsvExport,
    flag_parameter,
    query_flag,
    query_time,
    query_whole,
    time_parameter,
)
from kernel.errors import ValidationError
from paddlecloud_core.logcursor import RULE, log_cursor
from scheduling.admission import quota_report
from scheduling.budgets import budget_report
from scheduling.forecasts import job_predictions
from scheduling.reports import COLUMNS as USAGE_COLUMNS
from scheduling.reports import usage_report

from . import services
from .compare import (
    AXES,
    DEFAULT_POINTS,
    MAX_JOBS,
    MAX_RECORDS,
    MAX_SMOOTHING,
    compare_options,
    jobs_compare,
)
from .curves import KEPT
from .documents import to_yaml
from .folds import FOLDS, fold_rows
from .logs.lines import line_number
from .logs.source import build_log_blocks, log_blocks
from .master import dispatch
from .metrics import metrics_get
from .resumes import checkpoints_report
from .serializers import (
    BudgetSerializer,
    BuildRequestSerializer,
    BuildSerializer,
    DryRunSerializer,
    EventSerializer,
    GroupJobSerializer,
    GroupSerializer,
    JobDetailSerializer,
    JobMetricsSerializer,
    JobRowSerializer,
    JobSerializer,
    JobSubmitSerializer,
    QuotaUseSerializer,
    WorkerSerializer,
)
from .services import job_plan, job_spec_display

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409)}
MAX_TAIL = 100_000
LOG_OFFSET = "Log-Offset"  # the header: where an answer begins (paddlecloud_core.logcursor)


class JobCursor(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500


def paged(serializer_class) -> serializers.Serializer:
    """A cursor page of ``serializer_class``'s objects, as the schema shows it (the view names
    its operation ``…_list`` itself: drf-spectacular takes a list for a list alone)."""
    name = serializer_class.__name__.removesuffix("Serializer")
    return inline_serializer(f"Paged{name}", {
        "next": serializers.URLField(allow_null=True, help_text="the next page; null: the last"),
        "previous": serializers.URLField(allow_null=True),
        "results": serializer_class(many=True)})


class JobListView(DatacenterAPIView):
    @extend_schema(parameters=[
        OpenApiParameter("state", str, description="comma-separated states (a sweep's row: "
                         "when one of its trials is in one of them)"),
        OpenApiParameter("name", str, description="part of the name (a sweep's row: of one "
                         "of its trials' names, NAME-N)"),
        OpenApiParameter("sweep", str, description="only the trials of your sweep NAME, each "
                         "a job's row"),
        flag_parameter("unfolded", "every job its own row, a sweep's trials too"),
        OpenApiParameter("limit", int), OpenApiParameter("cursor", str)],
        responses={200: paged(JobRowSerializer), **ERRORS}, operation_id="v1_jobs_list",
        summary='Your jobs, newest first, each sweep\'s trials folded into one row of the '
                'sweep ("kind": "sweep"; its fields as GET /sweeps/NAME/ shows them, without '
                'its spec, and "url", "trials_url"), where its first trial would be')
    def get(self, request):
        within = {kind: request.query_params[kind] for kind in FOLDS
                  if kind in request.query_params}
        unfolded = query_flag(request, "unfolded")
        jobs = services.job_rows(request.user, self.datacenter,
                                 state=request.query_params.get("state"),
                                 name=request.query_params.get("name"),
                                 unfolded=unfolded, within=within)
        paginator = JobCursor()
        page = paginator.paginate_queryset(jobs, request, view=self)
        folded = {} if unfolded or within else fold_rows(page)
        plain = [job for job in page if job.pk not in folded]
        shown = dict(zip((job.pk for job in plain), JobRowSerializer(
            plain, many=True, context={"predictions": job_predictions(plain)}).data,
            strict=True))
        return paginator.get_paginated_response(
            [folded.get(job.pk) or shown[job.pk] for job in page])

    @extend_schema(request=JobSubmitSerializer,
                   parameters=[OpenApiParameter(
                       services.SUBMIT_KEY_HEADER, str, OpenApiParameter.HEADER,
                       description=f"{services.SUBMIT_KEY_RULE}: the same key again within 24 "
                       "hours answers with the job the first request made (header "
                       "Idempotent-Replayed: true) and makes none; with another request, 422")],
                   responses={201: JobSerializer, 200: DryRunSerializer,
                              **ERRORS, 422: ErrorSerializer},
                   summary="Submit a job (or, with dry_run, check it and see what it would start)")
    def post(self, request):
        if not isinstance(request.data, dict):
            raise ValidationError("the job must be a JSON object")
        key = services.submit_key_check(request.headers.get(services.SUBMIT_KEY_HEADER))
        if key is not None and not request.data.get("dry_run"):
            body, replayed = services.job_submit_once(
                request.user, self.datacenter, request.data, key,
                answer=lambda job: JobSerializer(job).data)
            return Response(body, status=status.HTTP_201_CREATED,
                            headers={"Idempotent-Replayed": "true"} if replayed else None)
        job, spec, objects, admission, digest = services.job_submit(
            request.user, self.datacenter, request.data)
        if job is None:
            shown = job_spec_display(spec, self.datacenter)
            if digest:  # a re-run's: its package as it is now, to compare with its origin's
                shown["package_digest"] = digest
            return Response({"dry_run": True, "job": shown,
                             "replicas": job_plan(spec), "admission": admission,
                             "objects": objects, "yaml": to_yaml(objects) if objects else ""})
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)


class JobDetailView(DatacenterAPIView):
    @extend_schema(responses={200: JobDetailSerializer, **ERRORS}, summary="One job")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        return Response(JobDetailSerializer(job).data)

    @extend_schema(responses={204: None, **ERRORS},
                   summary="Delete an ended job from history (its output stays in PFS)")
    def delete(self, request, name: str):
        services.job_delete(request.user, self.datacenter, name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobKillView(DatacenterAPIView):
    @extend_schema(request=None, responses={200: JobSerializer, **ERRORS},
                   summary="Kill a job: every replica is stopped")
    def post(self, request, name: str):
        job = services.job_kill(request.user, self.datacenter, name)
        return Response(JobSerializer(job).data)


class JobWorkersView(DatacenterAPIView):
    @extend_schema(responses={200: WorkerSerializer(many=True), **ERRORS},
                   summary="The job's workers (parameter servers and trainers)")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        return Response(WorkerSerializer(job.replicas.order_by("role", "index"), many=True).data)


class EventCursor(JobCursor):
    """A job's events, oldest first, in pages (a job may have many: its master's)."""

    ordering = ("time", "id")
    page_size = 100
    max_page_size = 1000


class JobEventsView(DatacenterAPIView):
    @extend_schema(parameters=[OpenApiParameter("limit", int), OpenApiParameter("cursor", str)],
                   responses={200: paged(EventSerializer), **ERRORS},
                   operation_id="v1_jobs_events_list",
                   summary="Every state change of the job and its workers, oldest first, in "
                           "pages (follow next)")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        paginator = EventCursor()
        page = paginator.paginate_queryset(job.events.select_related("replica"), request,
                                           view=self)
        return paginator.get_paginated_response(EventSerializer(page, many=True).data)


class BudgetsView(DatacenterAPIView):
    @extend_schema(responses={200: BudgetSerializer(many=True), **ERRORS},
                   summary="Your budgets and your group's in this datacenter: GPU-hours and "
                           "CPU-hours per window, used, left, and the use over the window")
    def get(self, request):
        return Response(budget_report(request.user, self.datacenter))


class UsageView(CsvExport, DatacenterAPIView):
    csv_columns = USAGE_COLUMNS

    @extend_schema(parameters=[
        time_parameter("since", "from the period holding this (default: 30 days ago)"),
        time_parameter("until", "to this (default: now)"),
        OpenApiParameter("by", str, enum=["day", "week", "month"],
                         description="the periods: calendar days, weeks from Monday or "
                                     "months, UTC (default: day)"),
        OpenApiParameter("per", str, enum=["user", "group", "datacenter"],
                         description="a row per user (default), group or the datacenter, "
                                     "each period; group and datacenter: leads and admins"),
        OpenApiParameter("group", str, description="only this group's members (its leads "
                                                   "and the admins)"),
        OpenApiParameter("user", str, description="only this user"), FORMAT_PARAMETER,
    ], responses={200: OpenApiTypes.OBJECT, (200, "text/csv"): OpenApiTypes.STR, **ERRORS},
        summary="Usage in this datacenter: GPU-hours, CPU-hours, jobs and the median wait, "
                "period by period (summed as budgets are); yours, your group's as its lead, "
                "everyone's as an admin")
    def get(self, request):
        params = request.query_params
        report = usage_report(request.user, self.datacenter, since=query_time(request, "since"),
                              until=query_time(request, "until"), by=params.get("by", "day"),
                              per=params.get("per", "user"), group=params.get("group"),
                              username=params.get("user"))
        if request.accepted_renderer.format == "csv":
            return Response(report["rows"])
        return Response(report)


class GroupView(DatacenterAPIView):
    @extend_schema(responses={200: GroupSerializer, **ERRORS},
                   summary="Your group in this datacenter: members, weight, quota and its use")
    def get(self, request):
        return Response(services.group_report(request.user, self.datacenter))


class GroupJobsView(DatacenterAPIView):
    @extend_schema(parameters=[
        OpenApiParameter("state", str, description="comma-separated states"),
        OpenApiParameter("name", str, description="part of the name"),
        OpenApiParameter("limit", int), OpenApiParameter("cursor", str)],
        responses={200: paged(GroupJobSerializer), **ERRORS}, operation_id="v1_group_jobs_list",
        summary="The jobs of your group's members, newest first (to look at: each changes "
                "only its owner's)")
    def get(self, request):
        jobs = services.group_jobs(request.user, self.datacenter,
                                   state=request.query_params.get("state"),
                                   name=request.query_params.get("name"))
        paginator = JobCursor()
        page = paginator.paginate_queryset(jobs, request, view=self)
        return paginator.get_paginated_response(GroupJobSerializer(
            page, many=True, context={"predictions": job_predictions(page)}).data)


class QuotaView(DatacenterAPIView):
    @extend_schema(responses={200: QuotaUseSerializer, **ERRORS},
                   summary="Your quota in this datacenter: each resource's limit and use")
    def get(self, request):
        return Response(quota_report(request.user, self.datacenter))


class JobLogsView(DatacenterAPIView):
    @extend_schema(parameters=[
        OpenApiParameter("worker", str, description="e.g. trainer-0 (default), pserver-1"),
        OpenApiParameter("tail", int, description="only the last N lines"),
        OpenApiParameter("offset", str, description=f"from there on ({LOG_OFFSET}: what it "
                         "said, advanced by the bytes read since): a follower going on "
                         "after a lost connection"),
        flag_parameter("follow", "keep streaming until the worker ends")],
        responses={(200, "text/plain"): OpenApiTypes.STR, **ERRORS},
        summary="A worker's log (kept after the job ends); header Log-Offset: where it "
                "begins (a byte of its file; with a pod's uid for a pod's log as it runs)")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        replica = services.job_worker(job, request.query_params.get("worker"))
        tail = query_whole(request, "tail", 0, MAX_TAIL, None)
        offset = request.GET.get("offset")
        if offset is not None and (offset := log_cursor(offset)) is None:
            raise ValidationError.for_field("offset", RULE)
        start, blocks = log_blocks(job, replica, follow=query_flag(request, "follow"),
                                   tail=tail, offset=offset)
        response = _streaming(blocks)
        if start is not None:
            response[LOG_OFFSET] = str(start)
        return response


class BuildListView(DatacenterAPIView):
    @extend_schema(request=BuildRequestSerializer, responses={202: BuildSerializer, **ERRORS},
                   summary="Build a runtime image from a trainer package and push it "
                           "(paddlectl build); follow it at builds/{id}/logs?follow=1")
    def post(self, request):
        build = services.build_create(request.user, self.datacenter, request.data)
        return Response(BuildSerializer(build).data, status=status.HTTP_202_ACCEPTED)


class BuildDetailView(DatacenterAPIView):
    @extend_schema(responses={200: BuildSerializer, **ERRORS}, summary="One build")
    def get(self, request, uid):
        return Response(BuildSerializer(services.build_get(request.user, self.datacenter,
                                                           uid)).data)


class BuildLogsView(DatacenterAPIView):
    @extend_schema(parameters=[flag_parameter("follow", "keep streaming until it ends")],
                   responses={(200, "text/plain"): OpenApiTypes.STR, **ERRORS},
                   summary="A build's log")
    def get(self, request, uid):
        build = services.build_get(request.user, self.datacenter, uid)
        return _streaming(build_log_blocks(build, follow=query_flag(request, "follow")))


class JobMetricsView(DatacenterAPIView):
    @extend_schema(parameters=[
        OpenApiParameter("worker", str, description="e.g. trainer-0 (default), pserver-1"),
        OpenApiParameter("from", int, description="the line to start from (an answer's next)")],
        responses={200: JobMetricsSerializer, **ERRORS},
        summary="What a worker reported with paddlecloud_sdk.report(step=…, **metrics)")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        replica = services.job_worker(job, request.query_params.get("worker"))
        first = line_number(request.query_params.get("from", "0"))
        return Response(metrics_get(job, replica, first))


class TemplateListView(DatacenterAPIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary='The templates you may submit from ("template": NAME in a '
                           'submission): [{"name", "description", "spec", "locked", '
                           '"limits"}]')
    def get(self, request):
        return Response([{"name": t.name, "description": t.description, "spec": t.spec,
                          "locked": t.locked, "limits": t.limits}
                         for t in services.template_list()])


class CompareView(DatacenterAPIView):
    @extend_schema(parameters=[
        OpenApiParameter("jobs", str, required=True,
                         description=f"1 to {MAX_JOBS} of your jobs' names, comma-separated"),
        OpenApiParameter("metric", str, description="also each job's curve of this metric "
                                                    "(series)"),
        OpenApiParameter("x", str, enum=list(AXES), default="step",
                         description="the curve along step, or along time (then without the "
                                     "points that have no time); it is thinned along it"),
        OpenApiParameter("smoothing", float, default=0,
                         description=f"0 (none) to {MAX_SMOOTHING}: also each curve smoothed "
                                     "(smoothed), the moving average of every point up to "
                                     "each, taken before thinning"),
        OpenApiParameter("max_points", int, default=DEFAULT_POINTS,
                         description=f"at most this many points a curve ({KEPT} to "
                                     f"{MAX_RECORDS}): a longer one is thinned to each "
                                     "slice of x's first, lowest, highest and last point; "
                                     "the table is always from every point")],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
        summary='Jobs side by side: {"jobs", "metrics", "table": a row per job and metric '
                '(final, best, their steps, goal min or max, points: from every point), '
                '"diff": what differs in their specs and environments (secret-looking '
                'variables hidden), "metric", "x", "smoothing", "max_points", "series": '
                '[{"job", "points": how many it reported, "step", "time", "value", '
                '"smoothed": with smoothing}] (thinned to max_points, values to 7 '
                'significant digits)}')
    def get(self, request):
        return Response(jobs_compare(request.user, self.datacenter,
                                     request.query_params.getlist("jobs"),
                                     request.query_params.get("metric"),
                                     **compare_options(request.query_params)))


class JobTasksView(DatacenterAPIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary="The job's master: each pass's tasks by state, and the tasks of "
                           "the current (or last) pass with who holds them")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        return Response(dispatch.tasks_report(job))


class JobCheckpointsView(DatacenterAPIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary="The job's checkpoints (step, pass, time, size, complete or why "
                           "not), newest first, each with the runs that resumed from it; and "
                           "its trainer 0's runs: the step each resumed from, what each that "
                           "ended by a restart lost")
    def get(self, request, name: str):
        job = services.job_get(request.user, self.datacenter, name)
        return Response(checkpoints_report(job))


# --- the master's calls: a job's trainers, with the job's master token --------------------------

class MasterView(APIView):
    """Called by a job's replicas with its master token (``Authorization: Bearer``), not by
    users: no session, no user token, no throttling (a job's trainers call often). Under the
    ASGI app ``jobs.master.app`` answers these paths before Django; these views answer them
    elsewhere (WSGI, the test client), with the same ``dispatch.master_call``."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []

    def call(self, request, uid, action: str, task_id: int | None = None) -> Response:
        token = dispatch.bearer(request.META.get("HTTP_AUTHORIZATION"))
        return Response(dispatch.master_call(uid, token, action, task_id, request.data))


class MasterNextView(MasterView):
    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary="A trainer's next task (docs/master.md)")
    def post(self, request, uid):
        return self.call(request, uid, "next")


class MasterPositionView(MasterView):
    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary="Where the pass is, for a checkpoint (docs/master.md)")
    def post(self, request, uid):
        return self.call(request, uid, "position")


class MasterResumeView(MasterView):
    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary="Put the pass back where a checkpoint left it (docs/master.md)")
    def post(self, request, uid):
        return self.call(request, uid, "resume")


class MasterTaskView(MasterView):
    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT, **ERRORS},
                   summary="Renew a task's lease, report it done or failed, or give it back")
    def post(self, request, uid, task_id: int, action: str):
        return self.call(request, uid, action, task_id)


def _streaming(chunks) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # no proxy buffering: lines as they come
    return response
