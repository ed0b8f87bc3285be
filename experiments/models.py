"""A sweep and its trials: each trial is an ordinary job (``jobs.Job``) linked to its sweep."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Sweep(models.Model):
    """A base job and a search space (``spec``, as ``paddlecloud_core.experiments.sweep_check``
    shows it); its trials are submitted as earlier ones end (``experiments.services``)."""

    class State(models.TextChoices):
        RUNNING = "running"  # trials run or are still to be submitted
        DONE = "done"  # every trial ended
        KILLED = "killed"  # its owner killed it: every trial was stopped

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="sweeps")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="sweeps")
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=64)
    spec = models.JSONField(help_text="The sweep as checked: base job, space, method, …")
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    best = models.JSONField(null=True, blank=True, help_text="The best objective value a trial "
                            "reported so far: its trial, value and settings.")
    problem = models.TextField(blank=True, help_text="Why the last trial could not be "
                                                     "submitted (it is tried again).")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "datacenter", "name"],
                                               name="one_sweep_name_per_owner")]

    def __str__(self):
        return f"sweep {self.name}"


class Trial(models.Model):
    """Trial ``number`` of a sweep: its settings and its job (None once the job is deleted)."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    settings = models.JSONField(default=dict)
    job = models.OneToOneField("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="trial")
    # Why it was stopped early ("": it was not; a kill is the job's own reason).
    stopped_early = models.TextField(blank=True)

    class Meta:
        ordering = ["number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"],
                                               name="one_trial_per_number")]

    def __str__(self):
        return f"{self.sweep.name}-{self.number}"
