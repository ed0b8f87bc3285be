"""Jobs, their replicas (parameter servers, trainers) and the record of every state change."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError as FormError
from django.db import models
from django.utils import timezone

from paddlecloud_core.contract import KEEP_CHECKPOINTS
from paddlecloud_core.spec import trainers_shown
from paddlecloud_core.templates import template_problems

from .states import FINAL_REPLICA_STATES, JobState, ReplicaState


class Build(models.Model):
    """A runtime image built from a trainer package (``jobs.builds``): ``FROM`` a base image,
    the package at ``/train/package``, its requirements installed; pushed to ``image``, a tag
    named by ``digest`` in the datacenter's build registry. One build per tag at a time: the
    jobs that need the same image wait for the same build."""

    class State(models.TextChoices):
        BUILDING = "building"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    # The reason of a build whose jobs were all killed while it ran (``builds.runs``).
    CANCELLED = "cancelled: no job waits for it any more"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="builds")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="builds")
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    package = models.CharField("trainer package", max_length=4096)
    base = models.CharField("base image", max_length=512)
    digest = models.CharField(max_length=64, help_text="sha256 of what decides the image: the "
                                                       "base, the Dockerfile, the package.")
    image = models.CharField(max_length=512, help_text="Where it is pushed: host/repo:tag.")
    registry = models.ForeignKey(
        "registries.Registry", on_delete=models.SET_NULL, null=True, blank=True,
        related_name="builds", help_text="The owner's credentials it is pushed with.")
    dockerfile = models.BooleanField("package's own Dockerfile", default=False)
    state = models.CharField(max_length=16, choices=State.choices, default=State.BUILDING)
    reason = models.TextField(blank=True)
    image_digest = models.CharField(max_length=80, blank=True,
                                    help_text="The pushed manifest's digest (sha256:…).")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["datacenter", "image"],
                                    condition=models.Q(state="building"),
                                    name="one_build_per_image"),
        ]

    def __str__(self) -> str:
        return f"{self.image} ({self.state})"

    @property
    def package_run(self) -> str:
        """The directory it is built from (``files.package_copy`` reads it as a job's): a
        job's build, that job's snapshot."""
        return self.package

    # What ``files.package_copy`` checks a copy against: nothing for a build, whose image
    # is named by a digest of what it is built from (``builds.recipe``).
    package_digest = ""

    @property
    def reference(self) -> str:
        """The image pinned to what was pushed (``host/repo:tag@sha256:…``), once built."""
        return f"{self.image}@{self.image_digest}" if self.image_digest else self.image

    # As a worker whose log is followed (``paddlectl logs JOB -w build``).
    name = role = "build"
    index = 0


class Job(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="jobs")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.PROTECT,
                                   related_name="jobs")
    name = models.CharField(max_length=40)
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False,
                           help_text="Tells this job's cluster objects from those of an earlier "
                                     "job of the same name.")
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    state_reason = models.TextField(blank=True)
    environment = models.CharField(
        max_length=64, blank=True, help_text="The digest of the environment its "
        "requirements.txt is installed in (jobs/backends/local/envs.py): in use while the job "
        "lives.")

    # What to run: a trainer package in PFS, the command that starts it, the image.
    package = models.CharField("trainer package", max_length=4096,
                               help_text="A directory in PFS, e.g. /pfs/dc1/home/alice/pkg.")
    package_snapshot = models.CharField(
        max_length=4096, blank=True, help_text="Where the package was copied when the job was "
        "submitted (jobs/<name>/package), or the job's own upload of a local package: what it "
        "runs. Empty for jobs submitted before snapshots were kept.")
    package_digest = models.CharField(
        max_length=71, blank=True, help_text="The snapshot's content digest (sha256:…): its "
        "paths, modes and bytes (paddlecloud_core.snapshots).")
    entry = models.TextField(help_text='The command that starts a replica: "python train.py".')
    topology = models.CharField(max_length=1024, blank=True,
                                help_text="PaddlePaddle v1 config file in the package (legacy).")
    image = models.CharField(max_length=512)
    image_digest = models.CharField(
        max_length=71, blank=True, help_text="The digest of the image its replicas ran "
        "(sha256:…), as the cluster reported it (a pod's imageID); empty where it runs none "
        "or none was reported yet.")
    build = models.ForeignKey(
        Build, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs",
        help_text="The build of its runtime image (a package with requirements.txt or a "
                  "Dockerfile, in a datacenter with a build registry).")
    registry = models.ForeignKey(
        "registries.Registry", on_delete=models.SET_NULL, null=True, blank=True,
        related_name="jobs", help_text="The credential its images are pulled with.")

    # Trainers, each with these resources.
    trainers = models.PositiveIntegerField(
        default=1, help_text="How many trainers; of an elastic job, the most at once (MAX).")
    # Elastic trainers (trainers given as MIN:MAX; docs/elastic.md): None for a fixed number.
    trainers_min = models.PositiveIntegerField(
        null=True, blank=True, help_text="An elastic job's fewest trainers (MIN); empty: "
                                         "a fixed number.")
    trainers_lost_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="How many trainers an elastic job may lose (each "
                                         "replaced when there is room) before it fails.")
    trainers_below_min_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="How long an elastic job may run with fewer than "
                                         "MIN trainers before it fails.")
    trainers_held = models.PositiveIntegerField(
        default=0, help_text="The trainers it holds now (running, or started or to be started "
                             "by the engine): what its quota counts of an elastic job.")
    trainers_lost = models.PositiveIntegerField(
        default=0, help_text="The trainers an elastic job has lost so far.")
    trainers_short_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when an elastic job runs with fewer than MIN "
                                         "trainers (empty: it does not).")
    cpu = models.PositiveIntegerField("CPU per trainer (millicores)", default=1000)
    memory = models.PositiveBigIntegerField("memory per trainer (bytes)", default=2**30)
    gpu = models.PositiveIntegerField("GPUs per trainer", default=0)

    # Parameter servers (none for collective jobs).
    pservers = models.PositiveIntegerField(default=0)
    pscpu = models.PositiveIntegerField("CPU per pserver (millicores)", default=1000)
    psmemory = models.PositiveBigIntegerField("memory per pserver (bytes)", default=2**30)

    passes = models.PositiveIntegerField(default=1)
    priority = models.SmallIntegerField(
        default=0, help_text="Its place in its owner's queue: higher first (high 100, normal 0, "
                             "low -100), then submission time.")
    env = models.JSONField("extra environment", default=dict, blank=True)
    restart_limit = models.PositiveIntegerField(
        default=0, help_text="How often a failed trainer is restarted before the job fails.")
    keep_checkpoints = models.PositiveIntegerField(
        default=KEEP_CHECKPOINTS, help_text="How many of its newest checkpoints the job keeps.")
    rerun_of = models.CharField(
        max_length=40, blank=True, default="",
        help_text="The name of the owner's job it re-runs (submit -from JOB).")
    resume_from = models.CharField(
        max_length=64, blank=True, default="",
        help_text="JOB:STEP: the checkpoint of another of the owner's jobs it starts from "
                  "(the step made explicit at submission).")
    after = models.CharField(
        max_length=1024, blank=True, default="",
        help_text="The jobs of its owner it runs after, as submitted: JOB (once it succeeded) "
                  "or JOB:any (once it ended), comma-separated (each a JobDependency).")
    deadline_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="The job fails if it runs longer than this.")
    ttl_seconds_after_finished = models.PositiveIntegerField(
        null=True, blank=True, help_text="Delete the job this long after it ends.")

    # The data its master dispatches to the trainers, task by task (jobs.master).
    dataset = models.CharField(max_length=4096, blank=True,
                               help_text="A glob of files in PFS; empty: no master.")
    dataset_unit = models.CharField(max_length=16, blank=True,
                                    help_text="file, chunk (RecordIO) or records.")
    task_records = models.PositiveIntegerField(null=True, blank=True,
                                               help_text="Records per task (unit records).")

    # Set by the portal, never through submit: a session (interactive.sessions) is a job whose
    # one replica serves its owner (a notebook, VisualDL) rather than trains.
    session = models.CharField(
        max_length=16, blank=True, default="", editable=False,
        help_text="What kind of session the job is (notebook, visualdl); empty for a training "
                  "job.")

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(
        null=True, blank=True, help_text="When its current start began (its start timeout runs "
                                         "from here).")
    budget_warned_at = models.DateTimeField(
        null=True, blank=True, help_text="When it was warned that its owner's (or group's) "
                                         "budget is spent; empty while it is not.")
    requeues = models.PositiveIntegerField(
        default=0, help_text="How often a start timed out and it went back to its queue.")
    preempting = models.TextField(
        blank=True, editable=False,
        help_text="Why the portal is stopping it to make room for another's job (its next "
                  "sync does: scheduling.preemption); empty while it is not.")
    # Who holds its start, and until when (jobs/starts.py): a start no living process holds
    # is sent again within seconds.
    start_holder = models.CharField(
        max_length=200, blank=True, editable=False,
        help_text="Who holds its start: being sent, queued, or a worker's process taking or "
                  "running it; empty when none is asked for.")
    start_lease_until = models.DateTimeField(
        null=True, blank=True, editable=False,
        help_text="Until when its start's holder holds it unless it renews (a living one does).")
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="unique_job_name_per_owner"),
        ]
        indexes = [
            # A user's jobs in a datacenter, newest first: the lists' order, their cursor
            # (created_at) and their count, from the index alone.
            models.Index(fields=["owner", "datacenter", "-created_at", "-id"],
                         name="job_owner_recent"),
            # ... of some states: the lists' state filter, and for each job listed the
            # waiting jobs ahead of it (admission.queue_ahead_annotation), a range each.
            models.Index(fields=["owner", "datacenter", "state", "created_at", "id"],
                         name="job_owner_state"),
            models.Index(fields=["state"], name="job_state"),
            # On PostgreSQL, "part of the name" (name__contains) is also found through a
            # trigram index of the names, made by migration 0009 (not declared here: it is
            # PostgreSQL's only, and SQLite rebuilds tables from the declared indexes).
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.owner}, {self.state})"

    @property
    def package_run(self) -> str:
        """The package directory its replicas get: its snapshot (else, for a job submitted
        before snapshots were kept, its package as it is)."""
        return self.package_snapshot or self.package

    @property
    def trainers_now(self) -> int | None:
        """The trainers it holds while it starts or runs (of a fixed job: all); else None."""
        if self.state not in (JobState.STARTING, JobState.RUNNING):
            return None
        return self.trainers_held if self.trainers_min is not None else self.trainers

    @property
    def trainers_shown(self) -> str:
        """Its trainers as people read them: ``2``, or for an elastic job ``3 (2-4)`` (with
        an en dash)."""
        return trainers_shown(self.trainers_now, self.trainers_min, self.trainers)


class JobDependency(models.Model):
    """That ``job`` runs after ``on`` ends as ``mode`` asks (``ok``: it succeeded; ``any``: it
    ended). ``met`` once it has: ``job`` no longer waits for it (``on`` may then be deleted).
    One that can no longer be met fails ``job`` (``scheduling.dependencies``)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    on = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True,
                           related_name="dependents")
    on_name = models.CharField(max_length=40, help_text="The name ``on`` had.")
    mode = models.CharField(max_length=8, default="ok")
    met = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "on"], name="unique_dependency")]
        # The dependents of a job that ends are found by ``on`` (its foreign key's index);
        # a waiting job's unmet ones by this.
        indexes = [models.Index(fields=["job", "met"], name="dependency_job_met")]

    def __str__(self) -> str:
        return f"{self.job_id} after {self.on_name}:{self.mode}"


class Replica(models.Model):
    class Role(models.TextChoices):
        PSERVER = "pserver"
        TRAINER = "trainer"
        MASTER = "master"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="replicas")
    role = models.CharField(max_length=16, choices=Role.choices)
    index = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=ReplicaState.choices,
                             default=ReplicaState.PENDING)
    reason = models.TextField(blank=True)
    restarts = models.PositiveIntegerField(
        default=0, help_text="Restarts after failures, counted against the job's limit.")
    disruptions = models.PositiveIntegerField(
        default=0, help_text="Restarts after the cluster took its pod away (eviction, "
                             "preemption, a node lost): not counted against the limit.")
    attempt = models.PositiveIntegerField(
        default=0, help_text="Which run of the replica this is: grows with every restart, "
                             "counted or not, and every start of the job.")
    exit_code = models.IntegerField(null=True, blank=True)
    host = models.CharField(max_length=253, blank=True)
    endpoint = models.CharField(max_length=300, blank=True, help_text="host:port")
    backend_ref = models.CharField(max_length=253, blank=True,
                                   help_text="The backend's handle: a pid, a pod name.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "role", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "role", "index"], name="unique_replica"),
        ]

    def __str__(self) -> str:
        return f"{self.job.name}-{self.role}-{self.index}"

    @property
    def name(self) -> str:
        """As users name workers: ``trainer-0``, ``pserver-1``."""
        return f"{self.role}-{self.index}"


def build_ended(build_id: int) -> bool:
    """Whether the build will write no more to its log (it ended, or is gone)."""
    state = Build.objects.filter(pk=build_id).values_list("state", flat=True).first()
    return state in (None, Build.State.SUCCEEDED, Build.State.FAILED)


def worker_ended(worker) -> bool:
    """``replica_ended`` or ``build_ended``, for whoever follows a worker's log."""
    if isinstance(worker, Build):
        return build_ended(worker.pk)
    return replica_ended(worker.pk)


def replica_ended(replica_id: int) -> bool:
    """Whether the replica will write no more: it is in a final state, or gone with its job.
    (Asked by whoever follows its log, and before the last read, so nothing is missed.)"""
    state = Replica.objects.filter(pk=replica_id).values_list("state", flat=True).first()
    return state is None or state in FINAL_REPLICA_STATES


# What a job can make happen as often as it likes (its master's tasks given back, failed,
# dispatched again) is recorded at most REPEAT_BURST times a kind in REPEAT_WINDOW_SECONDS; the
# rest of a burst is counted on the last event of its kind (``JobEvent.repeats``), so that a
# job flooding its master cannot flood its event list (docs/admin/security.md).
REPEAT_BURST = 10
REPEAT_WINDOW_SECONDS = 60


class JobEvent(models.Model):
    """One state change of a job or of one of its replicas (or of a task of its master)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    replica = models.ForeignKey(Replica, on_delete=models.CASCADE, null=True, blank=True,
                                related_name="events")
    time = models.DateTimeField(default=timezone.now)
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    reason = models.TextField(blank=True)
    repeats = models.PositiveIntegerField(
        default=0, help_text="How many more events like it followed, counted here rather "
                             "than recorded (REPEAT_BURST)")
    repeated_until = models.DateTimeField(null=True, blank=True,
                                          help_text="The time of the last of them")

    class Meta:
        ordering = ["time", "id"]
        indexes = [models.Index(fields=["job", "time", "id"], name="jobevent_job_time")]

    def __str__(self) -> str:
        who = f"{self.replica.name} " if self.replica_id else ""
        return f"{self.job.name}: {who}{self.from_state} -> {self.to_state} ({self.reason})"


class Usage(models.Model):
    """One run of a replica, as accounting keeps it: whose, where, what it held and from when
    to when (``ended_at`` empty while it runs). A row is appended as the replica's process
    starts and closed as it ends (``transitions.replica_transition``), or as its job is
    removed (``usage_close``); nothing else changes or deletes one. It names its job and
    replica by id without a foreign key: a job deleted (``DELETE``, ``kill -rm``, a TTL)
    takes its history with it, not its use. Budgets are summed from these rows
    (``scheduling.budgets``)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="usage")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.PROTECT,
                                   related_name="usage")
    job_key = models.BigIntegerField(help_text="Its job's id (the job may be gone).")
    job_name = models.CharField(max_length=40)
    replica_key = models.BigIntegerField(help_text="Its replica's id (it may be gone).")
    role = models.CharField(max_length=16)
    index = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=0)
    cpu = models.PositiveIntegerField("CPU held (millicores)", default=0)
    gpu = models.PositiveIntegerField("GPUs held", default=0)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # Checkpoints (issue 37), set by ``jobs.usage`` alone: the step a run resumed from (its
    # trainer 0's SDK said so), and what a run that ended by a restart lost — the time it
    # trained since its job's last complete checkpoint, and the steps it reported since.
    resumed_from = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The checkpoint's step this run resumed from.")
    lost_seconds = models.FloatField(
        null=True, blank=True, help_text="Ended by a restart: the seconds it trained since "
                                         "its job's last complete checkpoint (lost).")
    lost_steps = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Ended by a restart: the steps reported since its "
                                         "job's last complete checkpoint (lost).")
    # Its job's submission, for the usage reports' wait (``scheduling.reports``).
    submitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "usage record"  # the admin's "Usage records"
        ordering = ["started_at", "id"]
        indexes = [
            # An owner's runs in a datacenter that may overlap a budget's window.
            models.Index(fields=["datacenter", "owner", "started_at"], name="usage_owner_time"),
            # The open runs of a job, or of one replica of it, to close them.
            models.Index(fields=["job_key", "replica_key"], name="usage_open_run",
                         condition=models.Q(ended_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} {self.role}-{self.index} #{self.attempt} ({self.owner_id})"


def event_repeatable(job_id: int, from_state: str, to_state: str, reason: str) -> None:
    """Record an event of the job that it may cause at will: a row while its kind (from_state,
    to_state) has had fewer than REPEAT_BURST in the last REPEAT_WINDOW_SECONDS, else counted
    on the newest of them (one indexed look and one write either way)."""
    now = timezone.now()
    recent = list(JobEvent.objects.filter(
        job_id=job_id, replica=None, from_state=from_state, to_state=to_state,
        time__gte=now - timedelta(seconds=REPEAT_WINDOW_SECONDS),
    ).order_by("-time", "-id").values_list("pk", flat=True)[:REPEAT_BURST])
    if len(recent) >= REPEAT_BURST and JobEvent.objects.filter(pk=recent[0]).update(
            repeats=models.F("repeats") + 1, repeated_until=now):
        return
    JobEvent.objects.create(job_id=job_id, time=now, from_state=from_state, to_state=to_state,
                            reason=reason)


class Task(models.Model):
    """A piece of a job's dataset in one pass, as its master dispatches it: waiting, leased to
    a trainer until ``lease_expires``, done, or set aside after failing too often."""

    class State(models.TextChoices):
        WAITING = "waiting"
        LEASED = "leased"
        DONE = "done"
        SET_ASIDE = "set_aside"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    pass_no = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    spans = models.JSONField(help_text="What to read: [{path, kind, offset|start, count}].")
    state = models.CharField(max_length=16, choices=State.choices, default=State.WAITING)
    trainer = models.PositiveIntegerField(null=True, blank=True,
                                          help_text="The trainer holding it, or that did it.")
    lease = models.CharField(max_length=32, blank=True,
                             help_text="Names the current lease: a stale holder's calls fail.")
    lease_expires = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="Leases given.")
    failures = models.PositiveIntegerField(default=0)
    trained = models.PositiveIntegerField(
        default=0, help_text="Its records trained as of the latest checkpoint (or the one a "
                             "restarted job resumed from): the next holder skips them.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["job", "pass_no", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "pass_no", "index"], name="unique_task"),
        ]
        indexes = [models.Index(fields=["job", "pass_no", "state", "index"],
                                name="task_dispatch"),
                   # The next task to hand out: the first waiting one of the pass. PostgreSQL
                   # took it by the unique index, filtering out the pass's done tasks (all
                   # before it, where it guesses them spread evenly): a take cost more with
                   # every task done, 4 ms after 8 000 (bench/master.py). Here only waiting
                   # tasks are kept, so it reads one entry.
                   models.Index(fields=["job", "pass_no", "index"], name="task_waiting",
                                condition=models.Q(state="waiting")),
                   # The leases to take back: at most one a trainer.
                   models.Index(fields=["job", "trainer"], name="task_leased",
                                condition=models.Q(state="leased"))]

    def __str__(self) -> str:
        return f"{self.job.name} pass {self.pass_no + 1} task {self.index} ({self.state})"


class SubmitKey(models.Model):
    """An ``Idempotency-Key`` a submission came with (``POST /api/v1/jobs/``): for a day, the
    same key from the same user answers with the job it made instead of making another (a
    client that lost the answer sends its submission again, with the key)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="+")
    key = models.CharField(max_length=200)
    digest = models.CharField(max_length=64, help_text="SHA-256 of the request it came with.")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True,
                            related_name="+")
    answer = models.JSONField(null=True, blank=True, help_text="The body of the first answer.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "key"], name="unique_submit_key")]

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.key}"


class JobTemplate(models.Model):
    """A spec an administrator publishes for users to submit from (issue 39;
    ``paddlecloud_core.templates``): values as users write them, fields ``locked`` to them,
    fields ``limits`` keeps within a range or choices."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    spec = models.JSONField(default=dict, blank=True,
                            help_text='Field values as users write them, e.g. {"image": '
                                      '"paddle:2.6", "gpu": 1, "memory": "4Gi"}.')
    locked = models.JSONField(default=list, blank=True,
                              help_text='Fields users may not change, e.g. ["image"].')
    limits = models.JSONField(default=dict, blank=True,
                              help_text='e.g. {"trainers": {"min": 1, "max": 4}, "memory": '
                                        '{"max": "8Gi"}, "priority": {"choices": ["low", '
                                        '"normal"]}}')
    published = models.BooleanField(default=True, help_text="Listed and usable by users.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        if problems := template_problems(self.spec, self.locked, self.limits):
            raise FormError(problems)
