"""What interactive work keeps: the proxy's routes (a browser's way to one port of a running
replica, at an origin of its own)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ProxyRoute(models.Model):
    """One port of one replica of a running job, served by the portal's proxy at the origin
    ``{key}.{PADDLECLOUD_SESSIONS_DOMAIN}`` to its owner (and admins) only. It ends with its
    job (``interactive.services``); its upstream headers (a session's token) are encrypted
    and never shown."""

    key = models.CharField(max_length=32, unique=True, editable=False,
                           help_text="Random, lowercase [a-z0-9]: the route's host label.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="proxy_routes")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="proxy_routes")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="proxy_routes")
    replica = models.ForeignKey("jobs.Replica", on_delete=models.CASCADE,
                                related_name="proxy_routes")
    port = models.PositiveIntegerField()
    # Headers added to every request sent upstream (e.g. a Jupyter token), a JSON object
    # encrypted with the credential keys (registries.crypto); None: none.
    headers_encrypted = models.BinaryField(null=True, editable=False)
    purpose = models.CharField(max_length=32, blank=True,
                               help_text="What the route serves: '' (a port), notebook, visualdl…")
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now, help_text="When traffic last "
                                     "passed (updated at most every few seconds).")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["job", "port"], name="proxyroute_job_port")]

    def __str__(self) -> str:
        return f"route {self.key} to {self.job_id}:{self.port}"

    def __repr__(self) -> str:  # never the headers, not even encrypted
        return f"<ProxyRoute {self.key} job={self.job_id} port={self.port}>"


class Session(models.Model):
    """A session: a job of its owner's whose one replica serves them (a JupyterLab, a
    VisualDL) rather than trains (``Job.session`` says which), started by
    ``interactive.sessions.session_start``. Stopped when idle past ``idle_seconds`` unless
    ``kept``; what its code submits goes with ``api_token`` (its owner's, revoked when it
    ends)."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE,
                               related_name="interactive_session")
    kind = models.CharField(max_length=16, help_text="notebook or visualdl (Job.session).")
    idle_seconds = models.PositiveIntegerField(
        help_text="Stopped once idle this long (a notebook: no kernel busy nor active; "
                  "VisualDL: nobody looked).")
    kept = models.BooleanField(default=False, help_text="Kept alive however long idle.")
    active_at = models.DateTimeField(
        default=timezone.now, help_text="When it was last seen in use (its idle time runs "
                                        "from here).")
    jobs = models.JSONField(default=list, blank=True,
                            help_text="The owner's jobs it shows (VisualDL), by name.")
    api_token = models.OneToOneField(
        "accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True,
        related_name="interactive_session", editable=False,
        help_text="The owner's token its code submits with, revoked when it ends.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id}"
