"""What the file service keeps in the database: uploads in progress (each reserving room in
its owner's storage quota) and each home's usage."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class UploadSession(models.Model):
    """An upload in progress: the bytes so far sit in a hidden temporary beside the target.

    Until it completes it reserves ``reserved`` bytes of its owner's storage quota (its declared
    size; more while a tar unpacks), so uploads accepted together cannot overrun the quota.
    A single-request upload has one too (not ``resumable``: no other request may send to it).
    """

    class Kind(models.TextChoices):
        FILE = "file", "a file"
        TAR = "tar", "a directory as a tar stream"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="uploads")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="uploads")
    path = models.CharField(max_length=4096)
    kind = models.CharField(max_length=4, choices=Kind.choices, default=Kind.FILE)
    size = models.PositiveBigIntegerField()
    # The digest of the whole upload in ``algorithm`` (pfs.digests; the column kept its first
    # name): declared when the upload starts, or with its last chunk (so a client can hash as
    # it sends).
    sha256 = models.CharField(max_length=64, blank=True)
    algorithm = models.CharField(max_length=16, default="sha256")
    overwrite = models.BooleanField(default=True)
    offset = models.PositiveBigIntegerField(default=0)
    reserved = models.PositiveBigIntegerField(default=0)
    resumable = models.BooleanField(default=True)
    # Kept a while after the last byte, so a client whose final response was lost learns
    # that the upload is stored (and what was stored) instead of "not found".
    completed_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"upload of {self.path} ({self.offset}/{self.size})"


class Usage(models.Model):
    """Bytes in one user's home (apparent sizes, as ``du --apparent-size``): kept current by
    every write through the file service, and measured again by walks (jobs write into homes
    directly: while they run and as they end, and periodically). Never below zero."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="pfs_usage")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="pfs_usage")
    used = models.BigIntegerField(default=0)
    measured_at = models.DateTimeField(null=True, blank=True)
    # Why the last walk failed (a tree deeper than PFS goes, say); blank once one succeeds.
    # While set, ``used`` is not known: uploads, submissions and starts are refused.
    unknown = models.TextField(blank=True)
    # Counted up by every write through the file service (``usage_add``): a walk that began
    # at another revision does not record its figure (``usage_measure``).
    revision = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "datacenter"], name="unique_pfs_usage"),
            models.CheckConstraint(condition=models.Q(used__gte=0), name="pfs_usage_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.datacenter}: {self.used} bytes"
