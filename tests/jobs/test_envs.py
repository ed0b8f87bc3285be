"""Environments keyed by their contents (jobs/backends/local/envs.py, issue 19): a package's
``requirements.txt`` is installed once per datacenter and digest, by real uv from PyPI in a
real sandbox, and shared; a real Celery worker runs the jobs. Hit, miss, single flight, a
failure not cached, LRU eviction that never takes an environment a live job uses."""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connection

from jobs import engine
from jobs.backends.local import envs
from jobs.backends.local.backend import job_dir
from jobs.files import output_dir
from jobs.models import Job
from jobs.services import job_kill

TRAINER = """\
import os, time
import six
print("six", six.__version__, "from", six.__file__, flush=True)
time.sleep(float(os.environ.get("SLEEP", "60")))
"""

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.package(TRAINER)]
GOOD = "six==1.17.0  # tiny, pure Python\n"
BAD = "this-package-does-not-exist-pc==0\n"


@pytest.fixture
def pkg(pfs_home, package):
    """The package on disk."""
    return pfs_home / "pkg"


def launch(job: Job) -> Job:
    engine.job_launch(job.pk)
    job.refresh_from_db()
    return job


def train_log(job: Job, text: str, timeout: float = 20) -> str:
    """The trainer's log once it says ``text``."""
    log = output_dir(job) / "node_0" / "train.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = log.read_text() if log.exists() else ""
        if text in said:
            return said
        time.sleep(0.1)
    raise AssertionError(f"the trainer never said {text!r}: {said!r}")


def reasons(job: Job) -> list[str]:
    return list(job.events.values_list("reason", flat=True))


def setup_log(job: Job) -> str:
    return (output_dir(job) / "setup.log").read_text()


def builds(*jobs: Job) -> int:
    return sum(1 for job in jobs for reason in reasons(job)
               if reason.startswith("environment") and reason.endswith("building"))


def ended(alice, datacenter, job: Job) -> None:
    job_kill(alice, datacenter, job.name)


def test_a_miss_builds_and_a_hit_reuses_it_read_only(submit, pkg, alice, datacenter):
    (pkg / "requirements.txt").write_text(GOOD)
    first = launch(submit("first"))
    assert first.state in ("starting", "running"), first.state_reason
    short = first.environment[:12]
    assert f"environment {short} not found: installing requirements.txt with uv" in \
        setup_log(first)
    assert f"environment {short} built in" in setup_log(first)
    site = envs.env_path(datacenter, first.environment)
    assert (site / "six.py").is_file()
    assert not (job_dir(first) / "site-packages").exists()  # nothing per job

    # The same requirements written otherwise (comments, spaces): the same digest.
    (pkg / "requirements.txt").write_text("# ours\n  six==1.17.0\n\n")
    second = launch(submit("second", env={"SLEEP": "60"}))
    assert second.environment == first.environment
    assert f"environment {short} found (built " in setup_log(second)
    assert any(r.startswith(f"environment {short} found (built ") for r in reasons(second))
    assert builds(first, second) == 1
    assert f"six 1.17.0 from {site}/six.py" in train_log(second, "six 1.17.0")
    ended(alice, datacenter, first)
    ended(alice, datacenter, second)


def test_the_environment_is_read_only_in_the_job(submit, pkg, alice, datacenter):
    (pkg / "requirements.txt").write_text(GOOD)
    (pkg / "train.py").write_text(
        "import os, six\n"
        "try:\n    open(six.__file__, 'a').write('# mine')\n    print('WROTE')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n")
    job = launch(submit("rw"))
    # EROFS; EACCES first when the portal is root (the job is not the environment's owner).
    assert re.search(r"refused (30|13)\b", train_log(job, "refused"))
    assert "# mine" not in (envs.env_path(datacenter, job.environment) / "six.py").read_text()


def launch_together(jobs) -> None:
    """Launch the jobs at the same moment, each on a thread of its own (as two workers)."""
    barrier = threading.Barrier(len(jobs))

    def go(job):
        try:
            barrier.wait()
            engine.job_launch(job.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)


def test_two_jobs_at_once_wait_for_one_build(submit, pkg, alice, datacenter):
    (pkg / "requirements.txt").write_text(GOOD)
    jobs = [submit(f"twin{i}") for i in range(2)]
    launch_together(jobs)
    for job in jobs:
        job.refresh_from_db()
        assert job.state in ("starting", "running"), job.state_reason
    assert jobs[0].environment == jobs[1].environment
    assert builds(*jobs) == 1
    found = [job for job in jobs if "found (built" in setup_log(job)]
    assert len(found) == 1
    for job in jobs:
        assert "six 1.17.0" in train_log(job, "six 1.17.0")
        ended(alice, datacenter, job)


def test_a_failed_build_fails_its_job_and_is_not_cached(submit, pkg, alice, datacenter):
    (pkg / "requirements.txt").write_text(BAD)
    jobs = [submit(f"bad{i}") for i in range(2)]
    launch_together(jobs)
    for job in jobs:
        job.refresh_from_db()
        assert job.state == "failed"
        # One line, with uv's own words; its whole output in the setup log.
        assert "\n" not in job.state_reason
        assert job.state_reason.startswith("requirements.txt could not be installed (uv exited")
        assert "this-package-does-not-exist-pc" in job.state_reason
        assert "this-package-does-not-exist-pc" in setup_log(job)
    digest = jobs[0].environment
    assert not (envs.envs_root(datacenter) / digest).exists()
    assert not list(envs.envs_root(datacenter).glob(f"{digest}.tmp-*"))

    # Fixed, it builds; and the same bad requirements later are tried again, not remembered.
    later = launch(submit("bad-again"))
    assert later.state == "failed" and builds(later) == 1
    (pkg / "requirements.txt").write_text(GOOD)
    good = launch(submit("good"))
    assert good.state in ("starting", "running"), good.state_reason
    ended(alice, datacenter, good)


def test_a_package_without_requirements_builds_nothing(submit, pkg, datacenter):
    (pkg / "train.py").write_text("print('no requirements')\n")
    job = launch(submit("plain"))
    assert job.environment == ""
    assert not envs.envs_root(datacenter).exists()


def test_least_recently_used_go_first_never_one_in_use(submit, pkg, alice, datacenter,
                                                        settings):
    made = {}
    for name, requirements in (("a", "six==1.17.0\n"), ("b", "six==1.16.0\n"),
                               ("c", "six==1.15.0\n")):
        (pkg / "requirements.txt").write_text(requirements)
        made[name] = launch(submit(name))
        assert made[name].state in ("starting", "running"), made[name].state_reason
        if name != "b":
            ended(alice, datacenter, made[name])  # b stays live
    root = envs.envs_root(datacenter)
    digests = {name: job.environment for name, job in made.items()}
    assert len(set(digests.values())) == 3
    # a is used again (a hit) by a job that ends: b is now the least recently used, then c.
    (pkg / "requirements.txt").write_text("six==1.17.0\n")
    again = launch(submit("a-again"))
    assert again.environment == digests["a"]
    ended(alice, datacenter, again)

    # Room for nothing: all but the live job's go, least recently used first.
    assert envs.env_evict(datacenter, limit=0) == [digests["c"], digests["a"]]
    assert (root / digests["b"] / "site-packages").is_dir()
    ended(alice, datacenter, made["b"])
    assert envs.env_evict(datacenter, limit=0) == [digests["b"]]
    assert not [p for p in root.iterdir() if not p.name.endswith(".lock")
                and not p.name.startswith(".")]

    # The bound applies after each build (settings.PADDLECLOUD_ENV_CACHE_BYTES): with room
    # for one, a new environment pushes out the last one no job uses.
    settings.PADDLECLOUD_ENV_CACHE_BYTES = 1
    first = launch(submit("d"))
    ended(alice, datacenter, first)
    (pkg / "requirements.txt").write_text("six==1.16.0\n")
    second = launch(submit("e"))
    assert not (root / first.environment).exists()
    assert (root / second.environment / "site-packages").is_dir()
    ended(alice, datacenter, second)


def test_the_digest_follows_what_changes_the_result(pkg, tmp_path):
    (pkg / "requirements.txt").write_text("--find-links wheels\ntinydep\n")
    (pkg / "wheels").mkdir()
    (pkg / "wheels" / "tinydep-1.0-py3-none-any.whl").write_bytes(b"one")
    uv = envs.uv_path()

    def digest(environ):
        return envs.env_digest(envs.env_inputs(pkg, uv, environ, []))

    base = digest({})
    assert digest({"OTHER": "x"}) == base
    # Another index, another result.
    assert digest({"PIP_INDEX_URL": "https://x/"}) != base
    # A file the requirements name, changed.
    (pkg / "wheels" / "tinydep-1.0-py3-none-any.whl").write_bytes(b"two")
    assert digest({}) != base
