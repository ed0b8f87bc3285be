"""A trainer package's ``requirements.txt`` as a hostile user writes it (issue 33, item 5): read
as data and bounded (``paddlecloud_core/requirements.py``), checked at submit through the real
API and again when the job's copy is installed, and installed by real uv in a real sandbox whose
network reaches the datacenter's allowed package indexes and nothing else on the machine
(``jobs/backends/egress.py``). The allowed index is a real one on loopback
(``tests/package_index.py``); a second server on loopback stands for what must stay out of
reach (PostgreSQL, Redis, the portal)."""

from __future__ import annotations

import os
import time

import pytest

from jobs import engine
from jobs.files import output_dir
from jobs.models import Job
from tests.conftest import assert_error
from tests.factories import package_write
from tests.jobs.test_local_isolation import ended
from tests.package_index import make_wheel, package_index

pytestmark = pytest.mark.django_db(transaction=True)


class Answer:
    """A ``requests`` answer as ``assert_error`` reads a Django one."""

    def __init__(self, response):
        self.status_code = response.status_code
        self.content = response.content
        self.headers = response.headers
        self.json = response.json

    def __getitem__(self, name):
        return self.headers[name]


@pytest.fixture
def pkg(live_portal):
    """alice's package on disk."""
    package_write(live_portal.home, "print('hello')\n")
    return live_portal.home / "pkg"


def test_a_requirements_txt_past_its_bound_is_refused_at_submit_unread(live_portal, pkg):
    # A sparse file: a terabyte on paper, nothing on disk. Read whole, it would take the
    # portal's memory; it is refused after the bound (64 KiB) instead.
    with (pkg / "requirements.txt").open("wb") as f:
        f.truncate(1 << 40)
    started = time.monotonic()
    body = assert_error(Answer(live_portal.job_post("huge", timeout=60)), 400, "invalid",
                        "package")
    assert time.monotonic() - started < 10
    assert body["fields"]["package"] == [
        "requirements.txt: it is larger than the 65536 bytes allowed"]
    assert not Job.objects.filter(name="huge").exists()


def test_options_naming_paths_or_other_indexes_are_refused_at_submit(live_portal, pkg):
    (pkg / "requirements.txt").write_text(
        "six==1.17.0\n"
        "-r /etc/shadow\n"
        "--find-links /usr/share\n"
        "--index-url http://127.0.0.1:5432/simple   # PostgreSQL, trusting loopback\n"
        "--extra-index-url=http://127.0.0.1:6379/\n"
        "-e .\n"
        "evil @ file:///etc/passwd\n"
        "../../bob/pkg/evil-1.0-py3-none-any.whl\n")
    body = assert_error(Answer(live_portal.job_post("paths", timeout=60)), 400, "invalid",
                        "package")
    said = body["fields"]["package"][0]
    assert said.startswith("requirements.txt: line 2 ('-r /etc/shadow'): -r is "
                           "not allowed")
    for line, rule in ((3, "--find-links takes an allowed index's URL or a directory of the "
                           "package"),
                       (4, "http://127.0.0.1:5432/simple is not one of the package indexes "
                           "this datacenter allows (https://pypi.org/simple, "),
                       (5, "http://127.0.0.1:6379/ is not one of the package indexes"),
                       (6, "-e is not allowed"), (7, "not a requirement"),
                       (8, "not a requirement")):
        assert f"line {line} (" in said and rule in said, (line, said)
    assert "line 1 " not in said  # a plain requirement is fine
    assert not Job.objects.filter(name="paths").exists()


def test_an_allowed_index_is_named_and_used(live_portal, pkg):
    datacenter = live_portal.datacenter
    datacenter.package_indexes = "http://127.0.0.1:1/simple\nhttps://pypi.org/simple"
    datacenter.save()
    (pkg / "requirements.txt").write_text("--index-url http://127.0.0.1:1/simple/\nsix\n")
    assert live_portal.job_post("allowed", timeout=60).status_code == 201
    (pkg / "requirements.txt").write_text("--index-url http://127.0.0.1:2/simple/\nsix\n")
    body = assert_error(Answer(live_portal.job_post("other", timeout=60)), 400, "invalid",
                        "package")
    assert "not one of the package indexes this datacenter allows (http://127.0.0.1:1/simple, "\
           "https://pypi.org/simple)" in body["fields"]["package"][0]


def test_the_machines_own_index_is_the_default_its_credentials_never_shown(live_portal, pkg,
                                                                           monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror-user:s3cret@mirror.example.com/simple")
    (pkg / "requirements.txt").write_text("--index-url https://mirror.example.com/simple/\nsix\n")
    assert live_portal.job_post("mirror", timeout=60).status_code == 201
    (pkg / "requirements.txt").write_text("--index-url http://127.0.0.1:5432/\n")
    response = live_portal.job_post("postgres", timeout=60)
    body = assert_error(Answer(response), 400, "invalid", "package")
    assert body["fields"]["package"][0].endswith(
        "is not one of the package indexes this datacenter allows "
        "(https://mirror.example.com/simple)")
    assert "s3cret" not in response.text


IMPORTS_TINYDEP = "import tinydep; print('imported', tinydep.NAME)\n"


@pytest.fixture
def indexed(datacenter, pfs_home, package, tmp_path):
    """The package, on disk; the datacenter allows one index, on loopback, that serves
    ``tinydep``; ``trap``, another server on loopback, is not allowed."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "tinydep")
    pkg = pfs_home / "pkg"
    with package_index() as trap, package_index(
            [wheel], links={"trapdep": f"{trap.url}/files/"}) as index:
        datacenter.package_indexes = index.simple
        datacenter.save()
        yield pkg, index, trap


@pytest.mark.package(IMPORTS_TINYDEP)
def test_uv_reaches_the_allowed_index_and_nothing_else_on_the_machine(celery_worker, indexed,
                                                                      submit):
    pkg, index, trap = indexed
    (pkg / "requirements.txt").write_text(f"--index-url {index.simple}\ntinydep\n")
    job = ended(submit("allowed"))
    assert job.state == "succeeded", job.state_reason
    assert "imported tinydep" in (output_dir(job) / "node_0" / "train.log").read_text()
    assert "/simple/tinydep/" in index.seen

    # The allowed index links to a server of the machine it was not allowed to name (as a
    # compromised mirror could: or to PostgreSQL, Redis, the portal). uv is refused there.
    (pkg / "requirements.txt").write_text(f"--index-url {index.simple}\ntrapdep\n")
    job = ended(submit("trapped"))
    assert job.state == "failed"
    trap_at = trap.url.removeprefix("http://")
    assert job.state_reason.startswith("requirements.txt could not be installed")
    assert job.state_reason.endswith(f"its network reaches only the allowed package indexes, "
                                     f"not {trap_at}); see output/setup.log")
    assert trap.seen == []
    setup = (output_dir(job) / "setup.log").read_text()
    assert f"403 Forbidden) for url ({trap.url}/files/trapdep-1.0-py3-none-any.whl)" in setup
    assert f"the install's network refused {trap_at}: not an allowed package index" in setup


@pytest.mark.package(IMPORTS_TINYDEP)
def test_a_package_changed_after_submit_is_not_run_its_requirements_never_read(
        held_tasks, indexed, pfs_home, submit):
    """A job runs the snapshot of its package taken at submission (issue 39), which lies in
    its owner's home: changed between submit and start, it is refused, not read."""
    pkg, index, _ = indexed
    (pkg / "requirements.txt").write_text("tinydep\n")
    job = submit("changed")
    # Between submit and start its owner points the snapshot at the machine: never read.
    snapshot = pfs_home / "jobs" / "changed" / "package"
    os.mkfifo(snapshot / "fifo")
    (snapshot / "requirements.txt").write_text(f"--index-url {index.simple}\n-r /etc/shadow\n"
                                               "--find-links fifo/../../..\n")
    started = time.monotonic()
    engine.job_launch(job.pk)
    job.refresh_from_db()
    assert time.monotonic() - started < 30
    assert job.state == "failed"
    assert f"its package snapshot {job.package_snapshot} has changed since the job was " \
           "submitted" in job.state_reason, job.state_reason
    assert job.state_reason.endswith("it is not run"), job.state_reason
    assert index.seen == []
