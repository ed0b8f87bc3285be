"""bench/eta.py (issue 22): the replay of a team's week runs and its figures are sane, on the
first 200 jobs of the committed trace; and the committed trace is exactly what its seeded
generator (bench/eta_trace.py) makes, so it cannot drift from the code that documents it.

Pure: no database, no service (the scheduling model and the bench only)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import eta  # noqa: E402
import eta_trace  # noqa: E402

JOBS = 200


def test_the_committed_trace_is_what_the_generator_makes():
    committed = eta_trace.TRACE.read_text()
    assert committed == eta_trace.dumps(eta_trace.make_trace(eta_trace.SEED)), (
        "bench/traces/team-week.json differs from bench/eta_trace.py's output: write it anew "
        "with `.venv/bin/python bench/eta_trace.py`")
    data = json.loads(committed)
    assert len(data["jobs"]) == eta_trace.JOBS
    assert [j["id"] for j in data["jobs"]] == list(range(1, eta_trace.JOBS + 1))
    arrivals = [j["arrival"] for j in data["jobs"]]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] >= 0 and arrivals[-1] < data["week_seconds"]


@pytest.fixture(scope="module")
def replayed():
    replay = eta.Replay(eta.load(eta_trace.TRACE, JOBS))
    replay.run()
    return replay, eta.figures(replay)


def test_every_job_starts_and_is_predicted(replayed):
    replay, f = replayed
    assert f["jobs"] == f["started"] == JOBS
    assert f["never"] == 0 and f["not_started"] == []
    assert not replay.waiting and not replay.running
    for record in replay.records.values():
        assert record.start is not None and record.start >= record.job.arrival
        assert set(record.predicted) == set(eta.PREDICTORS)
        assert record.predicted["now"] == record.job.arrival
        predicted = record.predicted["forecast"]
        if record.unknown:  # nothing told when what it waited for would end: no time given
            assert predicted is None and record.unknown.startswith("it waits for room that job")
            continue
        assert predicted is not None and predicted >= record.job.arrival
        assert record.low <= predicted <= record.high


def test_the_figures_are_sane(replayed):
    _, f = replayed
    assert 0 < f["waited"] <= JOBS  # the first Monday morning is busy: some jobs wait
    for p in eta.PREDICTORS:
        assert f[p]["ratio"] is not None and f[p]["ratio"] >= 0
        assert f[p]["unpredicted"] == 0
    # "now" predicts no wait at all: its error is the wait itself.
    assert f["now"]["mae_waited_s"] == f["wait_median_waited_s"]
    assert math.isclose(f["now"]["ratio"], 1.0)
    assert 0 <= f["forecast"]["in_range_all"] <= 1
    # The first jobs of each user have nothing to go by: what waits for them is "unknown".
    unknown = sum(bool(r.unknown) for r in replayed[0].records.values())
    assert f["forecast"]["unknown"] == unknown < JOBS / 2
    assert f["forecast_ms"]["calls"] == JOBS
    text = eta.report(f)
    assert "<= 50 %" in text and ("met" in text or "missed" in text)


def test_gpu_shares_sum_to_one(replayed):
    replay, f = replayed
    users = f["users"]
    assert math.isclose(sum(u["share"] for u in users), 1.0)
    assert math.isclose(sum(u["fair_share"] for u in users), 1.0)
    # The GPU time got is what the started jobs ran, GPU by GPU.
    ran = sum(r.job.need.gpu * r.job.duration for r in replay.records.values()) / 3600
    assert math.isclose(f["gpu_hours"], ran)
    # Fair shares never give out more than the capacity.
    assert f["fair_gpu_hours"] <= replay.trace.capacity.gpu * f["span_hours"] + 1e-6


def test_water_fill_is_weighted_max_min():
    fair = eta.water_fill(16, {1: 2, 2: 20, 3: 20}, {1: 1.0, 2: 2.0, 3: 1.0})
    assert fair[1] == 2  # wants less than its share: gets all it wants
    assert math.isclose(fair[2], 28 / 3) and math.isclose(fair[3], 14 / 3)  # the rest, 2:1
    assert eta.water_fill(16, {1: 0}, {}) == {}
