"""What the file service keeps in the database: uploads in progress and each home's usage."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class UploadSession(models.Model):
    """A resumable upload: the bytes so far sit in a hidden temporary beside the target."""

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
    # Declared when the upload starts, or with its last chunk (so a client can hash as it sends).
    sha256 = models.CharField(max_length=64, blank=True)
    overwrite = models.BooleanField(default=True)
    offset = models.PositiveBigIntegerField(default=0)
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
    """Bytes in one user's home: kept current by every write through the file service, and
    measured again by a periodic walk (jobs write into homes directly)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="pfs_usage")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="pfs_usage")
    used = models.BigIntegerField(default=0)
    measured_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "datacenter"], name="unique_pfs_usage"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.datacenter}: {self.used} bytes"
