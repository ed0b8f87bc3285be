"""A job as users submit it, and every rule on its fields that needs nothing but the fields.

``spec_check`` applies them all and names each field's problem at once: the portal runs it
before its own checks (is the name free, is the package a directory in PFS, does the registry
exist), and ``paddlectl`` and the SDK run the same rules before anything is uploaded. The
field names are the API's; the seeds' flag names (``jobname``, ``parallelism`` …) are accepted
beside them.

``FIELDS`` is the table of every field a user sets: its name, type and rule, the words that
explain it, and how each way of submitting offers it — the API's submit serializer
(``jobs.serializers``), the flags of ``paddlectl submit``, the SDK's ``PaddleJob`` arguments
and the dashboard's submit form are all made from it, and ``JobSpec`` too. A new field is a row
here, the model's column and its migration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, asdict, dataclass, make_dataclass
from dataclasses import field as dataclass_field
from typing import Any

from .contract import ENV_NAME_RE, JOB_NAME_MAX, JOB_NAME_RE, KEEP_CHECKPOINTS, RESERVED_ENV
from .quantity import QuantityError, format_bytes, format_cpu, parse_bytes, parse_cpu
from .snapshots import image_pinned

# The image a job runs in when neither it nor its datacenter names one.
DEFAULT_IMAGE = "paddlepaddle/paddle:2.6.1"
# The same Paddle built for CUDA: the image of a job that asks for GPUs and names none.
DEFAULT_GPU_IMAGE = "paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6"
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]*$")
MAX_REPLICAS = 1000
MAX_GPU = 64
MAX_PASSES = 100_000
MAX_RESTARTS = 100
MAX_KEEP_CHECKPOINTS = 1000
MAX_ENV = 100
MAX_ENV_VALUE = 32 * 1024
MAX_DEADLINE = 30 * 24 * 3600
MAX_TEXT = 4096
MAX_IMAGE = 512
MAX_REGISTRY = 64
MAX_TOPOLOGY = 1024
MAX_RESUME_FROM = 64  # a job's name, ":" and a step
MAX_AFTER = 1024  # the jobs a job runs after, "JOB[:MODE]" each, comma-separated
MAX_TASK_RECORDS = 10**9
# An elastic job (``trainers`` a range MIN:MAX) may run below MIN this long before it fails,
# unless it says otherwise (``trainers_below_min_seconds``).
BELOW_MIN_SECONDS = 300

# The seeds' flag names, accepted as aliases.
ALIASES = {"jobname": "name", "parallelism": "trainers", "package_path": "package"}

# Quantities: (default, parser, most, formatter) — CPU in millicores, memory in bytes. The
# most is far past any machine, and within what the portal's columns hold (a 32-bit count of
# millicores, a 64-bit one of bytes): more is a mistake to name, not a job to store.
MAX_CPU = 10**9  # a million cores
MAX_MEMORY = 2**60  # 1Ei
_CPU = (1000, parse_cpu, MAX_CPU, format_cpu)
_MEMORY = (2**30, parse_bytes, MAX_MEMORY, format_bytes)

# Priority classes (``-priority``): the number underneath orders a user's queue, higher first.
PRIORITIES = {"high": 100, "normal": 0, "low": -100}

ENTRY_REQUIRED = 'required: the command that starts a trainer, e.g. "python train.py"'


# --- the fields a user sets ----------------------------------------------------------------------

# What a field's value is, and the type ``JobSpec`` holds it as once checked: a quantity in
# millicores or bytes, a priority's number. As sent (the API's JSON, a flag, an argument, the
# form) a quantity is text (1, 0.5, 500m; 1Gi) and a priority a PRIORITIES name.
TYPES: dict[str, type] = {
    "text": str,
    "integer": int,
    "trainers": int,  # sent as a number, or a range "MIN:MAX" (elastic trainers)
    "cpu": int,
    "memory": int,
    "choice": str,
    "priority": int,
    "env": dict,
}
REQUIRED = object()  # the default of a field that has none: it must be given
# The dashboard's widgets: a line of text, a whole number, one of a list, lines of text.
WIDGETS = ("text", "number", "select", "lines")


@dataclass(frozen=True)
class Field:
    """One field of a job as users set it, and how each way of submitting offers it."""

    name: str  # the API's name, JobSpec's and the model's
    type: str  # a key of TYPES
    help: str  # what it is, in words every consumer shows (API schema, --help, help(), form)
    # The rule of its type: the default (JobSpec's; None: not set), a whole number's range, a
    # text's most characters, a choice's (value, words) pairs. Rules that need more than one
    # value (name, image, package, topology, env, dataset, trainers) are ``spec_check``'s.
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[tuple[str, str], ...] = ()
    # ``paddlectl submit``: the flag's names (none: not a flag) and its value's name in help.
    flag: tuple[str, ...] = ()
    metavar: str = ""
    # A text flag that may be given more than once: its values are joined with ",".
    repeated: bool = False
    # ``PaddleJob``: the argument's name ("": the field's; None: not an argument) and its
    # default there (None: not sent, the portal's default applies).
    sdk: str | None = ""
    sdk_default: Any = None
    # The dashboard's submit form: its label (none: not on the form), widget (WIDGETS),
    # fieldset, an example or default shown in the empty field, and more HTML attributes.
    label: str = ""
    widget: str = "text"
    group: str = ""
    placeholder: str = ""
    attrs: tuple[tuple[str, str], ...] = ()

    @property
    def values(self) -> tuple[str, ...]:
        """A choice's values."""
        return tuple(value for value, _ in self.choices)

    @property
    def sdk_name(self) -> str | None:
        return self.name if self.sdk == "" else self.sdk

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __post_init__(self):
        if self.type not in TYPES or self.widget not in WIDGETS:
            raise ValueError(f"field {self.name}: type {self.type!r} is not one of TYPES, "
                             f"or widget {self.widget!r} not one of WIDGETS")


_SPELLED = (("spellcheck", "false"),)  # names and paths, not words
_SECONDS = "SECONDS"

# In the order of the form, where problems are listed in this order too.
FIELDS: tuple[Field, ...] = (
    # Job
    Field("name", "text", "the job's name, unique among your jobs: lower-case letters, digits "
          "and '-', at most 40 characters",
          default=REQUIRED, flag=("jobname", "name"), metavar="NAME", sdk="job_name",
          label="Name", group="Job", placeholder="e.g. fit-a-line",
          attrs=(("autocomplete", "off"), *_SPELLED)),
    Field("package", "text", "the trainer package: a directory in PFS "
          "(/pfs/{dc}/home/{user}/… or /pfs/{dc}/public/…)", default=REQUIRED,
          maximum=MAX_TEXT, sdk="trainer_package", label="Trainer package", group="Job",
          attrs=(("list", "package-dirs"), *_SPELLED)),
    Field("entry", "text", 'what starts a replica, e.g. "python train.py"', default=REQUIRED,
          maximum=MAX_TEXT, flag=("entry",), metavar="COMMAND", sdk="entry_point",
          label="Entry command", group="Job", placeholder="e.g. python train.py",
          attrs=_SPELLED),
    Field("rerun_of", "text", "the job this one re-runs: another of your jobs (`paddlectl "
          "submit -from JOB` starts from its spec, your flags changing it, and says what "
          "changed)", default="", maximum=JOB_NAME_MAX, flag=("from",), metavar="JOB",
          label="Re-run of", group="Job", placeholder="e.g. fit-a-line",
          attrs=(("autocomplete", "off"), *_SPELLED)),
    Field("priority", "priority", "high, normal or low: its place among your waiting jobs "
          "(high ones start before normal ones, low ones after; others' jobs are not passed) "
          "(default normal)", default=PRIORITIES["normal"],
          choices=tuple((name, name) for name in PRIORITIES), flag=("priority",),
          metavar="CLASS", label="Priority", widget="select", group="Job"),
    # Trainers
    Field("trainers", "trainers", "how many trainers (default 1), or "
          "a range MIN:MAX for elastic trainers: added as your quota has room and replaced "
          "when lost (a job with parameter servers and a dataset; docs/elastic.md)",
          default=1, minimum=1, maximum=MAX_REPLICAS, flag=("parallelism", "trainers"),
          metavar="N|MIN:MAX", sdk_default=1, label="Trainers", group="Trainers",
          placeholder="e.g. 2, or 2:4",
          attrs=(("inputmode", "text"), *_SPELLED, ("autocomplete", "off"))),
    # Set by a range of trainers (its MIN), or on its own through the API.
    Field("trainers_min", "integer", "the fewest trainers an elastic job runs with (the MIN of "
          "trainers MIN:MAX, which is then its MAX)", minimum=1, maximum=MAX_REPLICAS,
          sdk=None),
    Field("cpu", "cpu", "CPU per trainer: 1, 0.5 or 500m (default 1)", default=_CPU[0],
          flag=("cpu",), metavar="CPU", sdk="cpu_nums", sdk_default=1,
          label="CPU per trainer", group="Trainers"),
    Field("memory", "memory", "memory per trainer: 1Gi, 512Mi, 2G (default 1Gi)",
          default=_MEMORY[0], flag=("memory",), metavar="SIZE", sdk_default="1Gi",
          label="Memory per trainer", group="Trainers"),
    Field("gpu", "integer", "GPUs per trainer (default 0)", default=0, minimum=0,
          maximum=MAX_GPU, flag=("gpu",), metavar="N", sdk="gpu_nums", sdk_default=0,
          label="GPUs per trainer", widget="number", group="Trainers"),
    Field("trainers_lost_limit", "integer", "elastic trainers: how many the job may lose, "
          "each replaced when there is room, before it fails (default: MAX)", minimum=0,
          maximum=MAX_REPLICAS, flag=("trainers-lost-limit",), metavar="N",
          label="Trainers lost at most", widget="number", group="Trainers"),
    Field("trainers_below_min_seconds", "integer", "elastic trainers: how long the job may "
          "run with fewer than MIN before it fails (default 300)", minimum=1,
          maximum=MAX_DEADLINE, flag=("trainers-below-min-seconds",), metavar=_SECONDS,
          label="Below MIN at most (seconds)", widget="number", group="Trainers"),
    # Parameter servers
    Field("pservers", "integer", "the number of parameter servers: none for collective jobs "
          "(default 0)", default=0, minimum=0, maximum=MAX_REPLICAS, flag=("pservers",),
          metavar="N", sdk_default=0, label="Parameter servers", widget="number",
          group="Parameter servers"),
    Field("pscpu", "cpu", "CPU per parameter server (default 1)", default=_CPU[0],
          flag=("pscpu",), metavar="CPU", label="CPU per parameter server",
          group="Parameter servers"),
    Field("psmemory", "memory", "memory per parameter server (default 1Gi)",
          default=_MEMORY[0], flag=("psmemory",), metavar="SIZE",
          label="Memory per parameter server", group="Parameter servers"),
    # Runtime
    Field("image", "text", "the runtime image (default: the datacenter's; with -gpu, its "
          "CUDA image)", default="",
          maximum=MAX_IMAGE, flag=("image",), metavar="IMAGE", sdk="runtime_image",
          label="Image", group="Runtime", attrs=_SPELLED),
    Field("registry", "text", "your registry credentials for a private image (see `paddlectl "
          "registry`)", default="", maximum=MAX_REGISTRY, flag=("registry",), metavar="NAME",
          label="Registry credentials", widget="select", group="Runtime"),
    Field("env", "env", "environment variables of every replica, KEY=VALUE", default={},
          flag=("e", "env"), metavar="KEY=VALUE", label="Environment", widget="lines",
          group="Runtime", placeholder="e.g. BATCH_SIZE=64", attrs=_SPELLED),
    Field("passes", "integer", "passes, given as PADDLE_INIT_NUM_PASSES (default 1)",
          default=1, minimum=1, maximum=MAX_PASSES, flag=("passes",), metavar="N",
          label="Passes", widget="number", group="Runtime"),
    Field("restart_limit", "integer", "how often a failed trainer is restarted (default 0)",
          default=0, minimum=0, maximum=MAX_RESTARTS, flag=("restart-limit",), metavar="N",
          label="Restart limit", widget="number", group="Runtime"),
    Field("keep_checkpoints", "integer", "how many of its newest checkpoints the job keeps in "
          "jobs/{name}/checkpoints/ (PADDLE_CHECKPOINT_DIR, paddlecloud_sdk.checkpoint); "
          f"older ones are removed (default {KEEP_CHECKPOINTS})", default=KEEP_CHECKPOINTS,
          minimum=1, maximum=MAX_KEEP_CHECKPOINTS, flag=("keep-checkpoints",), metavar="N",
          label="Checkpoints kept", widget="number", group="Runtime"),
    Field("resume_from", "text", "start from a checkpoint of another of your jobs: JOB (its "
          "latest complete one) or JOB:STEP; its replicas find it as PADDLE_RESUME_FROM, and "
          "paddlecloud_sdk.checkpoint.load() resumes from it while the job has none of its own",
          default="", maximum=MAX_RESUME_FROM, flag=("resume-from",), metavar="JOB[:STEP]",
          label="Resume from", group="Runtime", placeholder="e.g. fit or fit:1200",
          attrs=_SPELLED),
    Field("after", "text", "run after other jobs of yours in the datacenter end: JOB (once "
          "it has succeeded) or JOB:any (once it has ended, however); several, "
          "comma-separated, must all hold. It waits holding no quota, and fails if one "
          "can no longer end as asked", default="", maximum=MAX_AFTER, flag=("after",),
          metavar="JOB[:ok|any]", repeated=True, label="Run after", group="Runtime",
          placeholder="e.g. prepare, or prepare:any", attrs=_SPELLED),
    Field("deadline_seconds", "integer", "fail the job if it runs longer", minimum=1,
          maximum=MAX_DEADLINE, flag=("deadline",), metavar=_SECONDS,
          label="Deadline (seconds)", widget="number", group="Runtime"),
    Field("ttl_seconds_after_finished", "integer", "delete the job this long after it ended",
          minimum=0, maximum=MAX_DEADLINE, flag=("ttl",), metavar=_SECONDS,
          label="Keep after finish (seconds)", widget="number", group="Runtime"),
    Field("topology", "text", "a PaddlePaddle v1 config file in the package (legacy)",
          default="", maximum=MAX_TOPOLOGY, flag=("topology",), metavar="FILE",
          label="Topology", group="Runtime", attrs=_SPELLED),
    # Data
    Field("dataset", "text", "files in PFS the job's master hands to the trainers task by "
          "task, e.g. /pfs/{dc}/home/{user}/data/part-*.recordio (quoted on a command line: "
          "the portal matches it); trainers read them with paddlecloud_sdk.master.reader() "
          "(docs/master.md); empty: no master", default="", maximum=MAX_TEXT,
          flag=("dataset",), metavar="GLOB", label="Dataset", group="Data",
          placeholder="e.g. /pfs/{dc}/home/{user}/data/part-*.recordio",
          attrs=(("autocomplete", "off"), *_SPELLED)),
    Field("dataset_unit", "choice", "what a task is: a file, a RecordIO chunk, or task_records "
          "records (lines of a text file) (default file, or records with task_records)",
          default="", maximum=16, choices=(("file", "a file"), ("chunk", "a RecordIO chunk"),
                                           ("records", "a number of records")),
          flag=("dataset-unit",), metavar="UNIT", label="A task is", widget="select",
          group="Data", placeholder="default: a file (records with a task size)"),
    Field("task_records", "integer", "records (or lines of a text file) a task holds, for "
          "dataset_unit records", minimum=1, maximum=MAX_TASK_RECORDS,
          flag=("task-records",), metavar="N", label="Records a task", widget="number",
          group="Data"),
)
FIELD = {field.name: field for field in FIELDS}

# Whole-number fields: (default, minimum, maximum).
INTEGERS: dict[str, tuple[int | None, int, int]] = {
    f.name: (f.default, f.minimum, f.maximum) for f in FIELDS
    if f.type in ("integer", "trainers")}
QUANTITIES: dict[str, tuple[int, Callable[[Any], int], int, Callable[[int], str]]] = {
    f.name: _CPU if f.type == "cpu" else _MEMORY for f in FIELDS if f.type in ("cpu", "memory")}
# How a job's dataset is cut into the master's tasks: a whole file each, a RecordIO chunk each,
# or ``task_records`` records each (of RecordIO files, or lines of text files).
DATASET_UNITS = FIELD["dataset_unit"].values


def resubmission(shown: Mapping[str, Any]) -> dict[str, Any]:
    """The submission that makes a job again, from the job as the API shows it (each field
    as users write it): every field a user sets that it has, the range of elastic trainers
    as MIN:MAX; not ``rerun_of`` (a re-run names its own)."""
    body = {f.name: shown[f.name] for f in FIELDS
            if f.name not in ("rerun_of", "trainers_min")
            and shown.get(f.name) not in (None, "", {})}
    if shown.get("trainers_min"):
        body["trainers"] = f"{shown['trainers_min']}:{shown['trainers']}"
    return body


def rerun_submission(shown: Mapping[str, Any]) -> dict[str, Any]:
    """The submission that re-runs a job exactly (issue 39), from the job as the API shows
    it: ``resubmission``, its package the snapshot the job ran (``package_snapshot``, the
    bytes of ``package_digest``), its image pinned to the digest it ran (``image_digest``)."""
    body = resubmission(shown)
    if shown.get("package_snapshot"):
        body["package"] = shown["package_snapshot"]
    if body.get("image") and shown.get("image_digest"):
        body["image"] = image_pinned(body["image"], shown["image_digest"])
    return body


def _spec_field(f: Field) -> tuple:
    kind = TYPES[f.type]
    if f.required:
        return f.name, kind
    if isinstance(f.default, dict):
        return f.name, kind, dataclass_field(default_factory=dict)
    return f.name, (kind if f.default is not None else kind | None), f.default


def _as_dict(self) -> dict:
    return asdict(self)


# A job as checked: every field of the table, with normalized values (CPU in millicores, memory
# in bytes, a priority's number).
JobSpec = make_dataclass("JobSpec", [("_", KW_ONLY), *map(_spec_field, FIELDS)], frozen=True,
                         namespace={"as_dict": _as_dict, "__module__": __name__,
                                    "__doc__": "A job as ``spec_check`` left it."})

# --- one field at a time -----------------------------------------------------------------------

def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a job name, or None."""
    if not isinstance(name, str) or not name:
        return "required: a unique name for the job, e.g. fit-a-line"
    if "_" in name:
        return "'_' is not allowed (Kubernetes object names cannot contain it); use '-'"
    if "." in name:
        return "'.' is not allowed: it breaks the Kubernetes service names of the job; use '-'"
    if name != name.lower():
        return "use lower-case letters"
    if len(name) > JOB_NAME_MAX:
        return (f"at most {JOB_NAME_MAX} characters, so that the names derived from it "
                "(<name>-trainer-N, …) fit Kubernetes' 63")
    if not JOB_NAME_RE.match(name):
        return ("only lower-case letters, digits and '-', starting and ending with a letter "
                "or digit")
    return None


def name_taken(name: str, datacenter_name: str | None = None) -> str:
    """The answer to a name the user already gave another job (in another datacenter)."""
    where = f" in datacenter {datacenter_name!r}" if datacenter_name else ""
    return (f"you already have a job named {name!r}{where}: delete it first "
            f"(paddlectl delete job {name}) or pick another name")


def topology_problem(topology: str) -> str | None:
    """Why ``topology`` cannot name a file in the package (whether it is one is the caller's
    to check, where the package is), or None."""
    if topology.startswith("/") or ".." in topology.split("/"):
        return "a path inside the package, without '..'"
    return None


def env_name_problem(key: Any) -> str | None:
    """Why ``key`` cannot be an extra variable of a job, or None."""
    if not isinstance(key, str) or not ENV_NAME_RE.match(key):
        return "not a valid variable name (letters, digits and '_', not starting with a digit)"
    if key in RESERVED_ENV:
        return "reserved: PaddleCloud sets it for every replica"
    return None


def integer_problem(name: str, value: int) -> str | None:
    """Why the whole number ``value`` is out of range for field ``name`` (``INTEGERS``)."""
    _, minimum, maximum = INTEGERS[name]
    if not minimum <= value <= maximum:
        return f"must be between {minimum} and {maximum}, not {value}"
    return None


def trainers_range(value: Any) -> tuple[int, int] | str | None:
    """``trainers`` given as a range, ``"MIN:MAX"`` (or a pair ``(MIN, MAX)``): the two
    numbers, or why it is not a range of trainers; None when ``value`` is not written as a
    range (a plain number, checked as one)."""
    if isinstance(value, (tuple, list)):
        parts = list(value)
    elif isinstance(value, str) and ":" in value:
        parts = [part.strip() for part in value.split(":")]
    else:
        return None
    shown = ":".join(str(part) for part in parts)
    if len(parts) != 2 or not all(
            (isinstance(p, int) and not isinstance(p, bool)) or (isinstance(p, str)
                                                                 and p.isdigit())
            for p in parts):
        return (f"{shown!r} is neither a whole number nor a range MIN:MAX of them, "
                "e.g. 2:4")
    low, high = (int(part) for part in parts)
    if low < 1:
        return f"MIN must be at least 1, not {low} (in {low}:{high})"
    if low > high:
        return f"MIN must be at most MAX, not {low}:{high}"
    if high > MAX_REPLICAS:
        return f"MAX must be at most {MAX_REPLICAS}, not {high}"
    return low, high


def trainers_shown(count: int | None, minimum: int | None, maximum: int) -> str:
    """How a job's trainers are shown: ``2`` for a fixed number; for a range, how many it
    holds now and the range, ``3 (2-4)`` with an en dash (``2-4`` before it holds any)."""
    if minimum is None or minimum >= maximum:
        return str(maximum)
    span = f"{minimum}\u2013{maximum}"
    return f"{count} ({span})" if count is not None else span


def quantity(name: str, value: Any) -> tuple[int, str | None]:
    """The quantity field ``name`` (cpu, memory, pscpu, psmemory) as a number (CPU in
    millicores, bytes), or its default and why ``value`` cannot be it."""
    default, parse, most, shown = QUANTITIES[name]
    if value is None or value == "":
        return default, None
    try:
        amount = parse(str(value) if isinstance(value, bool) else value)
    except QuantityError as exc:
        return default, str(exc)
    if amount <= 0:
        return default, "must be more than 0"
    if amount > most:
        return default, f"must be at most {shown(most)}"
    return amount, None


# --- a whole submission --------------------------------------------------------------------------

class _Checker:
    """Reads a submission field by field, reporting each problem to ``result``, so a user
    fixes everything in one go."""

    def __init__(self, data: Mapping[str, Any], result: SpecCheck):
        self.data = {ALIASES.get(key, key): value for key, value in data.items()}
        self.fail = result.fail

    def integer(self, name: str) -> int | None:
        default = INTEGERS[name][0]
        value = self.data.get(name, default)
        if value is None or value == "":
            return default
        if isinstance(value, bool) or not (isinstance(value, int) or
                                           (isinstance(value, str) and value.strip().isdigit())):
            self.fail(name, f"{value!r} is not a whole number")
            return default
        value = int(value)
        if (problem := integer_problem(name, value)) is not None:
            self.fail(name, problem)
            return default
        return value

    def quantity(self, name: str) -> int:
        amount, problem = quantity(name, self.data.get(name))
        if problem:
            self.fail(name, problem)
        return amount

    def text(self, name: str, *, required: str | None = None, maximum: int = MAX_TEXT) -> str:
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

    def env(self) -> dict[str, str]:
        env = self.data.get("env") or {}
        if not isinstance(env, Mapping):
            self.fail("env", 'an object of NAME: "value" pairs')
            return {}
        if len(env) > MAX_ENV:
            self.fail("env", f"at most {MAX_ENV} variables")
        for key, value in env.items():
            where = f"env.{key}"
            if (problem := env_name_problem(key)) is not None:
                self.fail(where, problem)
            elif not isinstance(value, str):
                self.fail(where, 'values are strings: write "4", not 4')
            elif len(value) > MAX_ENV_VALUE:
                self.fail(where, f"at most {MAX_ENV_VALUE} characters")
        return dict(env)


@dataclass
class SpecCheck:
    """What ``spec_check`` made of a submission: normalized values, and each field's
    problems (empty when there are none)."""

    values: dict[str, Any]
    errors: dict[str, list[str]]

    def fail(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def ordered(self) -> dict[str, list[str]]:
        """The problems in the order of the form: unknown fields, then the fields as
        ``ORDER`` lists them (each ``env.NAME`` where ``env`` is)."""
        def rank(name: str) -> int:
            base = "env" if name.startswith("env.") else name
            return ORDER.index(base) + 1 if base in ORDER else 0
        return dict(sorted(self.errors.items(), key=lambda item: rank(item[0])))

    def message(self) -> str:
        """One line naming every field's first problem."""
        return "; ".join(f"{name}: {msgs[0]}" for name, msgs in self.ordered().items())


ORDER = tuple(FIELD)


def spec_check(data: Mapping[str, Any], *, default_image: str,
               default_gpu_image: str | None = None,
               package_example: str = "/pfs/{datacenter}/home/{user}/pkg",
               extra_fields: frozenset[str] = frozenset()) -> SpecCheck:
    """Apply every rule that needs only the submission ``data``. ``values`` holds what a
    ``JobSpec`` is made of (a field with a problem keeps its default, so callers can go on
    checking the rest); ``package`` is the text as given, for the caller to resolve. A job
    that names no image runs ``default_image``, or ``default_gpu_image`` (where given) if its
    trainers ask for GPUs."""
    result = SpecCheck({}, {})
    check = _Checker(data, result)
    known = set(FIELD) | set(ALIASES) | extra_fields
    for unknown in sorted(set(data) - known):
        check.fail(unknown, "unknown field")

    name = check.data.get("name")
    if (problem := name_problem(name)) is not None:
        check.fail("name", problem)

    entry = check.text("entry", required=ENTRY_REQUIRED)
    image = check.text("image", maximum=MAX_IMAGE)
    image_given = bool(image)
    image = image or default_image
    if not IMAGE_RE.match(image):
        check.fail("image", f"{image!r} is not an image reference like "
                            f"{DEFAULT_IMAGE}")
    package = check.text("package", required="required: the trainer package directory, "
                                             f"e.g. {package_example}")
    registry = check.text("registry", maximum=MAX_REGISTRY)
    topology = check.text("topology", maximum=MAX_TOPOLOGY)
    if topology and (problem := topology_problem(topology)) is not None:
        check.fail("topology", problem)

    values: dict[str, Any] = dict(name=name, entry=entry, image=image, package=package,
                                  registry=registry, topology=topology)
    ranged = _trainers_written(check)
    values.update({key: check.integer(key) for key in INTEGERS})
    values.update({key: check.quantity(key) for key in QUANTITIES})
    if not image_given and default_gpu_image and values["gpu"]:
        values["image"] = default_gpu_image
    values["env"] = check.env()
    values.update(_dataset(check, values["task_records"]))
    values.update(_trainers_range(check, values, ranged))
    values["priority"] = _priority(check)
    values["resume_from"] = _resume_from(check)
    values["after"] = _after(check, name)
    for f in FIELDS:  # the rest: a text or a choice, with the rule of its type alone
        if f.name not in values:
            values[f.name] = check.text(f.name, maximum=f.maximum or MAX_TEXT)
            if f.choices and values[f.name] and values[f.name] not in f.values:
                check.fail(f.name, f"one of {', '.join(f.values)}, not {values[f.name]!r}")
                values[f.name] = f.default
    result.values = values
    return result


def _trainers_written(check: _Checker) -> bool:
    """``trainers`` written as a range MIN:MAX becomes ``trainers`` MAX and ``trainers_min``
    MIN (checked as those fields from here on). Whether it was written as one."""
    found = trainers_range(check.data.get("trainers"))
    if found is None:
        return False
    check.data["trainers"] = None  # checked here: not again as a number
    if isinstance(found, str):
        check.fail("trainers", found)
        return True
    low, high = found
    given = check.data.get("trainers_min")
    if given not in (None, "") and str(given).strip() != str(low):
        check.fail("trainers_min", f"given twice: as {given!r} and as MIN of trainers "
                                   f"{low}:{high}; give one")
    check.data["trainers"], check.data["trainers_min"] = high, low
    return True


ELASTIC_ONLY = "only with a range of trainers (trainers MIN:MAX)"


def _trainers_range(check: _Checker, values: dict[str, Any], ranged: bool) -> dict[str, Any]:
    """Elastic trainers: ``trainers_min`` below ``trainers`` makes the job elastic. Only a
    parameter-server job can be (a collective job's trainers form a communicator of a fixed
    size), and only with a dataset: its master hands records to whichever trainer asks, so a
    trainer lost or added loses or repeats nothing, where trainers that split the data by
    their index and count would. ``trainers_lost_limit`` (default: as many as ``trainers``)
    and ``trainers_below_min_seconds`` (default ``BELOW_MIN_SECONDS``) only with a range."""
    fixed = {"trainers_min": None, "trainers_lost_limit": None,
             "trainers_below_min_seconds": None}
    low, high = values["trainers_min"], values["trainers"]
    if ranged and check.data["trainers"] is None:
        return fixed  # the range itself was refused
    if low is not None and low > high:
        check.fail("trainers_min", f"at most trainers ({high}), not {low}")
        return fixed
    if low is None or low == high:
        for name in ("trainers_lost_limit", "trainers_below_min_seconds"):
            if values[name] is not None:
                check.fail(name, ELASTIC_ONLY)
        return fixed
    written = f"{low}:{high}"
    if not values["pservers"]:
        check.fail("trainers", f"a range ({written}) needs parameter servers (pservers of 1 "
                               "or more): a collective job's trainers form a communicator of "
                               "a fixed size; give a number")
    if not values["dataset"]:
        check.fail("trainers", f"a range ({written}) needs a dataset: the job's master hands "
                               "records to whichever trainer asks, so none is lost or read "
                               "twice as trainers come and go")
    return {"trainers_min": low,
            "trainers_lost_limit": (high if values["trainers_lost_limit"] is None
                                    else values["trainers_lost_limit"]),
            "trainers_below_min_seconds": (BELOW_MIN_SECONDS
                                           if values["trainers_below_min_seconds"] is None
                                           else values["trainers_below_min_seconds"])}


def priority_name(value: int) -> str:
    """A priority as users write it: the class's name, else the number."""
    return next((name for name, number in PRIORITIES.items() if number == value), str(value))


def _priority(check: _Checker) -> int:
    given = check.data.get("priority")
    if given in (None, ""):
        return PRIORITIES["normal"]
    if isinstance(given, str) and given.strip().lower() in PRIORITIES:
        return PRIORITIES[given.strip().lower()]
    check.fail("priority", f"one of {', '.join(PRIORITIES)}, not {given!r}")
    return PRIORITIES["normal"]


RESUME_FROM_RULE = "JOB or JOB:STEP: one of your jobs, and the step of one of its checkpoints"


def resume_from_parse(text: str) -> tuple[str, int | None]:
    """``JOB`` or ``JOB:STEP`` as (job, step or None: its latest complete checkpoint);
    ValueError saying the rule."""
    name, colon, step = text.partition(":")
    if not name:
        raise ValueError(f"{RESUME_FROM_RULE}: the job's name is missing")
    if (problem := name_problem(name)) is not None:
        raise ValueError(f"{RESUME_FROM_RULE} ({problem})")
    if colon and not (step.isascii() and step.isdigit() and len(step) <= 12):
        raise ValueError(f"{RESUME_FROM_RULE}: the step is a whole number, not {step!r}")
    return name, int(step) if colon else None


def _resume_from(check: _Checker) -> str:
    text = check.text("resume_from", maximum=MAX_RESUME_FROM)
    if text:
        try:
            resume_from_parse(text)
        except ValueError as exc:
            check.fail("resume_from", str(exc))
            return ""
    return text


# What a job waits for of each job it runs after (``after``): the mode's name, and the words
# of its waiting reason ("waiting for job prepare to succeed").
AFTER_MODES = {"ok": "succeed", "any": "end"}
AFTER_RULE = "JOB or JOB:MODE, comma-separated: your jobs, MODE ok (it succeeded; the default) " \
             "or any (it ended, however)"


def after_parse(text: str) -> list[tuple[str, str]]:
    """``after`` as (job, mode) pairs, in the order given, each job once; ValueError saying
    the rule."""
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, colon, mode = (s.strip() for s in part.partition(":"))
        if (problem := name_problem(name)) is not None:
            raise ValueError(f"{AFTER_RULE}; {name or part!r}: {problem}")
        mode = mode if colon else "ok"
        if mode not in AFTER_MODES:
            raise ValueError(f"{AFTER_RULE}; the mode of {name} is {mode!r}: give ok or any")
        if pairs.get(name, mode) != mode:
            raise ValueError(f"{AFTER_RULE}; {name} is given twice, as {name}:{pairs[name]} "
                             f"and {name}:{mode}: give one")
        pairs[name] = mode
    return list(pairs.items())


def after_shown(pairs: list[tuple[str, str]]) -> str:
    """(job, mode) pairs as ``after`` is stored and shown: ``prepare,clean:any``."""
    return ",".join(name if mode == "ok" else f"{name}:{mode}" for name, mode in pairs)


def _after(check: _Checker, name: Any) -> str:
    text = check.text("after", maximum=MAX_AFTER)
    if not text:
        return ""
    try:
        pairs = after_parse(text)
    except ValueError as exc:
        check.fail("after", str(exc))
        return ""
    if any(other == name for other, _ in pairs):
        check.fail("after", f"a job cannot run after itself ({name})")
        return ""
    return after_shown(pairs)


def _dataset(check: _Checker, task_records: int | None) -> dict[str, Any]:
    """The dataset the master dispatches: a glob of files in PFS (which it matches, and that
    it is the user's to read, is the portal's to check), how it is cut, and the task size."""
    dataset = check.text("dataset")
    unit = check.text("dataset_unit", maximum=16)
    if dataset and not dataset.startswith("/pfs/"):
        check.fail("dataset", "a glob of files in PFS, e.g. /pfs/{datacenter}/home/{user}/"
                              "data/part-*.recordio")
    if unit and unit not in DATASET_UNITS:
        check.fail("dataset_unit", f"one of {', '.join(DATASET_UNITS)}, not {unit!r}")
        unit = ""
    if not dataset:
        if unit or task_records is not None:
            check.fail("dataset", "required with dataset_unit or task_records: the files to "
                                  "cut into tasks")
        return {"dataset": "", "dataset_unit": "", "task_records": None}
    unit = unit or ("records" if task_records is not None else "file")
    if unit == "records" and task_records is None:
        check.fail("task_records", "required with dataset_unit records: how many records a "
                                   "task holds, e.g. 20")
    if unit != "records" and task_records is not None:
        check.fail("task_records", f"only with dataset_unit records (a task is a whole "
                                   f"{unit} here)")
    return {"dataset": dataset, "dataset_unit": unit, "task_records": task_records}
