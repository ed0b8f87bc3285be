"""The PFS API for everything but the bytes (those are ``pfs.transfer``): validate, call a
service, serialize."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer
from kernel import metrics
from kernel.api import (
    flag_parameter,
    query_flag,
    query_whole,
    validated,
)
from kernel.errors import ValidationError
from paddlecloud_core.quantity import format_bytes

from . import services
from .front import FRONT_SCOPE
from .serializers import (
    EntrySerializer,
    ListingSerializer,
    MkdirSerializer,
    RemovedSerializer,
    UploadCreateSerializer,
    UploadSerializer,
    UsageSerializer,
)

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404, 409, 413)}
PATH = OpenApiParameter("path", str, required=True,
                        description="/pfs/{datacenter}/home/{user}/… or /pfs/{datacenter}/public/…")
MAX_LIMIT = 10_000  # entries in one answer, when a client asks for pages
MAX_OFFSET = 10**9
PAGE = [OpenApiParameter("limit", int, description=f"at most this many entries (1 to "
                                                   f"{MAX_LIMIT}); all when absent"),
        OpenApiParameter("offset", int, description="skip this many entries first (with "
                                                    "next_offset of the answer before)")]


def _query_path(request) -> str:
    path = request.query_params.get("path")
    if not path:
        raise ValidationError.for_field("path", "required: a PFS path such as "
                                                "/pfs/datacenter1/home/alice/data")
    return path


class FilesView(DatacenterAPIView):
    @extend_schema(parameters=[PATH, flag_parameter("recursive", "every entry below, not "
                                                                 "only the children"), *PAGE],
                   responses={200: ListingSerializer, **ERRORS},
                   summary="List a directory (or show a file), like ls; a page of it when "
                           "asked")
    def get(self, request):
        limit = query_whole(request, "limit", 1, MAX_LIMIT, None)
        offset = query_whole(request, "offset", 0, MAX_OFFSET, 0)
        metrics.pfs_operation("list")
        target, entry, entries = services.pfs_list(
            request.user, self.datacenter, _query_path(request),
            recursive=query_flag(request, "recursive"))
        end = len(entries) if limit is None else min(offset + limit, len(entries))
        base = len(target.rel)
        listing = [services.entry_json(target.child(e.rel), e, name="/".join(e.rel[base:])
                                       or e.name) for e in entries[offset:end]]
        return Response({"path": str(target.path), "type": entry.type, "entries": listing,
                         "count": len(entries),
                         "next_offset": end if end < len(entries) else None})

    @extend_schema(parameters=[PATH, flag_parameter("recursive", "a directory with all it "
                                                                 "holds")],
                   responses={200: RemovedSerializer, **ERRORS},
                   summary="Remove a file, link or directory (recursive only when asked)")
    def delete(self, request):
        metrics.pfs_operation("remove")
        target, freed = services.pfs_remove(
            request.user, self.datacenter, _query_path(request),
            recursive=query_flag(request, "recursive"))
        return Response({"path": str(target.path), "freed": freed})


class StatView(DatacenterAPIView):
    @extend_schema(parameters=[PATH], responses={200: EntrySerializer, **ERRORS},
                   summary="One file's or directory's type, size and time")
    def get(self, request):
        metrics.pfs_operation("stat")
        target, entry = services.pfs_stat(request.user, self.datacenter, _query_path(request))
        return Response(services.entry_json(str(target.path), entry))


class MkdirView(DatacenterAPIView):
    @extend_schema(request=MkdirSerializer, responses={201: EntrySerializer, **ERRORS},
                   summary="Create a directory (and its parents when asked)")
    def post(self, request):
        data = validated(MkdirSerializer, request)
        metrics.pfs_operation("mkdir")
        target, entry = services.pfs_mkdir(request.user, self.datacenter,
                                           data["path"], parents=data["parents"])
        return Response(services.entry_json(str(target.path), entry),
                        status=status.HTTP_201_CREATED)


class UsageView(DatacenterAPIView):
    @extend_schema(responses={200: UsageSerializer, **ERRORS},
                   summary="Bytes in your home and reserved by uploads, against your storage "
                           "quota")
    def get(self, request):
        usage = services.usage_report(request.user, self.datacenter)
        return Response({"used": usage.used, "reserved": usage.reserved, "limit": usage.limit,
                         "used_display": format_bytes(usage.used),
                         "reserved_display": format_bytes(usage.reserved),
                         "limit_display": format_bytes(usage.limit),
                         "measured_at": usage.measured_at, "unknown": usage.unknown})


def _upload_context(request) -> dict:
    """The chunks the client is asked for: larger behind nginx, which takes each into a file
    the portal moves into place (PADDLECLOUD_PFS_FRONT_CHUNK_SIZE), than through the portal."""
    front = getattr(request._request, "scope", {}).get(FRONT_SCOPE)
    if front is not None and front.body_dir is not None:
        return {"chunk_size": max(settings.PADDLECLOUD_PFS_FRONT_CHUNK_SIZE,
                                  settings.PADDLECLOUD_PFS_CHUNK_SIZE)}
    return {}


class UploadListView(DatacenterAPIView):
    @extend_schema(request=UploadCreateSerializer, responses={201: UploadSerializer, **ERRORS},
                   summary="Start a resumable upload (then PATCH its bytes in chunks)")
    def post(self, request):
        data = validated(UploadCreateSerializer, request)
        session = services.upload_create(request.user, self.datacenter, **data)
        return Response(UploadSerializer(session, context=_upload_context(request)).data,
                        status=status.HTTP_201_CREATED)


class UploadDetailView(DatacenterAPIView):
    @extend_schema(responses={200: UploadSerializer, **ERRORS},
                   summary="An upload in progress: how many bytes the server has")
    def get(self, request, upload_id):
        session = services.upload_get(request.user, self.datacenter, upload_id)
        return Response(UploadSerializer(session, context=_upload_context(request)).data)

    @extend_schema(responses={204: None, **ERRORS}, summary="Abandon an upload")
    def delete(self, request, upload_id):
        session = services.upload_get(request.user, self.datacenter, upload_id)
        services.upload_abort(session)
        return Response(status=status.HTTP_204_NO_CONTENT)
