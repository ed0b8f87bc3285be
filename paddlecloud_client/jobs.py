"""Submitting a job whose trainer package is a local directory: what ``paddlectl submit`` and
the SDK's ``PaddleJob.submit()`` both do (they print or raise; this module does neither).

The portal checks the job before the package is uploaded — the user's home stands in for the
package in a dry run — so a taken name or a bad value costs no upload and replaces no files.
A local package goes to ``/pfs/{dc}/home/{user}/jobs/{name}/{dirname}``, beside the job's
``output`` directory (a package directory named ``output`` is uploaded as ``package``).
"""

from __future__ import annotations

from pathlib import Path

from paddlecloud_client import transfer
from paddlecloud_client.api import ApiClient
from paddlecloud_client.errors import ApiError
from paddlecloud_client.progress import Progress
from paddlecloud_core import layout, spec


def name_problem(name: str | None) -> str | None:
    """Why ``name`` cannot be a job name (the portal's rule), or None."""
    if not name:
        return "required: a unique name for the job, e.g. -jobname fit-a-line"
    problem = spec.name_problem(name)
    return None if problem is None else f"{name!r}: {problem}"


def package_path(home: str, name: str, local: Path) -> str:
    """Where the local package ``local`` of job ``name`` is uploaded, below ``home``."""
    return layout.package_path(home, name, Path(local).expanduser().resolve().name)


def topology_problem(topology: str, local: Path) -> str | None:
    """Why ``topology`` is not a file of the local package ``local`` (the portal's rule, then
    the file itself), or None."""
    if (problem := spec.topology_problem(topology)) is not None:
        return problem
    if not (Path(local) / topology).is_file():
        return f"{topology} is not a file in the package {local}"
    return None


def job_probe(client: ApiClient, home: str, body: dict) -> dict | None:
    """The server's dry run of a job whose package is still local (the home standing in for
    it; the topology, checked locally, left out): the plan, or None when the server could
    check everything but the package. Other mistakes raise ``ApiError`` without the
    stand-in's."""
    probe = {key: value for key, value in body.items() if key != "topology"}
    probe.update(package=home, dry_run=True)
    try:
        return client.job_submit(probe)
    except ApiError as exc:
        if exc.status != 400 or not exc.fields:
            raise
        fields = {key: msgs for key, msgs in exc.fields.items() if key != "package"}
        if not fields:
            return None
        message = "; ".join(f"{key}: {msgs[0] if isinstance(msgs, list) and msgs else msgs}"
                            for key, msgs in fields.items())
        raise ApiError(exc.status, exc.code, message, fields) from None


def package_upload(client: ApiClient, local: Path, remote: str, progress: Progress,
                   warn: transfer.Warn) -> None:
    """Upload ``local``'s contents to ``remote``, replacing what an earlier job left there."""
    try:
        client.pfs_remove(remote, recursive=True)
    except ApiError as exc:
        if exc.status != 404:
            raise
    transfer.upload_dir(client, local, remote, progress, warn, parents=True)
