"""A sweep's trials folded into one row of the job list (``jobs.folds``, registered by
``apps``): the list keeps a sweep's first listed trial, and shows the sweep's row there."""

from __future__ import annotations

from jobs.folds import Fold

from . import services
from .serializers import SweepRowSerializer


def sweep_rows(jobs) -> dict[int, dict]:
    """{job id: the row of its sweep} for the trials among ``jobs``."""
    reports = services.sweep_reports_of(job.pk for job in jobs)
    rows = {id(report): SweepRowSerializer(report).data for report in reports.values()}
    return {job_id: rows[id(report)] for job_id, report in reports.items()}


SWEEPS = Fold(kind="sweep", folded=services.trials_folded, members=services.trials_of,
              rows=sweep_rows)
