"""What the sweeps API shows (``services.sweep_report``'s dicts) and takes."""

from __future__ import annotations

from urllib.parse import urlencode

from django.urls import reverse
from rest_framework import serializers


class SweepWriteSerializer(serializers.Serializer):
    """A sweep as ``paddlectl sweep SPEC.yaml`` sends it (checked by
    ``paddlecloud_core.experiments.sweep_check``; the base job by the jobs' own rules)."""
    name = serializers.CharField(help_text="the sweep's name; its trials are NAME-1, NAME-2, …")
    job = serializers.JSONField(help_text="the base job: the fields of a job's submission")
    space = serializers.JSONField(help_text="env.NAME or arg.NAME: [values] or {min, max, log}")
    method = serializers.ChoiceField(["grid", "random", "asha"], required=False)
    seed = serializers.IntegerField(required=False)
    max_trials = serializers.IntegerField(required=False)
    parallel = serializers.IntegerField(required=False)
    objective = serializers.JSONField(required=False, help_text="{metric, mode}")
    stopping = serializers.JSONField(required=False,
                                     help_text="{rule: median, grace_steps, min_trials}")
    asha = serializers.JSONField(required=False, help_text="{min_steps, reduction_factor}")


class TrialSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    job = serializers.CharField(allow_null=True, help_text="its job (null: deleted)")
    state = serializers.CharField(allow_null=True, help_text="its job's state")
    counted = serializers.CharField(help_text="done, running, waiting, stopped (early), "
                                              "killed or removed")
    settings = serializers.JSONField()
    stopped_early = serializers.CharField(allow_null=True, help_text="why it was stopped early")


class PredictedEndSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True)
    unknown = serializers.CharField(allow_null=True, help_text="why no end can be predicted")


class SweepSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.CharField(help_text="running, done or killed")
    method = serializers.CharField()
    objective = serializers.JSONField(allow_null=True)
    progress = serializers.DictField(child=serializers.IntegerField(),
                                     help_text="trials by done, running, waiting, stopped, "
                                               "killed, removed, to_submit")
    progress_shown = serializers.CharField(help_text='in words: "1 done, 2 running, 0 '
                                                     'waiting, 1 stopped"')
    trials_total = serializers.IntegerField()
    best = serializers.JSONField(allow_null=True,
                                 help_text="the best value reported: trial, job, value, settings")
    best_shown = serializers.CharField(allow_null=True, help_text='in words: "loss 0.0519 '
                                       '(lr-1: env.LEARNING_RATE=0.1)"')
    problem = serializers.CharField(help_text="why the next trial is not submitted yet")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    predicted_end = PredictedEndSerializer()
    trials = TrialSerializer(many=True)
    spec = serializers.JSONField()


class SweepRowSerializer(SweepSerializer):
    """A sweep as one row of the job list (``GET /api/v1/jobs/``): its trials folded in."""
    kind = serializers.SerializerMethodField(help_text='"sweep" (a job\'s row: "job")')
    url = serializers.SerializerMethodField(help_text="the sweep in the API")
    trials_url = serializers.SerializerMethodField(help_text="its trials as rows of jobs")
    spec = None  # GET /sweeps/NAME/ shows it

    def get_kind(self, row) -> str:
        return "sweep"

    def get_url(self, row) -> str:
        return reverse("api-sweep", args=[row["name"]])

    def get_trials_url(self, row) -> str:
        return f"{reverse('api-jobs')}?{urlencode({'sweep': row['name']})}"
