"""Sweeps: a search space, the trials it makes, and when a trial is stopped early.

A sweep (``paddlectl sweep SPEC.yaml``, ``POST /api/v1/sweeps/``) is a base job and a search
space; each trial is the base job with one setting of the space. Everything here is pure:
the portal (``experiments/``), paddlectl and the SDK check a sweep with ``sweep_check``, and
the portal asks ``trial_settings`` for trial N's settings and ``stop_decision`` whether a
running trial goes on.

A space maps a *key* to its values: ``env.NAME`` sets environment variable NAME of the
trial; ``arg.NAME`` appends ``--NAME=VALUE`` to the base job's entry. Values are a list (each
value a string or a number), or, for ``random`` and ``asha``, a range ``{"min": …, "max": …,
"log": false, "integer": false}`` drawn from uniformly (on a log scale with ``log``).

Methods: ``grid`` (every combination of the lists, in order), ``random`` (each trial drawn
with ``random.Random`` from ``seed`` and its number, so trial N is the same every time), and
``asha`` (asynchronous successive halving: random trials, and at each rung — ``min_steps``,
``min_steps * reduction_factor``, … reported steps — a trial not among the best
1/``reduction_factor`` of the trials that reached the rung is stopped).

Early stopping (``stopping``, for grid and random): the median stopping rule — after
``grace_steps`` reported steps, a trial whose best objective so far is worse than the median of
the other trials' running means at the same step (with at least ``min_trials`` of them there)
is stopped.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

METHODS = ("grid", "random", "asha")
MODES = ("minimize", "maximize")
RULES = ("median", "none")
KEY_RE = re.compile(r"^(env|arg)\.([A-Za-z_][A-Za-z0-9_-]*)$")
KEY_RULE = "env.NAME (an environment variable) or arg.NAME (--NAME=VALUE after the entry)"
MAX_TRIALS = 1000
MAX_VALUES = 1000
MAX_STEPS = 10**9
TRIAL_SUFFIX_MAX = len(f"-{MAX_TRIALS}")
SWEEP_FIELDS = frozenset({"name", "job", "space", "method", "seed", "max_trials", "parallel",
                          "objective", "stopping", "asha"})


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def draw(self, rng: random.Random) -> float | int:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return round(value) if self.integer else float(f"{value:.6g}")


@dataclass(frozen=True)
class Sweep:
    """A checked sweep (``sweep_check``): everything but its base job, which the job's own
    rules check (``paddlecloud_core.spec``)."""
    name: str
    job: dict
    space: dict[str, list | Range]
    method: str = "grid"
    seed: int = 0
    max_trials: int = 1
    parallel: int = 1
    metric: str = ""
    mode: str = "minimize"
    rule: str = "none"
    grace_steps: int = 0
    min_trials: int = 3
    min_steps: int = 1
    reduction_factor: int = 3
    as_dict: dict = field(default_factory=dict, compare=False)  # as stored and shown


class SweepProblems(ValueError):
    """What is wrong with a sweep, by field (``space.env.LR``, ``max_trials``, …)."""

    def __init__(self, problems: dict[str, str]):
        self.problems = problems
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))


def _whole(value: Any, minimum: int, maximum: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        return None
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def _space(space: Any, method: str, problems: dict[str, str]) -> dict[str, list | Range]:
    if not isinstance(space, Mapping) or not space:
        problems["space"] = ('required: an object of KEY: [values] (or {min, max} ranges for '
                             f'random and asha), each KEY {KEY_RULE}')
        return {}
    out: dict[str, list | Range] = {}
    for key, values in space.items():
        where = f"space.{key}"
        if not isinstance(key, str) or not KEY_RE.match(key):
            problems[where] = f"not a key of the space: use {KEY_RULE}"
            continue
        if isinstance(values, list):
            if not values or len(values) > MAX_VALUES:
                problems[where] = f"a list of 1 to {MAX_VALUES} values"
            elif not all(isinstance(v, str) or _number(v) for v in values):
                problems[where] = "each value a string or a number"
            else:
                out[key] = list(values)
            continue
        if isinstance(values, Mapping):
            if method == "grid":
                problems[where] = "a grid takes lists of values, not ranges (use random or asha)"
                continue
            unknown = sorted(set(values) - {"min", "max", "log", "integer"})
            low, high = values.get("min"), values.get("max")
            if unknown:
                problems[where] = f"unknown {unknown[0]!r}: a range has min, max, log, integer"
            elif not (_number(low) and _number(high) and low < high):
                problems[where] = "a range {min: A, max: B} with numbers A < B"
            elif values.get("log") and low <= 0:
                problems[where] = "a log range needs min > 0"
            else:
                out[key] = Range(float(low), float(high), bool(values.get("log")),
                                 bool(values.get("integer")))
            continue
        problems[where] = "a list of values, or a range {min: A, max: B}"
    return out


def _stops(stopping: Any) -> bool:
    return isinstance(stopping, Mapping) and bool(stopping) \
        and stopping.get("rule", "median") != "none"


def sweep_check(data: Any, *, name_problem=None) -> Sweep:
    """The sweep ``data`` says (a spec file's, the API's), or SweepProblems naming each wrong
    field and its rule. ``name_problem`` is the jobs' name rule (a trial is named
    ``NAME-N``). The base job (``job``) is only checked to be an object here."""
    if not isinstance(data, Mapping):
        raise SweepProblems({"sweep": "an object with name, job, space, objective, …"})
    problems: dict[str, str] = {}
    for key in sorted(set(data) - SWEEP_FIELDS):
        problems[key] = f"unknown field; a sweep has {', '.join(sorted(SWEEP_FIELDS))}"
    name = data.get("name")
    if name_problem is not None and (why := name_problem(
            f"{name}-{MAX_TRIALS}" if isinstance(name, str) and name else name)) is not None:
        problems["name"] = why.replace("the job", "the sweep") + (
            f" (its trials are named NAME-1 … NAME-{MAX_TRIALS})" if "most" in why else "")
    job = data.get("job")
    if not isinstance(job, Mapping):
        problems["job"] = "required: the base job, the fields of paddlectl submit (entry, …)"
        job = {}
    elif "name" in job:
        problems["job.name"] = "a trial's name is the sweep's and its number: leave it out"
    method = data.get("method", "grid")
    if method not in METHODS:
        problems["method"] = f"unknown method {method!r}; use {', '.join(METHODS)}"
    space = _space(data.get("space"), method, problems)
    seed = data.get("seed", 0)
    if _whole(seed, 0, 2**63) is None:
        problems["seed"] = "a whole number >= 0"
    grid_size = math.prod(len(v) for v in space.values() if isinstance(v, list)) or 1
    max_trials = data.get("max_trials", grid_size if method == "grid" else None)
    if _whole(max_trials, 1, MAX_TRIALS) is None:
        problems["max_trials"] = f"required: a whole number from 1 to {MAX_TRIALS}" if \
            max_trials is None else f"a whole number from 1 to {MAX_TRIALS}"
    parallel = data.get("parallel", 1)
    if _whole(parallel, 1, MAX_TRIALS) is None:
        problems["parallel"] = f"a whole number from 1 to {MAX_TRIALS}: trials run at once"
    objective = data.get("objective")
    metric, mode = "", "minimize"
    if isinstance(objective, Mapping) and set(objective) <= {"metric", "mode"}:
        metric, mode = objective.get("metric"), objective.get("mode", "minimize")
        if not isinstance(metric, str) or not metric:
            problems["objective.metric"] = "required: a name the trials report(), e.g. loss"
        if mode not in MODES:
            problems["objective.mode"] = f"{mode!r}: use minimize or maximize"
    elif objective is not None or method == "asha" or _stops(data.get("stopping")):
        problems["objective"] = ("{metric: NAME, mode: minimize|maximize}: what the trials "
                                 "report() that ranks them")
    stopping = data.get("stopping") or {}
    rule, grace, min_trials = "none", 0, 3
    if not isinstance(stopping, Mapping) or not set(stopping) <= {"rule", "grace_steps",
                                                                 "min_trials"}:
        problems["stopping"] = "{rule: median, grace_steps: N, min_trials: M}"
    else:
        rule = stopping.get("rule", "median" if stopping else "none")
        grace = stopping.get("grace_steps", 0)
        min_trials = stopping.get("min_trials", 3)
        if rule not in RULES:
            problems["stopping.rule"] = f"unknown rule {rule!r}; use {', '.join(RULES)}"
        elif rule != "none" and method == "asha":
            problems["stopping.rule"] = "asha stops trials at its rungs: no other rule"
        if _whole(grace, 0, MAX_STEPS) is None:
            problems["stopping.grace_steps"] = "a whole number of steps >= 0"
        if _whole(min_trials, 1, MAX_TRIALS) is None:
            problems["stopping.min_trials"] = f"a whole number from 1 to {MAX_TRIALS}"
    asha = data.get("asha") or {}
    min_steps, factor = 1, 3
    if not isinstance(asha, Mapping) or not set(asha) <= {"min_steps", "reduction_factor"}:
        problems["asha"] = "{min_steps: N, reduction_factor: F}"
    else:
        if asha and method != "asha":
            problems["asha"] = "only with method asha"
        min_steps, factor = asha.get("min_steps", 1), asha.get("reduction_factor", 3)
        if _whole(min_steps, 1, MAX_STEPS) is None:
            problems["asha.min_steps"] = "a whole number of steps >= 1: the first rung"
        if _whole(factor, 2, 100) is None:
            problems["asha.reduction_factor"] = "a whole number from 2 to 100"
    if problems:
        raise SweepProblems(problems)
    shown = {"name": name, "job": dict(job), "method": method, "seed": seed,
             "max_trials": max_trials, "parallel": parallel,
             "space": {k: list(v) if isinstance(v, list) else dict(space_value_shown(v))
                       for k, v in space.items()},
             "objective": {"metric": metric, "mode": mode} if metric else None,
             "stopping": {"rule": rule, "grace_steps": grace, "min_trials": min_trials},
             "asha": ({"min_steps": min_steps, "reduction_factor": factor}
                      if method == "asha" else None)}
    return Sweep(name=name, job=dict(job), space=space, method=method, seed=seed,
                 max_trials=max_trials, parallel=parallel, metric=metric or "", mode=mode,
                 rule=rule, grace_steps=grace, min_trials=min_trials, min_steps=min_steps,
                 reduction_factor=factor, as_dict=shown)


def space_value_shown(value: Range) -> dict:
    return {"min": value.low, "max": value.high, "log": value.log, "integer": value.integer}


def trial_count(sweep: Sweep) -> int:
    """How many trials the sweep makes: ``max_trials``, or fewer for a smaller grid."""
    if sweep.method == "grid":
        return min(sweep.max_trials, math.prod(len(v) for v in sweep.space.values()))
    return sweep.max_trials


def trial_settings(sweep: Sweep, number: int) -> dict[str, Any]:
    """Trial ``number``'s (from 1) value of each key of the space."""
    keys = sorted(sweep.space)
    if sweep.method == "grid":
        combos = itertools.product(*(sweep.space[k] for k in keys))
        return dict(zip(keys, next(itertools.islice(combos, number - 1, None)), strict=True))
    rng = random.Random(f"{sweep.seed}:{number}")  # noqa: S311 - reproducible draws, no secret
    return {k: (rng.choice(v) if isinstance(v, list) else v.draw(rng))
            for k, v in ((k, sweep.space[k]) for k in keys)}


def trial_job(sweep: Sweep, number: int, settings: Mapping[str, Any]) -> dict:
    """The job trial ``number`` submits: the base job, named ``NAME-N``, with its settings."""
    job = dict(sweep.job, name=f"{sweep.name}-{number}")
    env = dict(job.get("env") or {})
    args = []
    for key, value in settings.items():
        kind, name = key.split(".", 1)
        if kind == "env":
            env[name] = str(value)
        else:
            args.append(f"--{name}={value}")
    if env:
        job["env"] = env
    if args:
        job["entry"] = " ".join([str(job.get("entry") or ""), *args]).strip()
    return job


# --- stopping ----------------------------------------------------------------------------------


Curve = Sequence[tuple[int, float]]  # (step, value) of a trial's objective, by step


def _better(mode: str, a: float, b: float) -> bool:
    return a < b if mode == "minimize" else a > b


def _running_mean_at(curve: Curve, step: int) -> float | None:
    values = [v for s, v in curve if s <= step]
    return sum(values) / len(values) if values else None


def _value_at(curve: Curve, step: int) -> float | None:
    """The last value reported at or before ``step``."""
    found = None
    for s, v in curve:
        if s > step:
            break
        found = v
    return found


def _number_shown(value: float) -> str:
    return f"{value:.4g}"


def stop_decision(sweep: Sweep, curve: Curve, others: Sequence[Curve]) -> str | None:
    """Why a running trial whose objective so far is ``curve`` (sorted by step) is stopped
    now, given the other trials' curves (running, ended or stopped); None: it goes on."""
    if not curve or not sweep.metric:
        return None
    step = curve[-1][0]
    if sweep.method == "asha":
        return _asha_decision(sweep, curve, others)
    if sweep.rule != "median" or step < sweep.grace_steps:
        return None
    # The others that reached the step, by their running mean up to it (Vizier's rule).
    means = [m for other in others if other and other[-1][0] >= step
             and (m := _running_mean_at(other, step)) is not None]
    if len(means) < sweep.min_trials:
        return None
    median = statistics.median(means)
    best = min(v for _, v in curve) if sweep.mode == "minimize" else max(v for _, v in curve)
    if not _better(sweep.mode, median, best):
        return None
    return (f"stopped early: {sweep.metric} {_number_shown(best)} (its best) at step {step} "
            f"{'above' if sweep.mode == 'minimize' else 'below'} the median "
            f"{_number_shown(median)} of {len(means)} other trials at that step")


def asha_rungs(sweep: Sweep, last_step: int) -> list[int]:
    """The rungs (steps) up to ``last_step``: min_steps * reduction_factor^k."""
    rungs, rung = [], sweep.min_steps
    while rung <= last_step:
        rungs.append(rung)
        rung *= sweep.reduction_factor
    return rungs


def _asha_decision(sweep: Sweep, curve: Curve, others: Sequence[Curve]) -> str | None:
    rungs = asha_rungs(sweep, curve[-1][0])
    if not rungs:
        return None
    rung = rungs[-1]
    mine = _value_at(curve, rung)
    values = [v for other in others if other and other[-1][0] >= rung
              and (v := _value_at(other, rung)) is not None]
    if mine is None:
        return None
    # Kept: among the best 1/reduction_factor of the trials at the rung (itself among them).
    ranked = sorted([mine, *values], reverse=sweep.mode == "maximize")
    keep = max(1, (len(values) + 1) // sweep.reduction_factor)
    cutoff = ranked[keep - 1]
    if not _better(sweep.mode, cutoff, mine):
        return None
    return (f"stopped early by ASHA at rung step {rung}: {sweep.metric} "
            f"{_number_shown(mine)} not among the best {keep} of {len(values) + 1} trials "
            f"there (cutoff {_number_shown(cutoff)})")


def best_of(sweep: Sweep, curves: Mapping[Any, Curve]) -> tuple[Any, float] | None:
    """The trial (its key in ``curves``) with the best objective value reported, and that
    value; None before any trial reported."""
    found = None
    for key, curve in curves.items():
        for _, value in curve:
            if found is None or _better(sweep.mode, value, found[1]):
                found = (key, value)
    return found
