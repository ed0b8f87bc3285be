"""What users do with jobs. The API, the dashboard, the CLI (through the API) and the admin
call these; they validate, record, and hand the work on to the Celery tasks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.audit import audit_record
from accounts.models import QUOTA_FORMATS, AuditEntry, Membership, Team
from accounts.throttling import rate_take
from kernel.errors import (
    ConflictError,
    NotFoundError,
    PaddleCloudError,
    UnprocessableError,
    ValidationError,
)
from kernel.queue import BUILD_RUN, JOB_BUILD, JOB_REMAINS_REMOVE, JOB_STOP, task_later
from paddlecloud_core.layout import job_holds, package_snapshot_rel, pfs_home
from paddlecloud_core.quantity import format_bytes, format_cpu
from paddlecloud_core.scheduling import Vec
from paddlecloud_core.spec import name_taken
from paddlecloud_core.templates import template_apply
from pfs.services import storage_check, storage_room, usage_add
from registries.oci import image_ref_parse
from registries.services import registry_get
from scheduling.admission import (
    queue_ahead_annotation,
    quota_admit,
    quota_fit_check,
    quota_fit_problems,
    quota_queue_check,
)
from scheduling.dependencies import dependencies_record
from scheduling.forecasts import datacenter_forecast
from scheduling.pool import REQUEST_FIELDS, held_vec
from scheduling.sooner import sooner_find

from .backends import backend_for, image_shown
from .backends.base import BackendError
from .builds.recipe import build_inputs, runtime_image, runtime_tag
from .builds.registry import push_credentials
from .builds.runs import build_abandoned, job_build_needed
from .engine import job_remains
from .files import Snapshot, job_home, package_digest, package_snapshot
from .folds import jobs_folded
from .models import Build, Job, JobEvent, JobTemplate, Replica, SubmitKey
from .notify import job_changed, job_deleted
from .spec import JobSpec, job_spec_validate, package_target
from .states import ACTIVE_STATES, FINAL_JOB_STATES, WAITING_STATES, JobState
from .transitions import job_transition
from .usage import usage_close


def job_plan(spec: JobSpec) -> list[dict]:
    """The replicas a spec starts, pservers first, with resources as users write them."""
    return ([{"name": f"pserver-{i}", "role": "pserver", "index": i,
              "cpu": format_cpu(spec.pscpu), "memory": format_bytes(spec.psmemory), "gpu": 0}
             for i in range(spec.pservers)]
            + [{"name": f"trainer-{i}", "role": "trainer", "index": i,
                "cpu": format_cpu(spec.cpu), "memory": format_bytes(spec.memory),
                "gpu": spec.gpu} for i in range(spec.trainers)])


def job_spec_display(spec: JobSpec, datacenter) -> dict:
    """A spec as the API shows a job: quantities as users write them, and the image it
    runs (``image_shown``)."""
    shown = spec.as_dict()
    for key in ("cpu", "pscpu"):
        shown[key] = format_cpu(shown[key])
    for key in ("memory", "psmemory"):
        shown[key] = format_bytes(shown[key])
    shown["image"] = image_shown(datacenter, shown["image"])
    return shown


class Submission(NamedTuple):
    job: Job | None  # None for a dry run
    spec: JobSpec
    objects: list[dict]  # what the backend creates for it (Kubernetes objects; else none)
    admission: dict | None = None  # a dry run's: would it start now, or wait, and how long
    package_digest: str = ""  # a re-run's dry run: its package's digest as it is now


def admission_preview(user, datacenter, unsaved: Job) -> dict:
    """What submitting ``unsaved`` now would do: start at once, or wait at a place in the
    user's queue, for a reason, until a predicted time, and what would start it sooner
    (``submit --dry-run``)."""
    unsaved.created_at = timezone.now()
    plan, predicted = datacenter_forecast(datacenter, [user.pk], extra=unsaved)
    if 0 in plan.admit:
        return {"starts": "now", "position": None, "reason": "", "predicted_start": None}
    ahead = Job.objects.filter(owner=user, datacenter=datacenter, state__in=WAITING_STATES)
    reason = plan.reasons.get(0) or plan.never.get(0)
    # Submitted now, it would go behind every waiting job of its priority or higher.
    return {"starts": "queued",
            "position": ahead.filter(priority__gte=unsaved.priority).count() + 1,
            "reason": reason.message if reason else "",
            "predicted_start": predicted[0].as_dict() if 0 in predicted else None,
            "sooner": sooner_find(unsaved)}


def job_submit(user, datacenter, data: dict, *, session: str = "") -> Submission:
    """Validate and record a job, and admit it (it starts once the record is committed) or
    queue it behind the user's quota. A job that can never fit the quota, that would wait
    while the user's ``queued`` quota of jobs already waits, or whose objects the cluster's
    schemas would refuse, is refused.

    With ``dry_run`` in ``data`` nothing is recorded or started (``job`` is None). ``session``
    (never a submitted field: ``interactive.sessions`` sets it) makes the job a session of
    that kind.
    """
    data = templated(data)
    dry_run = bool(data.get("dry_run"))
    if dry_run:  # costly (the objects, a forecast) and free of quota: a rate of its own
        rate_take("dry runs", user, limit=settings.PADDLECLOUD_DRY_RUNS_PER_MINUTE, window=60)
    spec = job_spec_validate(user, datacenter, data, fit=(
        REQUEST_FIELDS, lambda spec: quota_fit_problems(user, datacenter, spec)[0]))
    quota_fit_check(user, datacenter, spec)
    storage_check(user, datacenter)  # a job writes into the home: not one over its quota
    fields = spec.as_dict()
    registry_name = fields.pop("registry")
    registry = registry_get(user, datacenter, registry_name) if registry_name else None
    unsaved = Job(owner=user, datacenter=datacenter, registry=registry, session=session,
                  **fields)
    objects = backend_for(datacenter).objects(unsaved)
    if dry_run:
        quota_queue_check(user, datacenter, spec)
        digest = _package_now(user, datacenter, spec.package) if spec.rerun_of else ""
        return Submission(None, spec, objects, admission_preview(user, datacenter, unsaved),
                          package_digest=digest)
    fields["package_snapshot"], fields["package_digest"], copied = _package_snapshot(
        user, datacenter, spec)
    try:
        with transaction.atomic():
            quota_queue_check(user, datacenter, spec, lock=True)
            building = job_build_needed(unsaved)
            job = Job.objects.create(owner=user, datacenter=datacenter, registry=registry,
                                     uid=unsaved.uid, session=session, **fields,
                                     state=JobState.BUILDING if building else JobState.PENDING)
            if copied is not None:  # the name is the job's now: its snapshot takes its place
                added = copied.place()
                transaction.on_commit(lambda: usage_add(user, datacenter, added))
            Replica.objects.bulk_create(
                Replica(job=job, role=r["role"], index=r["index"]) for r in job_plan(spec))
            dependencies_record(job)
            JobEvent.objects.create(
                job=job, from_state="", to_state=job.state,
                reason=f"submitted by {user.username}" + (
                    f"; {data['placement']}" if data.get("placement") else "") + (
                    ": its runtime image is built from its package first" if building else ""))
            audit_record(user, AuditEntry.Action.JOB_SUBMIT, f"{user.username}/{job.name}",
                         datacenter=datacenter, trainers=job.trainers, pservers=job.pservers,
                         cpu=format_cpu(job.cpu), memory=format_bytes(job.memory),
                         gpu=job.gpu, image=job.image)
            if building:
                task_later(JOB_BUILD, job.pk)
            else:
                quota_admit(user.pk, datacenter.pk)
            job_changed(job.pk)
    except IntegrityError:
        if copied is not None:
            copied.discard()
        raise ValidationError.for_field("name", name_taken(spec.name)) from None
    except BaseException:
        if copied is not None:
            copied.discard()
        raise
    job.refresh_from_db(fields=["state", "state_reason", "started_at", "updated_at",
                                "trainers_held"])
    return Submission(job, spec, objects)


def _package_at(user, datacenter, package: str):
    """Where the package is (its storage and path)."""
    target, problems = package_target(user, datacenter, package)
    if target is None:
        raise ValidationError.for_field("package", problems[0])
    return target


def _package_now(user, datacenter, package: str) -> str:
    """The package's digest as it is now."""
    target = _package_at(user, datacenter, package)
    try:
        return package_digest(target.storage, target.rel)[0]
    except PaddleCloudError as exc:
        raise ValidationError.for_field("package", f"cannot read it: {exc.message}") from None


def _package_snapshot(user, datacenter, spec: JobSpec) -> tuple[str, str, Snapshot | None]:
    """The job's package snapshot, taken once at submission (issue 39): its path, its digest,
    and the copy still to be placed (None when nothing was copied). A package the job's own
    directory holds (a local package paddlectl or the SDK uploaded there) is its snapshot
    as it is; any other is copied into ``jobs/{name}/package``, within the owner's storage
    quota (``storage_room``, naming ``package``)."""
    target = _package_at(user, datacenter, spec.package)
    path = target.path
    if path.user == user.username and job_holds(spec.name, path.parts):
        return spec.package, _package_now(user, datacenter, spec.package), None
    home = job_home(Job(owner=user, datacenter=datacenter, name=spec.name))  # no link followed
    try:
        copied = package_snapshot(home, spec.name, target.storage, target.rel, lambda size:
                                  storage_room(user, datacenter, size, field="package",
                                               what="its package's snapshot"))
    except PaddleCloudError as exc:
        if "package" in exc.fields:  # no room for it
            raise
        where = home.display(package_snapshot_rel(spec.name))
        raise ValidationError.for_field(
            "package", f"cannot take its snapshot in {where}: {exc.message}") from None
    snapshot = "/".join((pfs_home(datacenter.name, user.username), *copied.rel))
    return snapshot, copied.digest, copied


def template_list():
    """The templates users may submit from."""
    return JobTemplate.objects.filter(published=True)


def templated(data: dict) -> dict:
    """A submission naming a ``template``, laid over it: a 400 naming each locked field given
    another value and each limited one out of bounds, or naming ``template`` when there is
    no such template."""
    name = data.get("template") if isinstance(data, dict) else None
    if not name:
        return data
    template = template_list().filter(name=name).first()
    if template is None:
        raise ValidationError.for_field(
            "template", f"no template named {name!r} (see paddlectl templates)")
    given = {key: value for key, value in data.items() if key != "template"}
    merged, problems = template_apply(template.name, template.spec, template.locked,
                                      template.limits, given)
    if problems:
        raise ValidationError("; ".join(f"{field}: {problem}" for field, problem
                                        in problems.items()),
                              fields={field: [problem] for field, problem in problems.items()})
    return merged


SUBMIT_KEY_HEADER = "Idempotency-Key"
SUBMIT_KEY_RULE = "1 to 200 printable ASCII characters (a fresh UUID for each job)"
SUBMIT_KEY_LIFETIME = timedelta(hours=24)


def submit_key_check(key: str | None) -> str | None:
    """The ``Idempotency-Key`` a submission came with, checked (None: none)."""
    if key is not None and not (0 < len(key) <= 200 and all(" " <= c <= "~" for c in key)):
        raise ValidationError.for_field(SUBMIT_KEY_HEADER, SUBMIT_KEY_RULE)
    return key


def job_submit_once(user, datacenter, data: dict, key: str,
                    answer: Callable[[Job], dict]) -> tuple[dict, bool]:
    """``job_submit`` under an ``Idempotency-Key``: the first submission with ``key`` makes the
    job and keeps ``answer(job)`` with the key; the same key again from ``user`` within
    SUBMIT_KEY_LIFETIME makes nothing and has that answer back. Returns the answer and whether
    it is a replay. The same key with another request is refused (422)."""
    digest = hashlib.sha256(json.dumps({"datacenter": datacenter.name, "job": data},
                                       sort_keys=True, default=str).encode()).hexdigest()
    SubmitKey.objects.filter(owner=user, created_at__lt=timezone.now() - SUBMIT_KEY_LIFETIME
                             ).delete()
    if (found := SubmitKey.objects.filter(owner=user, key=key).first()) is not None:
        return _submit_replay(found, digest), True
    try:
        with transaction.atomic():
            # Taken first: a second request with the key waits here for the first to commit.
            record = SubmitKey.objects.create(owner=user, key=key, digest=digest)
            job = job_submit(user, datacenter, data).job
            record.job, record.answer = job, answer(job)
            record.save(update_fields=["job", "answer"])
    except IntegrityError:
        found = SubmitKey.objects.filter(owner=user, key=key).first()
        if found is None:  # not the key's row that clashed
            raise
        return _submit_replay(found, digest), True
    return record.answer, False


def _submit_replay(found: SubmitKey, digest: str) -> dict:
    if found.digest != digest:
        raise UnprocessableError.for_field(
            SUBMIT_KEY_HEADER, "used already, within 24 hours, for another submission; send "
                               "a new key for a new job", code="idempotency_key_reused")
    return found.answer


BUILD_FIELDS = frozenset({"package", "base", "image", "registry"})


def build_create(user, datacenter, data: dict) -> Build:
    """``paddlectl build PACKAGE --base IMAGE [--image NAME] [--registry CRED]``: build and push
    without a job. ``image`` defaults to the datacenter's build registry, tagged by the digest;
    a name without a tag gets that tag. An image of that digest-named tag already in its
    registry is not built again (the build succeeds at once)."""
    if not isinstance(data, dict):
        raise ValidationError("the build must be a JSON object")
    errors = {key: ["unknown field"] for key in sorted(set(data) - BUILD_FIELDS)}
    package, base = data.get("package"), data.get("base") or datacenter.image
    image, registry_name = data.get("image") or "", data.get("registry") or ""
    if not isinstance(package, str) or not package:
        errors["package"] = ["required: the trainer package, a directory in your PFS home"]
    else:
        target, problems = package_target(user, datacenter, package)
        if problems:
            errors["package"] = problems[:1]
        else:
            package = str(target.path)
    for field, value in (("base", base), ("image", image)):
        if not isinstance(value, str):
            errors[field] = ["an image reference, e.g. registry.example.com/team/paddle:2.6"]
        elif value:
            try:
                image_ref_parse(value)
            except ValueError as exc:
                errors[field] = [str(exc)]
    if not image and not datacenter.build_registry and "image" not in errors:
        errors["image"] = [f"required: datacenter {datacenter.name!r} has no build registry, "
                           "so name where the image goes (host/repository[:tag])"]
    registry = None
    if registry_name and "registry" not in errors:
        try:
            registry = registry_get(user, datacenter, registry_name)
        except NotFoundError as exc:
            errors["registry"] = [exc.message]
    if errors:
        raise ValidationError("; ".join(f"{k}: {v[0]}" for k, v in errors.items()),
                              fields=errors)
    if (problem := backend_for(datacenter).image_build_problem(datacenter)) is not None:
        raise ConflictError(problem, code="builds_unavailable")
    try:
        inputs = build_inputs(datacenter, package, base, always=True)
    except BackendError as exc:
        raise ValidationError.for_field("package", str(exc)) from None
    if not image:
        image = runtime_image(datacenter, user, inputs.digest)
    elif ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
        image = f"{image}:{runtime_tag(inputs.digest)}"
    registry = push_credentials(user, datacenter, image, registry)
    with transaction.atomic():
        build = Build.objects.create(
            owner=user, datacenter=datacenter, package=package, base=base,
            digest=inputs.digest, image=image, registry=registry, dockerfile=inputs.own,
            state=Build.State.BUILDING)
        task_later(BUILD_RUN, build.pk)
    return build


def build_get(user, datacenter, uid) -> Build:
    build = (Build.objects.select_related("datacenter", "owner", "registry")
             .filter(owner=user, datacenter=datacenter, uid=uid).first())
    if build is None:
        raise NotFoundError(f"you have no build {uid} in datacenter {datacenter.name!r}")
    return build


def job_get(user, datacenter, name: str) -> Job:
    """One of the user's jobs in the datacenter; another user's job is simply not found."""
    job = (Job.objects.select_related("datacenter", "owner", "registry")
           .annotate(queue_ahead=queue_ahead_annotation())
           .filter(owner=user, datacenter=datacenter, name=name).first())
    if job is None:
        raise NotFoundError(f"you have no job named {name!r} in datacenter {datacenter.name!r}")
    return job


def job_worker(job, name: str | None, *, building: bool = True) -> Replica | Build:
    """The job's worker named ``name`` (``trainer-0``, ``pserver-1``, or ``build``: the build
    of its runtime image); by default its first trainer (its first replica when it has none),
    or, with ``building``, its build while the job is ``building``."""
    build = job.build if job.build_id else None
    if name == Build.role or (not name and building and build is not None
                              and job.state == JobState.BUILDING):
        if build is None:
            raise NotFoundError.for_field("worker", f"job {job.name!r} has no build: its "
                                                    "image was not built from its package")
        return build
    replicas = list(job.replicas.all())
    if not name:
        trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
        return min(trainers or replicas, key=lambda r: (r.role, r.index))
    for replica in replicas:
        if replica.name == name:
            return replica
    names = ", ".join(sorted([r.name for r in replicas] + ([Build.role] if build else [])))
    raise NotFoundError.for_field("worker", f"job {job.name!r} has no worker {name!r} "
                                            f"(it has {names})")


EVENTS_SHOWN = 100  # the events a job's page (and its WebSocket) shows at once: the latest


def job_events_shown(job, before: str | None = None) -> tuple[list[JobEvent], bool]:
    """The latest EVENTS_SHOWN of the job's events — or, with ``before`` (an event's id, as
    the page's link gives it), those before that event — oldest first; and whether there are
    older ones. A job's page stays small however many events its job has."""
    events = job.events.select_related("replica")
    if before is not None:
        edge = (job.events.filter(pk=int(before)).values_list("time", "id").first()
                if before.isascii() and before.isdigit() and len(before) < 19 else None)
        if edge is None:
            raise NotFoundError.for_field("before", f"job {job.name!r} has no event {before!r}")
        events = events.filter(Q(time__lt=edge[0]) | Q(time=edge[0], id__lt=edge[1]))
    rows = list(events.order_by("-time", "-id")[:EVENTS_SHOWN + 1])
    return rows[:EVENTS_SHOWN][::-1], len(rows) > EVENTS_SHOWN


def job_list(user, datacenter, *, state: str | None = None, name: str | None = None):
    return _jobs_filtered(Job.objects.filter(owner=user, datacenter=datacenter)
                          .select_related("datacenter", "registry"), state, name)


def job_rows(user, datacenter, *, state: str | None = None, name: str | None = None,
             unfolded: bool = False, within: dict[str, str] | None = None):
    """The job list as people read it: ``job_list`` with each group of jobs an app folds
    (a sweep's trials) kept as one job, where the group's row goes (``jobs.folds``); or every
    job (``unfolded``); or only one group's (``within``: ``{"sweep": NAME}``)."""
    return jobs_folded(user, datacenter, job_list(user, datacenter, state=state, name=name),
                       unfolded=unfolded, within=within)


def _jobs_filtered(jobs, state: str | None, name: str | None):
    """Jobs with their places in their queues, of ``state`` (comma-separated) and with
    ``name`` in their name."""
    jobs = jobs.annotate(queue_ahead=queue_ahead_annotation())
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
    with transaction.atomic():
        job_transition(job, JobState.KILLED, f"killed by {(by or user).username}")
        killed_stop([job])
    audit_record(by or user, AuditEntry.Action.JOB_KILL, f"{user.username}/{name}",
                 datacenter=datacenter, whose=user)
    return job


def killed_stop(jobs) -> None:
    """What follows jobs' kill, in its transaction: a build they wait for is abandoned (when no
    other job waits for it) and their replicas are stopped once it commits."""
    for job in jobs:
        if job.build_id is not None:
            build_abandoned(job.build_id)
        task_later(JOB_STOP, job.pk)


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
    nobody waits for replicas to stop. Its output stays in PFS, and its use in the usage
    ledger (budgets go on counting it)."""
    remains = job_remains(job)
    with transaction.atomic():
        job_deleted(job)
        usage_close(job.pk, timezone.now())  # its use stays in the ledger, its runs ended
        job.delete()
        audit_record(by, AuditEntry.Action.JOB_DELETE, f"{job.owner.username}/{job.name}",
                     datacenter=job.datacenter, whose=job.owner, **details)
        task_later(JOB_REMAINS_REMOVE, remains)


def group_get(user, datacenter) -> Team:
    """The user's group (team) in the datacenter, or a 404 that says they are in none."""
    team = Team.objects.filter(memberships__user=user, memberships__datacenter=datacenter).first()
    if team is None:
        raise NotFoundError.for_field("group", f"you are in no group in datacenter "
                                               f"{datacenter.name!r}; an administrator puts "
                                               "members in groups")
    return team


def group_report(user, datacenter) -> dict:
    """The user's group: its members, weight, and its quota's limits and use (what its
    members' starting and running jobs hold), for the API and ``paddlectl get group``."""
    team = group_get(user, datacenter)
    members = list(Membership.objects.filter(team=team).select_related("user")
                   .order_by("user__username"))
    active = Job.objects.filter(datacenter=datacenter, state__in=ACTIVE_STATES,
                                owner_id__in=[m.user_id for m in members]).only(
        *REQUEST_FIELDS, "trainers_held")
    used = sum((held_vec(job) for job in active), Vec())
    quota = {}
    for resource, limit in team.quota.items():
        fmt = QUOTA_FORMATS[resource]
        quota[resource] = {"limit": None if limit is None else fmt(limit), "limit_value": limit,
                           "used": fmt(getattr(used, resource)),
                           "used_value": getattr(used, resource)}
    return {"name": team.name, "weight": team.weight,
            "members": [{"username": m.user.username, "weight": m.weight} for m in members],
            "quota": quota}


def group_jobs(user, datacenter, *, state: str | None = None, name: str | None = None):
    """The jobs of every member of the user's group (their own among them), to look at: the
    group view. Changing one stays its owner's."""
    team = group_get(user, datacenter)
    mates = Membership.objects.filter(team=team).values("user_id")
    return _jobs_filtered(Job.objects.filter(owner_id__in=mates, datacenter=datacenter)
                          .select_related("datacenter", "registry", "owner"), state, name)
