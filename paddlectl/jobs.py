"""Submitting a job whose trainer package is a local directory: what ``paddlectl submit`` and
the SDK's ``PaddleJob.submit()`` both do (they print or raise; this module does neither).

The portal checks the job before the package is uploaded — the user's home stands in for the
package in a dry run — so a taken name or a bad value costs no upload and replaces no files.
A local package goes to ``/pfs/{dc}/home/{user}/jobs/{name}/{dirname}``, beside the job's
``output`` directory (a package directory named ``output`` is uploaded as ``package``).
"""

from __future__ import annotations

from pathlib import Path

from jobs.contract import JOB_NAME_MAX, JOB_NAME_RE  # the portal's rule (pure, no Django)
from paddlectl import transfer
from paddlectl.client import ApiClient
from paddlectl.errors import ApiError
from paddlectl.progress import Progress


def name_problem(name: str | None) -> str | None:
    """Why ``name`` cannot be a job name (the server's rule), or None."""
    if not name:
        return "required: a unique name for the job, e.g. -jobname fit-a-line"
    if "_" in name or "." in name:
        return f"{name!r}: '_' and '.' are not allowed (Kubernetes names cannot carry them); " \
               "use '-'"
    if name != name.lower():
        return f"{name!r}: use lower-case letters"
    if len(name) > JOB_NAME_MAX:
        return f"{name!r}: at most {JOB_NAME_MAX} characters"
    if not JOB_NAME_RE.match(name):
        return (f"{name!r}: only lower-case letters, digits and '-', starting and ending with "
                "a letter or digit")
    return None


def package_path(home: str, name: str, local: Path) -> str:
    """Where the local package ``local`` of job ``name`` is uploaded, below ``home``."""
    dirname = Path(local).expanduser().resolve().name
    if dirname in ("", "output"):  # jobs/NAME/output is the job's output directory
        dirname = "package"
    return f"{home}/jobs/{name}/{dirname}"


def output_path(home: str, name: str) -> str:
    return f"{home}/jobs/{name}/output"


def topology_problem(topology: str, local: Path) -> str | None:
    if topology.startswith("/") or ".." in topology.split("/"):
        return "a path inside the package, without '..'"
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
