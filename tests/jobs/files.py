"""A job's files on disk, for tests that write or read them as a replica would (the portal
itself reaches them only through ``jobs.files``)."""

from __future__ import annotations

from pathlib import Path

from jobs.files import JobFile, output_dir
from paddlecloud_core.layout import log_relpath, metrics_relpath
from pfs.storage.posix import PosixStorage


def log_path(job, replica) -> Path:
    return output_dir(job) / log_relpath(replica.role, replica.index)


def metrics_path(job, replica) -> Path:
    return output_dir(job) / metrics_relpath(replica.role, replica.index)


def file_at(path: Path) -> JobFile:
    """Any file on disk as the portal reads a job's files (no link followed)."""
    return JobFile(PosixStorage("/test", path.parent, links=False), (path.name,))


# A trainer's program: it prints $LINES (``|``-separated), sleeps $SECONDS, exits $CODE.
TRAINER = """\
import os, sys, time
for line in os.environ.get("LINES", "").split("|"):
    if line:
        print(line, flush=True)
time.sleep(float(os.environ.get("SECONDS", "0")))
sys.exit(int(os.environ.get("CODE", "0")))
"""
