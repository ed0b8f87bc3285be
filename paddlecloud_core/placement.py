"""``-datacenter auto``: of the datacenters a job could go to, the one where its predicted
start is earliest, and the words saying why (docs/users/jobs.md, "Choosing the datacenter").

Pure: paddlectl and the SDK (``paddlecloud_client.placement``, one dry run per configured
datacenter) and the dashboard (``dashboard.views``, one preview per membership) both ask
``placement_choose``, so both rank and say it alike.

A /pfs path of the job (its package, its dataset) is looked for at the same place in each
datacenter's PFS (``spec_in``). A datacenter that refused the job (its package or data not
there, its image not allowed, over quota, unreachable) is no candidate; one whose start the
model cannot tell ranks after every known start; equal starts go to the first in the caller's
order (the config's, or by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .layout import PFS_PREFIX
from .scheduling import span_words

AUTO = "auto"  # the datacenter that asks for this choice
PLACEMENT_MOST = 2000  # characters of the "why" a submission may carry (the job's first event)
PFS_FIELDS = ("package", "dataset")  # the paths in PFS a job reads: looked for in each datacenter


@dataclass(frozen=True)
class Option:
    """One datacenter as its dry run answered: a predicted start (``start``, a moment; or
    ``unknown``, why none), or ``refused``, why the job cannot go there."""

    datacenter: str
    start: datetime | None = None
    unknown: str = ""
    refused: str = ""


def admission_option(datacenter: str, admission: dict | None, now: datetime) -> Option:
    """A dry run's ``admission`` (the API's; None: not checked) as an ``Option``."""
    if not admission:
        return Option(datacenter, unknown="not checked without the package")
    if admission["starts"] == "now":
        return Option(datacenter, start=now)
    predicted = admission.get("predicted_start") or {}
    if predicted.get("at") and not predicted.get("unknown"):
        return Option(datacenter, start=datetime.fromisoformat(predicted["at"]))
    return Option(datacenter, unknown=predicted.get("unknown") or "not within 30 days")


class NowherePlaced(ValueError):
    """No datacenter can take the job; the message lists each one's reason."""


def spec_in(body: dict, datacenter: str) -> dict:
    """``body`` with its PFS paths moved to ``datacenter``: ``/pfs/datacenter1/home/alice/pkg``
    is ``/pfs/datacenter2/home/alice/pkg`` there (the same place in each datacenter's PFS)."""
    moved = dict(body)
    for field in PFS_FIELDS:
        value = body.get(field)
        if isinstance(value, str) and value.startswith(PFS_PREFIX):
            rest = value[len(PFS_PREFIX):].partition("/")[2]
            moved[field] = f"{PFS_PREFIX}{datacenter}/{rest}".rstrip("/")
    return moved


def _rounded(seconds: float) -> str:
    """``2 min``, ``1.5 h``, ``3 days``: the wait as people say it, not to the second."""
    step = 60 if seconds < 2 * 3600 else 1800 if seconds < 2 * 86400 else 43200
    rounded = max(step, round(seconds / step) * step)
    return "1 min" if rounded < 120 else span_words(rounded)


def option_words(option: Option, now: datetime) -> str:
    """``start predicted in 40 min``, ``starts now``, ``start unknown (why)``, or the refusal."""
    if option.refused:
        return option.refused
    if option.start is None:
        return f"start unknown ({option.unknown or 'not predicted'})"
    wait = (option.start - now).total_seconds()
    return "starts now" if wait < 60 else f"start predicted in {_rounded(wait)}"


def placement_choose(options: Sequence[Option], now: datetime) -> tuple[str, str]:
    """The datacenter to place the job in and why: ``placed in datacenter2: start predicted in
    2 min (datacenter1: in 40 min; datacenter3: package ... not found)``. Raises
    ``NowherePlaced`` when every option refused."""
    candidates = [option for option in options if not option.refused]
    if not candidates:
        reasons = "; ".join(f"{o.datacenter}: {o.refused}" for o in options)
        raise NowherePlaced(f"no datacenter can take the job ({reasons or 'none to ask'})")
    never = datetime.max.replace(tzinfo=now.tzinfo)
    order = {option.datacenter: index for index, option in enumerate(options)}
    chosen = min(candidates, key=lambda o: (o.start is None, o.start or never,
                                            order[o.datacenter]))
    if len(options) == 1:
        return chosen.datacenter, (f"placed in {chosen.datacenter}, the only datacenter to "
                                   f"choose from: {option_words(chosen, now)}")
    others = "; ".join(f"{o.datacenter}: {option_words(o, now).removeprefix('start predicted ')}"
                       for o in options if o is not chosen)
    return chosen.datacenter, (f"placed in {chosen.datacenter}: {option_words(chosen, now)} "
                               f"({others})")
