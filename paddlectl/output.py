"""How results are shown: one printer per ``-o`` format, and the formatting of cells.

``table`` aligns columns with spaces under upper-case headers, as kubectl does, shows times
in local time with their age and sizes human-readable; ``wide`` adds the wide-only columns
and exact sizes; ``json`` and ``yaml`` print the API's data as it came; ``csv`` the rows in
the table's columns (``get usage`` and ``get audit``: the portal's own export).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

from paddlecloud_client.progress import format_size

FORMATS = ("table", "wide", "json", "yaml", "csv")
PADDING = 3  # spaces between columns at least (kubectl's)


@dataclass(frozen=True)
class Column:
    header: str
    key: str | Callable[[dict], Any]
    kind: str = "text"  # "text", "size", "time" (local time and age) or "age" (age only)
    wide_only: bool = False
    narrow_only: bool = False  # -o wide shows a fuller column in its place

    def value(self, row: dict) -> Any:
        return self.key(row) if callable(self.key) else row.get(self.key)


def format_duration(seconds: float) -> str:
    """``45s``, ``3m``, ``2h``, ``1y``: the largest whole unit."""
    seconds = abs(int(seconds))
    for unit, length in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= length:
            return f"{seconds // length}{unit}"
    return f"{seconds}s"


def format_age(seconds: float) -> str:
    """``3m ago``, ``in 2d``."""
    amount = format_duration(seconds)
    return f"in {amount}" if seconds < 0 else f"{amount} ago"


def parse_time(text: str | None) -> datetime | None:
    """An ISO-8601 time (UTC when it names no zone), or None."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def format_time(text: str | None, now: datetime | None = None) -> str:
    """An ISO-8601 time as local time with its age: ``2026-11-21 10:02 (3m ago)``."""
    if not text:
        return "-"
    moment = parse_time(text)
    if moment is None:
        return text
    age = ((now or datetime.now(UTC)) - moment).total_seconds()
    return f"{moment.astimezone():%Y-%m-%d %H:%M} ({format_age(age)})"


def format_since(text: str | None, now: datetime | None = None) -> str:
    """How long ago an ISO-8601 time was, kubectl's AGE: ``3m``; ``-`` for none."""
    moment = parse_time(text)
    if moment is None:
        return "-"
    return format_duration(((now or datetime.now(UTC)) - moment).total_seconds())


def tabulate(rows: list[list[str]]) -> str:
    """Rows as lines whose cells are padded with spaces to their column's widest cell, and
    ``PADDING`` more: columns line up whatever the terminal's tab stops, or a pager's."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) + PADDING for i in range(len(rows[0]) - 1)]
    return "".join("".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                   + row[-1] + "\n" for row in rows)


def _cell(column: Column, row: dict, wide: bool) -> str:
    value = column.value(row)
    if column.kind == "size":
        return format_size(value, exact=wide)
    if column.kind == "time":
        return format_time(value)
    if column.kind == "age":
        return format_since(value)
    return "-" if value in (None, "") else str(value)


def _table(data: Any, rows: list[dict], columns: list[Column], wide: bool = False) -> str:
    shown = [c for c in columns if not (c.narrow_only if wide else c.wide_only)]
    lines = [[c.header.upper() for c in shown]]
    lines += [[_cell(c, row, wide) for c in shown] for row in rows]
    return tabulate(lines)


# -- the columns of each resource -------------------------------------------------------------

def _job_duration(job: dict) -> str | None:
    """How long a job has run (until now, or until it ended); None before it started."""
    started = parse_time(job.get("started_at"))
    if started is None:
        return None
    ended = parse_time(job.get("finished_at")) or datetime.now(UTC)
    return format_duration(max(0.0, (ended - started).total_seconds()))


def _job_state(job: dict) -> str | None:
    """The state, with the place in the user's queue while it waits: ``queued #2``."""
    position = job.get("queue_position")
    return f"{job.get('state')} #{position}" if position else job.get("state")


def predicted_start(prediction: dict | None) -> str:
    """A waiting job's predicted start for people: ``2026-11-21 10:12 (in 10m; 5m-40m)``;
    ``unknown (why)`` where nothing tells; a moment just passed (the prediction is as old
    as the answer) is ``now``."""
    if not prediction:
        return "-"
    if prediction.get("unknown"):
        return f"unknown ({prediction['unknown']})"
    if not prediction.get("at"):
        return "not within 30 days"
    now = datetime.now(UTC)
    at = parse_time(prediction["at"])
    shown = format_time(prediction["at"], now) if at is None or at > now else \
        f"{at.astimezone():%Y-%m-%d %H:%M} (now)"
    ends = [parse_time(prediction.get(k)) for k in ("earliest", "latest")]
    if all(ends):
        low, high = (max(0.0, (t - now).total_seconds()) for t in ends)
        shown = f"{shown[:-1]}; between {format_duration(low)} and {format_duration(high)})"
    return shown


def _job_trainers(job: dict):
    """``2``, or of an elastic job how many it holds and its range: ``3 (2-4)`` (an en dash)."""
    return job.get("trainers_shown") or job.get("trainers")


def _unusual(reason_key: str) -> Callable[[dict], Any]:
    """The reason of a row whose state needs one (failed, killed, waiting, ...): a table shows
    why a job failed without -o wide; running and succeeded go without saying."""
    return lambda row: None if row.get("state") in ("running", "succeeded") \
        else row.get(reason_key)


JOB_COLUMNS = [
    Column("name", "name"), Column("state", _job_state), Column("trainers", _job_trainers),
    Column("pservers", "pservers"), Column("duration", _job_duration),
    Column("age", "created_at", "age"),
    Column("reason", _unusual("state_reason"), narrow_only=True),
    Column("start", "started_at", "time", wide_only=True),
    Column("priority", "priority", wide_only=True),
    Column("predicted start", lambda row: predicted_start(row.get("predicted_start"))
           if row.get("predicted_start") else None, wide_only=True),
    Column("cpu", "cpu", wide_only=True), Column("memory", "memory", wide_only=True),
    Column("gpu", "gpu", wide_only=True), Column("pscpu", "pscpu", wide_only=True),
    Column("psmemory", "psmemory", wide_only=True), Column("passes", "passes", wide_only=True),
    Column("image", lambda row: row.get("image") or "none", wide_only=True),  # none: processes
    Column("entry", "entry", wide_only=True),
    Column("reason", "state_reason", wide_only=True),
]

WORKER_COLUMNS = [
    Column("name", "name"), Column("state", "state"), Column("restarts", "restarts"),
    Column("exit", "exit_code"), Column("start", "started_at", "time"),
    Column("reason", _unusual("reason"), narrow_only=True),
    Column("host", "host", wide_only=True), Column("endpoint", "endpoint", wide_only=True),
    Column("finished", "finished_at", "time", wide_only=True),
    Column("reason", "reason", wide_only=True),
]

def _pass_state(row: dict) -> str:
    if row.get("made") is False:
        return "to come"
    if not row.get("waiting") and not row.get("leased"):
        return "over"
    return "current" if row.get("current") else "waiting"


def _percent(part: int | None, whole: int | None) -> str | None:
    if part is None or not whole:
        return None
    return f"{100 * part // whole}%"


# ``get tasks``: a row per pass of the job's master (numbered from 1, as its events say) …
TASK_PASS_COLUMNS = [
    Column("pass", lambda row: row["pass"] + 1), Column("state", _pass_state),
    Column("done", "done"), Column("leased", "leased"), Column("waiting", "waiting"),
    Column("set aside", "set_aside"), Column("total", "total"),
    Column("progress", lambda row: _percent(row.get("done"), row.get("total"))),
]

# … and with -o wide the tasks of the current (or last) pass.
TASK_COLUMNS = [
    Column("id", "id"), Column("pass", lambda row: row["pass"] + 1), Column("index", "index"),
    Column("state", "state"),
    Column("trainer", lambda row: None if row.get("trainer") is None
           else f"trainer-{row['trainer']}"),
    Column("attempts", "attempts"), Column("failures", "failures"),
    Column("lease expires", "lease_expires", "time"),
]

# ``get checkpoints JOB``: newest first; RESUMED names the runs that resumed from it.
CHECKPOINT_COLUMNS = [
    Column("step", "step"), Column("pass", "pass"), Column("saved", "time", "time"),
    Column("size", "size", "size"),
    Column("complete", lambda row: "yes" if row["complete"] else f"no: {row['problem']}"),
    Column("resumed by", lambda row: ", ".join(f"run {n}" for n in row.get("resumed_by") or [])),
    Column("path", "path", wide_only=True),
]

# A dry run's plan: the replicas a job would start.
PLAN_COLUMNS = [Column("name", "name"), Column("role", "role"), Column("cpu", "cpu"),
                Column("memory", "memory"), Column("gpu", "gpu")]

# ``get quota``'s budgets: a row per budget and resource (GPU-hours, CPU-hours).
BUDGET_COLUMNS = [Column("budget", "budget"), Column("limit", "limit"), Column("used", "used"),
                  Column("left", "left"), Column("lost to restarts", "lost")]

# ``get quota``: rows made by the command from /me and /pfs/usage.
QUOTA_COLUMNS = [Column("resource", "resource"), Column("limit", "limit"),
                 Column("used", "used"),
                 Column("limit (exact)", "limit_value", wide_only=True),
                 Column("used (exact)", "used_value", wide_only=True)]

REGISTRY_COLUMNS = [Column("name", "name"), Column("server", "server"),
                    Column("username", "username"),
                    Column("created", "created_at", "time", wide_only=True)]


# ``get usage``: the report's rows; ``get audit``: the entries.
USAGE_COLUMNS = [Column("period", "period"), Column("user", "user"), Column("group", "group"),
                 Column("jobs", "jobs"), Column("gpu-hours", "gpu_hours"),
                 Column("cpu-hours", "cpu_hours"),
                 Column("median wait", lambda r: None if r["median_wait_seconds"] is None
                        else format_duration(r["median_wait_seconds"])),
                 Column("lost gpu-hours", "lost_gpu_hours", wide_only=True),
                 Column("lost cpu-hours", "lost_cpu_hours", wide_only=True)]
AUDIT_COLUMNS = [Column("time", "time", "time"), Column("who", "actor"),
                 Column("action", "action"), Column("what", "target"),
                 Column("whose", "whose"), Column("datacenter", "datacenter", wide_only=True),
                 Column("details", lambda r: " ".join(f"{k}={v}" for k, v in
                                                      (r.get("details") or {}).items()),
                        wide_only=True)]


PRINTERS: dict[str, Callable[[Any, list[dict], list[Column]], str]] = {
    "table": _table,
    "wide": lambda data, rows, columns: _table(data, rows, columns, wide=True),
    "json": lambda data, rows, columns: json.dumps(data, indent=2, ensure_ascii=False) + "\n",
    "yaml": lambda data, rows, columns: yaml.safe_dump(data, default_flow_style=False,
                                                       sort_keys=False, allow_unicode=True),
    "csv": lambda data, rows, columns: _csv(rows, columns),
}


def format_metric(value) -> str:
    """A reported metric's value: six significant digits; ``-`` for none (or nan)."""
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


# ``paddlectl compare``: a row per job and metric.
COMPARE_COLUMNS = [Column("job", "job"), Column("metric", "metric"),
                   Column("final", lambda r: format_metric(r["final"])),
                   Column("at step", "final_step"),
                   Column("best", lambda r: format_metric(r["best"])),
                   Column("at step", "best_step"), Column("goal", "goal"),
                   Column("points", "points", wide_only=True)]


def _limit(rule: dict) -> str:
    if "choices" in rule:
        return "|".join(map(str, rule["choices"]))
    return f"{rule.get('min', '')}..{rule.get('max', '')}"


# ``paddlectl templates``: a row per template.
TEMPLATE_COLUMNS = [
    Column("name", "name"),
    Column("values", lambda r: " ".join(f"{k}={v}" for k, v in sorted(r["spec"].items())
                                        if k not in r["locked"])),
    Column("locked", lambda r: " ".join(f"{k}={r['spec'][k]}" for k in r["locked"])),
    Column("limits", lambda r: " ".join(f"{k}={_limit(v)}" for k, v in r["limits"].items())),
    Column("description", "description", wide_only=True)]


def _csv(rows: list[dict], columns: list[Column]) -> str:
    """Rows as CSV in the table's columns (every one), values as they came."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c.header for c in columns])
    writer.writerows([["" if (v := c.value(row)) is None else v for c in columns]
                      for row in rows])
    return out.getvalue()


def emit(stream: TextIO, fmt: str, data: Any, rows: list[dict] | None = None,
         columns: list[Column] | None = None) -> None:
    """Print ``data`` (the API's answer) in ``fmt``; tables show ``rows`` in ``columns``."""
    rows = data if rows is None else rows
    stream.write(PRINTERS[fmt](data, rows, columns or []))
