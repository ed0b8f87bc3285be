"""Users, the datacenters they may use, their quotas there, and their API tokens."""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from paddlecloud.quantity import format_bytes, format_cpu

GiB = 2**30

dns_label_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "use lower-case letters, digits and '-', starting and ending with a letter or digit",
)


class User(AbstractUser):
    """A PaddleCloud user. Usernames are often e-mail addresses, as in the seeds' config."""

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"


def _default_backend() -> str:
    return settings.PADDLECLOUD_BACKEND


class Datacenter(models.Model):
    """A place jobs run: an execution backend plus the PFS the jobs and users share."""

    class Backend(models.TextChoices):
        LOCAL = "local", "local processes on the portal's machine"
        KUBERNETES = "kubernetes", "Kubernetes"

    name = models.CharField(
        max_length=63, unique=True, validators=[dns_label_validator],
        help_text="As users write it in ~/.paddle/config, e.g. datacenter1.",
    )
    description = models.TextField(blank=True)
    backend = models.CharField(max_length=16, choices=Backend.choices, default=_default_backend)

    kube_in_cluster = models.BooleanField(
        "in-cluster config", default=False,
        help_text="Use the service account of the pod the portal runs in.",
    )
    kubeconfig = models.CharField(
        max_length=1024, blank=True,
        help_text="Path to a kubeconfig file; empty means the default (~/.kube/config).",
    )
    kube_context = models.CharField("kubeconfig context", max_length=253, blank=True)
    namespace_prefix = models.CharField(
        max_length=20, default="paddle-", validators=[RegexValidator(
            r"^[a-z0-9]([-a-z0-9]*)?$", "lower-case letters, digits and '-'")],
        help_text="Each user's namespace is this prefix plus a safe form of the username.",
    )

    pfs_root = models.CharField(
        "PFS root", max_length=1024, blank=True,
        help_text="Directory holding home/ and public/; empty means PADDLECLOUD_PFS_ROOT/<name>.",
    )
    public_dir = models.CharField(
        "public dataset dir", max_length=1024, blank=True,
        help_text="Read-only /pfs/<name>/public; empty means <PFS root>/public.",
    )
    class PfsStorage(models.TextChoices):
        POSIX = "posix", "a directory: a CephFS, NFS or HDFS mount, or the local disk"
        S3 = "s3", "an S3-compatible object store"

    pfs_storage = models.CharField(
        "PFS storage", max_length=8, choices=PfsStorage.choices, default=PfsStorage.POSIX,
        help_text="Where the file service keeps users' files. Credentials for S3 come from "
                  "PADDLECLOUD_S3_ACCESS_KEY_ID/_SECRET_ACCESS_KEY or the usual AWS chain.",
    )
    s3_bucket = models.CharField("S3 bucket", max_length=63, blank=True)
    s3_endpoint_url = models.CharField(
        "S3 endpoint", max_length=200, blank=True, validators=[RegexValidator(
            r"^https?://[^\s/?#]+(/[^\s]*)?$", "an http:// or https:// URL")],
        help_text="Empty means AWS; e.g. http://minio:9000.")
    s3_region = models.CharField("S3 region", max_length=32, blank=True)

    default_image = models.CharField(
        max_length=512, blank=True,
        help_text="Image for jobs that name none; empty means PADDLECLOUD_DEFAULT_IMAGE.",
    )

    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="datacenters"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        if self.pfs_storage == self.PfsStorage.S3 and not self.s3_bucket:
            raise DjangoValidationError({"s3_bucket": "required when PFS storage is S3"})

    @property
    def pfs_root_path(self) -> Path:
        return Path(self.pfs_root) if self.pfs_root else settings.PADDLECLOUD_PFS_ROOT / self.name

    @property
    def public_path(self) -> Path:
        return Path(self.public_dir) if self.public_dir else self.pfs_root_path / "public"

    @property
    def image(self) -> str:
        return self.default_image or settings.PADDLECLOUD_DEFAULT_IMAGE


class Membership(models.Model):
    """A user may use a datacenter only while they are a member of it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    datacenter = models.ForeignKey(
        Datacenter, on_delete=models.CASCADE, related_name="memberships"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "datacenter"], name="unique_membership"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.datacenter}"


class Quota(models.Model):
    """What one user may use in one datacenter at once (enforced at job admission)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="quotas"
    )
    datacenter = models.ForeignKey(Datacenter, on_delete=models.CASCADE, related_name="quotas")
    cpu = models.PositiveIntegerField(
        "CPU (millicores)", default=4000, validators=[MinValueValidator(0)]
    )
    memory = models.PositiveBigIntegerField("memory (bytes)", default=8 * GiB)
    gpu = models.PositiveIntegerField("GPUs", default=0)
    jobs = models.PositiveIntegerField("concurrent jobs", default=2)
    storage = models.PositiveBigIntegerField("storage (bytes)", default=10 * GiB)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "datacenter"], name="unique_quota"),
        ]

    def __str__(self) -> str:
        return (f"{self.user} in {self.datacenter}: cpu {format_cpu(self.cpu)}, "
                f"memory {format_bytes(self.memory)}, gpu {self.gpu}, jobs {self.jobs}, "
                f"storage {format_bytes(self.storage)}")

    def limits(self) -> dict[str, dict]:
        """Each resource's limit, as written by users and as a number."""
        return {
            "cpu": {"limit": format_cpu(self.cpu), "limit_value": self.cpu},
            "memory": {"limit": format_bytes(self.memory), "limit_value": self.memory},
            "gpu": {"limit": str(self.gpu), "limit_value": self.gpu},
            "jobs": {"limit": str(self.jobs), "limit_value": self.jobs},
            "storage": {"limit": format_bytes(self.storage), "limit_value": self.storage},
        }


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


class ApiToken(models.Model):
    """A bearer token for the API, bound to one user and one datacenter.

    Only a SHA-256 digest of the token is stored: the token itself is shown once, when it is
    issued. Tokens are 256 random bits, so a fast hash is enough (nothing to brute-force).
    """

    PREFIX = "pct_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    datacenter = models.ForeignKey(
        Datacenter, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(
        max_length=16, help_text="The first characters of the token, to tell tokens apart."
    )
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {self.datacenter})"

    @staticmethod
    def digest_of(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @property
    def state(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "active"
