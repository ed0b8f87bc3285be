"""The sessions API (``sessions``): start, list, look at, stop and keep notebooks and VisualDL."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer
from kernel.api import flag_parameter, query_flag, validated
from kernel.errors import ValidationError

from . import sessions, visualdl
from .serializers import SessionKeepSerializer, SessionSerializer, SessionStartSerializer

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409)}


class SessionListView(DatacenterAPIView):
    @extend_schema(parameters=[flag_parameter("all", "also the sessions that have ended"),
                               OpenApiParameter("kind", str, description="notebook or visualdl")],
                   responses={200: SessionSerializer(many=True), **ERRORS},
                   summary="Your sessions (notebooks, VisualDL), newest first")
    def get(self, request):
        found = sessions.session_list(request.user, self.datacenter,
                                      kind=request.GET.get("kind") or None,
                                      ended=query_flag(request, "all"))
        return Response(SessionSerializer(found, many=True).data)

    @extend_schema(request=SessionStartSerializer,
                   responses={201: SessionSerializer, 200: SessionSerializer, **ERRORS},
                   summary="Start a session: a job of yours that serves a notebook or VisualDL")
    def post(self, request):
        data = dict(validated(SessionStartSerializer, request))
        kind = data.pop("kind")
        if kind == visualdl.KIND:
            # The one VisualDL of the user's for these jobs (reused), sized by the portal.
            if given := [field for field, value in data.items()
                         if field != "jobs" and value not in (None, "")]:
                raise ValidationError.for_field(
                    given[0], "not chosen for a VisualDL: it is sized and stopped by the "
                              "portal's settings (PADDLECLOUD_VISUALDL_*); give its jobs only")
            session, started = visualdl.visualdl_open(request.user, self.datacenter,
                                                      data.get("jobs") or [])
            return Response(SessionSerializer(session).data,
                            status=status.HTTP_201_CREATED if started else status.HTTP_200_OK)
        session = sessions.session_start(request.user, self.datacenter, kind, **data)
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetailView(DatacenterAPIView):
    @extend_schema(responses={200: SessionSerializer, **ERRORS}, summary="One session")
    def get(self, request, name: str):
        return Response(SessionSerializer(
            sessions.session_get(request.user, self.datacenter, name)).data)


class SessionStopView(DatacenterAPIView):
    @extend_schema(request=None, responses={200: SessionSerializer, **ERRORS},
                   summary="Stop a session (its job is killed)")
    def post(self, request, name: str):
        session = sessions.session_stop(request.user, self.datacenter, name)
        session.job.refresh_from_db()
        return Response(SessionSerializer(session).data)


class SessionKeepView(DatacenterAPIView):
    @extend_schema(request=SessionKeepSerializer, responses={200: SessionSerializer, **ERRORS},
                   summary="Keep a session alive however long idle, or not (keep: false)")
    def post(self, request, name: str):
        keep = validated(SessionKeepSerializer, request)["keep"]
        return Response(SessionSerializer(
            sessions.session_keep(request.user, self.datacenter, name, keep)).data)
