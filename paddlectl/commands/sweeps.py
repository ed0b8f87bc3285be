"""``paddlectl sweep SPEC.yaml``: a base job and a search space, its trials ordinary jobs
(``NAME-1``, ``NAME-2``, …) run ``parallel`` at a time; ``get sweeps``, ``kill NAME`` and
``delete sweep NAME`` (from ``jobs``) show, stop and remove them. The spec is checked by the
portal (``paddlecloud_core.experiments``), every mistake under its field."""

from __future__ import annotations

from pathlib import Path

import yaml

from paddlecloud_client.errors import UsageError
from paddlectl.output import Column

PROGRESS = ("done", "running", "waiting", "stopped", "killed")


def _progress(row: dict) -> str:
    progress = row["progress"]
    shown = " ".join(f"{progress[key]} {key}" for key in PROGRESS if progress.get(key))
    left = progress.get("to_submit")
    return (shown + (f" {left} to submit" if left else "")).strip() or "-"


def _best(row: dict) -> str | None:
    best, objective = row.get("best"), row.get("objective") or {}
    if not best:
        return None
    settings = " ".join(f"{k}={v}" for k, v in best["settings"].items())
    return f"{objective.get('metric')} {best['value']:.4g} ({best['job']}: {settings})"


def _end(row: dict) -> str | None:
    end = row.get("predicted_end") or {}
    if row["state"] != "running":
        return None
    return end.get("at") or f"unknown ({end.get('unknown')})"


SWEEP_COLUMNS = [
    Column("name", "name"), Column("state", "state"), Column("method", "method"),
    Column("trials", lambda row: f"{len(row['trials'])}/{row['trials_total']}"),
    Column("progress", _progress), Column("best", _best),
    Column("predicted end", _end), Column("age", "created_at", "age"),
    Column("problem", "problem", wide_only=True),
]
TRIAL_COLUMNS = [
    Column("job", "job"), Column("state", "state"),
    Column("settings", lambda row: " ".join(f"{k}={v}" for k, v in row["settings"].items())),
    Column("stopped early", "stopped_early"),
]


def sweep_row(sweep: dict) -> dict:
    """A sweep's row of the job list (the portal folds its trials into it) as ``get jobs``
    shows it: its state, and as its reason its progress and best so far."""
    return {**sweep, "state": f"sweep {sweep['state']}", "state_reason": "; ".join(filter(None, (
        f"{len(sweep['trials'])}/{sweep['trials_total']} trials: {_progress(sweep)}",
        _best(sweep) and f"best {_best(sweep)}")))}


def setup_sweep(parser) -> None:
    parser.description = (
        "sweep SPEC.yaml   start a sweep: a base job (the fields of submit) and a search space\n"
        "                  over env.NAME or arg.NAME (grid, random, asha), max_trials of them\n"
        "                  run parallel at a time, stopped early by stopping: {rule: median}")
    parser.add_argument("spec", metavar="SPEC.yaml", help="the sweep (YAML or JSON)")


def run_sweep(ctx, args) -> None:
    try:
        data = yaml.safe_load(Path(args.spec).read_text())
    except OSError as exc:
        raise UsageError(f"sweep: cannot read {args.spec}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"sweep: {args.spec} is not YAML: {exc}") from None
    sweep = ctx.client.sweep_submit(data)
    if ctx.output_format() in ("json", "yaml"):
        ctx.emit(sweep)
        return
    ctx.info(f"sweep {sweep['name']} started: {sweep['trials_total']} trials, "
             f"{_progress(sweep)} ({', '.join(t['job'] for t in sweep['trials'])})")


def sweeps_get(ctx, names: list[str]) -> None:
    """``get sweeps [NAME]``: one row a sweep; with one name, its trials too."""
    if len(names) == 1:
        sweep = ctx.client.sweep_get(names[0])
        if ctx.output_format() in ("json", "yaml"):
            ctx.emit(sweep)
            return
        ctx.emit(sweep, [sweep], SWEEP_COLUMNS)
        ctx.stdout.write("\n")
        ctx.emit(sweep["trials"], sweep["trials"], TRIAL_COLUMNS)
        return
    sweeps = [s for s in ctx.client.sweep_list() if not names or s["name"] in names]
    if not sweeps and ctx.output_format() not in ("json", "yaml"):
        ctx.info(f"no sweeps in datacenter {ctx.datacenter.name}")
        return
    ctx.emit(sweeps, sweeps, SWEEP_COLUMNS)
