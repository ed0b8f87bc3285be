"""Users, the datacenters they may use, their quotas there, and their API tokens."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from paddlecloud_core.quantity import format_bytes, format_cpu

from .execution import backend_choices, backend_kind, backend_kinds

GiB = 2**30
# An allowed package index (``Datacenter.package_indexes``): a host, no credentials, no query.
PACKAGE_INDEX_RE = re.compile(r"^https?://[^\s/?#@]+(/[^\s?#]*)?$")
dns_label_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "use lower-case letters, digits and '-', starting and ending with a letter or digit",
)


def preempt_after_check(value: int | None) -> None:
    if value and value < MIN_PREEMPT_AFTER:
        raise DjangoValidationError(f"at least {MIN_PREEMPT_AFTER} seconds (0 or empty: no "
                                    "preemption)")


MIN_PREEMPT_AFTER = 60  # seconds: less would stop jobs for waits that end by themselves


class User(AbstractUser):
    """A PaddleCloud user. Usernames are often e-mail addresses, as in the seeds' config."""

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"


def _default_backend() -> str:
    return settings.PADDLECLOUD_BACKEND


class Datacenter(models.Model):
    """A place jobs run: an execution backend plus the PFS the jobs and users share."""

    name = models.CharField(
        max_length=63, unique=True, validators=[dns_label_validator],
        help_text="As users write it in ~/.paddle/config, e.g. datacenter1.",
    )
    description = models.TextField(blank=True)
    backend = models.CharField(max_length=16, choices=backend_choices, default=_default_backend)
    # The settings its backend owns (the Kubernetes backend's cluster, PFS volume, scheduler
    # …): a JSON object, its keys the backend's settings fields, checked by their rules
    # (``accounts.execution``); each backend reads its own.
    backend_settings = models.JSONField(default=dict, blank=True, editable=False)
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
    gpu_image = models.CharField(
        "default GPU image", max_length=512, blank=True,
        help_text="Image for jobs that ask for GPUs (-gpu > 0) and name none: the CUDA build "
                  "of the default image's Paddle. Empty means the default image where one is "
                  "set above (its CUDA build is not known), else PADDLECLOUD_DEFAULT_GPU_IMAGE.",
    )
    build_registry = models.CharField(
        "build registry", max_length=255, blank=True, validators=[RegexValidator(
            r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*"
            r"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$",
            "host[:port] and an optional lower-case path, e.g. registry.example.com/paddlecloud")],
        help_text="Where runtime images built from trainer packages are pushed (host[:port]/"
                  "path): each user's under <this>/<their namespace>, pushed with their "
                  "credentials for that host. Empty: no builds; pods install requirements.txt "
                  "when they start.")
    build_registry_insecure = models.BooleanField(
        "build registry over plain HTTP", default=False,
        help_text="The build registry speaks HTTP, not HTTPS (one inside the cluster's network).")
    builder_image = models.CharField(
        max_length=512, blank=True,
        help_text="The rootless BuildKit image of the builder Jobs (Kubernetes); empty means "
                  "PADDLECLOUD_BUILDER_IMAGE.")
    package_indexes = models.TextField(
        "allowed package indexes", blank=True,
        help_text="The package indexes (and the hosts they send downloads to) that installs "
                  "and builds may reach, one http:// or https:// URL a line, e.g. "
                  "https://pypi.org/simple and https://files.pythonhosted.org. A "
                  "requirements.txt may name these (--index-url, --extra-index-url, "
                  "--find-links) and no other; uv and local builds reach their hosts and "
                  "nothing else. Empty: the portal machine's configured index (PyPI when none "
                  "is).")
    start_timeout = models.PositiveIntegerField(
        "start timeout (seconds)", default=300,
        help_text="A job whose replicas are not all running this long after it was admitted "
                  "(the cluster has no room for all of them) is stopped, its pods released, "
                  "and it goes back to the head of its queue; 0 means it waits for ever.")
    start_tries = models.PositiveIntegerField(
        "start tries", default=3, validators=[MinValueValidator(1)],
        help_text="How many starts that time out a job gets before it fails.")

    # What the datacenter has for jobs, shared by everyone (docs/admin/scheduling.md): empty means
    # no limit but each user's quota.
    capacity_cpu = models.PositiveIntegerField(
        "capacity: CPU (millicores)", null=True, blank=True,
        help_text="All jobs together hold at most this; when they would hold more, who "
                  "starts next is fair (each member's dominant share over their weight). "
                  "Empty: no limit but each user's quota.")
    capacity_memory = models.PositiveBigIntegerField("capacity: memory (bytes)", null=True,
                                                     blank=True)
    capacity_gpu = models.PositiveIntegerField("capacity: GPUs", null=True, blank=True)
    capacity_from_cluster = models.BooleanField(
        "capacity from the cluster", default=False,
        help_text="Kubernetes: the capacity is what the cluster's ready, schedulable nodes "
                  "offer (their allocatable), refreshed by the reconciler; the numbers above "
                  "are then written by it.")
    capacity_updated_at = models.DateTimeField(null=True, blank=True, editable=False)

    class BudgetSpent(models.TextChoices):
        STOP = "stop", "warn, then stop it after the grace period"
        FINISH = "finish", "warn, and let it finish"

    budget_spent = models.CharField(
        "a running job whose budget is spent", max_length=8, choices=BudgetSpent.choices,
        default=BudgetSpent.STOP)
    budget_grace_seconds = models.PositiveIntegerField(
        "budget grace (seconds)", default=600,
        help_text="How long a running job whose owner's (or group's) budget is spent runs "
                  "on after the warning, when it is stopped.")
    # Preemption (docs/admin/scheduling.md; ``paddlecloud_core.scheduling``): off unless set.
    preempt_after = models.PositiveIntegerField(
        "preempt after (seconds)", null=True, blank=True, validators=[preempt_after_check],
        help_text="With a capacity: a job of a user below their fair share that has waited "
                  "this long for the capacity may start by stopping running jobs of users "
                  "over theirs — those that lose the least work since their last checkpoint — "
                  "which are warned (SIGTERM and the grace period) and go back to the head "
                  "of their owners' queues. At least 60; 0 or empty: never.")

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
        if self.preempt_after == 0:  # as empty: one way to store "never"
            self.preempt_after = None
        if self.pfs_storage == self.PfsStorage.S3 and not self.s3_bucket:
            raise DjangoValidationError({"s3_bucket": "required when PFS storage is S3"})
        problems = {}
        try:
            kind = backend_kind(self.backend)
        except ValueError:
            kind = None  # the field's choices say so
        if kind is not None:
            try:
                self.backend_settings = kind.settings_clean(self.backend_settings)
            except DjangoValidationError as exc:
                problems.update(exc.error_dict)
        if bad := [u for u in self.package_indexes.split() if not PACKAGE_INDEX_RE.match(u)]:
            problems["package_indexes"] = (f"{bad[0]}: each line an http:// or https:// URL "
                                           "with a host, without credentials, a query or '#'")
        if kind is not None and kind.place is not None and not problems \
                and (clash := self._namespaces_shared(kind)):
            problems["namespace_prefix"] = clash
        if self.capacity_from_cluster and kind is not None and not kind.reads_capacity:
            problems["capacity_from_cluster"] = (
                "only with the " + " or ".join(k.label for k in backend_kinds() if k.reads_capacity)
                + " backend: its nodes are what the capacity is read from")
        if problems:
            raise DjangoValidationError(problems)

    def _namespaces_shared(self, kind) -> str | None:
        """Why another datacenter in the same place (its cluster) would share users'
        namespaces with this one: a prefix that is, or starts, the other's makes the same
        names (``paddle-`` + ``dc2-alice`` is ``paddle-dc2-`` + ``alice``), and so the same
        quota, PFS volume and claim; None when none would."""
        mine = self.namespace_prefix
        others = [other for other in Datacenter.objects.filter(backend=self.backend)
                  .exclude(pk=self.pk).order_by("name")
                  if other.namespace_prefix.startswith(mine)
                  or mine.startswith(other.namespace_prefix)]
        if not others or (here := kind.place_of(self)) is None:
            return None
        for other in others:
            if kind.place_of(other) == here:
                return (f"{mine!r} would share users' namespaces with datacenter {other.name} "
                        f"on the same cluster ({here}), whose prefix is "
                        f"{other.namespace_prefix!r}: on one cluster each datacenter's prefix "
                        f"must neither equal nor begin another's, e.g. {self.name}-")
        return None

    @property
    def pfs_root_path(self) -> Path:
        return Path(self.pfs_root) if self.pfs_root else settings.PADDLECLOUD_PFS_ROOT / self.name

    @property
    def public_path(self) -> Path:
        return Path(self.public_dir) if self.public_dir else self.pfs_root_path / "public"

    @property
    def capacity(self) -> dict[str, int | None]:
        """What it has for all jobs together, each resource (None: no limit)."""
        return {"cpu": self.capacity_cpu, "memory": self.capacity_memory,
                "gpu": self.capacity_gpu}

    @property
    def image(self) -> str:
        return self.default_image or settings.PADDLECLOUD_DEFAULT_IMAGE

    @property
    def image_gpu(self) -> str:
        """The image of GPU jobs that name none (``gpu_image``'s help says which)."""
        return self.gpu_image or self.default_image or settings.PADDLECLOUD_DEFAULT_GPU_IMAGE


class Team(models.Model):
    """A group of a datacenter's members (a team): its members' jobs together hold at most
    the group's quota, and when the datacenter's capacity is contended the group's share is
    weighed first, then each member's within it (docs/admin/scheduling.md). Members see each
    other's jobs (the group view), and change only their own."""

    datacenter = models.ForeignKey(Datacenter, on_delete=models.CASCADE, related_name="teams")
    name = models.CharField(max_length=63, validators=[dns_label_validator],
                            help_text="e.g. vision; unique in its datacenter.")
    weight = models.PositiveIntegerField(
        "fair-share weight", default=1, validators=[MinValueValidator(1)],
        help_text="A group with weight 2 is entitled to twice the share of one with weight 1 "
                  "(a member of no group counts as a group of their own, weight 1).")
    cpu = models.PositiveIntegerField("group quota: CPU (millicores)", null=True, blank=True,
                                      help_text="All members' jobs together; empty: no limit.")
    memory = models.PositiveBigIntegerField("group quota: memory (bytes)", null=True,
                                            blank=True)
    gpu = models.PositiveIntegerField("group quota: GPUs", null=True, blank=True)
    jobs = models.PositiveIntegerField("group quota: concurrent jobs", null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "group"
        ordering = ["datacenter", "name"]
        constraints = [
            models.UniqueConstraint(fields=["datacenter", "name"], name="unique_team_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} in {self.datacenter}"

    @property
    def quota(self) -> dict[str, int | None]:
        """The group's limits, each resource (None: no limit)."""
        return {"cpu": self.cpu, "memory": self.memory, "gpu": self.gpu, "jobs": self.jobs}


class Budget(models.Model):
    """GPU-hours and CPU-hours a user or a group may use in a datacenter per window, measured
    from their replicas' run time (docs/admin/scheduling.md). While one is spent, their jobs wait;
    a running one is warned, then stopped or let finish (``Datacenter.budget_spent``)."""

    class Window(models.TextChoices):
        DAY = "day"
        WEEK = "week"
        MONTH = "month"

    class Kind(models.TextChoices):
        ROLLING = "rolling", "rolling: the last 24 hours, 7 days or 30 days"
        CALENDAR = "calendar", "calendar: today, this week (from Monday), this month (UTC)"

    datacenter = models.ForeignKey(Datacenter, on_delete=models.CASCADE, related_name="budgets")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True,
                             blank=True, related_name="budgets")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="budgets", verbose_name="group")
    gpu_hours = models.DecimalField("GPU-hours", max_digits=10, decimal_places=1, null=True,
                                    blank=True, help_text="Empty: no GPU budget.")
    cpu_hours = models.DecimalField("CPU-hours", max_digits=10, decimal_places=1, null=True,
                                    blank=True, help_text="Empty: no CPU budget.")
    window = models.CharField(max_length=8, choices=Window.choices, default=Window.WEEK)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.ROLLING)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(user__isnull=False, team__isnull=True)
                           | models.Q(user__isnull=True, team__isnull=False)),
                name="budget_of_a_user_or_a_group"),
        ]

    def __str__(self) -> str:
        whose = f"group {self.team.name}" if self.team_id else str(self.user)
        return f"{whose} in {self.datacenter}: per {self.window} ({self.kind})"

    def clean(self):
        if bool(self.user_id) == bool(self.team_id):
            raise DjangoValidationError({"user": "a budget is a user's or a group's: give one"})
        if self.gpu_hours is None and self.cpu_hours is None:
            raise DjangoValidationError({"gpu_hours": "give GPU-hours, CPU-hours or both"})


class Membership(models.Model):
    """A user may use a datacenter only while they are a member of it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    datacenter = models.ForeignKey(
        Datacenter, on_delete=models.CASCADE, related_name="memberships"
    )
    granted_by_sso = models.BooleanField(
        "granted by single sign-on", default=False,
        help_text="Added at login because the identity provider's group claim names a group "
                  "mapped to this datacenter; removed at a login where it no longer does. "
                  "A membership an admin adds is never removed by single sign-on.")
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="memberships",
        verbose_name="group", help_text="The group (team) the member's jobs count against, "
                                        "beside their own quota; one at most.")
    lead = models.BooleanField(
        "group lead", default=False,
        help_text="Sees the usage report and the audit trail of every member of their group "
                  "(in this datacenter), beside their own.")
    weight = models.PositiveIntegerField(
        "fair-share weight", default=1, validators=[MinValueValidator(1)],
        help_text="When the datacenter's capacity is contended, a member with weight 2 is "
                  "entitled to twice the share of one with weight 1.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "datacenter"], name="unique_membership"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.datacenter}"

    def clean(self):
        if self.team_id and self.team.datacenter_id != self.datacenter_id:
            raise DjangoValidationError({"team": f"group {self.team.name!r} is of datacenter "
                                                 f"{self.team.datacenter.name!r}, not "
                                                 f"{self.datacenter.name!r}"})


QUOTA_RESOURCES = ("cpu", "memory", "gpu", "jobs", "queued", "storage")
# What a user may use where neither their own quota nor their datacenter's default says.
BUILTIN_QUOTA = {"cpu": 4000, "memory": 8 * GiB, "gpu": 0, "jobs": 2, "queued": 100,
                 "storage": 10 * GiB}
# Each resource as users write it.
QUOTA_FORMATS = {"cpu": format_cpu, "memory": format_bytes, "gpu": str, "jobs": str,
                 "queued": str, "storage": format_bytes}


class Quota(models.Model):
    """What one user may use in one datacenter at once (enforced at job admission), and how
    many of their jobs may wait for it (enforced at submission).

    The row without a user is the datacenter's default. In a user's row, a resource left
    empty takes the datacenter's default, so raising a default raises it for everyone who has
    not been given their own number. ``accounts.selectors.quota_get`` does the merging.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="quotas",
        null=True, blank=True, help_text="Empty: the default of everyone in the datacenter.",
    )
    datacenter = models.ForeignKey(Datacenter, on_delete=models.CASCADE, related_name="quotas")
    cpu = models.PositiveIntegerField("CPU (millicores)", null=True, blank=True,
                                      validators=[MinValueValidator(0)])
    memory = models.PositiveBigIntegerField("memory (bytes)", null=True, blank=True)
    gpu = models.PositiveIntegerField("GPUs", null=True, blank=True)
    jobs = models.PositiveIntegerField("concurrent jobs", null=True, blank=True)
    queued = models.PositiveIntegerField(
        "queued jobs", null=True, blank=True,
        help_text="How many jobs may wait for the quota at once; more are refused.")
    storage = models.PositiveBigIntegerField("storage (bytes)", null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "datacenter"], name="unique_quota"),
            models.UniqueConstraint(fields=["datacenter"], condition=models.Q(user=None),
                                    name="unique_default_quota"),
        ]

    def __str__(self) -> str:
        who = self.user if self.user_id else "default"
        return f"{who} in {self.datacenter}: " + ", ".join(
            f"{name} {_shown(getattr(self, name), QUOTA_FORMATS[name])}"
            for name in QUOTA_RESOURCES)

    def limits(self) -> dict[str, dict]:
        """Each resource's limit, as written by users and as a number."""
        return {name: {"limit": QUOTA_FORMATS[name](getattr(self, name)),
                       "limit_value": getattr(self, name)} for name in QUOTA_RESOURCES}


def membership_grant(user, datacenter, **fields) -> tuple[Membership, bool]:
    """Make ``user`` a member of ``datacenter`` (``fields``: the new membership's own), unless
    they are one; with a quota row of their own, every resource empty (the datacenter's
    default) until set, so the admin shows it beside the membership, ready to edit."""
    membership, created = Membership.objects.get_or_create(user=user, datacenter=datacenter,
                                                           defaults=fields)
    Quota.objects.get_or_create(user=user, datacenter=datacenter)
    return membership, created


def _shown(value, fmt) -> str:
    return "default" if value is None else fmt(value)


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


class SsoIdentity(models.Model):
    """A user as their OpenID provider knows them: the issuer and the ``sub`` claim, which
    the provider never reuses or changes (unlike the e-mail or the preferred username).
    Logging in with single sign-on finds the user by this pair (``accounts.sso``)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="sso_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField("subject (sub)", max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"],
                                               name="unique_sso_identity")]

    def __str__(self) -> str:
        return f"{self.user} = {self.subject} at {self.issuer}"


class SsoGroupMapping(models.Model):
    """Members of the identity provider's group ``group`` (as the group claim names it) are
    members of ``datacenter`` while they are in the group (checked at each login)."""

    group = models.CharField(max_length=255, help_text="As the provider's group claim writes it.")
    datacenter = models.ForeignKey(Datacenter, on_delete=models.CASCADE,
                                   related_name="sso_group_mappings")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "datacenter__name"]
        verbose_name = "single sign-on group mapping"
        constraints = [models.UniqueConstraint(fields=["group", "datacenter"],
                                               name="unique_sso_group_mapping")]

    def __str__(self) -> str:
        return f"group {self.group} → {self.datacenter}"


class DeviceLogin(models.Model):
    """``paddlectl login --web``: paddlectl asks for a login and shows a short user code; the
    user, logged in to the dashboard (with single sign-on or a password), approves that code
    on the /device/ page; paddlectl, polling with its device code, gets an API token once.
    (RFC 8628's device authorization grant, for PaddleCloud's own tokens.) Only a digest of
    the device code is stored; both codes are short-lived and used once."""

    user_code = models.CharField(max_length=9, unique=True)
    device_digest = models.CharField(max_length=64, unique=True, editable=False)
    username = models.CharField(max_length=150, help_text="Who paddlectl logs in as.")
    datacenter = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=100, blank=True)
    address = models.CharField(max_length=64, blank=True, help_text="Where paddlectl asked from.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                    null=True, blank=True, related_name="+")
    approved_at = models.DateTimeField(null=True, blank=True)
    denied_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)
    last_poll_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["address", "-created_at"], name="device_login_address")]

    def __str__(self) -> str:
        return f"{self.user_code} ({self.username})"


class AuditEntry(models.Model):
    """Who did what, when: submissions, kills and deletions of jobs, changes of registry
    credentials, of API tokens and of quotas. Written by the services
    (``accounts.audit.audit_record``); read by admins, by group leads for their group and by
    each user for what they did or was done to what is theirs (``accounts.audit.audit_visible``).
    Once written an entry is never changed or deleted (``save`` and ``delete`` refuse; the admin
    and the API only read). Never holds a secret."""

    class Action(models.TextChoices):
        JOB_SUBMIT = "job.submit", "job submitted"
        JOB_KILL = "job.kill", "job killed"
        JOB_DELETE = "job.delete", "job deleted"
        REGISTRY_CREATE = "registry.create", "registry credential added"
        REGISTRY_UPDATE = "registry.update", "registry credential changed"
        REGISTRY_DELETE = "registry.delete", "registry credential deleted"
        TOKEN_CREATE = "token.create", "API token made"
        TOKEN_REVOKE = "token.revoke", "API token revoked"
        NOTIFY_ADD = "notify.add", "notification subscription added"
        NOTIFY_REMOVE = "notify.remove", "notification subscription removed"
        QUOTA_CHANGE = "quota.change", "quota changed"
        SSO_USER_CREATE = "sso.user_create", "user created at single sign-on"
        SSO_USER_LINK = "sso.user_link", "user matched by e-mail at single sign-on"
        SSO_MEMBERSHIP_ADD = "sso.membership_add", "membership granted by single sign-on"
        SSO_MEMBERSHIP_REMOVE = "sso.membership_remove", "membership removed by single sign-on"
        PORT_OPEN = "job.port_open", "a job's port opened in the browser"
        PORT_FORWARD = "job.port_forward", "a job's port forwarded"

    time = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                              blank=True, related_name="+")
    actor_name = models.CharField("who", max_length=150,
                                  help_text="Kept when the user is deleted.")
    subject = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+", verbose_name="whose",
        help_text="The user whose job, registry, token or quota it was: they see the entry "
                  "beside its actor.")
    action = models.CharField(max_length=32, choices=Action.choices)
    datacenter = models.CharField(max_length=63, blank=True)
    target = models.CharField("what", max_length=300,
                              help_text="owner/job, owner/registry, or the quota's user.")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        verbose_name_plural = "audit log"
        indexes = [models.Index(fields=["action", "-time"], name="audit_action_time"),
                   models.Index(fields=["actor", "-time"], name="audit_actor_time"),
                   models.Index(fields=["subject", "-time"], name="audit_subject_time")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("an audit entry is written once and never changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("an audit entry is never deleted")
