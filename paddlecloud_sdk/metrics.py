"""Training metrics a replica reports, for the job's page to plot.

    from paddlecloud_sdk import report

    report(step=120, loss=0.53, accuracy=acc)     # numbers, numpy scalars, 0-d tensors

Each call appends one JSON line to a file beside the replica's log in the job's output
directory: ``<output_dir>/node_<i>/metrics.jsonl`` for trainer ``i`` (beside ``train.log``),
``<output_dir>/node_<i>/server-metrics.jsonl`` for pserver ``i`` (beside ``server.log``)::

    {"step": 120, "time": 1763700000.5, "loss": 0.53, "accuracy": 0.91}

``time`` is when the call was made (Unix time); a value that is nan or infinite is written as
``null``. The file is in the owner's PFS home, so it outlives the job; the portal serves it as
``GET /api/v1/jobs/{name}/metrics?worker=trainer-0`` and the job page plots every metric
against ``step``, live while the job runs. Report from the replica whose numbers you want to
see (usually trainer 0, with the loss averaged over the trainers).

Outside a job it writes ``./output/node_0/metrics.jsonl`` (``PADDLE_OUTPUT_DIR`` moves it).
Standard library and ``paddlecloud_core`` (itself standard library only): a trainer image needs
nothing else to import this module.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import time
from pathlib import Path

from paddlecloud_core.layout import METRICS_RESERVED, metrics_relpath

from . import env


def metrics_file() -> Path:
    """Where this replica's ``report`` calls go, beside its log: ``node_<trainer id>/
    metrics.jsonl`` for a trainer, ``node_<pserver id>/server-metrics.jsonl`` for a pserver
    (as ``paddlecloud_core.layout.metrics_relpath``, where the portal looks)."""
    if env.is_pserver():
        index = env.pserver_id()
        if index is None:
            raise ValueError("TRAINING_ROLE=PSERVER but PADDLE_PSERVER_ID is not set: "
                             "report() cannot tell which node_<i> directory is this pserver's")
        return env.output_dir() / metrics_relpath("pserver", index)
    return env.output_dir() / metrics_relpath("trainer", env.trainer_id())


def report(step: int, **metrics) -> None:
    """Append ``{"step": step, "time": now, **metrics}`` as one line to this replica's
    ``metrics.jsonl`` (see the module's documentation for where, and what reads it).

    ``step`` is a whole number >= 0 (the global step: it keeps counting across passes);
    ``metrics`` are at least one ``name=number``: an int or float, a numpy scalar or a
    one-element array or tensor (anything with ``.item()``); bools and strings are refused.
    A mistake is a ``TypeError`` or ``ValueError`` naming the argument and the rule.
    """
    line = {"step": _step(step), "time": time.time()}
    if not metrics:
        raise TypeError("report() needs at least one metric: report(step=..., loss=0.5)")
    for name, value in metrics.items():
        line[_name(name)] = _value(name, value)
    data = (json.dumps(line, allow_nan=False) + "\n").encode()
    _append(metrics_file(), data)


def _step(step) -> int:
    value = step
    if not isinstance(value, int) and hasattr(value, "item"):
        with contextlib.suppress(TypeError, ValueError):  # not one element: refused below
            value = value.item()
    if isinstance(value, bool):
        raise TypeError(f"step must be a whole number >= 0, got {step!r} (bool)")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"step must be a whole number >= 0, got {step!r} "
                        f"({type(step).__name__})") from None
    if value < 0:
        raise ValueError(f"step must be a whole number >= 0, got {value}")
    return value


def _name(name: str) -> str:
    if not name.isidentifier() or name in METRICS_RESERVED:
        raise ValueError(f"metric name {name!r}: a metric is named like a Python identifier "
                         f"(letters, digits, '_'), other than {' or '.join(METRICS_RESERVED)}")
    return name


def _value(name: str, value) -> int | float | None:
    number = value
    if not isinstance(number, int | float) and hasattr(number, "item"):
        try:
            number = number.item()
        except (TypeError, ValueError):
            shape = getattr(value, "shape", None)
            raise TypeError(f"metric {name!r} must be a single number, got a "
                            f"{type(value).__name__}"
                            + (f" of shape {tuple(shape)}" if shape is not None else "")
                            ) from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise TypeError(f"metric {name!r} must be a number (int, float, numpy scalar or "
                        f"one-element tensor), got {value!r} ({type(value).__name__})")
    if isinstance(number, int):
        return int(number)
    number = float(number)
    return number if math.isfinite(number) else None


def _append(path: Path, data: bytes) -> None:
    """One ``write`` of the whole line to a file opened for appending, so that a reader never
    sees half a line mixed with another one (O_APPEND writes land at the end, whole)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        written = os.write(fd, data)
        while written < len(data):  # a short write (a signal, a full disk): finish the line
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)
