"""What the sweeps API shows (``services.sweep_report``'s dicts) and takes."""

from __future__ import annotations

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
    trials_total = serializers.IntegerField()
    best = serializers.JSONField(allow_null=True,
                                 help_text="the best value reported: trial, job, value, settings")
    problem = serializers.CharField(help_text="why the next trial is not submitted yet")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    predicted_end = PredictedEndSerializer()
    trials = TrialSerializer(many=True)
    spec = serializers.JSONField()
