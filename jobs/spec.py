"""What a user asks to run, checked against every rule, with every mistake named at once.

``job_spec_validate`` takes the submission as the API, ``paddlectl submit`` and the dashboard
send it and returns a ``JobSpec`` with normalized values (CPU in millicores, memory in bytes),
or raises one ValidationError that lists each field's problem. The rules on the fields
themselves are the core's (``paddlecloud_core.spec``, which ``paddlectl`` and the SDK apply
too); here are the ones that need the portal: the name is free, the package is a directory
in PFS, its requirements.txt reads as data and names only the datacenter's allowed package
indexes, the registry exists, the topology file is in the package, the dataset matches files
the user may read, the checkpoint it resumes from is one of the user's jobs' and whole, the
jobs it runs after are the user's and may still end as it asks, and what the datacenter's
backend cannot run (its ``spec_problems``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from accounts.execution import backend_kind
from kernel.errors import NotFoundError, PaddleCloudError, ValidationError
from paddlecloud_core.layout import pfs_home
from paddlecloud_core.placement import PLACEMENT_MOST
from paddlecloud_core.requirements import REQUIREMENTS_FILE
from paddlecloud_core.scheduling import after_outcome
from paddlecloud_core.spec import JobSpec, after_parse, name_taken, spec_check
from pfs.services import pfs_target
from registries.services import registry_get

from .backends.base import BackendError
from .backends.environments import indexes_allowed, requirements_stored
from .checkpoints import resume_from_check
from .files import package_digest
from .master.dataset import dataset_problem
from .models import Job

__all__ = ["JobSpec", "after_targets", "job_spec_validate"]


def after_targets(user, datacenter, text: str, *, lock: bool = False
                  ) -> list[tuple[Job, str, bool]]:
    """The jobs a submission's ``after`` names (its form checked by the core): (job, mode,
    whether it has already ended as asked) each. ValueError saying what is wrong: a name that
    is no job of the user's in the datacenter (another user's job is no job of theirs, as
    everywhere in the API), or a job that has ended otherwise than asked. With ``lock`` (in
    the transaction that records the edges) the jobs' rows are locked, so one ending now is
    seen ended, or sees the edge (``scheduling.dependencies``)."""
    pairs = after_parse(text)
    found = Job.objects.filter(owner=user, datacenter=datacenter,
                               name__in=[name for name, _ in pairs])
    if lock:
        found = found.select_for_update()
    jobs = {job.name: job for job in found.only("id", "name", "state")}
    targets = []
    for name, mode in pairs:
        job = jobs.get(name)
        if job is None:
            raise ValueError(f"you have no job named {name!r} in datacenter "
                             f"{datacenter.name!r} (a job runs only after jobs of your own)")
        met = after_outcome(mode, job.state)
        if met is False:
            raise ValueError(f"job {name} has ended ({job.state}): it will never succeed; "
                             f"run after {name}:any to start once it has ended, however")
        targets.append((job, mode, bool(met)))
    return targets


def _is_file(target, relpath: str) -> bool:
    """Whether ``relpath`` is a file in the package (links inside its area followed)."""
    try:
        entry = target.storage.stat((*target.rel, *relpath.split("/")), follow=True)
    except PaddleCloudError:
        return False
    return entry.type == "file"


def _requirements_problem(target, datacenter) -> str | None:
    """What is wrong with the package's requirements.txt, read as data (at most its bound)
    against the datacenter's allowed indexes (``paddlecloud_core.requirements``); None when
    nothing is, or it has none. The job's copy is checked again when it starts."""
    try:
        requirements_stored(target.storage, (*target.rel, REQUIREMENTS_FILE),
                            indexes_allowed(datacenter))
    except BackendError as exc:
        return str(exc)
    return None


def snapshot_problem(origin: Job, package_at) -> str | None:
    """Why ``origin``'s package snapshot (``package_at``: where it is, None when it is gone)
    cannot be re-run byte for byte: gone, or changed since it was taken (its digest is not
    the one recorded); None when it is as ``origin`` ran it."""
    where = f"the package snapshot of job {origin.name} ({origin.package_snapshot})"
    instead = ("; re-run with -package PATH to run a package as it is now (submit -from "
               f"{origin.name} -package PATH)")
    if package_at is None:
        return f"{where} is gone: its files were removed" + instead
    try:
        digest, _ = package_digest(package_at.storage, package_at.rel)
    except PaddleCloudError as exc:
        return f"{where} cannot be read: {exc.message}" + instead
    if origin.package_digest and digest != origin.package_digest:
        return (f"{where} has changed since it was taken ({origin.package_digest} recorded, "
                f"{digest} now): it would not reproduce the job" + instead)
    return None


def package_target(user, datacenter, package: str):
    """The trainer package ``package`` as the PFS reads it (its storage and path), and the
    problems that make it unusable: not the user's to read, not a directory."""
    try:
        target = pfs_target(user, datacenter, package, field="package")
    except PaddleCloudError as exc:
        return None, exc.fields.get("package", [exc.message])
    try:
        if target.storage.is_dir(target.rel):
            return target, []
        raise target.storage.not_a_dir(target.rel)
    except NotFoundError:
        return None, [f"{target.path} is not a directory in PFS: upload the trainer package "
                      "there first (paddlectl cp -r)"]
    except PaddleCloudError as exc:  # not a directory, a link leading out …
        return None, [exc.fields.get("path", [exc.message])[0]]


def job_spec_validate(user, datacenter, data: dict, *,
                      fit: tuple[Collection[str], Callable[[JobSpec], dict[str, str]]]
                      | None = None) -> JobSpec:
    """Check a submission against every rule; raise one ValidationError naming each field.
    ``fit``: the fields a job's size is made of, and what the job's size breaks (the user's
    quota: field -> problem), told with the other mistakes when those fields are right (a
    job with no other mistake has its own check, its own error code)."""
    if not isinstance(data, dict):
        raise ValidationError("the job must be a JSON object")
    check = spec_check(data, default_image=datacenter.image,
                       default_gpu_image=datacenter.image_gpu,
                       extra_fields=frozenset({"dry_run", "placement"}),
                       package_example=f"{pfs_home(datacenter.name, user.username)}/pkg")
    values = check.values
    placement = data.get("placement", "")
    if not isinstance(placement, str) or len(placement) > PLACEMENT_MOST:
        check.fail("placement", "why this datacenter was chosen (-datacenter auto): text of at "
                                f"most {PLACEMENT_MOST} characters")

    name = values["name"]
    if "name" not in check.errors and (
            taken := Job.objects.filter(owner=user, name=name)
            .values_list("datacenter__name", flat=True).first()) is not None:
        check.fail("name", name_taken(name, None if taken == datacenter.name else taken))

    package_at = None  # the package's storage and path, read as the PFS reads it
    if values["package"]:
        package_at, problems = package_target(user, datacenter, values["package"])
        for problem in problems:
            check.fail("package", problem)
        if package_at is not None:
            values["package"] = str(package_at.path)

    if values["registry"]:
        try:
            registry_get(user, datacenter, values["registry"])
        except PaddleCloudError as exc:
            check.fail("registry", exc.fields["registry"][0])

    if package_at is not None and (problem := _requirements_problem(package_at, datacenter)):
        check.fail("package", problem)

    topology = values["topology"]
    if topology and "topology" not in check.errors and package_at is not None \
            and not _is_file(package_at, topology):
        check.fail("topology", f"{topology} is not a file in the package")

    if values["dataset"] and "dataset" not in check.errors and (
            problem := dataset_problem(user, datacenter, values["dataset"])) is not None:
        check.fail("dataset", problem)

    if values["rerun_of"] and "rerun_of" not in check.errors:
        origin = Job.objects.filter(owner=user, datacenter=datacenter,
                                    name=values["rerun_of"]).first()
        if origin is None:
            check.fail("rerun_of", f"you have no job named {values['rerun_of']!r} in "
                                   f"datacenter {datacenter.name!r}")
        elif origin.package_snapshot and values["package"] == origin.package_snapshot and (
                problem := snapshot_problem(origin, package_at)) is not None:
            check.errors.pop("package", None)  # said better: whose snapshot, and what to do
            check.fail("package", problem)

    if values["resume_from"] and "resume_from" not in check.errors:
        try:
            values["resume_from"] = resume_from_check(user, datacenter, values["resume_from"])
        except ValueError as exc:
            check.fail("resume_from", str(exc))

    if values["after"] and "after" not in check.errors:
        try:
            after_targets(user, datacenter, values["after"])
        except ValueError as exc:
            check.fail("after", str(exc))

    for field, problem in backend_kind(datacenter.backend).spec_problems(datacenter, values):
        check.fail(field, problem)

    if fit is not None and check.errors and not check.errors.keys() & set(fit[0]):
        for field, problem in fit[1](JobSpec(**values)).items():
            check.fail(field, problem)

    if check.errors:
        raise ValidationError(check.message(), fields=check.ordered())
    return JobSpec(**values)
