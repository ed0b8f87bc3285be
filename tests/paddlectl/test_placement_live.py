"""``paddlectl submit -datacenter auto`` against the live portal, alice with an account in
datacenter1 and datacenter2 (each its own config entry, its own token): the job goes where its
predicted start is earliest among the datacenters that can take it, submit says why, and the
job's first event says the same (docs/users/jobs.md, "Choosing the datacenter"); the SDK's
``datacenter="auto"`` alike."""

from __future__ import annotations

import re

import pytest

from accounts.models import Datacenter
from accounts.services import quota_set
from jobs.models import Job
from paddlecloud_sdk import PaddleJob
from paddlecloud_sdk.errors import UsageError
from tests.factories import package_write, submit_job
from tests.paddlectl.conftest import datacenter_entry
from tests.paddlectl.test_jobs_live import fails, ok

GiB = 2**30


@pytest.fixture
def two(live_cli, make_user, datacenter, other_datacenter, pfs_home, held_tasks):
    """datacenter1 has 4 CPUs and bob's job holds 3 of them for an hour at most (its deadline);
    in datacenter2 nothing runs. alice's config lists both (datacenter1 current)."""
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu=4000)
    datacenter.refresh_from_db()
    alice = live_cli.portal.user
    alice.memberships.create(datacenter=other_datacenter)
    (pfs_home.parents[2] / "datacenter2" / "home" / "alice").mkdir(parents=True)
    bob = make_user("bob")
    package_write(pfs_home.parent / "bob")
    for dc in (datacenter, other_datacenter):
        quota_set(None, dc, alice, cpu=64000, memory=64 * GiB, jobs=10, queued=10)
    quota_set(None, datacenter, bob, cpu=64000, memory=64 * GiB, jobs=10, queued=10)
    assert submit_job(bob, datacenter, "hold", package="/pfs/datacenter1/home/bob/pkg",
                      cpu="1", trainers=3, deadline_seconds=3600).state == "starting"
    url = live_cli.portal.url
    live_cli.write_config([datacenter_entry(endpoint=url),
                           datacenter_entry("datacenter2", endpoint=url)])
    return live_cli


def _first_event(name: str) -> str:
    return Job.objects.get(name=name).events.order_by("pk").first().reason


def test_auto_places_a_job_in_the_free_datacenter_and_says_why(two, tmp_path, pfs_home):
    local = tmp_path / "mypkg"
    local.mkdir()
    (local / "train.py").write_text("print('hi')\n")
    out = ok(two("submit", "-datacenter", "auto", "-jobname", "wide", "-entry",
                 "python train.py", "-parallelism", "2", "-cpu", "1", str(local))).stdout
    why = "placed in datacenter2: starts now (datacenter1: in 60 min)"
    assert out.startswith(why + "\n"), out
    assert re.search(r"^job wide submitted: ", out, re.M), out
    job = Job.objects.get(name="wide")
    assert job.datacenter.name == "datacenter2"
    # The local package went to the chosen datacenter only.
    assert job.package == "/pfs/datacenter2/home/alice/jobs/wide/mypkg"
    assert not (pfs_home / "jobs").exists()
    assert _first_event("wide") == f"submitted by alice; {why}"


def test_a_pfs_package_only_in_datacenter1_places_the_job_there(two, package):
    out = ok(two("submit", "-datacenter", "auto", "-jobname", "wide", "-entry", "x",
                 "-parallelism", "2", "-cpu", "1", package)).stdout
    first = out.splitlines()[0]
    assert first.startswith("placed in datacenter1: start predicted in 60 min (datacenter2: "
                            "package"), out
    assert Job.objects.get(name="wide").datacenter.name == "datacenter1"
    assert _first_event("wide") == f"submitted by alice; {first}"


def test_no_datacenter_that_can_take_the_job_is_an_error_naming_each_reason(two):
    result = fails(two("submit", "-datacenter", "auto", "-jobname", "wide", "-entry", "x",
                       "/pfs/datacenter3/home/alice/pkg"), 1,
                   "datacenter: auto: no datacenter can take the job (datacenter1: ",
                   "; datacenter2: ")
    assert "package" in result.stderr
    assert not Job.objects.filter(name="wide").exists()


def test_the_sdk_places_a_job_alike(two, package, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    job = PaddleJob(job_name="wide", entry_point="x", trainer_package=package, trainers=2,
                    cpu_nums=1, datacenter="auto", config=two.config).submit()
    assert job.datacenter == "datacenter1"
    assert job.placement.startswith("placed in datacenter1: start predicted in 60 min "
                                    "(datacenter2: package")
    assert _first_event("wide") == f"submitted by alice; {job.placement}"
    with pytest.raises(UsageError, match="datacenter: auto: no datacenter can take the job"):
        PaddleJob(job_name="nowhere", entry_point="x", trainer_package="/pfs/datacenter3/x",
                  datacenter="auto", config=two.config).submit()


def test_the_sdk_previews_where_auto_would_place_a_job(two, tmp_path, monkeypatch):
    """``preview()`` with ``datacenter="auto"``: the dry run of the datacenter ``submit()``
    would choose, with its name and why; nothing is created and the job is still "auto"."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    local = tmp_path / "mypkg"
    local.mkdir()
    (local / "train.py").write_text("print('hi')\n")
    job = PaddleJob(job_name="wide", entry_point="python train.py", trainer_package=str(local),
                    trainers=2, cpu_nums=1, datacenter="auto", config=two.config)
    plan = job.preview()
    assert plan["starts"] == "now", plan
    assert plan["datacenter"] == "datacenter2"
    assert plan["placement"] == "placed in datacenter2: starts now (datacenter1: in 60 min)"
    assert job.datacenter == "auto" and job.trainer_package == str(local)
    assert not Job.objects.filter(name="wide").exists()
    bigger = PaddleJob(job_name="wide", entry_point="x", trainer_package="/pfs/datacenter3/x",
                       datacenter="auto", config=two.config)
    with pytest.raises(UsageError, match="datacenter: auto: no datacenter can take the job"):
        bigger.preview()
