"""The interactive API: a browser route to a port of a running job."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer
from kernel.api import flag_parameter, query_flag, validated

from . import sessions
from .serializers import SessionKeepSerializer, SessionSerializer, SessionStartSerializer


class PortOpenView(APIView):
    """POST: a route to the port (``interactive.services.route_open``); answers its enter URL."""

    def post(self, request, name: str, port: int):
        return Response({"detail": "Not found."}, status=404)


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
