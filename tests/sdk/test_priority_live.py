"""The SDK and the scheduling model against a live portal: a job's priority, the dry run's
answer (would it start now, or queue where, why and until when), and a queued job's predicted
start. Jobs are admitted, never started (held tasks): no process runs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.services import quota_set
from paddlecloud_sdk import PaddleJob
from paddlecloud_sdk.errors import JobSpecError
from tests.factories import PACKAGE, package_write

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_cpu(live_portal, sdk_config, held_tasks):
    """alice's quota holds one CPU; her package is in PFS."""
    quota_set(None, live_portal.datacenter, live_portal.user, cpu=1000, jobs=10, queued=10)
    package_write(live_portal.home, "print('hello')\n")
    return live_portal


def test_a_high_priority_job_previewed_submitted_and_predicted(one_cpu, tmp_path):
    holder = PaddleJob(job_name="holder", entry_point="python train.py",
                       trainer_package=PACKAGE, deadline_seconds=1800)
    assert holder.preview() == {"starts": "now", "position": None, "reason": "",
                                "predicted_start": None}
    assert holder.submit().state == "starting"  # admitted: it holds the CPU for 30 min at most
    assert holder.info["priority"] == "normal"

    PaddleJob(job_name="normal-one", entry_point="python train.py",
              trainer_package=PACKAGE).submit()
    urgent = PaddleJob(job_name="urgent", entry_point="python train.py",
                       trainer_package=PACKAGE, priority="High")
    assert urgent.spec()["priority"] == "high"
    answer = urgent.preview()
    assert answer["starts"] == "queued" and answer["position"] == 1  # before normal-one
    assert answer["reason"] == "waiting for quota: cpu 1 asked, 0 of 1 free"
    assert set(answer["predicted_start"]) == {"at", "earliest", "latest", "unknown"}

    urgent.submit()
    assert urgent.state == "queued" and urgent.info["priority"] == "high"
    assert urgent.info["queue_position"] == 1
    predicted = urgent.predicted_start()
    assert predicted.earliest <= predicted.at <= predicted.latest
    assert 25 * 60 < (predicted.at - datetime.now(UTC)).total_seconds() <= 30 * 60
    assert PaddleJob.attach("urgent").priority == "high"
    assert holder.predicted_start() is None  # it does not wait

    # A local package is previewed before anything is uploaded.
    local = tmp_path / "local"
    local.mkdir()
    (local / "train.py").write_text("print('hello')\n")
    answer = PaddleJob(job_name="local", entry_point="python train.py",
                       trainer_package=local, priority="low").preview()
    assert (answer["starts"], answer["position"]) == ("queued", 3)
    assert not (one_cpu.home / "jobs" / "local").exists()


def test_a_priority_that_does_not_exist_is_refused_before_anything_is_sent():
    with pytest.raises(JobSpecError) as caught:
        PaddleJob(job_name="fit", entry_point="python train.py", trainer_package=PACKAGE,
                  priority="urgent")
    assert caught.value.fields == {"priority": ["one of high, normal, low, not 'urgent'"]}
