"""Runs side by side (issue 39): up to ``MAX_JOBS`` of a user's jobs, their metrics' final and
best values, what differs in their specs and environments, and one metric's curves.

The API (``GET /api/v1/compare/?jobs=a,b``), ``paddlectl compare`` and the compare page
(``static/js/compare.js`` draws the curves) all answer from ``jobs_compare``. Only the user's
own jobs: another's is not found, as on every other job endpoint, and nothing of it is read.

The diff holds only what differs: each field of the table (``paddlecloud_core.spec.FIELDS``,
shown as the API shows a job), each variable of ``env`` — whose value is never shown when its
name looks like a secret's (``paddlecloud_core.contract.env_secret``); only that it is set —
and the digest of the environment its requirements were installed into. A registry credential
appears by its name only (the API never holds its password).

The metrics are trainer 0's (what ``paddlecloud_sdk.report`` wrote, ``jobs.metrics``), at most
``MAX_RECORDS`` records a job; the curves are sent whole (compact arrays), and the page thins
them per pixel column as it draws.
"""

from __future__ import annotations

import re

from kernel.errors import NotFoundError, PaddleCloudError, ValidationError
from paddlecloud_core.contract import env_secret
from paddlecloud_core.spec import FIELDS

from .files import metrics_file
from .metrics import metrics_read
from .models import Job, Replica
from .serializers import JobSerializer

MAX_JOBS = 20
MAX_RECORDS = 100_000  # of one job's metrics read for a comparison
JOBS_RULE = f"1 to {MAX_JOBS} of your jobs' names, comma-separated"
HIDDEN = "(hidden)"  # a secret-looking variable's value, in the diff
# Metrics whose best value is their lowest (a loss, an error); every other is best highest
# (an accuracy, an AUC).
LOWER_IS_BETTER = re.compile(r"loss|err|mse|mae|rmse|perplexity|ppl|cost|latency|time",
                             re.IGNORECASE)
DEFAULT_METRIC = "loss"  # the curve the page shows first, when the jobs reported it
# The rows of the diff besides the fields: the environment its requirements made.
ENVIRONMENT = "environment"


def compare_names(given) -> list[str]:
    """The job names of ``?jobs=a,b`` (or ``jobs`` repeated), in order, each once."""
    names: list[str] = []
    for part in given if isinstance(given, list | tuple) else [given or ""]:
        for name in str(part).split(","):
            if (name := name.strip()) and name not in names:
                names.append(name)
    if not names:
        raise ValidationError.for_field("jobs", f"required: {JOBS_RULE}")
    if len(names) > MAX_JOBS:
        raise ValidationError.for_field("jobs", f"at most {MAX_JOBS} jobs, not {len(names)}")
    return names


def compare_jobs(user, datacenter, names: list[str]) -> list[Job]:
    """The user's jobs named ``names`` in this order; the first that is not theirs is not
    found, with the words ``jobs.services.job_get`` uses."""
    found = {job.name: job for job in Job.objects.select_related("datacenter", "registry")
             .filter(owner=user, datacenter=datacenter, name__in=names)}
    for name in names:
        if name not in found:
            raise NotFoundError(f"you have no job named {name!r} in datacenter "
                                f"{datacenter.name!r}")
    return [found[name] for name in names]


def goal(metric: str) -> str:
    """``min`` when a metric's best value is its lowest, else ``max``."""
    return "min" if LOWER_IS_BETTER.search(metric) else "max"


def _records(job) -> list[dict]:
    trainer = (job.replicas.filter(role=Replica.Role.TRAINER).order_by("index").first()
               or job.replicas.order_by("role", "index").first())
    if trainer is None:
        return []
    try:
        return metrics_read(metrics_file(job, trainer), 0, MAX_RECORDS)[0]
    except (PaddleCloudError, OSError):  # not readable as a job's file (a link), or gone
        return []


def _table(name: str, records: list[dict]) -> list[dict]:
    """A row per metric of one job: its last value and step, its best and step, its count."""
    rows: dict[str, dict] = {}
    for record in records:
        for metric, value in record["metrics"].items():
            if value is None:
                continue
            row = rows.get(metric)
            if row is None:
                row = rows[metric] = {"job": name, "metric": metric, "goal": goal(metric),
                                      "final": value, "final_step": record["step"],
                                      "best": value, "best_step": record["step"], "points": 0}
            row["points"] += 1
            row["final"], row["final_step"] = value, record["step"]
            if (value < row["best"]) if row["goal"] == "min" else (value > row["best"]):
                row["best"], row["best_step"] = value, record["step"]
    return [rows[metric] for metric in sorted(rows)]


def _series(name: str, records: list[dict], metric: str) -> dict:
    steps, times, values = [], [], []
    for record in records:
        value = record["metrics"].get(metric)
        if value is not None:
            steps.append(record["step"])
            times.append(record["time"])
            values.append(value)
    return {"job": name, "step": steps, "time": times, "value": values}


def _shown(jobs: list[Job]) -> list[dict]:
    """Each job's fields as the API shows a job (quantities, priority, image, registry)."""
    fields = [f.name for f in FIELDS if f.name not in ("name", "env")]
    data = JobSerializer(jobs, many=True, context={"predictions": {}}).data
    return [{name: shown.get(name) for name in fields} for shown in data]


def _diff(jobs: list[Job]) -> list[dict]:
    """``[{"field", "values": {job: value}, "secret"}]``: the fields, ``env.NAME`` and the
    environment where the jobs do not all agree."""
    names = [job.name for job in jobs]
    shown = _shown(jobs)
    rows = []
    for field in shown[0]:
        values = [entry[field] for entry in shown]
        if len({repr(v) for v in values}) > 1:
            rows.append({"field": field, "values": dict(zip(names, values, strict=True)),
                         "secret": False})
    for variable in sorted({key for job in jobs for key in job.env}):
        values = [job.env.get(variable) for job in jobs]
        if len(set(values)) > 1:
            secret = env_secret(variable)
            rows.append({"field": f"env.{variable}", "secret": secret, "values": {
                name: (HIDDEN if secret and value is not None else value)
                for name, value in zip(names, values, strict=True)}})
    environments = [job.environment or None for job in jobs]
    if len(set(environments)) > 1:
        rows.append({"field": ENVIRONMENT, "secret": False,
                     "values": dict(zip(names, environments, strict=True))})
    return rows


def jobs_compare(user, datacenter, given, metric: str | None = None, *,
                 default: bool = False) -> dict:
    """What the API answers: ``{"jobs", "metrics", "table", "diff", "metric", "series"}``;
    ``series`` (one per job, ``{"job", "step", "time", "value"}``) only for ``metric`` — or,
    with ``default``, for the one shown first (``DEFAULT_METRIC`` if reported, else the first
    by name): the page draws it without asking again."""
    jobs = compare_jobs(user, datacenter, compare_names(given))
    records = {job.name: _records(job) for job in jobs}
    table = [row for job in jobs for row in _table(job.name, records[job.name])]
    metrics = sorted({row["metric"] for row in table})
    if not metric and default and metrics:
        metric = DEFAULT_METRIC if DEFAULT_METRIC in metrics else metrics[0]
    return {
        "jobs": [{"name": job.name, "state": job.state, "created_at": job.created_at,
                  "started_at": job.started_at, "finished_at": job.finished_at}
                 for job in jobs],
        "metrics": metrics,
        "table": table,
        "diff": _diff(jobs),
        "metric": metric or None,
        "series": ([_series(job.name, records[job.name], metric) for job in jobs]
                   if metric else []),
    }
