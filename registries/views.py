"""The registries API: validate, call a service, serialize (never the password)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer

from . import services
from .serializers import RegistrySerializer, RegistryWriteSerializer

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409)}


class RegistryListView(DatacenterAPIView):
    @extend_schema(responses={200: RegistrySerializer(many=True), **ERRORS},
                   summary="Your registry credentials in this datacenter")
    def get(self, request):
        registries = services.registry_list(request.user, self.datacenter)
        return Response(RegistrySerializer(registries.select_related("datacenter"),
                                           many=True).data)

    @extend_schema(request=RegistryWriteSerializer,
                   responses={201: RegistrySerializer, **ERRORS},
                   summary="Add registry credentials (paddlectl registry)")
    def post(self, request):
        registry = services.registry_create(request.user, self.datacenter, request.data)
        return Response(RegistrySerializer(registry).data, status=status.HTTP_201_CREATED)


class RegistryDetailView(DatacenterAPIView):
    @extend_schema(responses={200: RegistrySerializer, **ERRORS}, summary="One credential")
    def get(self, request, name: str):
        registry = services.registry_get(request.user, self.datacenter, name)
        return Response(RegistrySerializer(registry).data)

    @extend_schema(request=RegistryWriteSerializer(partial=True),
                   responses={200: RegistrySerializer, **ERRORS},
                   summary="Change the server, username or password")
    def patch(self, request, name: str):
        registry = services.registry_update(request.user, self.datacenter, name, request.data)
        return Response(RegistrySerializer(registry).data)

    @extend_schema(responses={204: None, **ERRORS},
                   summary="Delete credentials (and their pull secret on the cluster)")
    def delete(self, request, name: str):
        services.registry_delete(request.user, self.datacenter, name)
        return Response(status=status.HTTP_204_NO_CONTENT)
