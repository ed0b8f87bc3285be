"""A job's files in its owner's PFS home, as the portal sees them (every backend): the output
directory, with each replica's log in it, and the trainer package.

Replicas write ``jobs/<name>/output/`` in the owner's home: on the local backend as
processes, on Kubernetes through the PFS volume mounted in their pods. Logs there outlive
the replicas, so the portal reads them after the pods are gone.
"""

from __future__ import annotations

import time
from pathlib import Path

from .processes import log_relpath

OUTPUT_MARKER = ".paddlecloud-job"


def home_dir(job) -> Path:
    return job.datacenter.pfs_root_path / "home" / job.owner.username


def output_dir(job) -> Path:
    return home_dir(job) / "jobs" / job.name / "output"


def log_path(job, replica) -> Path:
    """The replica's log file (``output/node_<i>/train.log`` or ``server.log``)."""
    return output_dir(job) / log_relpath(replica.role, replica.index)


def package_dir(job) -> Path:
    """Where the trainer package is on disk (checked when the job was submitted)."""
    from pfs.paths import pfs_area_root, pfs_path_parse

    path = pfs_path_parse(job.package, field="package")
    return pfs_area_root(job.datacenter, path).joinpath(*path.parts)


def output_prepare(job) -> Path:
    """Make the job's output directory, keeping an earlier job's output of the same name
    beside it (``output-<its id>``). Idempotent for the same job."""
    output = output_dir(job)
    marker = output / OUTPUT_MARKER
    if output.exists() and (not marker.exists() or marker.read_text() != str(job.pk)):
        earlier = marker.read_text() if marker.exists() else str(int(time.time()))
        output.rename(output.with_name(f"output-{earlier}"))
    output.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(job.pk))
    return output
