"""What users do with jobs. The API, the dashboard, the CLI (through the API) and the admin
call these; they validate, record, and hand the work on to the Celery tasks."""

from __future__ import annotations

from typing import NamedTuple

from django.db import IntegrityError, transaction

from accounts.audit import audit_record
from accounts.models import AuditEntry
from paddlecloud.errors import ConflictError, NotFoundError, ValidationError
from paddlecloud.queue import JOB_REMAINS_REMOVE, JOB_STOP, task_later
from paddlecloud_core.quantity import format_bytes, format_cpu
from paddlecloud_core.spec import name_taken
from registries.services import registry_get

from .admission import queue_ahead_annotation, quota_admit, quota_fit_check, quota_queue_check
from .backends import backend_for
from .engine import job_remains
from .models import Job, JobEvent, Replica
from .notify import job_changed, job_deleted
from .spec import JobSpec, job_spec_validate
from .states import FINAL_JOB_STATES, JobState
from .transitions import job_transition


def job_plan(spec: JobSpec) -> list[dict]:
    """The replicas a spec starts, pservers first, with resources as users write them."""
    return ([{"name": f"pserver-{i}", "role": "pserver", "index": i,
              "cpu": format_cpu(spec.pscpu), "memory": format_bytes(spec.psmemory), "gpu": 0}
             for i in range(spec.pservers)]
            + [{"name": f"trainer-{i}", "role": "trainer", "index": i,
                "cpu": format_cpu(spec.cpu), "memory": format_bytes(spec.memory),
                "gpu": spec.gpu} for i in range(spec.trainers)])


def job_spec_display(spec: JobSpec) -> dict:
    """A spec as the API shows a job: quantities as users write them."""
    shown = spec.as_dict()
    for key in ("cpu", "pscpu"):
        shown[key] = format_cpu(shown[key])
    for key in ("memory", "psmemory"):
        shown[key] = format_bytes(shown[key])
    return shown


class Submission(NamedTuple):
    job: Job | None  # None for a dry run
    spec: JobSpec
    objects: list[dict]  # what the backend creates for it (Kubernetes objects; else none)


def job_submit(user, datacenter, data: dict) -> Submission:
    """Validate and record a job, and admit it (it starts once the record is committed) or
    queue it behind the user's quota. A job that can never fit the quota, that would wait
    while the user's ``queued`` quota of jobs already waits, or whose objects the cluster's
    schemas would refuse, is refused.

    With ``dry_run`` in ``data`` nothing is recorded or started (``job`` is None).
    """
    dry_run = bool(data.get("dry_run"))
    spec = job_spec_validate(user, datacenter, data)
    quota_fit_check(user, datacenter, spec)
    fields = spec.as_dict()
    registry_name = fields.pop("registry")
    registry = registry_get(user, datacenter, registry_name) if registry_name else None
    unsaved = Job(owner=user, datacenter=datacenter, registry=registry, **fields)
    objects = backend_for(datacenter).objects(unsaved)
    if dry_run:
        quota_queue_check(user, datacenter, spec)
        return Submission(None, spec, objects)
    try:
        with transaction.atomic():
            quota_queue_check(user, datacenter, spec, lock=True)
            job = Job.objects.create(owner=user, datacenter=datacenter, registry=registry,
                                     uid=unsaved.uid, **fields)
            Replica.objects.bulk_create(
                Replica(job=job, role=r["role"], index=r["index"]) for r in job_plan(spec))
            JobEvent.objects.create(job=job, from_state="", to_state=JobState.PENDING,
                                    reason=f"submitted by {user.username}")
            audit_record(user, AuditEntry.Action.JOB_SUBMIT, f"{user.username}/{job.name}",
                         datacenter=datacenter, trainers=job.trainers, pservers=job.pservers,
                         cpu=format_cpu(job.cpu), memory=format_bytes(job.memory),
                         gpu=job.gpu, image=job.image)
            quota_admit(user.pk, datacenter.pk)
            job_changed(job.pk)
    except IntegrityError:
        raise ValidationError.for_field("name", name_taken(spec.name)) from None
    job.refresh_from_db(fields=["state", "state_reason", "started_at", "updated_at",
                                "trainers_held"])
    return Submission(job, spec, objects)


def job_get(user, datacenter, name: str) -> Job:
    """One of the user's jobs in the datacenter; another user's job is simply not found."""
    job = (Job.objects.select_related("datacenter", "owner", "registry")
           .annotate(queue_ahead=queue_ahead_annotation())
           .filter(owner=user, datacenter=datacenter, name=name).first())
    if job is None:
        raise NotFoundError(f"you have no job named {name!r} in datacenter {datacenter.name!r}")
    return job


def job_worker(job, name: str | None) -> Replica:
    """The job's worker named ``name`` (``trainer-0``, ``pserver-1``); by default its first
    trainer (its first replica when it has none)."""
    replicas = list(job.replicas.all())
    if not name:
        trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
        return min(trainers or replicas, key=lambda r: (r.role, r.index))
    for replica in replicas:
        if replica.name == name:
            return replica
    names = ", ".join(sorted(r.name for r in replicas))
    raise NotFoundError.for_field("worker", f"job {job.name!r} has no worker {name!r} "
                                            f"(it has {names})")


def job_list(user, datacenter, *, state: str | None = None, name: str | None = None):
    jobs = (Job.objects.filter(owner=user, datacenter=datacenter)
            .select_related("datacenter", "registry")
            .annotate(queue_ahead=queue_ahead_annotation()))
    if state:
        states = [s.strip() for s in state.split(",") if s.strip()]
        unknown = sorted(set(states) - set(JobState.values))
        if unknown:
            raise ValidationError.for_field(
                "state", f"unknown state {unknown[0]!r}; use {', '.join(JobState.values)}")
        jobs = jobs.filter(state__in=states)
    if name:
        jobs = jobs.filter(name__contains=name)
    return jobs


def job_kill(user, datacenter, name: str, *, by=None) -> Job:
    """End a job and every replica of it (the seeds' ``paddlectl kill``). ``by`` is who kills
    it when that is not its owner (an admin)."""
    job = job_get(user, datacenter, name)
    if job.state in FINAL_JOB_STATES:
        raise ConflictError(f"job {name!r} has already ended ({job.state})", code="job_ended")
    job_transition(job, JobState.KILLED, f"killed by {(by or user).username}")
    audit_record(by or user, AuditEntry.Action.JOB_KILL, f"{user.username}/{name}",
                 datacenter=datacenter)

    task_later(JOB_STOP, job.pk)
    return job


def job_delete(user, datacenter, name: str) -> None:
    """Remove an ended job from history (the seeds' ``kill -rm``). Its output stays in PFS."""
    job = job_get(user, datacenter, name)
    if job.state not in FINAL_JOB_STATES:
        raise ConflictError(f"job {name!r} is {job.state}: kill it first "
                            f"(paddlectl kill {name}), then delete it", code="job_not_ended")
    job_remove(job, by=user)


def job_remove(job: Job, *, by=None, **details) -> None:
    """Remove an ended job from history, audited: who (``by``; None is the system, when its
    TTL has passed) and why (``details``). The one way out, for a delete and a TTL.

    Its records go now: it is no longer listed and its name is free again. What may still run
    or be kept for it — the replicas of a job just killed, whose stop has not run yet, and what
    the backend keeps privately — a task stops and removes (``tasks.job_remains_remove``), so
    nobody waits for replicas to stop. Its output stays in PFS."""
    remains = job_remains(job)
    with transaction.atomic():
        job_deleted(job)
        job.delete()
        audit_record(by, AuditEntry.Action.JOB_DELETE, f"{job.owner.username}/{job.name}",
                     datacenter=job.datacenter, **details)
        task_later(JOB_REMAINS_REMOVE, remains)
