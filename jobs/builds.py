"""Runtime images built from trainer packages (issue 19; the seeds' ``build_docker.sh``, done by
the portal): ``FROM`` a base image, the package at ``/train/package`` (the seeds' path), its
``requirements.txt`` installed, pushed to the datacenter's build registry.

When: a datacenter that names a build registry (``Datacenter.build_registry``) builds the
runtime image of every job whose package has a ``requirements.txt`` (the Dockerfile below) or
a ``Dockerfile`` (used as given, the package as its context); ``paddlectl build`` builds one
without a job. A package with neither builds nothing.

Where: ``<build registry>/<the owner's namespace>/runtime:pc-<digest>``, the digest (sha256)
of what decides the image: this recipe's version, the base image, the Dockerfile and every file
of the package (name and contents; a link's target). Pushed with the owner's registry
credentials for that host (the job's ``-registry``, else the owner's credentials whose server
is the registry's host, else none). The job's pods then run that image pinned to the pushed
digest, pulled with the same credentials.

Once: before building, the registry is asked for the tag; a job whose image is there already
builds nothing. Jobs that need an image being built wait for that build (one ``building``
``Build`` per image: a database constraint); a failed build fails them all and is not kept —
the next job builds again.

How: the datacenter's backend runs the builder (``Backend.image_build``): BuildKit, rootless,
as a Kubernetes Job in the owner's namespace; buildah on the portal's machine for the local
backend (``paddlectl build`` only, where PADDLECLOUD_LOCAL_BUILDS allows it). Its output is the
build's log (``.paddlecloud/builds/<uid>.log`` in the owner's home), which ``paddlectl logs JOB
-w build`` and the job's page follow like any worker's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from paddlecloud.errors import NotFoundError, PaddleCloudError
from paddlecloud_core.contract import job_namespace
from paddlecloud_core.layout import IMAGE_PACKAGE_DIR
from pfs.paths import pfs_path_parse
from pfs.storage import storage_for
from registries.models import Registry
from registries.oci import RegistryError, image_ref_parse, manifest_digest
from registries.services import registry_password

from .backends import backend_for
from .backends.base import BackendError
from .backends.envs import indexes_allowed, requirements_stored
from .files import build_log_open
from .models import Build, Job, build_ended
from .notify import job_changed
from .signals import job_built
from .states import JobState
from .transitions import job_transition

logger = logging.getLogger(__name__)

RECIPE = 1  # the Dockerfile below and what the digest covers: a change names every image anew
PACKAGE_DIR = IMAGE_PACKAGE_DIR
REQUIREMENTS = "/train/requirements.txt"
TAG_PREFIX = "pc-"
# A build still ``building`` this long after it began lost its worker (a builder Job gives up
# after an hour): the next job that needs its image builds it again.
BUILD_LOST_AFTER = timedelta(hours=2)


def runtime_dockerfile(base: str, *, requirements: bool = True) -> str:
    """The Dockerfile of a package: its ``requirements.txt`` first (that layer is kept while
    only the code changes), installed with the base's own ``python3 -m pip``; then the
    package."""
    pip_env = ("PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore "
               "PIP_DISABLE_PIP_VERSION_CHECK=1")
    install = (f"COPY requirements.txt {REQUIREMENTS}\n"
               f"RUN {pip_env} python3 -m pip install -r {REQUIREMENTS}\n") if requirements else ""
    return (f"# Made by PaddleCloud (jobs.builds, recipe {RECIPE}) for a trainer package\n"
            f"FROM {base}\n{install}"
            f"COPY . {PACKAGE_DIR}\n"
            f"WORKDIR {PACKAGE_DIR}\n")


@dataclass(frozen=True)
class BuildInputs:
    dockerfile: str  # its text
    own: bool  # the package's own Dockerfile
    digest: str


def build_inputs(datacenter, package: str, base: str, *,
                 always: bool = False) -> BuildInputs | None:
    """What the runtime image of ``package`` on ``base`` is made of; None when the package has
    neither a Dockerfile nor a requirements.txt (a job's: nothing to build), unless ``always``
    (``paddlectl build``: the package on the base). Reads the package through its PFS storage
    (links leaving it are not followed); ``BackendError`` if it cannot."""
    path = pfs_path_parse(package, field="package")
    storage = storage_for(datacenter, path)
    hasher = hashlib.sha256(f"paddlecloud-build {RECIPE}\0".encode())
    names = set()
    try:
        if not storage.is_dir(path.parts):
            raise BackendError(f"the trainer package {package} is not a directory")
        entries = sorted(storage.walk(path.parts), key=lambda e: e.rel)
        for entry in entries:
            rel = "/".join(entry.rel[len(path.parts):])
            names.add(rel)
            hasher.update(f"{entry.type}\0{rel}\0{entry.target or ''}\0".encode())
            if entry.type == "file":
                for chunk in storage.read(entry.rel):
                    hasher.update(chunk)
                hasher.update(b"\0")
        if "Dockerfile" in names:
            own, text = True, b"".join(storage.read((*path.parts, "Dockerfile"))).decode(
                errors="replace")
        elif "requirements.txt" in names or always:
            if "requirements.txt" in names:  # installed by pip in the build: read as data
                requirements_stored(storage, (*path.parts, "requirements.txt"),
                                    indexes_allowed(datacenter))
            own, text = False, runtime_dockerfile(base,
                                                  requirements="requirements.txt" in names)
        else:
            return None
    except NotFoundError:
        raise BackendError(f"the trainer package {package} is gone") from None
    except PaddleCloudError as exc:
        raise BackendError(f"cannot read the trainer package: {exc.message}") from None
    hasher.update(f"\0{base}\0{text}".encode())
    return BuildInputs(dockerfile=text, own=own, digest=hasher.hexdigest())


def runtime_tag(digest: str) -> str:
    """The tag of the runtime image of that digest."""
    return f"{TAG_PREFIX}{digest[:40]}"


def runtime_image(datacenter, owner, digest: str) -> str:
    """Where the runtime image of that digest goes: one repository per owner."""
    return (f"{datacenter.build_registry}/{job_namespace(datacenter, owner.username)}/runtime:"
            f"{runtime_tag(digest)}")


def push_credentials(owner, datacenter, image: str, named: Registry | None = None):
    """The owner's credentials for the registry of ``image``: ``named`` if it is for that
    host, else the first of theirs whose server is that host; None (anonymous) if none."""
    host = image_ref_parse(image).host
    if named is not None and named.server == host:
        return named
    return (Registry.objects.filter(owner=owner, datacenter=datacenter, server=host)
            .order_by("name").first())


def registry_insecure(datacenter, image: str) -> bool:
    """Whether ``image``'s registry is spoken to over plain HTTP: the build registry, when
    its datacenter says so."""
    return datacenter.build_registry_insecure and image_ref_parse(image).host == \
        image_ref_parse(f"{datacenter.build_registry}/x").host


def credentials(registry: Registry | None) -> tuple[str, str] | None:
    return None if registry is None else (registry.username, registry_password(registry))


def image_found(image: str, registry: Registry | None, insecure: bool) -> str | None:
    """The digest of ``image`` if its registry has it; ``BackendError`` naming the registry
    (and the credentials, when it refused them) if it cannot be asked."""
    try:
        return manifest_digest(image, auth=credentials(registry), insecure=insecure)
    except RegistryError as exc:
        raise BackendError(_registry_problem(exc, registry)) from None


def _registry_problem(exc: RegistryError, registry: Registry | None) -> str:
    if exc.refused and registry is not None:
        return (f"{exc} (with your registry credentials {registry.name!r}: paddlectl registry "
                f"-name {registry.name} -password … updates them)")
    if exc.refused:
        return (f"{exc} (you have no registry credentials for it: add some with paddlectl "
                "registry -name NAME -server HOST -username … -password …)")
    return str(exc)


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
    path = pfs_path_parse(job.package, field="package")
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
        inputs = build_inputs(datacenter, job.package, job.image)
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
                        owner=job.owner, datacenter=job.datacenter, package=job.package,
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
