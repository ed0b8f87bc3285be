"""PaddleJob and elastic trainers: ``trainers=(MIN, MAX)`` or ``"MIN:MAX"``, sent as the API
takes it, and the core's rules on a range applied before anything is sent."""

from __future__ import annotations

import pytest

from paddlecloud_sdk import PaddleJob
from paddlecloud_sdk.errors import JobSpecError

DATASET = "/pfs/dc1/home/alice/data/part-*"


def job(**fields) -> PaddleJob:
    return PaddleJob(job_name="el", entry_point="python train.py",
                     trainer_package="/pfs/dc1/home/alice/pkg", **fields)


@pytest.mark.parametrize("trainers", [(2, 4), "2:4", [2, 4]])
def test_a_range_is_sent_as_min_max(trainers):
    spec = job(trainers=trainers, pservers=1, dataset=DATASET, trainers_lost_limit=3,
               trainers_below_min_seconds=60).spec()
    assert (spec["trainers"], spec["trainers_lost_limit"],
            spec["trainers_below_min_seconds"]) == ("2:4", 3, 60)
    assert job(trainers=3).spec()["trainers"] == 3


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"trainers": (2, 4)}, "trainers", "a range (2:4) needs parameter servers"),
    ({"trainers": "2:4", "pservers": 1}, "trainers", "a range (2:4) needs a dataset"),
    ({"trainers": (4, 2), "pservers": 1, "dataset": DATASET}, "trainers",
     "MIN must be at most MAX, not 4:2"),
    ({"trainers": "two:4"}, "trainers", "neither a whole number nor a range"),
    ({"trainers": 3, "trainers_lost_limit": 1}, "trainers_lost_limit",
     "only with a range of trainers"),
    ({"trainers": (2, 4), "pservers": 1, "dataset": DATASET,
      "trainers_below_min_seconds": 0}, "trainers_below_min_seconds", "must be between 1"),
])
def test_the_cores_rules_name_the_parameter(fields, field, says):
    with pytest.raises(JobSpecError) as raised:
        job(**fields)
    assert any(says in message for message in raised.value.fields[field]), raised.value.fields
