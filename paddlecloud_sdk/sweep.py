"""``Sweep``: a base job and a search space, submitted as one object whose trials are ordinary
jobs (``NAME-1``, ``NAME-2``, …), as ``paddlectl sweep SPEC.yaml`` does::

    from paddlecloud_sdk import PaddleJob, Sweep

    base = PaddleJob(name="lr", trainer_package="/pfs/dc1/home/alice/fit_a_line",
                     entry="python train.py", passes=20)
    sweep = Sweep("lr", base, {"env.LEARNING_RATE": [0.1, 0.01, 0.001]}, parallel=3,
                  objective={"metric": "loss"}, stopping={"rule": "median"}).submit()
    sweep.status()["progress"]   # {"done": 1, "running": 2, …}
    sweep.kill()

The sweep is checked here before anything is sent (``paddlecloud_core.experiments``); the base
job's package must already be in PFS (every trial runs the same one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paddlecloud_core.experiments import SweepProblems, sweep_check
from paddlecloud_core.spec import name_problem

from .errors import JobSpecError, UsageError, raises_own
from .job import Connection, PaddleJob


class Sweep:
    """A sweep: ``name``, the base ``job`` (a ``PaddleJob`` with a ``/pfs/`` package, or the
    API's dict of job fields), the ``space`` (``env.NAME`` or ``arg.NAME``: a list of values,
    or ``{"min", "max", "log"}`` for random and asha), ``method`` (grid, random, asha),
    ``seed``, ``max_trials``, ``parallel``, ``objective`` (``{"metric", "mode"}``),
    ``stopping`` (``{"rule": "median", "grace_steps", "min_trials"}``) and ``asha``
    (``{"min_steps", "reduction_factor"}``). Once submitted, ``info`` is the portal's view."""

    @raises_own
    def __init__(self, name: str, job: PaddleJob | Mapping[str, Any],
                 space: Mapping[str, Any], *, method: str = "grid", seed: int | None = None,
                 max_trials: int | None = None, parallel: int = 1,
                 objective: Mapping[str, str] | None = None,
                 stopping: Mapping[str, Any] | None = None,
                 asha: Mapping[str, int] | None = None, connection: Connection | None = None):
        if isinstance(job, PaddleJob):
            if not job.is_remote_package:
                raise JobSpecError({"job": ["a sweep's package is a /pfs/ directory: upload "
                                            "it first (paddlectl cp), every trial runs it"]})
            self._connection = connection or job.connection
            job = {k: v for k, v in job.spec().items() if k != "name"}
        else:
            self._connection = connection
        given = {"name": name, "job": dict(job), "space": dict(space), "method": method,
                 "seed": seed, "max_trials": max_trials, "parallel": parallel,
                 "objective": dict(objective) if objective else None,
                 "stopping": dict(stopping) if stopping else None,
                 "asha": dict(asha) if asha else None}
        self.body = {k: v for k, v in given.items() if v is not None}
        try:
            sweep_check(self.body, name_problem=name_problem)
        except SweepProblems as exc:
            raise JobSpecError({k: [v] for k, v in exc.problems.items()}) from None
        self.name = name
        self.info: dict | None = None

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = Connection()
        return self._connection

    @raises_own
    def submit(self) -> Sweep:
        """Start the sweep: its first ``parallel`` trials are submitted at once."""
        if self.info is not None:
            raise UsageError(f"sweep {self.name!r} was submitted already")
        self.info = self.connection.client.sweep_submit(self.body)
        return self

    @raises_own
    def status(self) -> dict:
        """The portal's view now: ``state``, ``progress``, ``best``, ``trials``,
        ``predicted_end``."""
        self.info = self.connection.client.sweep_get(self.name)
        return self.info

    @raises_own
    def kill(self) -> dict:
        """Stop every trial at once; no more are submitted."""
        self.info = self.connection.client.sweep_kill(self.name)
        return self.info
