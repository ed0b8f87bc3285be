"""The sweeps API: validate, call a service, serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer

from . import services
from .serializers import SweepSerializer, SweepWriteSerializer

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409)}


class SweepListView(DatacenterAPIView):
    @extend_schema(responses={200: SweepSerializer(many=True), **ERRORS},
                   summary="Your sweeps, newest first, with their progress")
    def get(self, request):
        return Response(SweepSerializer(services.sweep_list(request.user, self.datacenter),
                                        many=True).data)

    @extend_schema(request=SweepWriteSerializer, responses={201: SweepSerializer, **ERRORS},
                   summary="Start a sweep: a base job and a search space (paddlectl sweep)")
    def post(self, request):
        sweep = services.sweep_submit(request.user, self.datacenter, request.data)
        return Response(SweepSerializer(services.sweep_report(sweep)).data,
                        status=status.HTTP_201_CREATED)


class SweepDetailView(DatacenterAPIView):
    @extend_schema(responses={200: SweepSerializer, **ERRORS}, summary="One sweep")
    def get(self, request, name: str):
        return Response(SweepSerializer(services.sweep_report(
            services.sweep_get(request.user, self.datacenter, name))).data)

    @extend_schema(responses={204: None, **ERRORS},
                   summary="Delete an ended sweep and its trials' jobs from history")
    def delete(self, request, name: str):
        services.sweep_delete(request.user, self.datacenter, name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SweepKillView(DatacenterAPIView):
    @extend_schema(request=None, responses={200: SweepSerializer, **ERRORS},
                   summary="Kill a sweep: every trial is stopped, no more are submitted")
    def post(self, request, name: str):
        sweep = services.sweep_kill(request.user, self.datacenter, name)
        return Response(SweepSerializer(services.sweep_report(sweep)).data)
