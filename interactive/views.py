"""The interactive API: a browser route to a port of a running job (``services.route_open``).

``POST /api/v1/jobs/<name>/ports/<port>/open`` (``worker``: trainer-0 by default; ``path``: where
to land, / by default) answers the URL that enters the route, with a one-time ticket: open it
in a browser within a minute. ``GET`` the same URL (a link on the job's page) sends the
browser there.
"""

from __future__ import annotations

from django.shortcuts import redirect
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer
from jobs.services import job_get, job_worker

from . import services

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

