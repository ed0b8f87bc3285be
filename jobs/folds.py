"""Rows of the job list that stand for several jobs: an app above ``jobs`` that groups jobs (a
sweep's trials, ``experiments``) registers a ``Fold`` when it is ready, and the list (the API,
the dashboard, its live updates) folds each group into one row. ``jobs`` names no such app:
nothing below it may import it (the ``experiments-on-top`` contract).

A folded group keeps one of its listed jobs (the first of them the filters let through), and
the group's row takes that job's place: pagination counts a group once, and the state and name
filters keep a group when one of its jobs matches them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Fold:
    # The rows' kind ("sweep"); also the list's parameter that lists one group's jobs
    # (``?sweep=NAME``).
    kind: str
    # The listed jobs (a queryset, filtered) with one job kept per group: where its row sits.
    folded: Callable
    # ``members(user, datacenter, jobs, name)``: the listed jobs of group ``name`` (unfolded);
    # a NotFoundError when the user has no such group.
    members: Callable
    # ``rows(jobs)``: {job id: the row of its group (a dict as the API shows it, with "kind"
    # and "name")} for the jobs among ``jobs`` that belong to a group.
    rows: Callable


FOLDS: dict[str, Fold] = {}


def fold_register(fold: Fold) -> None:
    """Called from an app's ``ready()``; registering a kind again replaces it."""
    FOLDS[fold.kind] = fold


def jobs_folded(user, datacenter, jobs, *, unfolded: bool = False,
                within: dict[str, str] | None = None):
    """``jobs`` (a queryset of the user's listed jobs) as the list shows them: each group
    folded (unless ``unfolded``), or only the jobs of the group ``within`` names
    (``{"sweep": "lr"}``)."""
    for fold in FOLDS.values():
        if (name := (within or {}).get(fold.kind)) is not None:
            jobs = fold.members(user, datacenter, jobs, name)
        elif not unfolded:
            jobs = fold.folded(jobs)
    return jobs


def fold_rows(jobs) -> dict[int, dict]:
    """{job id: the row of its group} for the jobs among ``jobs`` that a fold groups."""
    rows: dict[int, dict] = {}
    for fold in FOLDS.values():
        rows.update(fold.rows(jobs))
    return rows
