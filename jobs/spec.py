"""What a user asks to run, checked against every rule, with every mistake named at once.

``job_spec_validate`` takes the submission as the API, ``paddlectl submit`` and the dashboard
send it (the seeds' flag names: ``jobname``, ``parallelism``, ``pscpu`` … are accepted beside
``name``, ``trainers``, …) and returns a ``JobSpec`` with normalized values (CPU in millicores,
memory in bytes), or raises one ValidationError that lists each field's problem.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from paddlecloud.errors import NotFoundError, PaddleCloudError, ValidationError
from paddlecloud.quantity import QuantityError, parse_bytes, parse_cpu
from pfs.services import pfs_target

from .contract import ENV_NAME_RE, RESERVED_ENV
from .contract import JOB_NAME_MAX as MAX_NAME
from .contract import JOB_NAME_RE as NAME_RE
from .models import Job

IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]*$")
MAX_REPLICAS = 1000
MAX_ENV = 100
MAX_ENV_VALUE = 32 * 1024
MAX_DEADLINE = 30 * 24 * 3600

# The seeds' flag names, accepted as aliases.
ALIASES = {"jobname": "name", "parallelism": "trainers", "package_path": "package"}


@dataclass(frozen=True)
class JobSpec:
    name: str
    package: str
    entry: str
    image: str
    topology: str = ""
    registry: str = ""
    trainers: int = 1
    cpu: int = 1000
    memory: int = 2**30
    gpu: int = 0
    pservers: int = 0
    pscpu: int = 1000
    psmemory: int = 2**30
    passes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    restart_limit: int = 0
    deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def name_problem(name) -> str | None:
    """Why ``name`` cannot be a job name, or None."""
    if not isinstance(name, str) or not name:
        return "required: a unique name for the job, e.g. fit-a-line"
    if "_" in name:
        return "'_' is not allowed (Kubernetes object names cannot contain it); use '-'"
    if "." in name:
        return "'.' is not allowed: it breaks the Kubernetes service names of the job; use '-'"
    if name != name.lower():
        return "use lower-case letters"
    if len(name) > MAX_NAME:
        return (f"at most {MAX_NAME} characters, so that the names derived from it "
                "(<name>-trainer-N, …) fit Kubernetes' 63")
    if not NAME_RE.match(name):
        return ("only lower-case letters, digits and '-', starting and ending with a letter "
                "or digit")
    return None


def name_taken(name: str, datacenter_name: str | None = None) -> str:
    """The answer to a name the user already gave another job (in another datacenter)."""
    where = f" in datacenter {datacenter_name!r}" if datacenter_name else ""
    return (f"you already have a job named {name!r}{where}: delete it first "
            f"(paddlectl delete job {name}) or pick another name")


class _Checker:
    """Collects one message per field, so a user fixes everything in one go."""

    def __init__(self, data: dict):
        self.data = {ALIASES.get(key, key): value for key, value in data.items()}
        self.errors: dict[str, list[str]] = {}

    def fail(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def integer(self, name: str, default: int | None, *, minimum: int,
                maximum: int) -> int | None:
        value = self.data.get(name, default)
        if value is None or value == "":
            return default
        if isinstance(value, bool) or not (isinstance(value, int) or
                                           (isinstance(value, str) and value.strip().isdigit())):
            self.fail(name, f"{value!r} is not a whole number")
            return default
        value = int(value)
        if not minimum <= value <= maximum:
            self.fail(name, f"must be between {minimum} and {maximum}, not {value}")
            return default
        return value

    def quantity(self, name: str, default: int, parse) -> int:
        value = self.data.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            self.fail(name, f"{value!r} is not an amount")
            return default
        try:
            amount = parse(value)
        except QuantityError as exc:
            self.fail(name, str(exc))
            return default
        if amount <= 0:
            self.fail(name, "must be more than 0")
            return default
        return amount

    def text(self, name: str, *, required: str | None = None, maximum: int = 4096) -> str:
        value = self.data.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                self.fail(name, required)
            return ""
        if not isinstance(value, str):
            self.fail(name, "must be a string")
            return ""
        if len(value) > maximum:
            self.fail(name, f"at most {maximum} characters")
            return ""
        return value.strip()


def _is_file(target, relpath: str) -> bool:
    """Whether ``relpath`` is a file in the package (links inside its area followed)."""
    try:
        entry = target.storage.stat((*target.rel, *relpath.split("/")), follow=True)
    except PaddleCloudError:
        return False
    return entry.type == "file"


def job_spec_validate(user, datacenter, data: dict) -> JobSpec:
    """Check a submission against every rule; raise one ValidationError naming each field."""
    if not isinstance(data, dict):
        raise ValidationError("the job must be a JSON object")
    check = _Checker(data)
    known = {f for f in JobSpec.__dataclass_fields__} | set(ALIASES) | {"dry_run"}
    for unknown in sorted(set(data) - known):
        check.fail(unknown, "unknown field")

    name = check.data.get("name")
    if (problem := name_problem(name)) is not None:
        check.fail("name", problem)
    elif (taken := Job.objects.filter(owner=user, name=name)
          .values_list("datacenter__name", flat=True).first()) is not None:
        check.fail("name", name_taken(name, None if taken == datacenter.name else taken))

    entry = check.text("entry", required='required: the command that starts a trainer, '
                                         'e.g. "python train.py"')
    image = check.text("image", maximum=512) or datacenter.image
    if not IMAGE_RE.match(image):
        check.fail("image", f"{image!r} is not an image reference like "
                            "paddlepaddle/paddle:2.6.1")

    package = check.text("package", required="required: the trainer package directory, e.g. "
                                             f"/pfs/{datacenter.name}/home/{user.username}/pkg")
    package_at = None  # the package's storage and path, read as the PFS reads it
    if package:
        try:
            target = pfs_target(user, datacenter, package, field="package")
        except PaddleCloudError as exc:
            for msg in exc.fields.get("package", [exc.message]):
                check.fail("package", msg)
        else:
            package = str(target.path)
            try:
                if target.storage.is_dir(target.rel):
                    package_at = target
                else:
                    raise target.storage.not_a_dir(target.rel)
            except NotFoundError:
                check.fail("package", f"{package} is not a directory in PFS: upload the "
                                      "trainer package there first (paddlectl cp -r)")
            except PaddleCloudError as exc:  # not a directory, a link leading out …
                check.fail("package", exc.fields.get("path", [exc.message])[0])

    registry = check.text("registry", maximum=64)
    if registry:
        from registries.services import registry_get

        try:
            registry_get(user, datacenter, registry)
        except PaddleCloudError as exc:
            check.fail("registry", exc.fields["registry"][0])

    topology = check.text("topology", maximum=1024)
    if topology:
        if topology.startswith("/") or ".." in topology.split("/"):
            check.fail("topology", "a path inside the package, without '..'")
        elif package_at is not None and not _is_file(package_at, topology):
            check.fail("topology", f"{topology} is not a file in the package")

    spec = dict(
        trainers=check.integer("trainers", 1, minimum=1, maximum=MAX_REPLICAS),
        pservers=check.integer("pservers", 0, minimum=0, maximum=MAX_REPLICAS),
        gpu=check.integer("gpu", 0, minimum=0, maximum=64),
        passes=check.integer("passes", 1, minimum=1, maximum=100_000),
        restart_limit=check.integer("restart_limit", 0, minimum=0, maximum=100),
        deadline_seconds=check.integer("deadline_seconds", None, minimum=1,
                                       maximum=MAX_DEADLINE),
        ttl_seconds_after_finished=check.integer("ttl_seconds_after_finished", None,
                                                 minimum=0, maximum=MAX_DEADLINE),
        cpu=check.quantity("cpu", 1000, parse_cpu),
        memory=check.quantity("memory", 2**30, parse_bytes),
        pscpu=check.quantity("pscpu", 1000, parse_cpu),
        psmemory=check.quantity("psmemory", 2**30, parse_bytes),
    )

    env = check.data.get("env") or {}
    if not isinstance(env, dict):
        check.fail("env", 'an object of NAME: "value" pairs')
        env = {}
    elif len(env) > MAX_ENV:
        check.fail("env", f"at most {MAX_ENV} variables")
    for key, value in env.items():
        where = f"env.{key}"
        if not ENV_NAME_RE.match(key):
            check.fail(where, "not a valid variable name (letters, digits and '_', "
                              "not starting with a digit)")
        elif key in RESERVED_ENV:
            check.fail(where, "reserved: PaddleCloud sets it for every replica")
        elif not isinstance(value, str):
            check.fail(where, 'values are strings: write "4", not 4')
        elif len(value) > MAX_ENV_VALUE:
            check.fail(where, f"at most {MAX_ENV_VALUE} characters")

    if check.errors:
        parts = [f"{name}: {msgs[0]}" for name, msgs in check.errors.items()]
        raise ValidationError("; ".join(parts), fields=check.errors)
    return JobSpec(name=name, package=package, entry=entry, image=image, topology=topology,
                   registry=registry, env=dict(env), **spec)
