""""You would start sooner if…": for a job that would wait, the changes to it that the
scheduling model (``paddlecloud_core.scheduling``) predicts start it sooner, each with its
predicted start (docs/admin/scheduling.md, "How alternatives are found"). Pure: the portal's
dry run and waiting reasons (``scheduling.sooner``) and the trace test
(tests/test_sooner_trace.py) call the same ``alternatives``.

Tried, each as the job alone changed in the same pool, its start read off the same forecast
the job's own predicted start comes from (one simulation each, ``CASE``):

- fewer trainers (one fewer, half, the fewest it may run with), for a job of fixed trainers;
- less memory per trainer (three quarters, half; never below ``LEAST_MEMORY``);
- a deadline, for a job without one: what its owner's jobs like it ran at most (the high end of
  its estimate), so that it may backfill ahead of a reservation it ends before;
- fewer GPUs per trainer (one fewer, half; at least one);
- each other datacenter the caller passes (those the owner has an account in), the job as is.

Shown are only those the model says start sooner by ``margin`` or more — a change it refuses
(over a quota or the capacity: the plan's ``never``), or whose start it cannot tell, is not —
the earliest first, at most ``most``, one of each kind (the mildest as early as the strongest,
within the margin; the milder ones are tried only when the strongest helps)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .quantity import format_bytes
from .scheduling import HORIZON, Pool, Vec, Waiting, _simulate, _when  # forecast's own
from .spec import FIELD

LEAST_MEMORY = 128 * 2**20  # less memory per trainer than this is never offered
MEMORY_STEP = 2**20  # offered amounts are whole MiB
DEADLINE_STEP = 300.0  # an offered deadline is rounded up to 5 minutes
# A change is shown when it starts the job sooner by this much at least: a minute, or a tenth
# of the job's wait, whichever is more.
MARGIN_SECONDS = 60.0
MARGIN_FRACTION = 0.1
MOST = 4  # alternatives shown at most
# Which of the forecast's runs a start is read from: the late end of the range (every running
# job ending at the high end of its estimate). The middle one would offer "now" wherever a
# running job has passed its estimate and "ends any moment", which on bench/eta.py's week
# missed the suggested time far more often (tests/test_sooner_trace.py).
CASE = "high"
EARLY = "low"  # the case a change's start is weighed against (``alternatives``)
KINDS = ("trainers", "memory", "deadline", "gpu", "datacenter")


@dataclass(frozen=True)
class Ask:
    """A waiting job's request as the search varies it: its trainers, each trainer's share,
    and the rest (its parameter servers, and the one job it counts of a concurrent-jobs
    quota). ``trainers_least``: the fewest trainers it may be offered (``trainers`` for an
    elastic job, whose MIN it is: not varied)."""

    trainers: int
    cpu: int  # millicores per trainer
    memory: int  # bytes per trainer
    gpu: int  # per trainer
    rest: Vec = Vec(jobs=1)  # noqa: RUF009 (frozen: one value shared safely)
    deadline: float | None = None
    trainers_least: int = 1

    @property
    def need(self) -> Vec:
        n = self.trainers
        return self.rest + Vec(cpu=n * self.cpu, memory=n * self.memory, gpu=n * self.gpu)


@dataclass(frozen=True)
class Alternative:
    """One change that starts the job sooner: the field changed and its new value (a
    ``datacenter``: its name), the change as ``paddlectl submit`` takes it, and the start."""

    kind: str  # of KINDS
    field: str  # the job's field (``deadline_seconds``), or ``datacenter``
    value: int | str
    flag: str  # "-trainers 2"
    start: float

    def message(self, now: float, before: float | None) -> str:
        """"would start in 4 min with -trainers 2 (now: in 1.2 h)"."""
        was = "unknown" if before is None else _when(before - now)
        return f"would start {_when(self.start - now)} with {self.flag} (now: {was})"


def _flag(field: str, value) -> str:
    shown = format_bytes(value) if field == "memory" else value
    name = "datacenter" if field == "datacenter" else FIELD[field].flag[-1]
    return f"-{name} {shown}"


def _tries(ask: Ask, run_high: float | None) -> list[tuple[str, str, int, Ask]]:
    """Each change to try, by kind, the mildest of a kind first: (kind, field, value, ask)."""
    tries = []
    for n in sorted({ask.trainers - 1, ask.trainers // 2, ask.trainers_least}, reverse=True):
        if ask.trainers_least <= n < ask.trainers:
            tries.append(("trainers", "trainers", n, replace(ask, trainers=n)))
    for part in (0.75, 0.5):
        memory = int(ask.memory * part) // MEMORY_STEP * MEMORY_STEP
        if LEAST_MEMORY <= memory < ask.memory and all(t[2] != memory for t in tries):
            tries.append(("memory", "memory", memory, replace(ask, memory=memory)))
    if ask.deadline is None and run_high is not None:
        deadline = int(math.ceil(run_high / DEADLINE_STEP) * DEADLINE_STEP)
        tries.append(("deadline", "deadline_seconds", deadline, replace(ask, deadline=deadline)))
    for gpu in sorted({ask.gpu - 1, ask.gpu // 2}, reverse=True):
        if 1 <= gpu < ask.gpu:
            tries.append(("gpu", "gpu", gpu, replace(ask, gpu=gpu)))
    return tries


def start_of(pool: Pool, job: Waiting, now: float, horizon: float = HORIZON,
             case: str = CASE) -> float | None:
    """When ``job`` (one of ``pool.waiting``, or added to it) is predicted to start in the
    forecast's run ``case`` (None: not within the horizon, never, or unknown)."""
    return _start_and_why(pool, job, now, horizon, case)[0]


def _start_and_why(pool: Pool, job: Waiting, now: float, horizon: float,
                   case: str) -> tuple[float | None, str]:
    """``start_of``, and why no start is told where nothing tells when what it waits for
    ends ("": a start is told, or it is not within the horizon)."""
    waiting = [w for w in pool.waiting if w.id != job.id] + [job]
    started, why, after_why = _simulate(replace(pool, waiting=waiting), now, case, [job.id],
                                        horizon)
    if job.id in started:
        return started[job.id], ""
    return None, after_why.get(job.id) or why


def alternatives(pool: Pool, job: Waiting, ask: Ask, now: float, *,
                 before: float | None = None, others: Mapping[str, Pool] | None = None,
                 most: int = MOST, horizon: float = HORIZON,
                 case: str = CASE) -> list[Alternative]:
    """The changes to ``job`` (waiting in ``pool``, its request ``ask``) predicted to start it
    sooner than ``before`` (its predicted start now; None: none is told, and any start
    told is sooner), by the margin; in ``others`` (datacenter name -> its pool, the job not
    in it), the job as is. The earliest first; at most one of each kind and ``most`` in all."""
    margin = MARGIN_SECONDS if before is None else max(
        MARGIN_SECONDS, MARGIN_FRACTION * (before - now))
    run_high = job.run.high if job.run.known else None
    best: dict[str, Alternative] = {}
    # A change is weighed against the job's EARLY start (every running job ending at the low
    # end of its estimate), not its late one: it is shown only if, at its latest, it starts
    # sooner than the job unchanged would at its earliest — however the run times ahead fall
    # within their ranges. Compared late with late, a smaller request was offered for a start
    # the job unchanged also met in bench/eta.py's week (tests/test_sooner_trace.py).
    early, unknown = _start_and_why(pool, job, now, horizon, EARLY)
    # The low case is not always the earlier: other jobs ending early may go first.
    early = min((t for t in (early, before) if t is not None), default=None)

    def helps(start: float | None) -> bool:
        return start is not None and (early is None or start <= early - margin)

    def start_changed(changed: Ask) -> float | None:
        run = job.run
        if changed.deadline is not None and changed.deadline < run.seconds:
            run = replace(run, seconds=changed.deadline)
        return start_of(pool, replace(job, need=changed.need, deadline=changed.deadline,
                                      run=run), now, horizon, case)

    by_kind: dict[str, list] = {}
    # Where its start is unknown (it waits for room a job whose end nothing tells holds), a
    # change here would start it "sooner" only by slipping into room the model frees around
    # that job, kept forever (on the week none did start sooner); another datacenter does not
    # wait for that job.
    for kind, field, value, changed in [] if unknown else _tries(ask, run_high):
        by_kind.setdefault(kind, []).append((field, value, changed))
    for kind, tries in by_kind.items():
        # The strongest change of a kind first: if it does not help, no milder one will (and
        # is not tried: a few simulations a request). Else the mildest as early, within the
        # margin, is the one shown.
        field, value, changed = tries[-1]
        start = start_changed(changed)
        if not helps(start):
            continue
        for milder_field, milder_value, milder in tries[:-1]:
            milder_start = start_changed(milder)
            if helps(milder_start) and milder_start <= start + margin:
                field, value, start = milder_field, milder_value, milder_start
                break
        best[kind] = Alternative(kind, field, value, _flag(field, value), start)
    for name, other in (others or {}).items():
        start = start_of(other, replace(job, since=None, submitted=now), now, horizon, case)
        if helps(start) and ("datacenter" not in best or start < best["datacenter"].start):
            best["datacenter"] = Alternative("datacenter", "datacenter", name,
                                             _flag("datacenter", name), start)
    return sorted(best.values(), key=lambda a: (a.start, KINDS.index(a.kind)))[:most]
