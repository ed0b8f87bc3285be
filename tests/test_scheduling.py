"""The scheduling model alone (``paddlecloud_core.scheduling``), with a simulated clock: fair
share by weighted dominant share, by group then by member; priorities; backfill that never
delays the reserved job; forecasts that are exact when run times are known; run-time
estimates from history. The portal's admission applies exactly these plans
(tests/jobs/test_fair_share.py, test_groups.py)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from paddlecloud_core.scheduling import (
    NOTHING_KNOWN,
    Estimate,
    Forecast,
    Limit,
    Pool,
    Running,
    Vec,
    Waiting,
    estimate,
    forecast,
    lost_minutes,
    name_stem,
    running,
    schedule,
    shape,
)

GiB = 2**30


def job(id_, owner, cpu=1, gpu=0, at=0.0, priority=0, run=None, deadline=None, name=""):
    known = Estimate(run, run, run) if run is not None else Estimate(3600, 900, 14400)
    return Waiting(id_, owner, Vec(cpu * 1000, 0, gpu, 1), submitted=at + id_ * 1e-3,
                   priority=priority, name=name or f"j{id_}", run=known, deadline=deadline)


def replay(pool: Pool, runs: dict[int, float], until: float = 1e7) -> dict[int, float]:
    """Run the plan forward: every job runs exactly ``runs[id]``; when each starts."""
    waiting, running, started, now = list(pool.waiting), list(pool.running), {}, 0.0
    while waiting and now < until:
        plan = schedule(Pool(**{**pool.__dict__, "waiting": waiting, "running": running}), now)
        for job_id in plan.admit:
            one = next(j for j in waiting if j.id == job_id)
            waiting.remove(one)
            started[job_id] = now
            running.append(Running(job_id, one.owner, one.need, now + runs[job_id]))
        assert not plan.never
        ends = [r.ends for r in running if r.ends > now]
        if not ends:
            break
        now = min(ends)
        running = [r for r in running if r.ends > now]
    return started


def test_one_job_of_a_user_goes_before_the_fiftieth_of_another():
    pool = Pool(capacity=Limit(cpu=4000),
                running=[Running(100 + i, 1, Vec(1000, 0, 0, 1), ends=60) for i in range(4)],
                waiting=[job(i, 1) for i in range(1, 50)] + [job(99, 2, at=10)])
    plan = schedule(pool, 0)
    assert plan.admit == []
    assert plan.reasons[99].kind == "capacity"
    assert plan.reasons[2].message == "waiting behind job j1"
    # The first CPU to free up is bob's.
    assert replay(pool, dict.fromkeys(range(200), 60.0))[99] == 60


def test_weights_divide_a_contended_capacity():
    pool = Pool(capacity=Limit(cpu=8000, gpu=8), weights={1: 3, 2: 1},
                waiting=[job(i, 1 + i % 2, cpu=1, gpu=1) for i in range(40)])
    plan = schedule(pool, 0)
    owners = [1 + i % 2 for i in plan.admit]
    assert (owners.count(1), owners.count(2)) == (6, 2)


def test_dominant_share_counts_the_scarcest_resource():
    """bob's GPU jobs hold a quarter of the GPUs: his dominant share is 25 %; alice's CPU jobs
    hold 2 of 16 CPUs (12.5 %): her next job goes first."""
    pool = Pool(capacity=Limit(cpu=16000, gpu=4),
                running=[Running(10, 1, Vec(2000, 0, 0, 1), 100),
                         Running(11, 2, Vec(1000, 0, 1, 1), 100)],
                waiting=[job(1, 2, cpu=13, gpu=0), job(2, 1, cpu=13)])
    plan = schedule(pool, 0)
    assert plan.admit == [2]
    assert plan.reasons[1].kind == "capacity"


def test_priorities_order_a_users_queue_but_not_anothers():
    pool = Pool(quotas={1: Limit(jobs=1), 2: Limit(jobs=1)},
                waiting=[job(1, 1), job(2, 1, priority=100), job(3, 1, priority=-100),
                         job(4, 2, priority=-100)])
    plan = schedule(pool, 0)
    assert sorted(plan.admit) == [2, 4]
    assert plan.reasons[1].message == "waiting for quota: jobs 1 asked, 0 of 1 free"
    assert plan.reasons[3].message == "waiting behind job j1"


def test_a_small_job_backfills_only_beside_the_reserved_one():
    """4 CPUs; a 2-CPU job runs for 100 s; a 3-CPU job waits for it. A 1-CPU job may start
    at once (at 100 s there is 1 CPU left beside the big one); a 2-CPU job may too if its
    deadline ends it by 100 s, and not otherwise."""
    running = [Running(9, 1, Vec(2000, 0, 0, 1), ends=100)]
    for small, admitted in ((job(2, 1, cpu=1), True), (job(2, 1, cpu=2), False),
                            (job(2, 1, cpu=2, deadline=90), True),
                            (job(2, 1, cpu=2, deadline=120), False)):
        pool = Pool(capacity=Limit(cpu=4000), running=running,
                    waiting=[job(1, 1, cpu=3), small])
        plan = schedule(pool, 0)
        assert (2 in plan.admit) is admitted, small
        assert plan.reserved == {1: 100}
        if not admitted:
            assert plan.reasons[2].message == "waiting behind job j1: starting now would delay it"


def test_another_users_job_waits_for_the_reserved_ones_turn():
    pool = Pool(capacity=Limit(cpu=4000), names={2: "bob"},
                running=[Running(9, 1, Vec(2000, 0, 0, 1), ends=100)],
                waiting=[job(1, 2, cpu=4), job(2, 1, cpu=2)])
    plan = schedule(pool, 0)
    assert plan.admit == []
    assert plan.reasons[2].kind == "turn"
    assert plan.reasons[2].message.startswith(
        "waiting for its turn: the datacenter's capacity is held for another user's job, ")
    # Members of one group see each other's jobs: there the reason names it, and whose it is.
    plan = schedule(Pool(**{**pool.__dict__, "teams": {1: 7, 2: 7}}), 0)
    assert plan.reasons[2].message.startswith(
        "waiting for its turn: the datacenter's capacity is held for job j1 of bob, ")
    # Of another group, it is another user's again.
    plan = schedule(Pool(**{**pool.__dict__, "teams": {1: 7, 2: 8}}), 0)
    assert "another user's job" in plan.reasons[2].message


@pytest.mark.parametrize("capacity", [Limit(cpu=2000), Limit()])
def test_a_priority_orders_its_owners_queue_not_other_owners_jobs(capacity):
    """alice (1) and bob (2) hold nothing; alice's normal job was submitted before bob's high
    one, and only one fits (the capacity, or the group quota they share): alice's starts.
    bob's high job still goes before his own earlier normal one."""
    pool = Pool(capacity=capacity, teams={1: 7, 2: 7}, team_quotas={7: Limit(cpu=2000)},
                waiting=[job(1, 1, cpu=2), job(2, 2, cpu=2), job(3, 2, cpu=2, priority=100)])
    plan = schedule(pool, 0)
    assert plan.admit == [1]
    assert plan.reasons[2].message == "waiting behind job j3"


@pytest.mark.parametrize("seed", range(30))
def test_backfill_never_delays_the_reserved_job(seed):
    """Random queues of one user on a capacity, every run time known exactly: the job given
    the first reservation starts no later than the time it was reserved for."""
    rng = random.Random(seed)  # noqa: S311 - random queues, not secrets
    running = [Running(100 + i, 1, Vec(rng.randint(1, 4) * 1000, 0, 0, 1),
                       ends=rng.randint(10, 500)) for i in range(rng.randint(1, 4))]
    waiting = [job(i, 1, cpu=rng.randint(1, 8), run=rng.randint(10, 500),
                   deadline=rng.choice([None, rng.randint(10, 500)])) for i in range(1, 15)]
    runs = {w.id: min(w.run.seconds, w.deadline or w.run.seconds) for w in waiting}
    pool = Pool(capacity=Limit(cpu=8000), running=running, waiting=waiting)
    plan = schedule(pool, 0)
    if not plan.reserved:
        return
    reserved, at = next(iter(plan.reserved.items()))
    assert replay(pool, runs)[reserved] <= at


def test_a_group_quota_is_shared_and_shares_go_by_group_then_member():
    pool = Pool(capacity=Limit(cpu=4000), teams={1: 7, 2: 7},
                team_quotas={7: Limit()}, team_names={7: "vision"},
                waiting=[job(i, 1 + i % 3) for i in range(30)])
    plan = schedule(pool, 0)
    owners = sorted(1 + i % 3 for i in plan.admit)
    assert owners == [1, 2, 3, 3]  # the group (1, 2) gets 2 CPUs, user 3 alone gets 2
    pool = Pool(teams={1: 7, 2: 7}, team_quotas={7: Limit(cpu=2000)}, team_names={7: "vision"},
                waiting=[job(1, 1), job(2, 1), job(3, 2), job(4, 2)])
    plan = schedule(pool, 0)
    assert sorted(plan.admit) == [1, 3]
    assert plan.reasons[2].message == ("waiting for group vision's quota: cpu 1 asked, "
                                       "0 of 2 free")


def test_a_job_bigger_than_a_limit_can_never_start():
    plan = schedule(Pool(capacity=Limit(gpu=8), waiting=[job(1, 1, gpu=9)]), 0)
    assert plan.never[1].message == ("can never start: it asks for more than the datacenter's "
                                     "capacity: gpu 9 asked, 8 in all")


def test_forecasts_are_exact_when_run_times_are():
    pool = Pool(capacity=Limit(cpu=2000),
                running=[Running(9, 1, Vec(2000, 0, 0, 1), ends=50)],
                waiting=[job(1, 1, cpu=1, run=30), job(2, 2, cpu=2, run=10),
                         job(3, 1, cpu=1, run=30)])
    predicted = forecast(pool, 0)
    actual = replay(pool, {1: 30, 2: 10, 3: 30})
    assert {k: f.start for k, f in predicted.items()} == actual
    assert all(f.low == f.start == f.high for f in predicted.values())


def test_what_waits_for_a_job_whose_end_nothing_tells_is_predicted_unknown_saying_why():
    """Issue 40.1: a running job with no earlier job of its owner to go by and no deadline
    (or one run past every estimate of it) has no end to predict from: the job that needs its
    room is predicted ``unknown``, naming it and why — not "now", not a made-up hour. What does
    not need its room is still predicted."""
    fresh = running(1, 1, Vec(gpu=1, jobs=1), began=0.0, run=NOTHING_KNOWN, now=100.0,
                    name="first-ever")
    others = Running(2, 2, Vec(gpu=1, jobs=1), ends=700.0)
    pool = Pool(capacity=Limit(gpu=2), names={1: "alice", 2: "bob"}, running=[fresh, others],
                waiting=[Waiting(3, 2, Vec(gpu=2, jobs=1), submitted=50.0)])
    assert forecast(pool, 100.0)[3] == Forecast(None, None, None, unknown=(
        "it waits for room that job first-ever (alice's) holds, and nothing tells when that "
        "ends: no job of its owner has ended yet to tell how long it runs"))
    # A job of one GPU needs only the room bob's job frees at 700.
    pool = replace(pool, waiting=[Waiting(4, 2, Vec(gpu=1, jobs=1), submitted=60.0)])
    assert forecast(pool, 100.0)[4] == Forecast(700.0, 700.0, 700.0)

    # Run past the high end of what its owner's jobs like it ran: the same.
    overdue = running(1, 1, Vec(gpu=2, jobs=1), began=0.0, run=Estimate(60, 30, 120),
                      now=500.0, name="slow")
    assert overdue.unknown == "it has run longer than its owner's jobs like it did"
    pool = Pool(capacity=Limit(gpu=2), names={1: "alice"}, running=[overdue],
                waiting=[Waiting(3, 2, Vec(gpu=1, jobs=1), submitted=50.0)])
    assert "job slow (alice's)" in forecast(pool, 500.0)[3].unknown
    # Within its range, or bounded by a deadline, it is taken to end any moment.
    for late in (running(1, 1, Vec(gpu=2, jobs=1), began=0.0, run=Estimate(60, 30, 120),
                         now=100.0),
                 running(1, 1, Vec(gpu=2, jobs=1), began=0.0, run=estimate([], ("x",), 300),
                         now=500.0, deadline=300)):
        pool = Pool(capacity=Limit(gpu=2), running=[late],
                    waiting=[Waiting(3, 2, Vec(gpu=1, jobs=1), submitted=50.0)])
        assert forecast(pool, late.ends)[3] == Forecast(late.ends, late.ends, late.ends_high)


def test_a_job_behind_a_waiting_job_of_unknown_run_time_is_predicted_unknown():
    """A waiting job predicted to start, whose own run time nothing tells, holds its room for
    an unknown time: the job that can only start after it is ``unknown``; the first job's own
    start is known."""
    pool = Pool(capacity=Limit(gpu=1), names={1: "alice"},
                running=[Running(9, 2, Vec(gpu=1, jobs=1), ends=50.0)],
                waiting=[Waiting(1, 1, Vec(gpu=1, jobs=1), submitted=1.0, name="new-kind"),
                         Waiting(2, 1, Vec(gpu=1, jobs=1), submitted=2.0,
                                 run=Estimate(10, 10, 10))])
    predicted = forecast(pool, 0.0)
    assert predicted[1].start == 50.0
    assert predicted[2].start is None and "job new-kind (alice's)" in predicted[2].unknown


def test_a_job_that_runs_after_others_is_in_no_queue_until_they_end():
    """Issue 40.4: a job that runs after another waits for it with that reason, holding
    nothing and blocking nothing: the job behind it in its owner's queue starts now."""
    pool = Pool(quotas={1: Limit(jobs=2)},
                running=[Running(9, 1, Vec(1000, 0, 0, 1), ends=100.0, name="prep")],
                waiting=[replace(job(1, 1, run=50), name="train", after=((9, "prep", "ok"),)),
                         job(2, 1, run=50, name="other")])
    plan = schedule(pool, 0.0)
    assert plan.admit == [2]
    assert plan.reasons[1].kind == "after"
    assert plan.reasons[1].message == "waiting for job prep to succeed"
    assert schedule(replace(pool, waiting=[replace(
        job(1, 1), after=((9, "prep", "ok"), (8, "clean", "any")))]), 0.0).reasons[1].message \
        == "waiting for job prep to succeed and job clean to end"


def test_a_chain_of_jobs_is_predicted_to_start_one_after_the_other():
    """Issue 40.4: the predicted start follows the chain — prep's predicted end, then train's
    own queueing (the place prep frees goes to "more", ahead of it in its owner's queue; the
    next is free at 130), then eval after train's predicted end."""
    pool = Pool(quotas={1: Limit(jobs=2)},
                running=[Running(9, 1, Vec(1000, 0, 0, 1), ends=100.0, name="prep"),
                         Running(8, 1, Vec(1000, 0, 0, 1), ends=130.0, name="busy")],
                waiting=[job(1, 1, run=40, name="more"),
                         replace(job(2, 1, run=50), name="train", after=((9, "prep", "ok"),)),
                         replace(job(3, 1, run=10), name="eval", after=((2, "train", "any"),))])
    predicted = forecast(pool, 0.0)
    assert predicted[1].start == 100.0
    assert predicted[2].start == 130.0  # after prep (100), once the quota has room (130)
    assert predicted[3].start == 180.0  # after train (130 + 50)
    # Without the job ahead, it starts as prep ends.
    alone = forecast(replace(pool, waiting=pool.waiting[1:]), 0.0)
    assert (alone[2].start, alone[3].start) == (100.0, 150.0)


def test_a_start_after_a_job_whose_end_nothing_tells_is_unknown_saying_which():
    fresh = running(9, 1, Vec(1000, 0, 0, 1), began=0.0, run=NOTHING_KNOWN, now=10.0,
                    name="prep")
    pool = Pool(running=[fresh], waiting=[
        replace(job(1, 1, run=50), name="train", after=((9, "prep", "ok"),)),
        replace(job(2, 1, run=50), name="report", after=((7, "building", "ok"),))])
    predicted = forecast(pool, 10.0)
    assert predicted[1] == Forecast(None, None, None, unknown=(
        "it runs after job prep, and nothing tells when that ends: no job of its owner has "
        "ended yet to tell how long it runs"))
    # One not in the pool at all (its image still building, say): no end to go by either.
    assert predicted[2].unknown == "it runs after job building, and nothing tells when that ends"


def test_an_estimate_from_nothing_is_not_known_and_a_deadline_bounds_one():
    assert not estimate([], ("a", 1, 0, 0)).known
    bounded = estimate([], ("a", 1, 0, 0), deadline=600)
    assert bounded.known and bounded.high == bounded.seconds == 600
    assert estimate([(("a", 1, 0, 0), 60.0)], ("b", 2, 0, 0)).known  # the owner's other runs


def test_a_job_past_its_predicted_end_is_taken_to_end_now():
    """Running past its estimate, a job is predicted to end any moment: what waits for it is
    predicted to start now, not never."""
    pool = Pool(capacity=Limit(gpu=1), running=[Running(1, 1, Vec(gpu=1, jobs=1), ends=100.0)],
                waiting=[Waiting(2, 2, Vec(gpu=1, jobs=1), submitted=50.0)])
    assert forecast(pool, 100.0)[2].start == 100.0


def test_a_running_job_ends_as_the_jobs_like_it_that_ran_longer_did():
    """Issue 40.2: a job that has run past some of its like is not taken to end now (nor at
    their mean, gone by): it ends as those that ran longer than it has did — their mean, the
    range from the shortest to the longest of them. Before it has run that long, its
    estimate holds."""
    etl = ("etl", 1, 0, 0)
    runs = [(etl, minutes * 60.0) for minutes in (10, 20, 30, 40, 50, 90)]
    run = estimate(runs, etl)
    fresh = running(1, 1, Vec(1, 0, 0, 1), began=0.0, run=run, now=300.0)
    assert (fresh.ends, fresh.ends_low, fresh.ends_high) == (40 * 60, 10 * 60, 90 * 60)
    # 35 minutes in, three of the six ran longer (40, 50, 90): it ends at 60, not now.
    late = running(1, 1, Vec(1, 0, 0, 1), began=0.0, run=run, now=35 * 60.0)
    assert (late.ends, late.ends_low, late.ends_high, late.unknown) == (3600, 2400, 5400, "")
    # A deadline still bounds it.
    capped = running(1, 1, Vec(1, 0, 0, 1), began=0.0, run=estimate(runs, etl, deadline=3000),
                     now=35 * 60.0, deadline=3000)
    assert (capped.ends, capped.ends_high) == (3000, 3000)
    # What waits for its room is predicted from then, not now.
    pool = Pool(capacity=Limit(cpu=1000), running=[late],
                waiting=[Waiting(2, 2, Vec(1000, 0, 0, 1), submitted=35 * 60.0)])
    assert forecast(pool, 35 * 60.0)[2] == Forecast(3600, 2400, 5400)
    # Past every one of them: nothing tells (issue 40.1).
    assert running(1, 1, Vec(1, 0, 0, 1), began=0.0, run=run, now=100 * 60.0).unknown


def test_a_running_job_that_reports_its_progress_ends_at_its_own_pace():
    """Issue 40.2 (and 40.1: use what is known): half its planned passes done after 10
    minutes, a job ends about 10 minutes later — whatever its like ran, and even with no
    earlier job of its owner to go by (no longer "unknown"). Its deadline still bounds it."""
    gpu = Vec(gpu=1, jobs=1)
    for run in (NOTHING_KNOWN, estimate([(("x",), 7200.0)] * 5, ("x",))):
        half = running(1, 1, gpu, began=0.0, run=run, now=600.0, name="first", progress=0.5)
        assert (half.ends, half.ends_low, half.ends_high, half.unknown) == (
            1200, 900, 1800, "")
        pool = Pool(capacity=Limit(gpu=1), running=[half],
                    waiting=[Waiting(2, 2, gpu, submitted=600.0)])
        assert forecast(pool, 600.0)[2] == Forecast(1200, 900, 1800)
    bounded = running(1, 1, gpu, began=0.0, run=NOTHING_KNOWN, now=600.0, deadline=1000,
                      progress=0.5)
    assert (bounded.ends, bounded.ends_high) == (1000, 1000)
    # All its work done: it ends any moment.
    assert running(1, 1, gpu, began=0.0, run=NOTHING_KNOWN, now=600.0, progress=1.0).ends == 600
    # Nothing done yet tells no pace: as before.
    assert running(1, 1, gpu, began=0.0, run=NOTHING_KNOWN, now=600.0, progress=0.0).unknown


def test_an_estimate_is_the_mean_of_its_like_and_its_range_all_of_them():
    """Issue 40.2: a start comes after the run times ahead of it add up, so each is estimated
    by the mean of its like (a median leaves the sum early: a few long runs weigh in the sum,
    not in the median), and its range spans them all: of 20 runs, it holds the next about 9
    times in 10 (the 10th-90th percentile held 8)."""
    kind = ("sweep", 1, 0, 1)
    found = estimate([(kind, float(s)) for s in (600, 600, 600, 600, 1800)], kind)
    assert (found.seconds, found.low, found.high) == (840, 600, 1800)
    # Four such jobs, one after another on one GPU: the fifth starts after their sum.
    pool = Pool(capacity=Limit(gpu=1), waiting=[
        Waiting(i, 1, Vec(gpu=1, jobs=1), submitted=float(i), run=found) for i in range(1, 6)])
    assert forecast(pool, 0.0)[5] == Forecast(4 * 840, 4 * 600, 4 * 1800)


def test_estimates_come_from_the_same_kind_of_job():
    need = Vec(2000, GiB, 1, 1)
    history = [(shape("resnet-3", need), 600.0), (shape("resnet-4", need), 660.0),
               (shape("resnet-5", need), 640.0), (shape("bert", need), 9000.0)]
    found = estimate(history, shape("resnet-6", need))
    assert (found.seconds, found.low, found.high) == (pytest.approx(633.3, abs=0.1), 600, 660)
    assert estimate(history, shape("resnet-6", need), deadline=300).seconds == 300
    assert estimate([], shape("new", need)).seconds == 3600  # nothing known: an hour
    assert [name_stem(n) for n in ("sweep-lr-17", "bert3", "fit-a-line", "run-v2")] == [
        "sweep-lr", "bert", "fit-a-line", "run"]


def test_the_readmes_worked_example():
    """docs/admin/scheduling.md: dc1 (64 CPUs, 512Gi, 16 GPUs), group vision (weight 2, 12 GPUs:
    alice, bob) and carol alone."""
    sweeps = [Waiting(i, 1, Vec(8000, 32 * GiB, 2, 1), submitted=i, name=f"sweep-lr-{i}",
                      run=Estimate(1800, 1200, 2400)) for i in range(1, 9)]
    bert = Waiting(20, 3, Vec(16000, 64 * GiB, 8, 1), submitted=20, name="bert-large",
                   run=Estimate(7200, 6000, 9000))
    detr = Waiting(30, 2, Vec(8000, 32 * GiB, 4, 1), submitted=30, name="detr",
                   run=Estimate(3600, 3000, 4000))
    pool = Pool(capacity=Limit(cpu=64000, memory=512 * GiB, gpu=16),
                quotas={user: Limit(gpu=16, jobs=10) for user in (1, 2, 3)},
                teams={1: 7, 2: 7}, team_quotas={7: Limit(gpu=12)}, team_weights={7: 2},
                team_names={7: "vision"}, names={1: "alice", 2: "bob", 3: "carol"},
                waiting=[*sweeps, bert, detr])
    plan = schedule(pool, 0)
    assert plan.admit == [1, 20, 30, 2]  # the table's steps 1-4, in order
    assert plan.reasons[3].message == ("waiting for the datacenter's capacity: gpu 2 asked, "
                                       "0 of 16 free")
    assert plan.reasons[4].message == "waiting behind job sweep-lr-3"
    assert plan.reserved == {3: 1800}
    predicted = forecast(pool, 0)
    assert (predicted[3].start, predicted[3].low, predicted[3].high) == (1800, 1200, 2400)
    assert [predicted[i].start for i in range(4, 9)] == [1800, 3600, 3600, 3600, 3600]
    alone = Pool(**{**pool.__dict__, "waiting": sweeps})  # without carol and bob
    plan = schedule(alone, 0)
    assert len(plan.admit) == 6  # 12 GPUs: the group's quota
    assert plan.reasons[7].message == ("waiting for group vision's quota: gpu 2 asked, 0 of "
                                       "12 free")


# --- preemption (issue 37 point 5) --------------------------------------------------------------

def gpu_run(id_, owner, gpus, began, saved=None):
    return Running(id_, owner, Vec(gpus * 1000, 0, gpus, 1), ends=1e6, began=began, saved=saved)


def test_preemption_stops_the_fewest_jobs_that_lose_the_least_gpu_time():
    """16 GPUs; alice holds all in four jobs, bob's 6-GPU job waited past preempt_after.
    Stopping a1 (2 GPUs, saved a minute ago) is cheapest but frees too little: with a2 (4
    GPUs, saved 5 min ago: 20 GPU-minutes) it makes room; a3 and a4 lose more."""
    now = 3600.0
    pool = Pool(capacity=Limit(gpu=16), preempt_after=600, running=[
        gpu_run(1, 1, 2, began=0, saved=now - 60),       # 2 GPU-minutes
        gpu_run(2, 1, 4, began=0, saved=now - 300),      # 20
        gpu_run(3, 1, 6, began=now - 600),               # none saved: 60, since it began
        gpu_run(4, 1, 4, began=0, saved=now - 1800)],    # 120
        waiting=[job(9, 2, cpu=6, gpu=6, at=now - 700)])
    plan = schedule(pool, now)
    assert plan.preempt[9].victims == (1, 2)
    assert plan.preempt[9].at == pytest.approx(now - 700 + 9e-3 + 600)
    assert plan.preempt[9].lost == {1: (2.0, 2.0), 2: (20.0, 20.0)}
    assert lost_minutes(pool.running[2], now) == (60.0, 60.0)
    assert plan.reasons[9].message.endswith(
        "; would start by preemption at 1970-01-01 00:58 UTC, after preempt_after (10 min) "
        "of waiting")


def test_preemption_only_for_a_user_below_their_share_and_only_of_those_over_theirs():
    now = 3600.0
    running = [gpu_run(1, 1, 4, began=0), gpu_run(2, 2, 4, began=0),
               gpu_run(3, 1, 4, began=0), gpu_run(4, 2, 4, began=0)]
    # alice and bob hold half each: carol is below, they are over (three users: 1/3 each).
    pool = Pool(capacity=Limit(gpu=16), preempt_after=60, running=running,
                waiting=[job(8, 1, cpu=1, gpu=1), job(9, 3, cpu=1, gpu=1)])
    plan = schedule(pool, now)
    assert set(plan.preempt) == {9}  # alice's own job is not started by preemption
    assert "preemption" not in plan.reasons[8].message
    # Without the setting, nothing; a job not yet running is never a victim.
    assert not schedule(Pool(**{**pool.__dict__, "preempt_after": None}), now).preempt
    starting = [Running(r.id, r.owner, r.held, r.ends) for r in running]
    assert not schedule(Pool(**{**pool.__dict__, "running": starting}), now).preempt


def test_preemption_never_only_swaps_who_is_over_their_share():
    """alice's one job holds all 16 GPUs: stopping it for bob's 16-GPU job would leave her
    below him (and her job, first at equal shares, would start again). With a second job
    of hers, bob's 8-GPU job may take one: she keeps more than he then holds."""
    now = 3600.0
    alone = Pool(capacity=Limit(gpu=16), preempt_after=60, running=[gpu_run(1, 1, 16, began=0)],
                 waiting=[job(9, 2, cpu=1, gpu=16)])
    assert not schedule(alone, now).preempt
    two = Pool(capacity=Limit(gpu=24), preempt_after=60,
               running=[gpu_run(1, 1, 16, began=0), gpu_run(2, 1, 8, began=0)],
               waiting=[job(9, 2, cpu=1, gpu=8)])
    assert schedule(two, now).preempt[9].victims == (2,)  # alice keeps 16 of 24, bob 8
    half = Pool(**{**two.__dict__, "waiting": [job(9, 2, cpu=1, gpu=12)]})
    assert not schedule(half, now).preempt  # room for 12 takes both: she would keep none
