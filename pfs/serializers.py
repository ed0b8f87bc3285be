"""The PFS API's bodies: what the views answer and accept (the byte streams of
``pfs.transfer`` are described in ``pfs.schema``)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from . import digests


class EntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField()
    type = serializers.ChoiceField(["file", "dir", "link", "other"])
    size = serializers.IntegerField()
    mtime = serializers.DateTimeField()
    target = serializers.CharField(allow_null=True)


class ListingSerializer(serializers.Serializer):
    path = serializers.CharField()
    type = serializers.CharField()
    entries = EntrySerializer(many=True)
    count = serializers.IntegerField(help_text="entries in all, on every page")
    next_offset = serializers.IntegerField(allow_null=True,
                                           help_text="the offset of the next page; null at the "
                                                     "last")


class MkdirSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=4096, trim_whitespace=False)
    parents = serializers.BooleanField(default=False)


class RemovedSerializer(serializers.Serializer):
    path = serializers.CharField()
    freed = serializers.IntegerField()


class UsageSerializer(serializers.Serializer):
    used = serializers.IntegerField(help_text="bytes the files of your home hold (apparent "
                                              "sizes, as du --apparent-size)")
    reserved = serializers.IntegerField(help_text="bytes reserved by your uploads in progress")
    limit = serializers.IntegerField()
    used_display = serializers.CharField()
    reserved_display = serializers.CharField()
    limit_display = serializers.CharField()
    measured_at = serializers.DateTimeField(allow_null=True)
    unknown = serializers.CharField(help_text="why the last measure failed (used is then not "
                                              "known, and uploads, submissions and starts are "
                                              "refused); empty when it succeeded")


class UploadCreateSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=4096, trim_whitespace=False)
    size = serializers.IntegerField(min_value=0)
    sha256 = serializers.CharField(
        max_length=64, min_length=64, required=False,
        help_text="SHA-256 of the whole upload; or send it as X-Checksum-Sha256 with the "
                  "last chunk")
    algorithm = serializers.ChoiceField(
        list(digests.ALGORITHMS), default=digests.SHA256,
        help_text="the digest the upload is checked with: sha256, or xxh3-128 (much faster; "
                  "offered when the answer names it). Its checksum goes in checksum, or with "
                  "the last chunk as X-Checksum-Sha256 / X-Checksum-Xxh3-128")
    checksum = serializers.CharField(
        max_length=64, required=False,
        help_text="the whole upload's digest in algorithm, as hexadecimal digits")
    kind = serializers.ChoiceField(["file", "tar"], default="file")
    overwrite = serializers.BooleanField(default=True)
    parents = serializers.BooleanField(default=False)


class UploadSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    path = serializers.CharField()
    kind = serializers.CharField()
    size = serializers.IntegerField()
    offset = serializers.IntegerField()
    chunk_size = serializers.SerializerMethodField()
    algorithm = serializers.CharField(help_text="the digest this upload is checked with")
    complete = serializers.SerializerMethodField()
    result = serializers.JSONField(
        allow_null=True, help_text="once complete: what was stored (entry, or files/bytes)")
    created_at = serializers.DateTimeField()

    def get_complete(self, session) -> bool:
        return session.completed_at is not None

    def get_chunk_size(self, session) -> int:
        return self.context.get("chunk_size", settings.PADDLECLOUD_PFS_CHUNK_SIZE)
