"""A build run: a job's (its image found in the registry, a build joined, or one run and its
jobs released when it ends) and ``paddlectl build``'s, in the worker."""


from __future__ import annotations

import contextlib
import logging
import os
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from kernel.errors import NotFoundError, PaddleCloudError
from pfs.paths import pfs_path_parse
from pfs.storage import storage_for

from ..backends import backend_for
from ..backends.base import BackendError
from ..files import build_log_open
from ..models import Build, Job, build_ended
from ..notify import job_changed
from ..signals import job_built
from ..states import JobState
from ..transitions import job_transition
from .recipe import BuildInputs, build_inputs, runtime_image, runtime_tag
from .registry import credentials, image_found, push_credentials, registry_insecure

logger = logging.getLogger(__name__)

# A build still ``building`` this long after it began lost its worker (a builder Job gives up
# after an hour): the next job that needs its image builds it again.
BUILD_LOST_AFTER = timedelta(hours=2)


# --- a job's build ---------------------------------------------------------------------------

def job_build_needed(job) -> bool:
    """Whether the job's image is built from its package: its datacenter names a build
    registry, its replicas run in images, its image is not in that registry already (a runtime
    image), and its package has a requirements.txt or a Dockerfile."""
    datacenter = job.datacenter
    if not datacenter.build_registry or not backend_for(datacenter).runs_images:
        return False
    if job.image.startswith(f"{datacenter.build_registry}/"):
        return False  # a runtime image already (paddlectl build's): run it as it is
    path = pfs_path_parse(job.package_run, field="package")
    storage = storage_for(datacenter, path)
    for name in ("Dockerfile", "requirements.txt"):
        with contextlib.suppress(NotFoundError, PaddleCloudError):
            if storage.stat((*path.parts, name)).type == "file":
                return True
    return False


def job_build(job_id: int) -> None:
    """The worker's part for a ``building`` job: use the image if the registry has it, join
    the build of it under way, or build it now (and then let every job waiting for it go)."""
    job = Job.objects.select_related("datacenter", "owner", "registry").get(pk=job_id)
    if job.state != JobState.BUILDING:
        return
    datacenter = job.datacenter
    try:
        inputs = build_inputs(datacenter, job.package_run, job.image)
        if inputs is None:  # nothing to build: the job runs its image as it is
            _jobs_release([job], None)
            return
        image = runtime_image(datacenter, job.owner, inputs.digest)
        registry = push_credentials(job.owner, datacenter, image, job.registry)
        found = image_found(image, registry, registry_insecure(datacenter, image))
    except BackendError as exc:
        job_transition(job, JobState.FAILED, f"its runtime image cannot be built: {exc}")
        return
    if found:
        build = Build(image=image, image_digest=found, registry=registry)
        _jobs_release([job], build, f"its runtime image {image} was built before: "
                                    "nothing to build")
        return
    build = _build_join(job, image, inputs, registry)
    if build is not None:
        build_run(build.pk, inputs)


def _build_join(job, image: str, inputs: BuildInputs, registry) -> Build | None:
    """Make the job wait for the build of ``image`` under way, or for a new one. Returns the
    new build (the caller runs it), or None when the job joined one already running."""
    for _ in range(3):
        try:
            with transaction.atomic():
                build = (Build.objects.select_for_update()
                         .filter(datacenter=job.datacenter, image=image,
                                 state=Build.State.BUILDING).first())
                if build is not None and build.created_at < timezone.now() - BUILD_LOST_AFTER:
                    _build_finish(build, Build.State.FAILED,
                                  reason="its builder was lost (no end recorded after "
                                         f"{BUILD_LOST_AFTER}): built again")
                    build = None
                created = build is None
                if created:
                    build = Build.objects.create(
                        owner=job.owner, datacenter=job.datacenter, package=job.package_run,
                        base=job.image, digest=inputs.digest, image=image, registry=registry,
                        dockerfile=inputs.own)
                Job.objects.filter(pk=job.pk).update(build=build)
                job_changed(job.pk)  # its page shows the build's log
            return build if created else None
        except IntegrityError:  # another job's worker made it first: join it
            continue
    raise BackendError(f"could not record the build of {image}")


def build_abandoned(build_id: int) -> bool:
    """A job stopped waiting for the build (it was killed): if the build was for jobs and none
    waits for it any more, it is cancelled — failed, which the builder's watch sees and stops
    the builder. A build asked for by ``paddlectl build`` (no job) goes on. Returns whether it
    was cancelled."""
    with transaction.atomic():
        build = Build.objects.select_for_update().filter(
            pk=build_id, state=Build.State.BUILDING).first()
        if build is None or not build.jobs.exists() or \
                build.jobs.filter(state=JobState.BUILDING).exists():
            return False
        Build.objects.filter(pk=build.pk).update(
            state=Build.State.FAILED, reason=Build.CANCELLED, finished_at=timezone.now())
    return True


def build_run(build_id: int, inputs: BuildInputs | None = None) -> None:
    """Run the build: the backend's builder, its output in the build's log. Then every job
    waiting for it takes the image, or fails with the build's reason. ``inputs``: the
    package as the job's worker just read it (else it is read now)."""
    build = Build.objects.select_related("datacenter", "owner", "registry").get(pk=build_id)
    if build.state != Build.State.BUILDING:
        return
    log = None
    try:
        log = build_log_open(build)
        # (A job's package has a requirements.txt or a Dockerfile; paddlectl build's may have
        # neither: the package on the base.)
        inputs = inputs or build_inputs(build.datacenter, build.package, build.base,
                                        always=True)
        if build.image.endswith(f":{runtime_tag(inputs.digest)}") and (found := image_found(
                build.image, build.registry, registry_insecure(build.datacenter, build.image))):
            _say(log, f"{build.image} is in its registry already: nothing to build")
            _build_finish(build, Build.State.SUCCEEDED, image_digest=found)
            return
        how = "the package's Dockerfile" if inputs.own else f"FROM {build.base}"
        _say(log, f"building {build.image} ({how})")
        digest = backend_for(build.datacenter).image_build(
            build, inputs.dockerfile, log, credentials(build.registry),
            insecure=registry_insecure(build.datacenter, build.image),
            cancelled=lambda: Build.CANCELLED if build_ended(build.pk) else "")
    except BackendError as exc:
        if log is not None:
            _say(log, f"failed: {exc}")
        _build_finish(build, Build.State.FAILED, reason=str(exc))
    except Exception:  # a bug: the build and its jobs must not wait for ever
        logger.exception("build %s of %s", build.uid, build.image)
        _build_finish(build, Build.State.FAILED, reason="the portal failed while building "
                                                        "(see its log)")
        raise
    else:
        _say(log, f"pushed {build.image}@{digest}")
        _build_finish(build, Build.State.SUCCEEDED, image_digest=digest)
    finally:
        if log is not None:
            os.close(log)


def _say(fd: int, line: str) -> None:
    os.write(fd, f"paddlecloud: {line}\n".encode())


def _build_finish(build: Build, state: str, *, reason: str = "", image_digest: str = "") -> None:
    with transaction.atomic():
        if not Build.objects.select_for_update().filter(
                pk=build.pk, state=Build.State.BUILDING).update(
                state=state, reason=reason[:4000], image_digest=image_digest,
                finished_at=timezone.now()):
            return  # cancelled meanwhile (build_abandoned): its jobs were killed
        build.state, build.reason, build.image_digest = state, reason, image_digest
        waiting = list(Job.objects.select_related("datacenter", "owner")
                       .filter(build=build, state=JobState.BUILDING))
        if state == Build.State.SUCCEEDED:
            _jobs_release(waiting, build, f"its runtime image is built: {build.reference}")
        else:
            for job in waiting:
                job_transition(job, JobState.FAILED,
                               f"building its runtime image failed: {reason}")


def _jobs_release(jobs: list[Job], build: Build | None, reason: str = "") -> None:
    """The jobs' runtime image is ready (``build``'s) or not needed (None): they become
    ``pending``, and the owner's queue may admit them."""
    with transaction.atomic():
        for job in jobs:
            if build is not None:
                job.image = build.reference
                job.registry = job.registry or build.registry
                Job.objects.filter(pk=job.pk).update(image=job.image, registry=job.registry)
            job_transition(job, JobState.PENDING,
                           reason or "its package has nothing to build")
        for owner_id, datacenter_id in {(j.owner_id, j.datacenter_id) for j in jobs}:
            job_built.send(Job, owner_id=owner_id, datacenter_id=datacenter_id,
                           job_ids=[j.pk for j in jobs])
