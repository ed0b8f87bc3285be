"""``paddlecloud_sdk.Sweep`` against a live portal: checked before anything is sent, then
submitted, followed and killed as one object; its trials run by the Celery worker."""

from __future__ import annotations

import time

import pytest

from jobs.models import Job
from paddlecloud_sdk import PaddleJob, Sweep
from paddlecloud_sdk.errors import ApiError, JobSpecError
from tests.factories import HOME

pytestmark = pytest.mark.django_db(transaction=True)

TRAIN = """\
import os, time
from paddlecloud_sdk import report
report(step=1, loss=float(os.environ["LR"]))
time.sleep(600)
"""


@pytest.fixture
def reaper():
    """Leaves no trial running, whatever becomes of the test."""
    yield
    from jobs.backends import backend_for

    for job in Job.objects.select_related("datacenter", "owner"):
        backend_for(job.datacenter).stop(job, list(job.replicas.all()), grace=1)


def test_a_sweep_from_the_sdk(live_portal, sdk_config, celery_worker, reaper, tmp_path):
    pkg = live_portal.home / "waiter"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAIN)
    base = PaddleJob(job_name="lr", entry_point="python train.py",
                     trainer_package=f"{HOME}/waiter")
    with pytest.raises(JobSpecError) as caught:
        Sweep("lr", base, {"env.LR": [1, 2]}, method="bayes", max_trials=0)
    assert set(caught.value.fields) == {"method", "max_trials"}
    local = PaddleJob(job_name="lr", entry_point="python train.py", trainer_package=tmp_path)
    with pytest.raises(JobSpecError, match="a /pfs/ directory"):
        Sweep("lr", local, {"env.LR": [1, 2]})
    assert not Job.objects.exists()

    sweep = Sweep("lr", base, {"env.LR": [0.5, 0.25, 0.125]}, parallel=2,
                  objective={"metric": "loss"}).submit()
    assert [t["job"] for t in sweep.info["trials"]] == ["lr-1", "lr-2"]
    deadline = time.monotonic() + 60
    while (sweep.status()["best"] or {}).get("value") != 0.25:
        assert time.monotonic() < deadline, sweep.info
        time.sleep(0.2)
    assert sweep.info["best"]["settings"] == {"env.LR": 0.25}
    assert sweep.kill()["state"] == "killed"
    assert Job.objects.filter(state="killed").count() == 2
    with pytest.raises(ApiError) as caught:
        Sweep("lr", base, {"env.LR": [1]}).submit()
    assert set(caught.value.fields) == {"name"}
