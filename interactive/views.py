"""The interactive API: a browser route to a port of a running job (``services.route_open``).

``POST /api/v1/jobs/<name>/ports/<port>/open`` (``worker``: trainer-0 by default; ``path``: where
to land, / by default) answers the URL that enters the route, with a one-time ticket: open it
in a browser within a minute. ``GET`` the same URL (a link on the job's page) sends the
browser there.
"""

from __future__ import annotations

from django.shortcuts import redirect
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer
from jobs.services import job_get, job_worker
from kernel.api import flag_parameter, query_flag, validated

from . import services, sessions
from .serializers import SessionKeepSerializer, SessionSerializer, SessionStartSerializer

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409)}


class PortOpenView(DatacenterAPIView):
    def _enter(self, request, name: str, port: int, query) -> str:
        job = job_get(request.user, self.datacenter, name)
        services.job_reachable(request.user, job)
        replica = job_worker(job, query.get("worker") or None, building=False)
        route = services.route_open(request.user, job, port=port, replica=replica,
                                    label=f"{job.name} {replica.name}:{port}")
        return services.route_enter_url(route, request, query.get("path") or "/")

    @extend_schema(
        request=inline_serializer("PortOpen", {
            "worker": serializers.CharField(required=False, help_text="trainer-0 by default"),
            "path": serializers.CharField(required=False, help_text="where to land: /")}),
        responses={200: inline_serializer("PortOpened", {
            "url": serializers.CharField(help_text="opens the port in a browser, once, "
                                                   "within a minute")}), **ERRORS},
        summary="Open a port of a running job in the browser (its owner only)")
    def post(self, request, name: str, port: int):
        return Response({"url": self._enter(request, name, port, request.data)})

    @extend_schema(
        parameters=[OpenApiParameter("worker", str, description="trainer-0 by default"),
                    OpenApiParameter("path", str, description="where to land: /")],
        responses={302: None, **ERRORS},
        summary="Send the browser to a port of a running job (its owner only)")
    def get(self, request, name: str, port: int):
        return redirect(self._enter(request, name, port, request.query_params))


# --- sessions ------------------------------------------------------------------------------------

SESSION_ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409)}


class SessionListView(DatacenterAPIView):
    @extend_schema(parameters=[flag_parameter("all", "also the sessions that have ended"),
                               OpenApiParameter("kind", str, description="notebook or visualdl")],
                   responses={200: SessionSerializer(many=True), **SESSION_ERRORS},
                   summary="Your sessions (notebooks, VisualDL), newest first")
    def get(self, request):
        found = sessions.session_list(request.user, self.datacenter,
                                      kind=request.GET.get("kind") or None,
                                      ended=query_flag(request, "all"))
        return Response(SessionSerializer(found, many=True).data)

    @extend_schema(request=SessionStartSerializer,
                   responses={201: SessionSerializer, **SESSION_ERRORS},
                   summary="Start a session: a job of yours that serves a notebook or VisualDL")
    def post(self, request):
        data = dict(validated(SessionStartSerializer, request))
        session = sessions.session_start(request.user, self.datacenter, data.pop("kind"),
                                         **data)
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetailView(DatacenterAPIView):
    @extend_schema(responses={200: SessionSerializer, **SESSION_ERRORS}, summary="One session")
    def get(self, request, name: str):
        return Response(SessionSerializer(
            sessions.session_get(request.user, self.datacenter, name)).data)


class SessionStopView(DatacenterAPIView):
    @extend_schema(request=None, responses={200: SessionSerializer, **SESSION_ERRORS},
                   summary="Stop a session (its job is killed)")
    def post(self, request, name: str):
        session = sessions.session_stop(request.user, self.datacenter, name)
        session.job.refresh_from_db()
        return Response(SessionSerializer(session).data)


class SessionKeepView(DatacenterAPIView):
    @extend_schema(request=SessionKeepSerializer,
                   responses={200: SessionSerializer, **SESSION_ERRORS},
                   summary="Keep a session alive however long idle, or not (keep: false)")
    def post(self, request, name: str):
        keep = validated(SessionKeepSerializer, request)["keep"]
        return Response(SessionSerializer(
            sessions.session_keep(request.user, self.datacenter, name, keep)).data)
