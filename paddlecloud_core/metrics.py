"""What a line of a metrics file is: the one rule the portal (``jobs.metrics``, the job page,
the API) and a VisualDL session (``paddlecloud_sdk.sessions.visualdl``) read it with.

``paddlecloud_sdk.report`` appends one JSON line per call (``layout.metrics_relpath``)::

    {"step": 120, "time": 1763700000.5, "loss": 0.53}

and a reader makes each line a record::

    {"seq": 12, "step": 120, "time": 1763700000.5, "metrics": {"loss": 0.53}}

``seq`` is the line's number in the file, from 0. A line that is not a JSON object, has no
whole-number ``step`` >= 0, or no metric (a name other than step and time with a number or
null; other values are left out) is no record: it is skipped.
"""

from __future__ import annotations

import json
import math

from .layout import METRICS_RESERVED

_NUMBERS = (int, float)
DECODE = json.JSONDecoder().raw_decode
JSON_SPACE = " \t\n\r"  # what JSON allows around a value


def _number(value) -> int | float | None:
    """A metric's value as JSON can carry it: nan and infinities become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def metric_record(seq: int, line: str | bytes) -> dict | None:
    """Line ``seq`` of a metrics file as a record, or None when it is not one (see the
    module's documentation)."""
    if isinstance(line, bytes):
        try:
            line = line.decode()
        except UnicodeDecodeError:
            return None
    # json.loads without its layers: the same parse of the line without the whitespace around
    # it, and nothing after the value.
    text = line.strip(JSON_SPACE)
    try:
        data, end = DECODE(text)
    except (ValueError, RecursionError):  # not JSON, a number too long, nested too deep
        return None
    if end != len(text):
        return None
    return metric_value_record(seq, data)


def metric_value_record(seq: int, data) -> dict | None:
    """A line's JSON value as a record (``metric_record``'s rule once it is parsed)."""
    # JSON gives exact types (a bool is not an int here): ``type() is`` is the check, and the
    # fast one on a comparison's 200 000 lines.
    if type(data) is not dict:
        return None
    step = data.get("step")
    if type(step) is not int or step < 0:
        return None
    moment = data.get("time")
    try:
        moment = _number(float(moment)) if type(moment) in _NUMBERS else None
    except OverflowError:
        moment = None
    metrics = {name: (value if type(value) is not float or math.isfinite(value) else None)
               for name, value in data.items()
               if (value is None or type(value) in _NUMBERS) and name not in METRICS_RESERVED}
    if not metrics:
        return None
    return {"seq": seq, "step": step, "time": moment, "metrics": metrics}
