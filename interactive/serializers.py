"""What the sessions API shows and takes."""

from __future__ import annotations

from datetime import datetime

from rest_framework import serializers

from paddlecloud_core.quantity import format_bytes, format_cpu

from .models import Session
from .sessions import KINDS, idle_shown, session_idle_at


class SessionStartSerializer(serializers.Serializer):
    """A session as ``paddlectl notebook start`` sends it; the rules are the service's (a
    job's for name, cpu, memory, gpu and image)."""

    kind = serializers.ChoiceField(KINDS, help_text="notebook (JupyterLab) or visualdl")
    name = serializers.CharField(required=False, allow_blank=True, max_length=100,
                                 help_text="its job's name (default KIND-xxxxx)")
    cpu = serializers.CharField(required=False, allow_blank=True, max_length=32,
                                help_text="CPU, as a job's (default 1)")
    memory = serializers.CharField(required=False, allow_blank=True, max_length=32,
                                   help_text="memory, as a job's (default 1Gi)")
    gpu = serializers.IntegerField(required=False, min_value=0, help_text="GPUs (default 0)")
    image = serializers.CharField(required=False, allow_blank=True, max_length=512,
                                  help_text="its image (default: the datacenter's); on "
                                            "Kubernetes one with JupyterLab")
    idle = serializers.CharField(required=False, allow_blank=True, max_length=32,
                                 help_text="stopped once idle this long: 90s, 30m, 1h "
                                           "(default 1h)")
    jobs = serializers.ListField(child=serializers.CharField(max_length=40), required=False,
                                 max_length=50, help_text="VisualDL: the jobs it shows")


class SessionKeepSerializer(serializers.Serializer):
    keep = serializers.BooleanField(default=True, help_text="true: never stopped when idle; "
                                                            "false: its idle limit applies")


class SessionSerializer(serializers.Serializer):
    name = serializers.CharField(source="job.name")
    kind = serializers.CharField()
    state = serializers.CharField(source="job.state", help_text="its job's state")
    state_reason = serializers.CharField(source="job.state_reason")
    cpu = serializers.SerializerMethodField()
    memory = serializers.SerializerMethodField()
    gpu = serializers.IntegerField(source="job.gpu")
    image = serializers.CharField(source="job.image")
    idle = serializers.SerializerMethodField(help_text="its idle limit: 1h, 30m")
    idle_seconds = serializers.IntegerField()
    kept = serializers.BooleanField(help_text="never stopped when idle")
    active_at = serializers.DateTimeField(help_text="when it was last seen in use")
    idle_stop_at = serializers.SerializerMethodField(
        help_text="when it is stopped if it stays idle (null: kept, or not running)")
    jobs = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(source="job.started_at", allow_null=True)
    finished_at = serializers.DateTimeField(source="job.finished_at", allow_null=True)

    def get_cpu(self, session: Session) -> str:
        return format_cpu(session.job.cpu)

    def get_memory(self, session: Session) -> str:
        return format_bytes(session.job.memory)

    def get_idle(self, session: Session) -> str:
        return idle_shown(session.idle_seconds)

    def get_idle_stop_at(self, session: Session) -> datetime | None:
        at = session_idle_at(session)
        return serializers.DateTimeField().to_representation(at) if at else None
