"""``PaddleJob(...).submit()`` sends an Idempotency-Key and sends the submission again, with
it, when the answer is lost: one job, the job the first request made."""

from __future__ import annotations

import pytest

from jobs.models import Job
from paddlecloud_sdk import PaddleJob
from tests.factories import PACKAGE
from tests.outages import TcpProxy

from .conftest import write_config

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_submission_whose_answer_was_lost_is_one_job(live_portal, sdk_config, package):
    proxy = TcpProxy(live_portal.port, drop_answer=b"Idempotency-Key")
    proxy.start()
    try:
        write_config(sdk_config, proxy.url)
        job = PaddleJob(job_name="fit", entry_point="python train.py",
                        trainer_package=PACKAGE).submit()
    finally:
        proxy.stop()
    assert proxy.dropped == 1
    assert job.info["name"] == "fit"
    assert Job.objects.filter(name="fit").count() == 1
