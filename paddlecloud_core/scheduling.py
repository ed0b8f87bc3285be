"""Who starts next in a datacenter, and when each waiting job will start: the scheduling model
(docs/admin/scheduling.md). Pure: the portal's admission (``scheduling.admission``) loads a ``Pool``
from the database under its lock and applies the ``Plan``; ``bench/eta.py`` replays a trace
through the very same functions with a simulated clock.

The model, in order:

- **Limits.** A job counts against its owner's quota and against the datacenter's capacity
  (each resource: ``None`` is no limit). It starts only if it fits both.
- **Fair share.** The next job looked at is the next of the owner with the lowest weighted
  dominant share: of the datacenter's capacity, the largest fraction any one resource of it
  the owner holds, divided by the owner's weight (dominant resource fairness). Without a
  capacity nothing is shared: owners are taken by their next job's submission time.
- **Priorities.** Within an owner's queue, jobs go by priority, then submission time. A
  priority orders its owner's own jobs only: between owners (at equal shares, or with no
  capacity to share) the owner whose next job was submitted first goes first, whatever its
  priority, so marking every job ``high`` gains nothing over other users.
- **Reservations and backfill.** A job that does not fit is given a reservation on each limit
  it waits for that carries none yet: the time its start is predicted for (as running jobs
  end) and what will be left over then. A job behind it (of any owner, on the capacity; of the
  same owner, on a quota) may start first only if it cannot delay that start: its deadline
  ends it before, or it fits in what is left over. Nothing else overtakes, so a large job is
  never starved by small ones.
- **Predicted start.** ``forecast`` runs the plan forward in time, each running job ending when
  predicted (``Estimate``: its deadline where set, else the run times of its owner's earlier
  jobs of the same shape; once it has run a while, those of them that ran longer than it has;
  where its master's tasks tell how much of its work is done, its own pace), and reads off
  when each waiting job starts, with a range. Where
  nothing tells when a job ends — no job of its owner has ended yet and it has no deadline, or
  it has run past every run time of the jobs it was estimated from — the forecast does not
  make one up: what can only start once that job has ended is predicted ``unknown``, with why.
- **Preemption** (only where the datacenter sets ``preempt_after``, ``Pool.preempt_after``).
  A job waiting for the datacenter's capacity whose owner (their group, if in one) holds less
  than their fair share — their weight's part of the capacity among everyone who holds or
  waits — may start by stopping running jobs of those over theirs, once it has waited
  ``preempt_after``: the victims are those that lose the fewest GPU-minutes (CPU-minutes
  where they hold no GPUs) since their last checkpoint (``lost_minutes``), as few as make
  room, and only while each victim's owner keeps a larger share than the job's owner will
  then hold (else they would only change places). ``Plan.preempt`` says which and when; the
  job's reason says when. Predicted starts leave preemption out.
- **Dependencies.** A job that runs after others (``Waiting.after``: those that have not yet
  ended as it asks) is in no queue until they have: it holds nothing, blocks nothing, and
  waits for the reason ``after_words`` gives. A forecast starts it, through its queue as any
  other, once each of them has ended in the run forward (assumed to end as asked); one whose
  end nothing tells makes its start ``unknown``, with why.
"""

from __future__ import annotations

import heapq
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from .quantity import format_bytes, format_cpu
from .spec import AFTER_MODES
from .status import FINAL_STATES

RESOURCES = ("cpu", "memory", "gpu", "jobs")
SHARED = ("cpu", "memory", "gpu")  # what a datacenter's capacity limits (not a count of jobs)
CAPACITY = "capacity"  # the key of the datacenter's limit (an owner's is their id)
# The waiting jobs of each queue a plan looks at beyond those that can start: those that may
# start ahead of one that waits (backfill). What is behind them waits for a later plan.
LOOK_BEHIND = 20
# How far ahead ``forecast`` looks before it calls a start "not within the horizon".
HORIZON = 30 * 24 * 3600.0
# The run time a job of which nothing is known holds its place with in a plan (``Estimate`` with
# ``known`` False; a forecast never predicts a start from it), and the range of a run time
# bounded only by a deadline (its low end, as a fraction of it).
UNKNOWN_RUN = 3600.0
UNKNOWN_SPREAD = (0.25, 4.0)
# The range around a run time read from little (two earlier runs; a running job's own pace), as
# fractions of it: one or two figures say little of the spread.
THIN_SPREAD = (0.5, 2.0)


@dataclass(frozen=True)
class Vec:
    """Amounts of each resource (cpu in millicores, memory in bytes, gpu, jobs)."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0
    jobs: int = 0

    def __add__(self, other: Vec) -> Vec:
        return Vec(*(getattr(self, r) + getattr(other, r) for r in RESOURCES))

    def __sub__(self, other: Vec) -> Vec:
        return Vec(*(getattr(self, r) - getattr(other, r) for r in RESOURCES))


@dataclass(frozen=True)
class Limit:
    """What may be held at once under one limit; ``None``: no limit on that resource."""

    cpu: int | None = None
    memory: int | None = None
    gpu: int | None = None
    jobs: int | None = None

    def short(self, held: Vec, need: Vec) -> dict[str, tuple[int, int, int]]:
        """Each resource of which ``need`` is more than is free: (asked, free, limit)."""
        out = {}
        for r in RESOURCES:
            limit = getattr(self, r)
            if limit is not None and getattr(need, r) > limit - getattr(held, r):
                out[r] = (getattr(need, r), max(limit - getattr(held, r), 0), limit)
        return out

    def over(self, need: Vec) -> dict[str, tuple[int, int]]:
        """Each resource of which ``need`` is more than the whole limit: (asked, limit)."""
        return {r: (getattr(need, r), getattr(self, r)) for r in RESOURCES
                if getattr(self, r) is not None and getattr(need, r) > getattr(self, r)}


@dataclass(frozen=True)
class Estimate:
    """A predicted run time in seconds, with a range; ``known`` False: nothing to go by (no
    earlier job of the owner, no deadline), the figures only hold the job's place."""

    seconds: float
    low: float
    high: float
    known: bool = True
    # The run times it was read from, shortest first: what a running job's remaining time is
    # read from once it has run a while (``running``). Empty: none (a deadline, nothing known).
    runs: tuple[float, ...] = ()


NOTHING_KNOWN = Estimate(UNKNOWN_RUN, UNKNOWN_RUN * UNKNOWN_SPREAD[0],
                         UNKNOWN_RUN * UNKNOWN_SPREAD[1], known=False)
# Why the end of a job run on ``NOTHING_KNOWN`` is unknown (``Running.unknown``).
NOTHING_KNOWN_WHY = "no job of its owner has ended yet to tell how long it runs"


@dataclass(frozen=True)
class Waiting:
    id: int
    owner: int
    need: Vec
    submitted: float
    priority: int = 0
    name: str = ""
    run: Estimate = NOTHING_KNOWN
    deadline: float | None = None  # the most it may run, in seconds (it fails after)
    since: float | None = None  # when it began to wait this time (None: ``submitted``)
    # The jobs it runs after that have not yet ended as it asks: (id, name, mode) each.
    after: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class Running:
    id: int
    owner: int
    held: Vec
    ends: float  # when it is predicted to end (at the latest its deadline)
    ends_low: float | None = None  # the range of that prediction (None: ``ends``)
    ends_high: float | None = None
    unknown: str = ""  # why nothing tells when it ends ("": ``ends`` does)
    name: str = ""
    began: float | None = None  # when this run began (None: not running yet: never preempted)
    saved: float | None = None  # when it last saved a checkpoint (None: not known)


def running(job_id: int, owner: int, held: Vec, began: float, run: Estimate, now: float, *,
            name: str = "", deadline: float | None = None,
            run_began: float | None = None, progress: float | None = None) -> Running:
    """A job that began at ``began`` and runs ``run`` (its estimate), as a plan at ``now``
    sees it: where it has done a part ``progress`` (0-1) of its work, ending when the rest
    takes it at its pace so far; else as the runs its estimate came from that lasted longer
    than it has so far did (``Estimate.runs``), else when predicted, or now if that has passed
    (any moment: a plan never waits on the past); its end ``unknown`` where its estimate had
    nothing to go by, or where it has run past the high end of it, and no deadline bounds it.
    ``run_began``: this run's start, for preemption (``Running.began``)."""
    unknown = ""
    elapsed = now - began
    if progress is not None and progress > 0 and elapsed > 0:
        # Its own pace tells more than any other job: the rest of its work at that pace.
        left = elapsed * max(1 - progress, 0.0) / progress
        run = _capped(elapsed + left, elapsed + left * THIN_SPREAD[0],
                      elapsed + left * THIN_SPREAD[1], deadline)
    elif longer := [r for r in run.runs if r > elapsed]:
        # Of the jobs like it, only those that ran longer than it has so far say when it ends.
        run = _from_runs(longer, deadline)
    elif deadline is None and not run.known:
        unknown = NOTHING_KNOWN_WHY
    elif deadline is None and now > began + run.high:
        unknown = "it has run longer than its owner's jobs like it did"
    return Running(job_id, owner, held, ends=max(now, began + run.seconds),
                   ends_low=max(now, began + run.low), ends_high=max(now, began + run.high),
                   unknown=unknown, name=name, began=run_began)


@dataclass
class Pool:
    """One datacenter as admission sees it: limits, weights, who holds what, who waits."""

    capacity: Limit = field(default_factory=Limit)
    quotas: Mapping[int, Limit] = field(default_factory=dict)
    weights: Mapping[int, float] = field(default_factory=dict)
    running: Sequence[Running] = ()
    waiting: Sequence[Waiting] = ()
    names: Mapping[int, str] = field(default_factory=dict)  # owners' names, for reasons
    # Groups (teams): each owner's group, and each group's quota, weight and name.
    teams: Mapping[int, int] = field(default_factory=dict)
    team_quotas: Mapping[int, Limit] = field(default_factory=dict)
    team_weights: Mapping[int, float] = field(default_factory=dict)
    team_names: Mapping[int, str] = field(default_factory=dict)
    # Owners none of whose jobs may start now whatever is free, the kind of reason (budget: a
    # spent budget; storage: a home over its storage quota, or not measured) and why.
    blocked: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    # How long a job below its owner's fair share waits before running jobs of those over
    # theirs may be stopped for it, in seconds (None: never).
    preempt_after: float | None = None


@dataclass(frozen=True)
class Reason:
    """Why a job waits (or can never start), in words with the numbers, and in parts for
    programs: ``kind`` is quota, capacity, turn (fair share / a reservation), behind, never,
    budget, storage."""

    kind: str
    message: str
    blocking: int | None = None  # the job it waits for (its reservation, or the one ahead)


@dataclass(frozen=True)
class Preemption:
    """What would start a waiting job by preemption: when (its wait reaches
    ``preempt_after``), the running jobs to stop, and what each loses (GPU-minutes,
    CPU-minutes) since its last checkpoint."""

    at: float
    victims: tuple[int, ...]
    lost: Mapping[int, tuple[float, float]]


@dataclass
class Plan:
    admit: list[int] = field(default_factory=list)  # in the order they were taken
    reasons: dict[int, Reason] = field(default_factory=dict)  # every waiting job not admitted
    never: dict[int, Reason] = field(default_factory=dict)  # can never fit its limits
    reserved: dict[int, float] = field(default_factory=dict)  # job -> its reserved start
    preempt: dict[int, Preemption] = field(default_factory=dict)  # waiting job -> its own


def after_outcome(mode: str, state: str) -> bool | None:
    """Whether a job that runs after another (``mode``, ``spec.AFTER_MODES``) may start once
    that one is in ``state``: True (it ended as asked), False (it ended otherwise: it never
    may), None (not yet)."""
    if state not in FINAL_STATES:
        return None
    return mode == "any" or state == "succeeded"


def after_words(pairs: Iterable[tuple[str, str]]) -> str:
    """Why a job waits for the jobs it runs after, (name, mode) each: ``waiting for job
    prepare to succeed and job clean to end``."""
    return "waiting for " + " and ".join(f"job {name} to {AFTER_MODES[mode]}"
                                         for name, mode in pairs)


def queue_order(job: Waiting) -> tuple:
    """A queue's order: higher priority first, then submission time."""
    return (-job.priority, job.submitted, job.id)


def arrival(job: Waiting) -> tuple:
    """Between owners at equal shares: the next job submitted first goes first (its priority
    orders its owner's queue only)."""
    return (job.submitted, job.id)


def dominant_share(held: Vec, capacity: Limit, weight: float) -> float:
    """The largest fraction of the capacity of any one resource ``held`` is, over ``weight``."""
    shares = [getattr(held, r) / getattr(capacity, r) for r in SHARED
              if getattr(capacity, r)]
    return (max(shares) if shares else 0.0) / (weight or 1.0)


# Each resource as users write it (cpu 500m, memory 2Gi), as quotas show them.
FORMATS = {"cpu": format_cpu, "memory": format_bytes, "gpu": str, "jobs": str}


def _short_text(short: dict[str, tuple[int, int, int]]) -> str:
    return "; ".join(f"{r} {FORMATS[r](asked)} asked, {FORMATS[r](free)} of "
                     f"{FORMATS[r](limit)} free" for r, (asked, free, limit) in short.items())


class _Ledger:
    """What each limit holds as the plan is made, and the reservations on each."""

    def __init__(self, pool: Pool, now: float):
        self.pool, self.now = pool, now
        self.held: dict = defaultdict(Vec)
        # The jobs that hold each limit and when each ends: to predict reserved starts.
        self.holders: dict = defaultdict(list)
        self.reservations: dict = {}  # limit key -> (job, start, left over then)
        for run in pool.running:
            self.hold(run.owner, run.held, run.ends)

    def limits(self, owner: int) -> list[tuple[object, Limit]]:
        """Each limit a job of ``owner`` counts against, by key: the owner's quota (key: the
        owner), their group's (("team", id)) and the datacenter's capacity."""
        pool = self.pool
        limits: list[tuple[object, Limit]] = [(owner, pool.quotas.get(owner, Limit()))]
        if (team := pool.teams.get(owner)) is not None:
            limits.append((("team", team), pool.team_quotas.get(team, Limit())))
        limits.append((CAPACITY, pool.capacity))
        return limits

    def hold(self, owner: int, need: Vec, ends: float) -> None:
        for key, _ in self.limits(owner):
            self.held[key] = self.held[key] + need
            self.holders[key].append((ends, need))

    def start_at(self, key, limit: Limit, need: Vec) -> tuple[float, Vec] | None:
        """When ``need`` fits ``limit`` as its holders end (None: never), and what is
        left over of the limit then."""
        held = self.held[key]
        for ends, freed in [(self.now, Vec()), *sorted(self.holders[key], key=lambda h: h[0])]:
            held = held - freed
            if not limit.short(held, need):
                return max(ends, self.now), _room(limit, held) - need
        return None


def _room(limit: Limit, held: Vec) -> Vec:
    big = 2**62
    return Vec(*((big if getattr(limit, r) is None else getattr(limit, r) - getattr(held, r))
                 for r in RESOURCES))


def _fits_in(need: Vec, room: Vec) -> bool:
    return all(getattr(need, r) <= getattr(room, r) for r in RESOURCES)


def schedule(pool: Pool, now: float) -> Plan:
    """Which waiting jobs start now (``admit``), and why every other one waits."""
    plan = Plan()
    ledger = _Ledger(pool, now)
    queues: dict[int, list[Waiting]] = defaultdict(list)
    for job in pool.waiting:
        if job.after:  # in no queue until the jobs it runs after have ended
            plan.reasons[job.id] = Reason("after", after_words((n, m) for _, n, m in job.after),
                                          blocking=job.after[0][0])
            continue
        queues[job.owner].append(job)
    for queue in queues.values():
        queue.sort(key=queue_order, reverse=True)  # popped from the end
    ahead: dict[int, Waiting] = {}  # each owner's first job that waits: what the rest wait behind

    # Fair share is weighed in two steps: the group (or the owner of no group) furthest below
    # its weighted share goes first, and within a group, the member furthest below theirs.
    def share(key, weight: float) -> float:
        return dominant_share(ledger.held[key], pool.capacity, weight)

    def member_turn(owner: int) -> tuple:
        """A member's place in their group: their share of what the group may hold (the
        group's quota, else the capacity), over their weight."""
        team = pool.teams.get(owner)
        whole = pool.capacity
        if team is not None and team in pool.team_quotas:
            group = pool.team_quotas[team]
            whole = Limit(**{r: getattr(group, r) if getattr(group, r) is not None
                             else getattr(pool.capacity, r) for r in SHARED})
        weight = pool.weights.get(owner, 1.0)
        return (dominant_share(ledger.held[owner], whole, weight),
                arrival(queues[owner][-1]))

    members: dict[object, list[int]] = defaultdict(list)
    for owner in queues:
        team = pool.teams.get(owner)
        members[("team", team) if team is not None else owner].append(owner)

    def turn(entity) -> tuple:
        """The entity's place: its weighted share, then its next job's submission."""
        first = min((o for o in members[entity] if queues[o]), key=member_turn)
        weight = (pool.team_weights.get(entity[1], 1.0) if isinstance(entity, tuple)
                  else pool.weights.get(entity, 1.0))
        return (share(entity, weight), arrival(queues[first][-1]))

    heap = [(turn(entity), n, entity) for n, entity in enumerate(members)]
    heapq.heapify(heap)
    while heap:
        _, n, entity = heapq.heappop(heap)
        owner = min((o for o in members[entity] if queues[o]), key=member_turn)
        _place(queues[owner].pop(), ledger, plan, ahead)
        if owner in ahead and not _slot_free(owner, ledger):
            # None of the owner's jobs can start now: the rest wait behind the first.
            first = ahead[owner]
            for job in queues[owner]:
                plan.reasons[job.id] = Reason("behind", f"waiting behind job "
                                              f"{first.name or first.id}", blocking=first.id)
            queues[owner].clear()
        if any(queues[o] for o in members[entity]):
            heapq.heappush(heap, (turn(entity), n, entity))
    if pool.preempt_after is not None:
        _preemptions(pool, ledger, plan)
    return plan


def _slot_free(owner: int, ledger: _Ledger) -> bool:
    """Whether the owner may start one more job (their quota's and group's ``jobs``)."""
    return all(limit.jobs is None or ledger.held[key].jobs < limit.jobs
               for key, limit in ledger.limits(owner))


def _place(job: Waiting, ledger: _Ledger, plan: Plan, ahead: dict[int, Waiting]) -> None:
    pool, now = ledger.pool, ledger.now
    limits = ledger.limits(job.owner)
    for key, limit in limits:
        if over := limit.over(job.need):
            what = ("the datacenter's capacity" if key == CAPACITY
                    else "your group's quota" if isinstance(key, tuple) else "your quota")
            plan.never[job.id] = Reason("never", f"can never start: it asks for more than "
                                        f"{what}: " + "; ".join(
                                            f"{r} {FORMATS[r](a)} asked, {FORMATS[r](b)} in all"
                                            for r, (a, b) in over.items()))
            return
    if (blocked := pool.blocked.get(job.owner)) is not None:
        plan.reasons[job.id] = Reason(*blocked)
        return
    short = {key: limit.short(ledger.held[key], job.need) for key, limit in limits}
    if not any(short.values()):
        blocked_by = _reservation_in_the_way(job, ledger)
        if blocked_by is None:
            plan.admit.append(job.id)
            ends = now + (job.deadline if job.deadline is not None else job.run.seconds)
            ledger.hold(job.owner, job.need, ends)
            for key, _ in limits:
                if key in ledger.reservations:
                    res_job, start, left = ledger.reservations[key]
                    if not _ends_before(job, now, start):
                        ledger.reservations[key] = (res_job, start, left - job.need)
            return
        plan.reasons[job.id] = blocked_by
    elif job.owner in ahead:
        first = ahead[job.owner]
        plan.reasons[job.id] = Reason("behind", f"waiting behind job {first.name or first.id}",
                                      blocking=first.id)
    elif short[job.owner]:
        plan.reasons[job.id] = Reason("quota",
                                      f"waiting for quota: {_short_text(short[job.owner])}")
    elif team_short := next((v for k, v in short.items() if isinstance(k, tuple) and v), None):
        team = pool.teams[job.owner]
        plan.reasons[job.id] = Reason(
            "group", f"waiting for group {pool.team_names.get(team, team)}'s quota: "
                     f"{_short_text(team_short)}")
    else:
        plan.reasons[job.id] = Reason(
            "capacity", f"waiting for the datacenter's capacity: {_short_text(short[CAPACITY])}")
    ahead.setdefault(job.owner, job)
    # A job that does not fit reserves each limit it waits for that has no reservation yet.
    for key, limit in limits:
        if not short[key] or key in ledger.reservations:
            continue
        found = ledger.start_at(key, limit, job.need)
        if found is not None:
            ledger.reservations[key] = (job, found[0], found[1])
            plan.reserved[job.id] = max(plan.reserved.get(job.id, now), found[0])


def _ends_before(job: Waiting, now: float, start: float) -> bool:
    """Whether the job surely ends by ``start``: its deadline ends it."""
    return job.deadline is not None and now + job.deadline <= start


def _reservation_in_the_way(job: Waiting, ledger: _Ledger) -> Reason | None:
    """The reason the job may not start now, fitting as it does: it would delay a
    reservation (its own owner's earlier job, or on the capacity, another's turn)."""
    for key, _ in ledger.limits(job.owner):
        if key not in ledger.reservations:
            continue
        res_job, start, left = ledger.reservations[key]
        if _ends_before(job, ledger.now, start) or _fits_in(job.need, left):
            continue
        if res_job.owner == job.owner:
            return Reason("behind", f"waiting behind job {res_job.name or res_job.id}: starting "
                          "now would delay it", blocking=res_job.id)
        what = ("the datacenter's capacity" if key == CAPACITY
                else f"group {ledger.pool.team_names.get(key[1], key[1])}'s quota")
        return Reason("turn", f"waiting for its turn: {what} is held for "
                      f"{_job_of_another(res_job, job, ledger.pool)}, whose fair share is "
                      f"further from met, predicted to start {_when(start - ledger.now)}",
                      blocking=res_job.id)
    return None


def _job_of_another(other: Waiting, job: Waiting, pool: Pool) -> str:
    """``other`` (another owner's job) as the reason of ``job`` names it. Those who see
    ``job`` — its owner and, in the group view, their group's members — see ``other`` only if
    its owner is in that same group: then by its name and owner's, else as "another user's
    job" (a reason is no way to learn of jobs one may not look at)."""
    team = pool.teams.get(job.owner)
    if team is None or pool.teams.get(other.owner) != team:
        return "another user's job"
    who = pool.names.get(other.owner, f"user {other.owner}")
    return f"job {other.name or other.id} of {who}"


def _when(seconds: float) -> str:
    if seconds < 60:
        return "now"
    if seconds < 3600:
        return f"in {round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"in {seconds / 3600:.1f} h"
    return f"in {seconds / 86400:.1f} days"


# --- preemption ---------------------------------------------------------------------------------

def lost_minutes(run: Running, now: float) -> tuple[float, float]:
    """What stopping ``run`` at ``now`` loses: GPU-minutes and CPU-minutes of work since its
    last checkpoint, or since its run began when it saved none since."""
    began = now if run.began is None else run.began
    minutes = max(now - max(run.saved or began, began), 0.0) / 60
    return run.held.gpu * minutes, run.held.cpu / 1000 * minutes


def _entity(pool: Pool, owner: int):
    """Whose share an owner's jobs count in: their group's, else their own (ledger keys)."""
    team = pool.teams.get(owner)
    return ("team", team) if team is not None else owner


def _preemptions(pool: Pool, ledger: _Ledger, plan: Plan) -> None:
    """For each job waiting for the capacity whose owner is below their fair share, the
    running jobs of those over theirs whose stop would let it start, the cheapest (what
    ``lost_minutes`` says) and as few as make room; its reason says when (``Plan.preempt``)."""
    now, capacity = ledger.now, pool.capacity
    weights = {}
    for owner in {run.owner for run in pool.running} | {job.owner for job in pool.waiting}:
        entity = _entity(pool, owner)
        weights[entity] = (pool.team_weights.get(entity[1], 1.0) if isinstance(entity, tuple)
                           else pool.weights.get(entity, 1.0)) or 1.0
    fair = 1.0 / sum(weights.values()) if weights else 0.0
    share = {entity: dominant_share(ledger.held[entity], capacity, weight)
             for entity, weight in weights.items()}
    jobs = {job.id: job for job in pool.waiting}
    held = ledger.held[CAPACITY]
    for job_id, reason in list(plan.reasons.items()):
        job = jobs.get(job_id)
        if reason.kind != "capacity" or job is None:
            continue
        entity = _entity(pool, job.owner)
        if share[entity] >= fair:
            continue
        short = capacity.short(held, job.need)
        candidates = sorted(
            (run for run in pool.running if run.began is not None
             and share[_entity(pool, run.owner)] > fair and _entity(pool, run.owner) != entity
             and any(getattr(run.held, r) for r in short)),
            key=lambda run: (*lost_minutes(run, now), run.id))
        # Whoever loses a job keeps more than the job's owner will hold: else the two would
        # only change places (and the victim, first at equal shares, would start again).
        gains = dominant_share(ledger.held[entity] + job.need, capacity, weights[entity])
        chosen, freed, freed_of = [], Vec(), defaultdict(Vec)
        for run in candidates:
            if not capacity.short(held - freed, job.need):
                break
            loser = _entity(pool, run.owner)
            if dominant_share(ledger.held[loser] - freed_of[loser] - run.held, capacity,
                              weights[loser]) <= gains:
                continue
            chosen.append(run)
            freed, freed_of[loser] = freed + run.held, freed_of[loser] + run.held
        if capacity.short(held - freed, job.need):
            continue  # stopping them all would not make room
        for run in reversed(chosen):  # the costliest first: is it needed after all?
            if not capacity.short(held - (freed - run.held), job.need):
                chosen.remove(run)
                freed = freed - run.held
        at = (job.since if job.since is not None else job.submitted) + pool.preempt_after
        plan.preempt[job_id] = Preemption(at, tuple(run.id for run in chosen),
                                          {run.id: lost_minutes(run, now) for run in chosen})
        plan.reasons[job_id] = replace(reason, message=(
            f"{reason.message}; would start by preemption at {_clock(at)}, after "
            f"preempt_after ({span_words(pool.preempt_after)}) of waiting"))


def _clock(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M UTC")


def span_words(seconds: float) -> str:
    """A length of time as people say it: 45 s, 30 min, 2 h, 1.5 h, 3 days."""
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 86400:g} days"


# --- predicted starts ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Forecast:
    start: float | None  # None: not within the horizon, or ``unknown``
    low: float | None
    high: float | None
    unknown: str = ""  # why no start can be predicted ("": ``start`` is the prediction)


def forecast(pool: Pool, now: float, only: Iterable[int] | None = None,
             horizon: float = HORIZON) -> dict[int, Forecast]:
    """When each waiting job (or each of ``only``) is predicted to start: the plan run forward,
    running jobs ending when predicted and started ones running their predicted time; the range
    from the same run with every run time at the low and at the high end of its range. A job
    that can only start after a job whose end nothing tells (``Running.unknown``, or a waiting
    job started on the way whose ``Estimate`` is not ``known``) is ``unknown``, with why."""
    runs = {case: _simulate(pool, now, case, only, horizon)
            for case in ("seconds", "low", "high")}
    ids = [j.id for j in pool.waiting] if only is None else list(only)
    out = {}
    for job_id in ids:
        s, lo, hi = (runs[c][0].get(job_id) for c in ("seconds", "low", "high"))
        why = runs["seconds"][2].get(job_id) or runs["seconds"][1]
        if s is None and why:
            out[job_id] = Forecast(None, None, None, unknown=why)
            continue
        known = [t for t in (s, lo, hi) if t is not None]
        out[job_id] = Forecast(s, min(known) if known else None,
                               max(known) if len(known) == 3 else None)
    return out


def _simulate(pool: Pool, now: float, case: str, only: Iterable[int] | None,
              horizon: float) -> tuple[dict[int, float], str, dict[int, str]]:
    """When each wanted job starts as the plan runs forward; if some never do while a job
    whose end nothing tells still runs, why (that job); and why each that runs after a job
    that never ends here never starts."""
    def end_of(run: Running) -> float:
        picked = {"seconds": run.ends, "low": run.ends_low, "high": run.ends_high}[case]
        return max(now, run.ends if picked is None else picked)

    # A job whose end nothing tells never ends here; each plan sees it end any moment, as
    # admission does (``running``), so that what starts meanwhile is what admission starts.
    endless = [run for run in pool.running if run.unknown]
    running = [replace(run, ends=end_of(run)) for run in pool.running if not run.unknown]
    waiting = {job.id: job for job in sorted(pool.waiting, key=queue_order)}
    wanted = set(waiting if only is None else only) & set(waiting)
    started: dict[int, float] = {}
    ended: set[int] = set()
    t = now
    while wanted - started.keys() and t <= now + horizon:
        for job_id, job in waiting.items():  # in its queue once what it runs after has ended
            if job.after and all(other in ended for other, _, _ in job.after):
                waiting[job_id] = replace(job, after=())
        plan = schedule(replace(pool, running=running + [replace(run, ends=t) for run in endless],
                                waiting=_heads(pool, waiting), preempt_after=None), t)
        for job_id in plan.admit:
            job = waiting.pop(job_id)
            started[job_id] = t
            if job.deadline is None and not job.run.known:
                endless.append(Running(job.id, job.owner, job.need, t, name=job.name,
                                       unknown=NOTHING_KNOWN_WHY))
                continue
            run = getattr(job.run, case)
            if job.deadline is not None:
                run = min(run, job.deadline)
            running.append(Running(job.id, job.owner, job.need, t + run))
        for job_id in plan.never:
            waiting.pop(job_id)
            wanted.discard(job_id)
        if not running:
            break
        # The next end (a job predicted to have ended already ends now: plan again at once).
        t = max(t, min(run.ends for run in running))
        ended.update(run.id for run in running if run.ends <= t)
        running = [run for run in running if run.ends > t]
    endless_why = {run.id: run.unknown for run in endless}
    after_why = {}
    for job_id in wanted - started.keys():
        job = waiting.get(job_id)
        other = next((a for a in job.after if a[0] not in ended), None) if job else None
        if other is not None:
            said = endless_why.get(other[0])
            after_why[job_id] = (f"it runs after job {other[1]}, and nothing tells when that "
                                 "ends" + (f": {said}" if said else ""))
    why = ""
    if endless and wanted - started.keys():
        first = endless[0]
        who = pool.names.get(first.owner, first.owner)
        why = (f"it waits for room that job {first.name or first.id} ({who}'s) holds, and "
               f"nothing tells when that ends: {first.unknown}")
    return started, why, after_why


def _heads(pool: Pool, waiting: dict[int, Waiting]) -> list[Waiting]:
    """The jobs of each queue a plan looks at (``waiting`` in queue order), as admission reads
    them: as many as the owner may start at once, and ``LOOK_BEHIND`` more."""
    seen: dict[int, int] = defaultdict(int)
    heads = []
    for job in waiting.values():
        jobs = pool.quotas.get(job.owner, Limit()).jobs
        if job.after:  # in no queue yet (admission does not read it either)
            heads.append(job)
        elif jobs is None or seen[job.owner] < jobs + 1 + LOOK_BEHIND:
            seen[job.owner] += 1
            heads.append(job)
    return heads


# --- run times ----------------------------------------------------------------------------------

STEM_RE = re.compile(r"(?:[-.]?(?:v|run|try|r)?\d+)+$")


def name_stem(name: str) -> str:
    """What a job's name says of its kind: ``resnet-run-12`` → ``resnet``; ``bert3`` →
    ``bert``."""
    return STEM_RE.sub("", name) or name


def shape(name: str, need: Vec) -> tuple:
    """A job's kind and size, for looking up how long such jobs ran."""
    return (name_stem(name), need.cpu, need.memory, need.gpu)


def estimate(history: Sequence[tuple[tuple, float]], of: tuple,
             deadline: float | None = None) -> Estimate:
    """How long a job of shape ``of`` will run, from ``history`` (its owner's earlier jobs:
    (shape, seconds), oldest first): the last 20 runs of the same shape, else of the same name
    stem, else of all (``_from_runs``). A deadline caps it;
    with no earlier job, the deadline is all there is to go by, and without one nothing is
    (``NOTHING_KNOWN``)."""
    same = [s for k, s in history if k == of]
    if not same:
        same = [s for k, s in history if k[0] == of[0]]
    if not same:
        same = [s for _, s in history]
    if same:
        return _from_runs(same[-20:], deadline)
    if deadline is not None:  # it ends by its deadline, at the latest
        return Estimate(deadline, deadline * UNKNOWN_SPREAD[0], deadline)
    return NOTHING_KNOWN


def _from_runs(runs: Sequence[float], deadline: float | None) -> Estimate:
    """The estimate ``runs`` (run times of jobs like it) make: their mean — a start comes after
    the sum of the run times ahead of it, whose best guess is the sum of their means, not of
    their medians (which a few long runs leave early) — and the range from the shortest to the
    longest (of 20 runs, it holds the next one about 9 times in 10), each capped by the
    deadline."""
    runs = sorted(runs)
    mid = statistics.fmean(runs)
    low, high = runs[0], runs[-1]
    if len(runs) < 3:  # two runs say little of the spread
        low, high = min(low, mid * THIN_SPREAD[0]), max(high, mid * THIN_SPREAD[1])
    return _capped(mid, low, high, deadline, tuple(runs))


def _capped(seconds: float, low: float, high: float, deadline: float | None,
            runs: tuple[float, ...] = ()) -> Estimate:
    """An estimate with each figure at most the deadline (a job fails past it)."""
    cap = math.inf if deadline is None else deadline
    return Estimate(min(seconds, cap), min(low, cap), min(high, cap), runs=runs)
