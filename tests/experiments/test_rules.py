"""The sweeps' pure rules (paddlecloud_core.experiments): what a sweep may say, the settings of
each trial, and when a running trial is stopped early."""

from __future__ import annotations

import pytest

from paddlecloud_core.experiments import (
    SweepProblems,
    asha_rungs,
    best_of,
    stop_decision,
    sweep_check,
    trial_count,
    trial_job,
    trial_settings,
)
from paddlecloud_core.spec import name_problem

BASE = {"name": "lr", "job": {"entry": "python train.py", "env": {"A": "1"}},
        "space": {"env.LEARNING_RATE": [0.1, 0.01], "arg.layers": [2, 3, 4]}}


def problems(**changes) -> dict[str, str]:
    data = {**BASE, **changes}
    with pytest.raises(SweepProblems) as caught:
        sweep_check({k: v for k, v in data.items() if v is not None}, name_problem=name_problem)
    return caught.value.problems


def test_a_grid_is_every_combination_in_order_and_each_trial_its_job():
    sweep = sweep_check(BASE, name_problem=name_problem)
    assert (sweep.method, trial_count(sweep), sweep.max_trials) == ("grid", 6, 6)
    settings = [trial_settings(sweep, n) for n in range(1, 7)]
    assert settings[0] == {"arg.layers": 2, "env.LEARNING_RATE": 0.1}
    assert settings[-1] == {"arg.layers": 4, "env.LEARNING_RATE": 0.01}
    assert len({tuple(s.items()) for s in settings}) == 6
    job = trial_job(sweep, 3, settings[2])
    assert job == {"name": "lr-3", "entry": "python train.py --layers=3",
                   "env": {"A": "1", "LEARNING_RATE": "0.1"}}
    # max_trials below the grid's size: its first ones
    assert trial_count(sweep_check({**BASE, "max_trials": 4})) == 4


def test_random_trials_are_drawn_from_the_seed_and_the_number():
    data = {**BASE, "method": "random", "seed": 7, "max_trials": 20,
            "space": {"env.LR": {"min": 1e-4, "max": 1e-1, "log": True},
                      "env.BATCH": {"min": 8, "max": 64, "integer": True},
                      "env.OPT": ["sgd", "adam"]}}
    sweep = sweep_check(data)
    drawn = [trial_settings(sweep, n) for n in range(1, 21)]
    assert drawn == [trial_settings(sweep_check(data), n) for n in range(1, 21)]
    assert drawn != [trial_settings(sweep_check({**data, "seed": 8}), n) for n in range(1, 21)]
    assert all(1e-4 <= d["env.LR"] <= 1e-1 and 8 <= d["env.BATCH"] <= 64
               and isinstance(d["env.BATCH"], int) and d["env.OPT"] in ("sgd", "adam")
               for d in drawn)
    # log-uniform: about as many below 1e-2.5 as above
    assert 4 <= sum(d["env.LR"] < 10 ** -2.5 for d in drawn) <= 16


def test_each_refusal_names_its_field_and_the_rule():
    assert "unknown method 'bayes'" in problems(method="bayes")["method"]
    assert "from 1 to" in problems(max_trials=0)["max_trials"]
    assert "from 1 to" in problems(max_trials=-3)["max_trials"]
    assert "required" in problems(method="random")["max_trials"]
    assert "space" in problems(space={})
    assert "env.NAME" in problems(space={"LR": [1]})["space.LR"]
    assert "1 to" in problems(space={"env.LR": []})["space.env.LR"]
    assert "not ranges" in problems(space={"env.LR": {"min": 0, "max": 1}})["space.env.LR"]
    assert "A < B" in problems(method="random", max_trials=3,
                               space={"env.LR": {"min": 1, "max": 1}})["space.env.LR"]
    assert "parallel" in problems(parallel=0)
    assert "leave it out" in problems(job={"name": "x", "entry": "e"})["job.name"]
    assert "required" in problems(job=None)["job"]
    assert "metric" in problems(stopping={"rule": "median"})["objective"]
    assert "unknown rule" in problems(objective={"metric": "loss"},
                                      stopping={"rule": "hope"})["stopping.rule"]
    assert "upper" not in problems(name="LR")["name"] and "lower-case" in \
        problems(name="LR")["name"]
    assert "unknown field" in problems(trials=3)["trials"]
    assert "only with method asha" in problems(asha={"min_steps": 5})["asha"]
    assert "2 to 100" in problems(method="asha", max_trials=9, objective={"metric": "loss"},
                                  asha={"reduction_factor": 1})["asha.reduction_factor"]


def test_a_checked_sweep_checks_again_as_stored():
    data = {**BASE, "objective": {"metric": "loss"}, "stopping": {"grace_steps": 5}}
    sweep = sweep_check(data)
    assert sweep_check(sweep.as_dict) == sweep
    assert (sweep.rule, sweep.grace_steps, sweep.min_trials) == ("median", 5, 3)


MEDIAN = sweep_check({**BASE, "objective": {"metric": "loss", "mode": "minimize"},
                      "stopping": {"rule": "median", "grace_steps": 3, "min_trials": 3}})


def curve(*values, start=1):
    return [(step, value) for step, value in enumerate(values, start)]


GOOD = [curve(5, 3, 2, 1, 0.5), curve(6, 3, 1, 0.8, 0.4), curve(5, 2, 1, 0.7, 0.3)]


def test_the_median_rule_stops_a_trial_worse_than_the_median_of_the_others():
    why = stop_decision(MEDIAN, curve(9, 9, 8.9, 8.8), GOOD)
    # the others' running means at step 4: 2.75, 2.7, 2.175 → median 2.7
    assert why == ("stopped early: loss 8.8 (its best) at step 4 above the median 2.7 of 3 "
                   "other trials at that step")
    assert stop_decision(MEDIAN, curve(5, 3, 1.5, 0.9), GOOD) is None  # better: goes on


def test_the_median_rule_waits_for_its_grace_and_enough_trials():
    assert stop_decision(MEDIAN, curve(9, 9), GOOD) is None  # step 2 < grace 3
    assert stop_decision(MEDIAN, curve(9, 9, 9, 9), GOOD[:2]) is None  # 2 < min_trials 3
    # others that have not reached its step do not count
    assert stop_decision(MEDIAN, curve(9, 9, 9, 9, 9, 9), GOOD) is None
    assert stop_decision(MEDIAN, [], GOOD) is None


def test_maximize_turns_the_rule_around():
    sweep = sweep_check({**BASE, "objective": {"metric": "acc", "mode": "maximize"},
                         "stopping": {"grace_steps": 1, "min_trials": 2}})
    others = [curve(0.5, 0.6, 0.7), curve(0.4, 0.6, 0.8)]
    assert "below the median" in stop_decision(sweep, curve(0.1, 0.1, 0.2), others)
    assert stop_decision(sweep, curve(0.5, 0.7, 0.9), others) is None


ASHA = sweep_check({**BASE, "method": "asha", "max_trials": 9, "objective": {"metric": "loss"},
                    "asha": {"min_steps": 2, "reduction_factor": 3},
                    "space": {"env.LR": {"min": 0.001, "max": 0.1, "log": True}}})


def test_asha_rungs_grow_by_the_reduction_factor():
    assert asha_rungs(ASHA, 1) == []
    assert asha_rungs(ASHA, 20) == [2, 6, 18]


def test_asha_keeps_the_best_third_at_each_rung():
    others = [curve(5, 1), curve(5, 2), curve(5, 3), curve(5, 4), curve(5, 5)]
    # six trials at rung 2: the best 2 go on
    assert stop_decision(ASHA, curve(5, 1.5), others) is None
    assert "not among the best 2 of 6 trials" in stop_decision(ASHA, curve(5, 2.5), others)
    # the first trial at a rung goes on; between rungs nothing is decided anew
    assert stop_decision(ASHA, curve(5, 9), []) is None
    assert stop_decision(ASHA, curve(5, 1.5, 9, 9), others) is None


def test_the_best_is_the_best_value_any_trial_reported():
    assert best_of(MEDIAN, {"a": curve(3, 2), "b": curve(4, 1.5, 9)}) == ("b", 1.5)
    assert best_of(MEDIAN, {}) is None
