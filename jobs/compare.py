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
``MAX_RECORDS`` records a job, parsed once per file and kept while it is unchanged, in memory
and on disk (``jobs.metrics_cache``: a worker parses a job's when it ends). The table's
final and best values are exact, from every point. A curve is sent thinned
(``jobs.curves``): at most ``max_points`` points a job (the page asks for twice its chart's
width in pixels), in each bucket of x its first, lowest, highest and last point, so that it
draws as the whole curve would. Thinning depends on what is drawn,
so it is done for what the client asks:

- along ``x`` (step, or time): a bucket is a slice of that axis, and time can have gaps and
  bursts that step has not (a run paused, then resumed), so thinning along step and drawing
  along time would lose detail where time is sparse. Along time, the points without a time
  are left out, as they cannot be drawn there.
- with ``smoothing``: the moving average is taken over every point, here, before thinning.
  Averaging the thinned points instead would be wrong: they are a bucket's extremes, not a
  sample, and far fewer, so the same weight would reach much further back and towards the
  spikes. The smoothed curve is sent beside the raw one, at the same points: each bucket's
  first and last are among them, so it is known at least every bucket, and it varies little
  inside one.

A log scale needs nothing here: every bucket's lowest is kept, so whether all values are
above 0 is the same question on the thinned curve.
"""

from __future__ import annotations

import math
import re

from kernel.errors import NotFoundError, ValidationError
from paddlecloud_core.contract import env_secret
from paddlecloud_core.spec import FIELDS

from .curves import KEPT, compact, smoothed, thinned
from .metrics_cache import MAX_RECORDS, Column, job_columns
from .models import Job
from .serializers import JobSerializer

MAX_JOBS = 20
JOBS_RULE = f"1 to {MAX_JOBS} of your jobs' names, comma-separated"
HIDDEN = "(hidden)"  # a secret-looking variable's value, in the diff
# Metrics whose best value is their lowest (a loss, an error); every other is best highest
# (an accuracy, an AUC).
LOWER_IS_BETTER = re.compile(r"loss|err|mse|mae|rmse|perplexity|ppl|cost|latency|time",
                             re.IGNORECASE)
DEFAULT_METRIC = "loss"  # the curve the page shows first, when the jobs reported it
# A curve's points at most, unless asked otherwise: twice the width in pixels of the page's
# chart on a common screen (the page asks for more when it is wider).
DEFAULT_POINTS = 2400
AXES = ("step", "time")  # what x can be
MAX_SMOOTHING = 0.99  # the page's slider's highest
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
             .prefetch_related("replicas")
             .filter(owner=user, datacenter=datacenter, name__in=names)}
    for name in names:
        if name not in found:
            raise NotFoundError(f"you have no job named {name!r} in datacenter "
                                f"{datacenter.name!r}")
    return [found[name] for name in names]


def goal(metric: str) -> str:
    """``min`` when a metric's best value is its lowest, else ``max``."""
    return "min" if LOWER_IS_BETTER.search(metric) else "max"


def _table(name: str, columns: dict[str, Column]) -> list[dict]:
    """A row per metric of one job: its last value and step, its best and step, its count
    (from every point, exact)."""
    rows = []
    for metric in sorted(columns):
        column, way = columns[metric], goal(metric)
        best, best_step = ((column.low, column.low_step) if way == "min"
                           else (column.high, column.high_step))
        rows.append({"job": name, "metric": metric, "goal": way, "final": column.final,
                     "final_step": column.final_step, "best": best, "best_step": best_step,
                     "points": len(column.value)})
    return rows


def _series(name: str, column: Column | None, x: str, smoothing: float,
            max_points: int) -> dict:
    """One job's curve of a metric along ``x``, thinned to ``max_points`` (see the module's
    docstring for why it is thinned along x, and smoothed before)."""
    if column is None:
        steps, times, values = [], [], []
    elif x == "time":  # only the points that have a time
        kept = [i for i, moment in enumerate(column.time) if moment == moment]
        steps = [column.step[i] for i in kept]
        times = [column.time[i] for i in kept]
        values = [column.value[i] for i in kept]
    else:
        steps, times, values = column.step, column.time, column.value
    average = smoothed(values, smoothing) if smoothing else None
    shown = thinned(times if x == "time" else steps, values, max_points) if values else []
    one = {"job": name, "points": len(column.value) if column else 0,
           "step": [int(steps[i]) for i in shown],
           "time": [None if times[i] != times[i] else round(times[i], 3) for i in shown],
           "value": [compact(values[i]) for i in shown]}
    if average is not None:
        one["smoothed"] = [compact(average[i]) for i in shown]
    return one


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


def compare_options(params) -> dict:
    """The curve's options of a query (``x``, ``smoothing``, ``max_points``), checked, as
    ``jobs_compare``'s keywords; those not given are left to its defaults."""
    options: dict = {}
    if (x := params.get("x")) is not None:
        if x not in AXES:
            raise ValidationError.for_field("x", f"step or time, not {x!r}")
        options["x"] = x
    if (given := params.get("smoothing")) is not None:
        try:
            smoothing = float(given)
        except ValueError:
            smoothing = math.nan
        if not 0 <= smoothing <= MAX_SMOOTHING:
            raise ValidationError.for_field(
                "smoothing", f"a number from 0 (none) to {MAX_SMOOTHING}, not {given!r}")
        options["smoothing"] = smoothing
    if (given := params.get("max_points")) is not None:
        if not given.isdigit() or not KEPT <= int(given) <= MAX_RECORDS:
            raise ValidationError.for_field(
                "max_points", f"a whole number from {KEPT} to {MAX_RECORDS} (every point), "
                              f"not {given!r}")
        options["max_points"] = int(given)
    return options


def jobs_compare(user, datacenter, given, metric: str | None = None, *,
                 default: bool = False, x: str = "step", smoothing: float = 0.0,
                 max_points: int = DEFAULT_POINTS) -> dict:
    """What the API answers: ``{"jobs", "metrics", "table", "diff", "metric", "x",
    "smoothing", "max_points", "series"}``; ``series`` (one per job, ``{"job", "points",
    "step", "time", "value"}`` and ``"smoothed"`` with ``smoothing``) only for ``metric`` —
    or, with ``default``, for the one shown first (``DEFAULT_METRIC`` if reported, else the
    first by name): the page draws it without asking again."""
    jobs = compare_jobs(user, datacenter, compare_names(given))
    columns = {job.name: job_columns(job) for job in jobs}
    table = [row for job in jobs for row in _table(job.name, columns[job.name])]
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
        "x": x,
        "smoothing": smoothing,
        "max_points": max_points,
        "series": ([_series(job.name, columns[job.name].get(metric), x, smoothing,
                            max_points) for job in jobs] if metric else []),
    }
