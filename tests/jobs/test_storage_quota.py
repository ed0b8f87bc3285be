"""What jobs write counts against the storage quota (issue 33, item 7).

A job writes into its owner's home behind the file service's back. Its home is measured while
it runs (``homes_measure``, every PADDLECLOUD_PFS_RUNNING_USAGE_INTERVAL) and as it ends; a
home over its quota then takes no upload, no submission and starts no waiting job, each
refused or held with the reason, until files are removed. Sparse files count by their
apparent size, and a package's sparse file stays sparse in the job's copy under ``var/``.

Real jobs: submitted over HTTP, started by a Celery worker, run as local replicas (in a
bubblewrap sandbox where the machine has one).
"""

from __future__ import annotations

import os
import textwrap

import pytest

from accounts.models import Quota
from jobs.models import Job
from scheduling.tasks import homes_measure
from tests.factories import package_write
from tests.pfs.test_api import Pfs, check_error
from tests.polling import wait

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

WRITER = textwrap.dedent("""\
    import os, time

    home = os.environ["PADDLE_PFS_HOME"]
    with open(os.path.join(home, "big.bin"), "wb") as out:
        out.write(os.urandom(1 << 20))  # 1 MiB, ten times the quota
    with open(os.path.join(home, "sparse.bin"), "wb") as out:
        out.truncate(1 << 40)  # 1 TiB of holes
    while not os.path.exists(os.path.join(home, "go")):
        time.sleep(0.1)
    """)


@pytest.fixture
def pfs(live_portal) -> Pfs:
    pfs = Pfs(live_portal)
    yield pfs
    pfs.http.close()


def job(name: str) -> Job:
    return Job.objects.get(name=name)


def test_a_job_writing_past_the_quota_stops_new_uploads_submissions_and_starts(
        live_portal, pfs, celery_worker):
    home = live_portal.home
    Quota.objects.update_or_create(user=live_portal.user, datacenter=live_portal.datacenter,
                                   defaults={"storage": 100 * KiB, "jobs": 1})
    package_write(home, WRITER)
    assert live_portal.job_post("writer").status_code == 201
    wait(lambda: (home / "sparse.bin").exists(), timeout=60, message="the job to write")
    waiting = live_portal.job_post("waiting")  # accepted: nothing measured since the write
    assert waiting.status_code == 201, waiting.text

    # While it runs, its home is measured (as celery beat has it every minute): apparent
    # sizes, the sparse file's terabyte included.
    homes_measure.delay()
    wait(lambda: pfs.usage()["used"] >= TiB, timeout=30, message="the home to be measured")
    assert TiB + MiB < pfs.usage()["used"] < TiB + MiB + 100 * KiB  # with its package, logs

    body = check_error(pfs.put("more.txt", b"z"), 403, "quota_exceeded", "size")
    assert "over your storage quota of 100Ki" in body["message"], body
    body = check_error(live_portal.job_post("third"), 403, "quota_exceeded", "storage")
    assert "your home holds 1.0Ti, over" in body["message"], body
    assert "over your storage quota of 100Ki" in body["message"], body
    assert not Job.objects.filter(name="third").exists()

    # It ends; the job that waited for its place does not start while the home is over.
    (home / "go").touch()
    wait(lambda: job("writer").state == "succeeded", timeout=60, message="the writer to end")
    wait(lambda: "waiting for storage" in job("waiting").state_reason, timeout=30,
         message="the waiting job to be held for storage")
    assert job("waiting").state == "queued"
    assert "over your storage quota of 100Ki" in job("waiting").state_reason

    # Files removed: uploads are taken again, and the waiting job starts at once (it writes
    # and, "go" being there, ends).
    for name in ("big.bin", "sparse.bin"):
        assert pfs.rm(name).status_code == 200
    assert pfs.put("more.txt", b"z").status_code == 201
    wait(lambda: job("waiting").state == "succeeded", timeout=60,
         message="the waiting job to start and end")


CHECKER = textwrap.dedent("""\
    import os, sys

    st = os.stat("holes.bin")
    print("apparent", st.st_size, "on disk", st.st_blocks * 512, flush=True)
    sys.exit(0 if st.st_size == 1 << 30 and st.st_blocks * 512 < (1 << 20) else 3)
    """)


def test_a_sparse_file_in_a_package_stays_sparse_in_the_jobs_copy(live_portal, celery_worker,
                                                                  settings):
    home = live_portal.home
    package_write(home, CHECKER)
    with open(home / "pkg" / "holes.bin", "wb") as out:
        out.truncate(GiB)
        out.seek(GiB // 2)
        out.write(b"data in the middle")
    Quota.objects.update_or_create(user=live_portal.user, datacenter=live_portal.datacenter,
                                   defaults={"storage": 3 * GiB})  # the package, its snapshot

    assert live_portal.job_post("sparse").status_code == 201
    snapshot = home / "jobs" / "sparse" / "package" / "holes.bin"  # taken at submission
    assert os.stat(snapshot).st_size == GiB and os.stat(snapshot).st_blocks * 512 < MiB
    wait(lambda: job("sparse").state in ("succeeded", "failed"), timeout=60,
         message="the job to end")

    log = (home / "jobs" / "sparse" / "output" / "node_0" / "train.log").read_text()
    assert job("sparse").state == "succeeded", log
    assert f"apparent {GiB} on disk" in log, log
    copies = list((settings.VAR_DIR / "jobs").glob("*/pkg/holes.bin"))
    for copy in copies:  # the copy kept under var/ (until the job is cleaned up)
        assert os.stat(copy).st_blocks * 512 < MiB
        with open(copy, "rb") as data:
            data.seek(GiB // 2)
            assert data.read(18) == b"data in the middle"


def test_a_package_whose_snapshot_would_not_fit_the_quota_is_refused_copying_nothing(
        live_portal):
    """A job's package is copied into its directory at submission (issue 39), and the copy
    counts: one that would bring the home over its quota is refused naming the package."""
    home = live_portal.home
    package_write(home, "print('hi')\n")
    (home / "pkg" / "weights.bin").write_bytes(os.urandom(300 * KiB))
    Quota.objects.update_or_create(user=live_portal.user, datacenter=live_portal.datacenter,
                                   defaults={"storage": 500 * KiB})  # the package, not twice
    body = check_error(live_portal.job_post("big"), 403, "quota_exceeded", "package")
    size = 300 * KiB + len("print('hi')\n")
    assert body["message"].startswith(f"package: its package's snapshot of {size} would bring "
                                      f"your home to {2 * size}, over your storage quota"), body
    assert not Job.objects.filter(name="big").exists()
    assert not (home / "jobs" / "big").exists()  # nothing copied, nothing made
