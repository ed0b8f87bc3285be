"""``PaddleJob``: submit a training job from Python and follow it, as ``paddlectl`` does.

    from paddlecloud_sdk import PaddleJob

    job = PaddleJob(job_name="fit-a-line", entry_point="python train.py",
                    trainer_package="./fit_a_line", trainers=2, passes=5).submit()
    for line in job.logs(follow=True):
        print(line)
    assert job.wait() == "succeeded"

It talks to the portal through ``paddlecloud_client``, as paddlectl does — the same config
(``~/.paddle/config``, ``$PADDLE_CONFIG``, or ``config=``), the same current datacenter (or
``datacenter=``), the same token cache beside the config, the same API client and upload code
— and never prints: problems are exceptions (``paddlecloud_sdk.errors``), and ``logs()``
yields lines for the caller to show.

A local ``trainer_package`` directory is uploaded as ``paddlectl submit`` uploads one: to
``/pfs/{datacenter}/home/{user}/jobs/{job_name}/{dirname}`` (``package`` for a directory named
``output``), replacing what an earlier job of that name left there, once the portal has
checked the rest of the job; a ``/pfs/…`` path is used as it is.
"""

from __future__ import annotations

import codecs
import contextlib
import copy
import inspect
import io
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from paddlecloud_client import errors as client_errors
from paddlecloud_client import jobs, pfspath
from paddlecloud_client.api import ApiClient, datacenter_client
from paddlecloud_client.config import Config, Datacenter, config_load, config_path
from paddlecloud_client.placement import datacenter_choose
from paddlecloud_client.progress import Progress
from paddlecloud_core import layout, spec
from paddlecloud_core.placement import AUTO, PFS_FIELDS, spec_in
from paddlecloud_core.status import FINAL_STATES

from .errors import (
    JobSpecError,
    JobTimeoutError,
    UsageError,
    iterates_own,
    raises_own,
)

# The seeds' parameter names and the API's, accepted beside PaddleJob's own.
ALIASES = {
    "jobname": "job_name", "trainer_package_path": "trainer_package", "cpu_num": "cpu_nums",
    "gpu_num": "gpu_nums", "base_image": "runtime_image", "parallelism": "trainers",
    "memory_limit": "memory",
    **{f.name: f.sdk_name for f in spec.FIELDS if f.sdk_name not in (None, f.name)},
}
# The seeds' order of the arguments that may be given by position (seed 002's PaddleJob);
# the job's other fields are keyword-only.
POSITIONAL = ("job_name", "entry_point", "trainer_package", "memory", "cpu_nums", "gpu_nums",
              "runtime_image", "pservers", "trainers", "passes", "env", "registry",
              "cephfs_volume", "topology", "datacenter", "config", "pscpu", "psmemory")
# A field's argument as PaddleJob takes it, by the field's type (paddlecloud_core.spec.TYPES).
ANNOTATIONS = {
    "text": str, "choice": str, "priority": str, "integer": int,
    "trainers": int | str | tuple[int, int], "cpu": int | float | str, "memory": str | int,
    "env": Mapping[str, Any],
}
_SDK_FIELDS = tuple(f for f in spec.FIELDS if f.sdk_name is not None)
_DATASET = ("dataset", "dataset_unit")  # checked together, by _check_dataset
IGNORED = {
    "namespace": "namespaces are the portal's: every user has one per datacenter",
}


class IgnoredParameterWarning(UserWarning):
    """A seed-era parameter that PaddleCloud no longer uses."""


@dataclass(frozen=True)
class CephFSVolume:
    """The seeds' CephFS volume, accepted for compatibility and ignored: volumes (PFS) are
    configured per datacenter by the admins now, and every job sees the owner's home and the
    public datasets (``PADDLE_PFS_HOME``, ``PADDLE_PFS_PUBLIC``)."""

    monitors_addr: str
    user: str = "admin"
    secret_name: str = "cephfs-secret"  # noqa: S105 - a Kubernetes Secret's name
    mount_path: str = "/mnt/cephfs"
    path: str = "/"


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=3)


def _config_load(config: str | os.PathLike | Config | None) -> Config:
    if isinstance(config, Config):
        return config
    explicit = os.fspath(config) if config is not None else None
    return config_load(config_path(explicit), warn=_warn)


class Connection:
    """One datacenter of the config file and the API client for it (no request is made until
    one is needed)."""

    @raises_own
    def __init__(self, config: str | os.PathLike | Config | None = None,
                 datacenter: str | None = None):
        self.config = _config_load(config)
        self.datacenter: Datacenter = self.config.datacenter(datacenter)
        self.client = datacenter_client(self.config, self.datacenter, agent="paddlecloud-sdk")

    @property
    def home(self) -> str:
        """The user's PFS home in this datacenter."""
        return self.datacenter.home

    def __repr__(self) -> str:
        dc = self.datacenter
        return f"<Connection {dc.username}@{dc.name} {dc.endpoint}>"


def connect(config: str | os.PathLike | Config | None = None,
            datacenter: str | None = None) -> Connection:
    """A connection to a datacenter of the config (default: ``$PADDLE_CONFIG`` or
    ``~/.paddle/config``, its current datacenter)."""
    return Connection(config, datacenter)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PredictedStart:
    """When a waiting job is predicted to start, with a range (``PaddleJob.predicted_start``);
    ``unknown``: why no time can be told (then ``at`` is None)."""

    at: datetime | None
    earliest: datetime | None
    latest: datetime | None
    unknown: str | None = None


class PaddleJob:
    """A PaddleCloud job: its parameters, and once submitted (or attached), the server's view
    of it in ``info``.

    ``trainer_package`` is a local directory (uploaded by ``submit()``) or a ``/pfs/…``
    directory. ``memory``/``cpu_nums``/``gpu_nums`` are per trainer, ``psmemory``/``pscpu``
    per pserver (quantities as Kubernetes writes them: ``"512Mi"``, ``"2G"``; ``1``, ``0.5``,
    ``"500m"``). ``passes`` reaches trainers as ``PADDLE_INIT_NUM_PASSES`` (default 1, or
    ``dist_train``'s ``num_passes``). ``env`` adds variables (numbers are turned into
    strings). ``config``/``datacenter`` pick the config file and datacenter; ``connection`` a
    ``Connection`` to share between jobs.

    ``trainers`` is a number, or a range for **elastic trainers**: ``(2, 4)`` or ``"2:4"``
    — the job starts once 2 fit your quota, runs as many as fit up to 4, replaces trainers it
    loses, and fails only with fewer than 2 for longer than ``trainers_below_min_seconds``
    (default 300) or once it has lost more than ``trainers_lost_limit`` (default: 4). Only a
    job with ``pservers`` and a ``dataset`` may have a range (docs/elastic.md).

    ``dataset`` (a glob of files in PFS: ``/pfs/{dc}/home/{user}/data/part-*.recordio``) gives
    the job a master that hands the files to the trainers task by task, pass after pass
    (``paddlecloud_sdk.master.reader()`` in the trainer reads them); ``dataset_unit`` says what
    a task is — ``"file"``, ``"chunk"`` (a RecordIO chunk) or ``"records"``, ``task_records``
    records (or lines of a text file) — by default a file, or ``records`` when
    ``task_records`` is given.

    ``priority`` (``"high"``, ``"normal"``, the default, or ``"low"``) is the job's place among
    your waiting jobs: a high one starts before your normal ones, a low one after them
    (others' jobs are not passed). ``preview()`` asks the portal whether the job would start
    now or queue, and ``predicted_start()`` when a queued job is predicted to start.

    The seeds' names are accepted too: ``trainer_package_path``, ``cpu_num``, ``gpu_num``,
    ``use_gpu`` (one GPU when true and ``gpu_nums`` is not given), ``base_image``/``image``,
    ``parallelism``, ``name``/``jobname``, ``entry``. ``cephfs_volume`` and ``namespace`` are
    accepted and ignored, with a warning. Arguments are checked here, before anything is sent:
    every mistake is named in one ``JobSpecError``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        # The signature is __signature__ (made from the field table, below PaddleJob).
        bound = PaddleJob.__init__.__signature__.bind(self, *args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        values = {f.sdk_name: given[f.sdk_name] for f in _SDK_FIELDS}
        defaults = {f.sdk_name: f.sdk_default for f in _SDK_FIELDS}
        problems: dict[str, list[str]] = {}

        def fail(name: str, message: str) -> None:
            problems.setdefault(name, []).append(message)

        aliases = dict(given["aliases"])
        use_gpu = aliases.pop("use_gpu", None)
        for alias, value in aliases.items():
            if alias in IGNORED:
                warnings.warn(f"PaddleJob({alias}=...) is ignored: {IGNORED[alias]}",
                              IgnoredParameterWarning, stacklevel=2)
                continue
            if alias not in ALIASES:
                raise TypeError(f"PaddleJob() got an unexpected keyword argument {alias!r}")
            target = ALIASES[alias]
            if values[target] != defaults[target] and values[target] != value:
                fail(target, f"given twice, as {target} and as {alias}")
            values[target] = value
        if use_gpu is not None:
            if not isinstance(use_gpu, bool):
                fail("use_gpu", "True or False")
            elif use_gpu and values["gpu_nums"] == 0:
                values["gpu_nums"] = 1
            elif not use_gpu and values["gpu_nums"] not in (0, None):
                fail("gpu_nums", "use_gpu=False asks for no GPU")

        cephfs_volume = given["cephfs_volume"]
        if cephfs_volume is not None:
            warnings.warn(
                "PaddleJob(cephfs_volume=...) is ignored: volumes are configured per datacenter "
                "by the admins; jobs see your PFS home and the public datasets "
                "($PADDLE_PFS_HOME, $PADDLE_PFS_PUBLIC)", IgnoredParameterWarning, stacklevel=2)

        env = values.pop("env")
        for name, value in values.items():
            setattr(self, name, value)
        self.cephfs_volume = cephfs_volume
        self.env: dict[str, str] = {}
        self.datacenter = given["datacenter"]
        self._config = given["config"]
        self._connection = given["connection"]
        self.info: dict | None = None
        self.placement = ""  # with datacenter="auto", why the job went where it did
        self._check(env, fail, problems)
        if problems:
            raise JobSpecError(problems)

    # -- checking -------------------------------------------------------------------------------

    def _check(self, env: Mapping[str, Any] | None, fail, problems: dict) -> None:
        name = self.job_name
        if not isinstance(name, str):
            fail("job_name", "required: a name for the job, e.g. fit-a-line")
        elif (problem := spec.name_problem(name)) is not None:
            fail("job_name", f"{name!r}: {problem}")

        if not isinstance(self.entry_point, str) or not self.entry_point.strip():
            fail("entry_point", 'required: the command that starts a replica, e.g. '
                                '"python train.py"')

        package = self.trainer_package
        if package is None or package == "":
            fail("trainer_package", "required: a local directory to upload, or a /pfs/... "
                                    "directory")
        elif not isinstance(package, str | os.PathLike):
            fail("trainer_package", "a path")

        # The portal's rules (paddlecloud_core.spec), under PaddleJob's names.
        for f in _SDK_FIELDS:
            value, name = getattr(self, f.sdk_name), f.sdk_name
            if f.type in ("cpu", "memory"):
                if value is None and f.sdk_default is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, int | float | str) \
                        or value == "":
                    value = repr(value)  # refused by the parser, in its own words
                if (problem := spec.quantity(f.name, value)[1]) is not None:
                    fail(name, problem)
            elif f.type in ("integer", "trainers"):
                if value is None and f.sdk_default is None:
                    continue
                if f.type == "trainers" and (found := spec.trainers_range(value)) is not None:
                    if isinstance(found, str):
                        fail(name, found)
                    else:
                        setattr(self, name, found)
                    continue
                if not _is_int(value):
                    fail(name, f"{value!r} is not a whole number")
                elif (problem := spec.integer_problem(f.name, value)) is not None:
                    fail(name, problem)

        self._check_dataset(fail)
        self._check_elastic(fail, problems)

        if self.priority is not None:
            if (not isinstance(self.priority, str)
                    or self.priority.strip().lower() not in spec.PRIORITIES):
                fail("priority", f"one of {', '.join(spec.PRIORITIES)}, not {self.priority!r}")
            else:
                self.priority = self.priority.strip().lower()

        for f in _SDK_FIELDS:  # a repeated flag's values may come as a list (after=[...])
            value = getattr(self, f.sdk_name)
            if f.repeated and isinstance(value, list | tuple) \
                    and all(isinstance(v, str) for v in value):
                setattr(self, f.sdk_name, ",".join(value) or None)

        # Texts and choices the checks above leave (the dataset's are _check_dataset's).
        texts = {f.sdk_name: f.values for f in _SDK_FIELDS
                 if f.type in ("text", "choice") and not f.required and f.name not in _DATASET}
        for name, choices in {**texts, "datacenter": ()}.items():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                fail(name, "a non-empty string")
            elif value is not None and choices and value not in choices:
                fail(name, f"one of {', '.join(choices)}, not {value!r}")

        if env is not None:
            if not isinstance(env, Mapping):
                fail("env", 'a mapping of NAME: "value"')
                return
            for key, value in env.items():
                if (problem := spec.env_name_problem(key)) is not None:
                    fail(f"env.{key}", problem)
                elif isinstance(value, bool) or not isinstance(value, str | int | float):
                    fail(f"env.{key}", f"a string or a number, not {type(value).__name__}")
                else:
                    self.env[key] = str(value)

    def _check_dataset(self, fail) -> None:
        """The core's rules on ``dataset``, ``dataset_unit`` and ``task_records`` together
        (whether the glob matches files the user may read is the portal's to say)."""
        data: dict[str, Any] = {}
        for field in ("dataset", "dataset_unit"):
            value = getattr(self, field)
            if value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                fail(field, "a non-empty string")
                return
            data[field] = value
        task_records_ok = self.task_records is None or (
            _is_int(self.task_records)
            and spec.integer_problem("task_records", self.task_records) is None)
        if task_records_ok:
            data["task_records"] = self.task_records
        if not data or data == {"task_records": None}:
            return
        errors = spec.spec_check(data, default_image=spec.DEFAULT_IMAGE).errors
        for field in ("dataset", "dataset_unit", "task_records"):
            if field == "task_records" and not task_records_ok:
                continue  # its own problem is named already
            for problem in errors.get(field, []):
                fail(field, problem)

    def _check_elastic(self, fail, problems: dict) -> None:
        """The core's rules on a range of trainers: with pservers and a dataset; its limits
        only with a range (each field's own problem is named already)."""
        fields = ("trainers", "pservers", "trainers_lost_limit", "trainers_below_min_seconds")
        if any(field in problems for field in (*fields, "dataset")):
            return
        data = {"trainers": self._trainers_sent(), "pservers": self.pservers,
                "dataset": self.dataset, "trainers_lost_limit": self.trainers_lost_limit,
                "trainers_below_min_seconds": self.trainers_below_min_seconds}
        errors = spec.spec_check({k: v for k, v in data.items() if v is not None},
                                 default_image=spec.DEFAULT_IMAGE).errors
        for field in fields:
            for problem in errors.get(field, []):
                fail(field, problem)

    def _trainers_sent(self):
        """``trainers`` as the API takes it: a number, or ``"MIN:MAX"``."""
        if isinstance(self.trainers, tuple):
            return f"{self.trainers[0]}:{self.trainers[1]}"
        return self.trainers

    # -- where things are ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.job_name

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = Connection(self._config, self.datacenter)
        return self._connection

    @property
    def client(self) -> ApiClient:
        return self.connection.client

    @property
    def is_remote_package(self) -> bool:
        return pfspath.is_remote(os.fspath(self.trainer_package))

    @property
    def package_path(self) -> str:
        """The trainer package in PFS: as given, or where a local one is uploaded."""
        if self.is_remote_package:
            return os.fspath(self.trainer_package).rstrip("/")
        return jobs.package_path(self.connection.home, self.job_name, self.trainer_package)

    @property
    def output_path(self) -> str:
        """The job's output directory in PFS (model, metrics, ``node_N/train.log``)."""
        return layout.output_path(self.connection.home, self.job_name)

    @property
    def state(self) -> str | None:
        """The state last seen (no request; ``status()`` asks the server)."""
        return self.info["state"] if self.info else None

    # -- submitting ---------------------------------------------------------------------------

    def spec(self) -> dict:
        """The job as the API takes it (``POST /api/v1/jobs/``)."""
        body: dict[str, Any] = {}
        for f in _SDK_FIELDS:
            value = getattr(self, f.sdk_name)
            if f.name == "package":
                value = self.package_path
            elif f.type == "trainers":
                value = self._trainers_sent()
            elif f.type in ("cpu", "memory") and value is not None:
                value = str(value)
            elif f.type == "env":
                value = dict(value) or None
            if value is not None:
                body[f.name] = value
        return body

    @raises_own
    def submit(self) -> PaddleJob:
        """Upload a local trainer package and submit the job; ``self``, with the server's
        answer in ``info``. The portal checks the job before the package is uploaded, so a
        mistake (a name in use, a reserved variable …) costs no upload and replaces no files.
        """
        if self.info is not None:
            raise UsageError(f"job {self.job_name!r} was submitted already")
        placement = self._place() if self.datacenter == AUTO else None
        body = self.spec()
        if placement:
            body["placement"] = placement
        if not self.is_remote_package:
            local = Path(self.trainer_package).expanduser()
            if not local.is_dir():
                raise JobSpecError({"trainer_package": [
                    f"{local} is not a directory here (a local trainer package is uploaded; "
                    "a path in PFS starts with /pfs/)"]})
            if self.topology and (problem := jobs.topology_problem(self.topology, local)):
                raise JobSpecError({"topology": [problem]})
            jobs.job_probe(self.client, self.connection.home, body)
            progress = Progress(io.StringIO(), body["package"], None, enabled=False)
            jobs.package_upload(self.client, local, body["package"], progress, _warn)
        self.info = self.client.job_submit(body)
        return self

    def _place(self) -> str:
        """``datacenter="auto"``: the job goes to the configured datacenter where it would
        start first (paddlecloud_client.placement); the why, kept in ``placement``."""
        config = _config_load(self._config)
        local = None if self.is_remote_package else Path(self.trainer_package).expanduser()
        if local is not None and not local.is_dir():
            raise JobSpecError({"trainer_package": [
                f"{local} is not a directory here (a local trainer package is uploaded; "
                "a path in PFS starts with /pfs/)"]})
        self._connection = Connection(config, config.datacenters[0].name)  # for spec() alone
        chosen, self.placement = datacenter_choose(config, self.spec(), local,
                                                   agent="paddlecloud-sdk")
        moved = spec_in(self.spec(), chosen.name)
        for f in _SDK_FIELDS:  # its /pfs paths, at the same place there
            if f.name in PFS_FIELDS and not (f.name == "package" and local is not None):
                setattr(self, f.sdk_name, moved.get(f.name))
        self.datacenter = chosen.name
        self._connection = Connection(config, chosen.name)
        return self.placement

    @raises_own
    def preview(self) -> dict:
        """What submitting the job now would do, without submitting it (the portal's dry run;
        nothing is uploaded): ``{"starts": "now"}``, or ``"queued"`` with ``position`` (its
        place among your waiting jobs), ``reason`` (the limit it would wait for, with the
        numbers), ``predicted_start`` (``{"at", "earliest", "latest"}``, ISO times; None:
        not within 30 days) and ``sooner``, the changes that would start it sooner
        (``[{"change": {"trainers": 2}, "flag", "start", "message"}]``, the earliest first).
        With ``datacenter="auto"``, the dry run of the datacenter ``submit()`` would choose now,
        with ``datacenter`` (its name) and ``placement`` (why) added; the job itself is left
        as it was (``submit()`` chooses again). A mistake in the job raises as ``submit()``
        would."""
        if self.datacenter == AUTO:
            placed = copy.copy(self)  # _place moves the copy's datacenter and /pfs paths
            why = placed._place()
            return {**placed.preview(), "datacenter": placed.datacenter, "placement": why}
        body = self.spec()
        if self.is_remote_package:
            plan = self.client.job_submit({**body, "dry_run": True})
        else:  # the home stands in for the package not uploaded yet
            plan = jobs.job_probe(self.client, self.connection.home, body)
            if plan is None:
                raise JobSpecError({"trainer_package": [
                    "the portal could not check the job with your home standing in for the "
                    "local package; give a /pfs/ directory to preview it"]})
        return plan["admission"]

    @raises_own
    def predicted_start(self) -> PredictedStart | None:
        """When the job, while it waits (pending or queued), is predicted to start, asked of
        the portal now: ``at``, and the range ``earliest`` to ``latest`` (aware datetimes in UTC;
        ``at`` None: not within 30 days, or ``unknown`` says why nothing tells). None once it
        no longer waits."""
        predicted = self.refresh().get("predicted_start")
        if predicted is None:
            return None
        return PredictedStart(*(datetime.fromisoformat(predicted[key]) if predicted.get(key)
                                else None for key in ("at", "earliest", "latest")),
                              unknown=predicted.get("unknown"))

    @classmethod
    @raises_own
    def attach(cls, job_name: str, *, datacenter: str | None = None,
               config: str | os.PathLike | Config | None = None,
               connection: Connection | None = None) -> PaddleJob:
        """A job submitted before (by this SDK, ``paddlectl`` or the dashboard), by name."""
        connection = connection or Connection(config, datacenter)
        info = connection.client.job_get(job_name)
        given = {}
        for f in _SDK_FIELDS:
            value = info.get(f.name)
            if f.type in ("text", "choice", "env"):
                value = value or None  # "" and {}: not given
            elif f.type == "priority" and value not in spec.PRIORITIES:
                value = None  # a number set by an admin: the job's, not an argument
            given[f.sdk_name] = value
        if info.get("trainers_min") is not None:
            given["trainers"] = (info["trainers_min"], info["trainers"])
        if not info.get("dataset"):
            given["dataset_unit"] = None
        job = cls(**given, datacenter=connection.datacenter.name, connection=connection)
        job.info = info
        return job

    # -- following ----------------------------------------------------------------------------

    @raises_own
    def refresh(self) -> dict:
        """The job as the server sees it now (also kept in ``info``)."""
        self.info = self.client.job_get(self.job_name)
        return self.info

    def status(self) -> str:
        """The job's state: pending, queued, starting, running, succeeded, failed, killed."""
        return self.refresh()["state"]

    @raises_own
    def workers(self) -> list[dict]:
        """Its workers (pservers, then trainers): name, role, index, state, reason, restarts,
        exit_code, host, endpoint, started_at, finished_at."""
        return self.client.job_workers(self.job_name)

    @raises_own
    def events(self) -> list[dict]:
        """Every state change of the job and its workers, oldest first."""
        return self.client.job_events(self.job_name)

    @raises_own
    def wait(self, timeout: float | None = None, poll: float = 1.0) -> str:
        """Until the job ends; its final state (succeeded, failed or killed). After
        ``timeout`` seconds, ``JobTimeoutError`` (the job goes on)."""
        if poll <= 0:
            raise ValueError("poll must be more than 0 seconds")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.status()
            if state in FINAL_STATES:
                return state
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise JobTimeoutError(self.job_name, state, timeout)
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - now)))

    def logs(self, worker: str | None = None, follow: bool = False,
             tail: int | None = None) -> Iterator[str]:
        """The lines of a worker's log (``trainer-0`` by default; ``pserver-1`` …), without
        their newlines. ``tail``: only the last lines. ``follow``: go on until the worker
        ends (after a lost connection, or the portal's restart, it goes on from the line
        after the last one given)."""
        if tail is not None and (not _is_int(tail) or tail < 0):
            raise ValueError(f"tail must be a whole number of lines, not {tail!r}")
        return iterates_own(self._lines(worker, tail, follow))

    def _lines(self, worker: str | None, tail: int | None, follow: bool) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        blocks = self.client.job_log_blocks(self.job_name, worker=worker, tail=tail,
                                            follow=follow)
        with contextlib.closing(blocks):
            for block in blocks:
                pending += decoder.decode(block)
                *lines, pending = pending.split("\n")
                yield from lines
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending

    # -- ending -------------------------------------------------------------------------------

    @raises_own
    def kill(self) -> str:
        """Stop every worker; the job's state (``killed``, or how it ended before)."""
        try:
            self.info = self.client.job_kill(self.job_name)
        except client_errors.ApiError as exc:
            if exc.code != "job_ended":
                raise
            self.refresh()
        return self.info["state"]

    @raises_own
    def delete(self) -> None:
        """Remove the ended job from history (the seeds' ``kill -rm``); its output stays."""
        self.client.job_delete(self.job_name)
        self.info = None

    def __repr__(self) -> str:
        state = f" {self.state}" if self.info else ""
        return f"<PaddleJob {self.job_name!r}{state}>"


def _signature() -> inspect.Signature:
    """PaddleJob's arguments: the seeds' positional ones, then the job's other fields
    (keyword-only), where to submit, and the seeds' and the API's names (``ALIASES``)."""
    own = {"cephfs_volume": (CephFSVolume | None, None), "datacenter": (str | None, None),
           "config": (str | os.PathLike | Config | None, None)}
    for f in _SDK_FIELDS:
        kind = str | os.PathLike if f.name == "package" else ANNOTATIONS[f.type]
        if f.repeated:
            kind = kind | list[str]
        own[f.sdk_name] = (kind if f.sdk_default is not None else kind | None, f.sdk_default)
    own["connection"] = (Connection | None, None)
    positional = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    annotation=own[name][0], default=own[name][1])
                  for name in POSITIONAL]
    keywords = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                  default=default)
                for name, (kind, default) in own.items() if name not in POSITIONAL]
    return inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                              *positional, *keywords,
                              inspect.Parameter("aliases", inspect.Parameter.VAR_KEYWORD,
                                                annotation=Any)])


PaddleJob.__init__.__signature__ = _signature()
PaddleJob.__init__.__doc__ = "The job's fields (paddlecloud_core.spec.FIELDS):\n\n" + "\n".join(
    f"{f.sdk_name}: {f.help}" for f in _SDK_FIELDS)
