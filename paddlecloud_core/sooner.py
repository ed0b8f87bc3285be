""""You would start sooner if…": for a job that would wait, the changes to it that the
scheduling model (``paddlecloud_core.scheduling``) predicts start it sooner, each with its
predicted start (docs/admin/scheduling.md, "How alternatives are found"). Pure: the portal's
dry run and waiting reasons (``scheduling.sooner``) and the trace test
(tests/test_sooner_trace.py) call the same ``alternatives``.

Tried, each as the job alone changed in the same pool:

- fewer trainers (one fewer, half, the fewest it may run with), for a job of fixed trainers;
- less memory per trainer (three quarters, half; never below ``LEAST_MEMORY``);
- a deadline, for a job without one: what its owner's jobs like it ran at most (the high end of
  its estimate), so that it may backfill ahead of a reservation it ends before;
- fewer GPUs per trainer (one fewer, half; at least one);
- each other datacenter the caller passes (those the owner has an account in), the job as is.

Shown are only those meant as a promise: a change with which the plan now starts the job at
once (nothing submitted later can take that room first), or, given what the owners are
expected to submit (``Expected``), one that starts it sooner with the running jobs ending late
(``CASE``) and early (``EARLY``), the expected jobs submitted at once in both (``_weathered``) —
sooner by ``margin`` or more than the job unchanged at its earliest. A change the model refuses
(over a quota or the capacity: the plan's ``never``), or whose start it cannot tell, is not;
the earliest first, at most ``most``, one of each kind (the mildest as early as the strongest,
within the margin; the milder ones are tried only when the strongest helps)"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from .quantity import format_bytes
from .scheduling import HORIZON, Pool, Vec, Waiting, _simulate, _when, schedule
from .spec import FIELD

LEAST_MEMORY = 128 * 2**20  # less memory per trainer than this is never offered
MEMORY_STEP = 2**20  # offered amounts are whole MiB
DEADLINE_STEP = 300.0  # an offered deadline is rounded up to 5 minutes
# A change is shown when it starts the job sooner by this much at least: a minute, or a tenth
# of the job's wait, whichever is more.
MARGIN_SECONDS = 60.0
MARGIN_FRACTION = 0.1
MOST = 4  # alternatives shown at most
# An owner is expected to submit a job within a time if their rate makes one this likely.
ARRIVAL_CHANCE = 0.1
# An owner's rate of submissions is read over this many seconds before now.
EXPECTED_WINDOW = 4 * 3600.0
EXPECTED_AFTER = 1e-3  # seconds: an expected job is submitted after those that wait now
# Which of the forecast's runs a start is read from: the late end of the range (every running
# job ending at the high end of its estimate). The middle one would offer "now" wherever a
# running job has passed its estimate and "ends any moment", which on bench/eta.py's week
# missed the suggested time far more often (tests/test_sooner_trace.py).
CASE = "high"
EARLY = "low"  # the case the job unchanged is weighed in (``alternatives``)

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


def _starts_at_once(pool: Pool, job: Waiting, now: float) -> bool:
    """Whether the plan now (admission's, on the pool as it is: no running job ending, none
    stopped) starts ``job`` (one of ``pool.waiting``, or added to it)."""
    waiting = [w for w in pool.waiting if w.id != job.id] + [job]
    return job.id in schedule(replace(pool, waiting=waiting, preempt_after=None), now).admit


@dataclass(frozen=True)
class Expected:
    """What an owner is expected to submit: ``rate`` jobs a second (their recent
    submissions), each like ``like`` (their last one)."""

    rate: float
    like: Waiting


def _expected_jobs(expected: Sequence[Expected], now: float, until: float) -> list[Waiting]:
    """The jobs expected to be submitted from ``now`` to ``until``: of each owner, as many as
    their rate makes likely (one from a chance of ``ARRIVAL_CHANCE``), as if submitted now,
    after every job that waits (at equal shares, those go first)."""
    out = []
    for e in expected:
        count = math.floor(e.rate * (until - now) + 1 - ARRIVAL_CHANCE)
        out += [replace(e.like, id=-(len(out) + 1), submitted=now + EXPECTED_AFTER, since=None,
                        after=(), name=f"expected-{e.like.owner}-{k}") for k in range(count)]
    return out


def _weathered(pool: Pool, job: Waiting, now: float, start: float,
               expected: Sequence[Expected], horizon: float, case: str) -> float | None:
    """When ``job`` starts if the jobs expected until then are submitted now (each at once,
    in the fair-share order they would take): later than ``start`` widens the time they are
    expected in, and it is made again (a few times at most)."""
    for _ in range(3):
        coming = _expected_jobs(expected, now, start)
        if not coming:
            return start
        later = start_of(replace(pool, waiting=[*pool.waiting, *coming]), job, now, horizon,
                         case)
        if later is None or later <= start:
            return later if later is None else start
        start = later
    return start


def alternatives(pool: Pool, job: Waiting, ask: Ask, now: float, *,
                 before: float | None = None, others: Mapping[str, Pool] | None = None,
                 expected: Sequence[Expected] | None = None, most: int = MOST,
                 horizon: float = HORIZON, case: str = CASE) -> list[Alternative]:
    """The changes to ``job`` (waiting in ``pool``, its request ``ask``) that start it sooner
    than it would unchanged — at ``before`` (its predicted start now; None: none is told) and,
    at its earliest, by the margin at least: those that start it at once, and (``expected``
    given) those that start it later even if the jobs ``expected`` meanwhile are submitted
    (``_weathered``); in ``others`` (datacenter name -> its pool, the job not in it), the job
    as is. The earliest first; at most one of each kind and ``most`` in all."""
    margin = MARGIN_SECONDS if before is None else max(
        MARGIN_SECONDS, MARGIN_FRACTION * (before - now))
    run_high = job.run.high if job.run.known else None
    early: list = []  # the job unchanged at its earliest, and why it is unknown, once needed
    # Only a start the margin before ``before`` helps: no simulation need look further.
    within = horizon if before is None else min(horizon, before - now)

    def helps(start: float | None) -> bool:
        if start is None:
            return False
        if not early:
            # The job unchanged at its EARLIEST (every running job ending at the low end of
            # its estimate; the low case is not always the earlier: other jobs ending early
            # may go first) must be the margin later. Its start unknown: any start is sooner.
            low, unknown = _start_and_why(pool, job, now, within, EARLY)
            early.extend([min((t for t in (low, before) if t is not None), default=None),
                          unknown])
        return early[0] is None or start <= early[0] - margin

    def start_in(pool: Pool, changed: Waiting, expected: Sequence[Expected] | None):
        if _starts_at_once(pool, changed, now):
            return now if helps(now) else None
        if expected is None:
            return None
        latest = now
        for each in (case, EARLY):
            start = start_of(pool, changed, now, within - margin, each)
            # Where the job's own start is unknown (it waits for room a job whose end nothing
            # tells holds), a later start here would come only of room the model frees around
            # that job, kept forever (on the week none did start sooner).
            if not helps(start) or early[1]:
                return None
            start = _weathered(pool, changed, now, start, expected, within - margin, each)
            if not helps(start):
                return None
            latest = max(latest, start)
        return latest

    def start_changed(changed: Ask) -> float | None:
        run = job.run
        if changed.deadline is not None and changed.deadline < run.seconds:
            run = replace(run, seconds=changed.deadline)
        return start_in(pool, replace(job, need=changed.need, deadline=changed.deadline,
                                      run=run), expected)

    best: dict[str, Alternative] = {}
    by_kind: dict[str, list] = {}
    for kind, field, value, changed in _tries(ask, run_high):
        by_kind.setdefault(kind, []).append((field, value, changed))
    for kind, tries in by_kind.items():
        # The strongest change of a kind first: if it does not help, no milder one will (and
        # is not tried). Else the mildest as early, within the margin, is the one shown.
        field, value, changed = tries[-1]
        start = start_changed(changed)
        if start is None:
            continue
        for milder_field, milder_value, milder in tries[:-1]:
            milder_start = start_changed(milder)
            if milder_start is not None and milder_start <= start + margin:
                field, value, start = milder_field, milder_value, milder_start
                break
        best[kind] = Alternative(kind, field, value, _flag(field, value), start)
    for name, other in (others or {}).items():
        # There, at once only: what its owners are expected to submit is not read.
        start = start_in(other, replace(job, since=None, submitted=now), None)
        if start is not None and ("datacenter" not in best or start < best["datacenter"].start):
            best["datacenter"] = Alternative("datacenter", "datacenter", name,
                                             _flag("datacenter", name), start)
    return sorted(best.values(), key=lambda a: (a.start, KINDS.index(a.kind)))[:most]
