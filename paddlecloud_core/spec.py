"""A job as users submit it, and every rule on its fields that needs nothing but the fields.

``spec_check`` applies them all and names each field's problem at once: the portal runs it
before its own checks (is the name free, is the package a directory in PFS, does the registry
exist), and ``paddlectl`` and the SDK run the same rules before anything is uploaded. The
field names are the API's; the seeds' flag names (``jobname``, ``parallelism`` …) are accepted
beside them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .contract import ENV_NAME_RE, JOB_NAME_MAX, JOB_NAME_RE, RESERVED_ENV
from .quantity import QuantityError, format_bytes, format_cpu, parse_bytes, parse_cpu

# The image a job runs in when neither it nor its datacenter names one.
DEFAULT_IMAGE = "paddlepaddle/paddle:2.6.1"
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]*$")
MAX_REPLICAS = 1000
MAX_GPU = 64
MAX_PASSES = 100_000
MAX_RESTARTS = 100
MAX_ENV = 100
MAX_ENV_VALUE = 32 * 1024
MAX_DEADLINE = 30 * 24 * 3600
MAX_TEXT = 4096
MAX_IMAGE = 512
MAX_REGISTRY = 64
MAX_TOPOLOGY = 1024
MAX_TASK_RECORDS = 10**9
# An elastic job (``trainers`` a range MIN:MAX) may run below MIN this long before it fails,
# unless it says otherwise (``trainers_below_min_seconds``).
BELOW_MIN_SECONDS = 300
# How a job's dataset is cut into the master's tasks: a whole file each, a RecordIO chunk each,
# or ``task_records`` records each (of RecordIO files, or lines of text files).
DATASET_UNITS = ("file", "chunk", "records")

# The seeds' flag names, accepted as aliases.
ALIASES = {"jobname": "name", "parallelism": "trainers", "package_path": "package"}

# Whole-number fields: (default, minimum, maximum).
INTEGERS: dict[str, tuple[int | None, int, int]] = {
    "trainers": (1, 1, MAX_REPLICAS),
    "pservers": (0, 0, MAX_REPLICAS),
    "gpu": (0, 0, MAX_GPU),
    "passes": (1, 1, MAX_PASSES),
    "restart_limit": (0, 0, MAX_RESTARTS),
    "deadline_seconds": (None, 1, MAX_DEADLINE),
    "ttl_seconds_after_finished": (None, 0, MAX_DEADLINE),
    "task_records": (None, 1, MAX_TASK_RECORDS),
    # Elastic trainers (``trainers`` given as MIN:MAX): the fewest it runs with, how many
    # trainers it may lose (and replace) over its life, and how long it may run with fewer
    # than MIN. Defaults are applied by ``_trainers_range``.
    "trainers_min": (None, 1, MAX_REPLICAS),
    "trainers_lost_limit": (None, 0, MAX_REPLICAS),
    "trainers_below_min_seconds": (None, 1, MAX_DEADLINE),
}
# Quantities: (default, parser, most, formatter) — CPU in millicores, memory in bytes. The
# most is far past any machine, and within what the portal's columns hold (a 32-bit count of
# millicores, a 64-bit one of bytes): more is a mistake to name, not a job to store.
MAX_CPU = 10**9  # a million cores
MAX_MEMORY = 2**60  # 1Ei
_CPU = (1000, parse_cpu, MAX_CPU, format_cpu)
_MEMORY = (2**30, parse_bytes, MAX_MEMORY, format_bytes)
QUANTITIES: dict[str, tuple[int, Callable[[Any], int], int, Callable[[int], str]]] = {
    "cpu": _CPU, "memory": _MEMORY, "pscpu": _CPU, "psmemory": _MEMORY}

# Priority classes (``-priority``): the number underneath orders a user's queue, higher first.
PRIORITIES = {"high": 100, "normal": 0, "low": -100}

ENTRY_REQUIRED = 'required: the command that starts a trainer, e.g. "python train.py"'


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
    # The data the job's master dispatches to its trainers, task by task (empty: none).
    dataset: str = ""
    dataset_unit: str = ""
    task_records: int | None = None
    # Elastic trainers: ``trainers`` is then the most that run at once (None: a fixed number).
    trainers_min: int | None = None
    trainers_lost_limit: int | None = None
    trainers_below_min_seconds: int | None = None
    priority: int = 0  # a PRIORITIES number; users write the class's name

    def as_dict(self) -> dict:
        return asdict(self)


FIELDS = frozenset(JobSpec.__dataclass_fields__)


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


ORDER = ("name", "entry", "image", "package", "registry", "topology", *INTEGERS, *QUANTITIES,
         "env", "dataset", "dataset_unit", "priority")


def spec_check(data: Mapping[str, Any], *, default_image: str,
               package_example: str = "/pfs/{datacenter}/home/{user}/pkg",
               extra_fields: frozenset[str] = frozenset()) -> SpecCheck:
    """Apply every rule that needs only the submission ``data``. ``values`` holds what a
    ``JobSpec`` is made of (a field with a problem keeps its default, so callers can go on
    checking the rest); ``package`` is the text as given, for the caller to resolve."""
    result = SpecCheck({}, {})
    check = _Checker(data, result)
    known = FIELDS | set(ALIASES) | extra_fields
    for unknown in sorted(set(data) - known):
        check.fail(unknown, "unknown field")

    name = check.data.get("name")
    if (problem := name_problem(name)) is not None:
        check.fail("name", problem)

    entry = check.text("entry", required=ENTRY_REQUIRED)
    image = check.text("image", maximum=MAX_IMAGE) or default_image
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
    values["env"] = check.env()
    values.update(_dataset(check, values["task_records"]))
    values.update(_trainers_range(check, values, ranged))
    values["priority"] = _priority(check)
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
