"""Training metrics: what a replica reported with ``paddlecloud_sdk.report(step=…, **metrics)``.

The SDK appends one JSON line per call to ``node_<i>/metrics.jsonl`` beside the replica's log
in the job's output directory (``paddlecloud_sdk/metrics.py``)::

    {"step": 120, "time": 1763700000.5, "loss": 0.53}

Here the portal reads them back as records (the rule: ``paddlecloud_core.metrics``, which a
VisualDL session reads them with too), for the API (``GET /api/v1/jobs/{name}/metrics``), the
WebSocket that streams them and the job page that plots them::

    {"seq": 12, "step": 120, "time": 1763700000.5, "metrics": {"loss": 0.53}}

``seq`` is the line's number in the file, from 0, counting every line as ``jobs.logs.lines`` does
(also those that are not valid records, which are skipped), so a reader that resumes from a
line number never sees a record twice nor misses one. A last line without its newline is
still being written: it is neither returned nor counted. The API answers at most PAGE records
at a time: ``next`` is where to go on from (``?from=``), ``more`` whether there is more.
"""

from __future__ import annotations

from kernel.errors import PaddleCloudError
from paddlecloud_core.metrics import DECODE, metric_record, metric_value_record

from .files import JobFile, metrics_file
from .logs.lines import BATCH_LINES, Cursor, lines_read, lines_skip, lines_tail, tail_offset

PAGE = 10_000  # records in one answer of the API


AT_ONCE = 1000  # lines parsed at once (more saves no time: more objects for the collector)
ONE_BY_ONE = 64  # lines parsed one at a time once a batch of them cannot be parsed at once


def _parsed_at_once(lines: list) -> list | None:
    """Each line's JSON value, parsed as one array (``[line0,\nline1,\n…]``: half the time of
    a parse per line, as the keys are read once), or None unless that is sure to be what
    parsing each line alone gives. It is when every line begins with "{", the lines hold
    no other "{", and the array holds as many objects as there are lines: then each line's
    "{" opens one of the objects, so each object is whole within its own line, and what
    follows it there can only be whitespace (one comma between two: the one put there)."""
    if not all(type(line) is str and line[:1] == "{" for line in lines):
        return None
    text = ",\n".join(lines)
    if text.count("{") != len(lines):
        return None
    try:
        values = DECODE("[" + text + "]")[0]
    except (ValueError, RecursionError):
        return None
    if len(values) != len(lines) or not all(type(value) is dict for value in values):
        return None
    return values


def _records_into(records: list[dict], first: int, lines: list) -> None:
    values = _parsed_at_once(lines)
    if values is not None:
        records += [record for seq, value in enumerate(values, first)
                    if (record := metric_value_record(seq, value)) is not None]
    elif len(lines) <= ONE_BY_ONE:
        records += [record for seq, line in enumerate(lines, first)
                    if (record := metric_record(seq, line)) is not None]
    else:  # a line that is not a record: the halves without it are still parsed at once
        half = len(lines) // 2
        _records_into(records, first, lines[:half])
        _records_into(records, first + half, lines[half:])


def metric_records(first: int, lines: list[str]) -> list[dict]:
    """The records among ``lines``, which are lines ``first``, ``first + 1``, … of a file:
    what ``metric_record`` makes of each (a comparison reads 200 000 lines: they are parsed
    many at a time when that gives the same)."""
    records: list[dict] = []
    for start in range(0, len(lines), AT_ONCE):
        _records_into(records, first + start, lines[start:start + AT_ONCE])
    return records


def metrics_read(file: JobFile, first: int = 0, limit: int = PAGE
                 ) -> tuple[list[dict], int, bool]:
    """Up to ``limit`` records from line ``first`` on, the number of the next line to read
    (``first`` when there is nothing new, or no file yet), and whether ``limit`` stopped the
    reading. Only complete lines are read."""
    if first < 0:
        raise ValueError(f"first must be >= 0, got {first}")
    cursor = Cursor()
    lines_skip(file, cursor, first)
    if cursor.line < first:  # the file has fewer lines
        return [], first, False
    records: list[dict] = []
    while len(records) < limit:
        first = cursor.line
        # No more lines than records still wanted: each line is at most one record.
        batch = lines_read(file, cursor, limit=min(BATCH_LINES, limit - len(records)))
        if not batch:
            return records, cursor.line, False
        records += metric_records(first, batch)
    return records, cursor.line, True


def metric_names(records: list[dict]) -> list[str]:
    """Every metric name in ``records``, sorted."""
    return sorted({name for record in records for name in record["metrics"]})


def metrics_get(job, replica, first: int = 0) -> dict:
    """What the API answers for a worker: ``{"worker", "names", "records", "next", "more"}``,
    the records of its metrics file from line ``first`` (none before it reported anything)."""
    records, next_line, more = metrics_read(metrics_file(job, replica), first)
    return {"worker": replica.name, "names": metric_names(records), "records": records,
            "next": next_line, "more": more}


def metrics_last(job, replica, lines: int = 20) -> dict | None:
    """The latest record a worker reported (read from the last lines of its file), for a page
    that shows it without a script; None before it reported anything."""
    try:
        first, tail = lines_tail(metrics_file(job, replica), lines)
    except (PaddleCloudError, OSError):
        return None
    records = metric_records(first, tail)
    return records[-1] if records else None


def metrics_recent(job, replica, lines: int) -> list[dict]:
    """The records among the last ``lines`` complete lines of a worker's metrics, reading no
    more of the file than they span (their ``seq`` counts from the first of them, not from
    the file's start); none before it reported anything."""
    file = metrics_file(job, replica)
    try:
        cursor = Cursor(offset=tail_offset(file, lines))
        found: list[str] = []
        while batch := lines_read(file, cursor):
            found += batch
    except (PaddleCloudError, OSError):
        return []
    return metric_records(0, found)


def metric_latest(job, replica, name: str, lines: int = 5000) -> dict | None:
    """The latest record among the worker's last ``lines`` that has metric ``name`` (e.g. the
    ``checkpoint`` the SDK reports after each save); None when there is none there."""
    return next((record for record in reversed(metrics_recent(job, replica, lines))
                 if name in record["metrics"]), None)
