"""``-datacenter auto``'s choice and its words (paddlecloud_core.placement): the pure function
paddlectl, the SDK and the dashboard share."""

from datetime import UTC, datetime, timedelta

import pytest

from paddlecloud_core.placement import NowherePlaced, Option, placement_choose, spec_in

NOW = datetime(2026, 11, 28, 22, 0, tzinfo=UTC)


def test_the_earliest_known_start_wins_and_the_others_are_named():
    chosen, why = placement_choose([
        Option("datacenter1", start=NOW + timedelta(minutes=40)),
        Option("datacenter2", start=NOW + timedelta(minutes=2)),
        Option("datacenter3", refused="package: /pfs/datacenter3/home/alice/pkg not found"),
    ], NOW)
    assert chosen == "datacenter2"
    assert why == ("placed in datacenter2: start predicted in 2 min (datacenter1: in 40 min; "
                   "datacenter3: package: /pfs/datacenter3/home/alice/pkg not found)")


def test_a_start_now_beats_a_later_one_and_an_unknown_ranks_after_any_known():
    chosen, why = placement_choose([
        Option("datacenter1", unknown="no history of the jobs it waits for"),
        Option("datacenter2", start=NOW + timedelta(hours=3)),
    ], NOW)
    assert chosen == "datacenter2"
    assert why == ("placed in datacenter2: start predicted in 3 h (datacenter1: start "
                   "unknown (no history of the jobs it waits for))")
    chosen, why = placement_choose([Option("datacenter1", start=NOW + timedelta(hours=3)),
                                    Option("datacenter2", start=NOW)], NOW)
    assert (chosen, why) == ("datacenter2", "placed in datacenter2: starts now "
                                            "(datacenter1: in 3 h)")


def test_ties_go_to_the_first_in_the_callers_order():
    options = [Option("datacenter2", start=NOW), Option("datacenter1", start=NOW)]
    assert placement_choose(options, NOW)[0] == "datacenter2"
    unknown = [Option("datacenter2", unknown="why"), Option("datacenter1", unknown="why")]
    assert placement_choose(unknown, NOW)[0] == "datacenter2"


def test_only_one_datacenter_says_so():
    assert placement_choose([Option("datacenter1", start=NOW + timedelta(minutes=10))], NOW) \
        == ("datacenter1", "placed in datacenter1, the only datacenter to choose from: start "
                           "predicted in 10 min")


def test_nowhere_lists_every_reason():
    with pytest.raises(NowherePlaced) as caught:
        placement_choose([Option("datacenter1", refused="package: not found"),
                          Option("datacenter2", refused="cannot reach http://x")], NOW)
    assert str(caught.value) == ("no datacenter can take the job (datacenter1: package: not "
                                 "found; datacenter2: cannot reach http://x)")


def test_a_jobs_pfs_paths_are_looked_for_at_the_same_place_in_each_datacenter():
    body = {"name": "fit", "package": "/pfs/datacenter1/home/alice/pkg",
            "dataset": "/pfs/datacenter1/public/mnist/*.recordio", "entry": "/pfs/x"}
    assert spec_in(body, "datacenter2") == {
        **body, "package": "/pfs/datacenter2/home/alice/pkg",
        "dataset": "/pfs/datacenter2/public/mnist/*.recordio"}
    assert spec_in({"package": "pkg"}, "datacenter2") == {"package": "pkg"}
