from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.serializers import QuotaResourceSerializer
from paddlecloud_core.placement import PLACEMENT_MOST
from paddlecloud_core.quantity import format_bytes, format_cpu
from paddlecloud_core.spec import FIELDS, Field, priority_name
from scheduling.admission import queue_position
from scheduling.forecasts import job_predictions
from scheduling.sooner import sooner_find

from .backends import image_shown
from .models import Build, Job, JobEvent, Replica
from .states import WAITING_STATES


@extend_schema_field(OpenApiTypes.STR)
class CpuField(serializers.Field):
    def to_representation(self, value):
        return format_cpu(value)


@extend_schema_field(OpenApiTypes.STR)
class BytesField(serializers.Field):
    def to_representation(self, value):
        return format_bytes(value)


@extend_schema_field(OpenApiTypes.STR)
class PriorityField(serializers.Field):
    def to_representation(self, value):
        return priority_name(value)


# A job's fields shown as users write them (paddlecloud_core.spec.TYPES), by type; the model's
# own fields show the rest.
SHOWN = {"cpu": CpuField, "memory": BytesField, "priority": PriorityField}


class JobSerializer(serializers.ModelSerializer):
    datacenter = serializers.CharField(source="datacenter.name")
    registry = serializers.CharField(source="registry.name", default=None, allow_null=True)
    queue_position = serializers.SerializerMethodField(
        help_text="While queued: 1 for the next of your jobs to start, 2 behind it, …")
    predicted_start = serializers.SerializerMethodField(
        help_text='While it waits: when it is predicted to start, {"at", "earliest", '
                  '"latest", "unknown"} (ISO times; "at" null: not within 30 days, or '
                  '"unknown" says why nothing tells when); else null')
    trainers_held = serializers.IntegerField(
        source="trainers_now", read_only=True, allow_null=True,
        help_text="The trainers it holds now (running, or being started), which your quota "
                  "counts; null unless it is starting or running")
    trainers_shown = serializers.CharField(
        read_only=True, help_text='Its trainers as people read them: "2", or of an elastic '
                                  'job how many it holds and its range, "3 (2\u20134)"')
    trainers_below_min_since = serializers.DateTimeField(
        source="trainers_short_since", read_only=True, allow_null=True,
        help_text="Since when an elastic job runs with fewer than trainers_min trainers "
                  "(it fails after trainers_below_min_seconds); null: it does not")

    class Meta:
        model = Job
        fields = ["name", "state", "state_reason", "queue_position", "predicted_start",
                  "datacenter", *(f.name for f in FIELDS if f.name != "name"),
                  "package_snapshot", "package_digest", "image_digest",
                  "trainers_held", "trainers_shown", "trainers_lost", "trainers_below_min_since",
                  "created_at", "started_at", "finished_at"]

    def get_fields(self):
        fields = super().get_fields()
        for f in FIELDS:
            if f.type in SHOWN and f.name in fields:
                fields[f.name] = SHOWN[f.type](help_text=f.help, read_only=True)
        if "image" in fields:
            fields["image"] = serializers.CharField(
                read_only=True, allow_null=True,
                help_text="The image its replicas run; null where they run in none (a "
                          "datacenter whose jobs run as processes on the portal's machine)")
        return fields

    def to_representation(self, job):
        data = super().to_representation(job)
        if "image" in data:
            data["image"] = image_shown(job.datacenter, data["image"])
        return data

    def get_queue_position(self, job) -> int | None:
        return queue_position(job)

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_predicted_start(self, job) -> dict | None:
        if job.state not in WAITING_STATES:
            return None
        predictions = self.context.get("predictions")
        if predictions is None:  # one job: its own forecast
            predictions = job_predictions([job])
        prediction = predictions.get(job.pk)
        return prediction.as_dict() if prediction else None


class JobRowSerializer(JobSerializer):
    """A job as a row of the job list; a row that stands for several jobs (a sweep's trials,
    ``jobs.folds``) has a kind and fields of its own."""
    kind = serializers.SerializerMethodField(help_text='"job" (a sweep\'s row: "sweep")')

    class Meta(JobSerializer.Meta):
        fields = ["kind", *JobSerializer.Meta.fields]

    def get_kind(self, job) -> str:
        return "job"


class JobDetailSerializer(JobSerializer):
    """One job (``GET .../jobs/NAME``): with, while it waits, what would start it sooner."""

    sooner = serializers.SerializerMethodField(
        help_text='While it waits: the changes that would start it sooner, the earliest first, '
                  '[{"change": {field: value}, "flag", "start", "message"}] (submit it anew so '
                  'changed; docs/users/jobs.md); else null')

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "sooner"]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_sooner(self, job) -> list | None:
        return sooner_find(job) if job.state in WAITING_STATES else None


class GroupJobSerializer(JobSerializer):
    """Another member's job as the group page shows it: whose it is, its state and place in
    the queue, and what it holds of the group's quota. Never what only its owner may see —
    its environment (API keys, cloud credentials), entry and its arguments, package, image,
    registry, topology or dataset (docs/admin/security.md)."""

    owner = serializers.CharField(source="owner.username", read_only=True)

    class Meta(JobSerializer.Meta):
        fields = ["owner", "name", "state", "state_reason", "queue_position", "predicted_start",
                  "priority", "datacenter", "trainers", "trainers_min", "trainers_held",
                  "trainers_shown", "pservers", "cpu", "memory", "gpu", "pscpu", "psmemory",
                  "created_at", "started_at", "finished_at"]


class BudgetUseSerializer(serializers.Serializer):
    limit = serializers.FloatField()
    used = serializers.FloatField()
    left = serializers.FloatField()
    lost = serializers.FloatField(help_text="of used: trained since a checkpoint by runs "
                                            "that ended by a restart, and lost")


class BudgetBucketSerializer(serializers.Serializer):
    start = serializers.DateTimeField(help_text="the bucket's start (an hour of a day's "
                                                "window, a day of a week's or a month's)")
    cpu_hours = serializers.FloatField()
    gpu_hours = serializers.FloatField()


class BudgetSerializer(serializers.Serializer):
    whose = serializers.CharField(help_text='"you", or "group NAME"')
    window = serializers.ChoiceField(["day", "week", "month"])
    kind = serializers.ChoiceField(["rolling", "calendar"])
    since = serializers.DateTimeField(help_text="when the window began")
    in_words = serializers.CharField(help_text='e.g. "in the last 7 days", "this month"')
    gpu_hours = BudgetUseSerializer(allow_null=True, help_text="null: no GPU budget")
    cpu_hours = BudgetUseSerializer(allow_null=True, help_text="null: no CPU budget")
    series = BudgetBucketSerializer(many=True)


class GroupQuotaEntrySerializer(serializers.Serializer):
    limit = serializers.CharField(allow_null=True, help_text="null: no limit")
    limit_value = serializers.IntegerField(allow_null=True)
    used = serializers.CharField()
    used_value = serializers.IntegerField()


class GroupMemberSerializer(serializers.Serializer):
    username = serializers.CharField()
    weight = serializers.IntegerField()


class GroupSerializer(serializers.Serializer):
    name = serializers.CharField()
    weight = serializers.IntegerField(help_text="the group's fair-share weight")
    members = GroupMemberSerializer(many=True)
    quota = serializers.DictField(child=GroupQuotaEntrySerializer(),
                                  help_text="cpu, memory, gpu, jobs: all members' jobs "
                                            "together")


def submit_field(f: Field) -> serializers.Field:
    """The API's field for a field of the table, as the schema shows it."""
    shared = {"required": f.required, "help_text": f.help}
    if f.type == "integer":
        return serializers.IntegerField(min_value=f.minimum, max_value=f.maximum, **shared)
    if f.choices:
        return serializers.ChoiceField(f.values, **shared)
    if f.type == "env":
        return serializers.DictField(child=serializers.CharField(), **shared)
    return serializers.CharField(max_length=f.maximum, **shared)  # text, trainers, quantities


JobSubmitSerializer = type("JobSubmitSerializer", (serializers.Serializer,), {
    "__module__": __name__,
    "__doc__": "For the schema only: the body is checked by jobs.spec, which names every "
               "mistake. Its fields are paddlecloud_core.spec.FIELDS.",
    **{f.name: submit_field(f) for f in FIELDS},
    "dry_run": serializers.BooleanField(
        required=False, help_text="check everything and answer what would be started; start "
                                  "nothing"),
    "placement": serializers.CharField(
        required=False, max_length=PLACEMENT_MOST,
        help_text="why this datacenter was chosen (paddlectl's -datacenter auto): recorded "
                  "in the job's first event"),
    "template": serializers.CharField(
        required=False, help_text="a template to start from (GET /api/v1/templates/): its "
                                  "values fill in what is not given; a locked field may not "
                                  "change, a limited one stays within its bounds"),
})


class WorkerSerializer(serializers.ModelSerializer):
    class Meta:
        model = Replica
        fields = ["name", "role", "index", "state", "reason", "restarts", "exit_code", "host",
                  "endpoint", "started_at", "finished_at"]


class BuildSerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="uid", read_only=True)
    reference = serializers.CharField(read_only=True,
                                      help_text="The image pinned to what was pushed.")

    class Meta:
        model = Build
        fields = ["id", "state", "reason", "package", "base", "image", "image_digest",
                  "reference", "dockerfile", "created_at", "finished_at"]


class BuildRequestSerializer(serializers.Serializer):
    package = serializers.CharField(help_text="The trainer package, a directory in PFS.")
    base = serializers.CharField(required=False, help_text="The base image (default: the "
                                                           "datacenter's default image).")
    image = serializers.CharField(required=False, help_text="Where it is pushed; default: "
                                  "the datacenter's build registry, tagged by the digest.")
    registry = serializers.CharField(required=False, help_text="Your registry credentials "
                                     "to push with (default: yours for the image's host).")


class EventSerializer(serializers.ModelSerializer):
    worker = serializers.SerializerMethodField()

    class Meta:
        model = JobEvent
        fields = ["id", "time", "worker", "from_state", "to_state", "reason", "repeats",
                  "repeated_until"]

    def get_worker(self, event) -> str | None:
        return event.replica.name if event.replica_id else None


class MetricRecordSerializer(serializers.Serializer):
    """One ``paddlecloud_sdk.report`` call, as the worker's metrics file holds it."""

    seq = serializers.IntegerField(help_text="the line's number in the file, from 0 (lines "
                                             "that are not records are skipped but counted)")
    step = serializers.IntegerField()
    time = serializers.FloatField(allow_null=True, help_text="Unix time of the report")
    metrics = serializers.DictField(
        child=serializers.FloatField(allow_null=True),
        help_text="name -> value; null for nan or an infinity")


class JobMetricsSerializer(serializers.Serializer):
    """What a worker reported with ``paddlecloud_sdk.report(step=…, **metrics)``."""

    worker = serializers.CharField()
    names = serializers.ListField(child=serializers.CharField(),
                                  help_text="every metric name in the records, sorted")
    records = MetricRecordSerializer(many=True, help_text="in the order they were reported")
    next = serializers.IntegerField(help_text="the line to go on from (?from=)")
    more = serializers.BooleanField(help_text="whether more records follow (at most "
                                              "10 000 are answered at a time)")


class PlannedReplicaSerializer(serializers.Serializer):
    name = serializers.CharField()
    role = serializers.CharField()
    index = serializers.IntegerField()
    cpu = serializers.CharField()
    memory = serializers.CharField()
    gpu = serializers.IntegerField()


class DryRunSerializer(serializers.Serializer):
    """What a submission with ``dry_run`` answers: the checked job and its replicas."""

    dry_run = serializers.BooleanField()
    job = serializers.DictField()
    replicas = PlannedReplicaSerializer(many=True)
    admission = serializers.DictField(
        help_text='Would it start now? {"starts": "now" or "queued", "position" in your queue, '
                  '"reason" it would wait, "predicted_start": {"at", "earliest", "latest", '
                  '"unknown"}, "sooner": [{"change": {field: value}, "flag", "start", '
                  '"message"}]: the changes that would start it sooner, the earliest first '
                  '(docs/users/jobs.md)}')
    objects = serializers.ListField(
        child=serializers.DictField(),
        help_text="On a Kubernetes datacenter, the objects that would be created, in order")
    yaml = serializers.CharField(
        allow_blank=True,
        help_text="The same objects as ---separated YAML documents, as `kubectl apply -f` takes "
                  "them (empty when there are none)")


class QuotaUseEntrySerializer(QuotaResourceSerializer):
    used = serializers.CharField()
    used_value = serializers.IntegerField()


class QuotaUseSerializer(serializers.Serializer):
    """Jobs that are starting or running use cpu, memory, gpu and jobs; jobs that wait use
    queued; storage is the PFS."""

    cpu = QuotaUseEntrySerializer()
    memory = QuotaUseEntrySerializer()
    gpu = QuotaUseEntrySerializer()
    jobs = QuotaUseEntrySerializer()
    queued = QuotaUseEntrySerializer(help_text="your jobs that wait (pending or queued)")
    storage = QuotaUseEntrySerializer()
