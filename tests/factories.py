"""The one way the tests make a thing: a user's PFS home as users write it (derived from
``paddlecloud_core.layout``), a trainer package in a home on disk, what a job's submission
says, a job submitted through the service, a job's row made straight in the database. The
fixtures built on them (``pfs_home``, ``package``, ``submit``, ``live_portal``) are in
tests/conftest.py; a difference a test needs is an argument here, not a copy there."""

from __future__ import annotations

from pathlib import Path

from jobs.models import Job, Replica
from jobs.services import job_submit
from paddlecloud_core.layout import pfs_home

HELLO_TRAINER = "print('hi')\n"  # the default train.py: a trainer that ends at once, well


def home(username: str = "alice", datacenter: str = "datacenter1") -> str:
    """``username``'s PFS home in ``datacenter``, as users write it (``/pfs/{dc}/home/{user}``)."""
    return pfs_home(datacenter, username)


HOME = home()  # alice's home in datacenter1, where most tests work
PACKAGE = f"{HOME}/pkg"  # where the ``package`` fixture puts alice's trainer package


def package_write(home_dir: Path, program: str = HELLO_TRAINER, name: str = "pkg",
                  files: dict[str, str] | None = None) -> str:
    """A trainer package ``name`` in the home ``home_dir`` on disk (``…/{dc}/home/{user}``):
    ``program`` as its train.py and ``files`` (relative path: text) beside it. Its PFS path."""
    package = home_dir / name
    package.mkdir(parents=True)
    (package / "train.py").write_text(program)
    for relative, text in (files or {}).items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    return f"{home(home_dir.name, home_dir.parents[1].name)}/{name}"


def job_fields(user, datacenter, name: str = "fit", **fields) -> dict:
    """What a submission of ``user``'s job ``name`` says: their package ``pkg``, entry
    ``python train.py``, and ``fields`` (which may set those too)."""
    return {"name": name, "package": f"{home(user.username, datacenter.name)}/pkg",
            "entry": "python train.py", **fields}


def submit_job(user, datacenter, name: str = "fit", **fields) -> Job:
    """``user``'s job (``job_fields``) submitted through the service."""
    return job_submit(user, datacenter, job_fields(user, datacenter, name, **fields)).job


def job_row(owner, datacenter, name: str = "fit", *, replicas: dict | None = None,
            **fields) -> Job:
    """``owner``'s job ``name`` made straight in the database, neither checked nor admitted:
    their package ``pkg``, entry ``python train.py``, image ``paddle``, and ``fields``. With
    ``replicas`` (the fields each replica gets; ``{}``: the defaults), its pservers and
    trainers too; without, no replica."""
    job = Job.objects.create(**{"owner": owner, "datacenter": datacenter, "image": "paddle",
                                **job_fields(owner, datacenter, name, **fields)})
    if replicas is not None:
        for role, count in (("pserver", job.pservers), ("trainer", job.trainers)):
            for index in range(count):
                Replica.objects.create(job=job, role=role, index=index, **replicas)
    return job
