"""The environment cache on Kubernetes (issue 19; ``jobs.backends.local.envs`` is the local one,
``jobs.backends.environments`` what both share):
a job's requirements are installed once per digest, in its owner's PFS home, by the init step of
whichever of the owner's pods needs them first (``scripts.INIT_SCRIPT``), and shared by every
later pod and job of the owner that needs the same.

The digest (``env_digest``) is computed here, in the portal, with the local backend's rules
(``envs.image_env_inputs``): the normalized requirements, the contents of what they name in
the package, the job's image reference and pip's command line. The pods get it as
``PADDLECLOUD_ENV_DIGEST``, and their ``PYTHONPATH`` names ``<home>/.paddlecloud/envs/<digest>/
site-packages`` (``layout.env_rel``).

Why in the owner's home and not once per datacenter: a pod mounts its owner's home (read-write)
and the public area (read-only), nothing else of the PFS, and every user's pods run as the
datacenter's one uid. An environment shared between users would have to be somewhere every
user's pods can write, and then any user's job could change what another's imports. In the
owner's home, only the owner's own jobs can touch it, as they can touch the owner's package.

The bound (``env_prune``, when a job starts): the environments of the owner's home past
``PADDLECLOUD_ENV_CACHE_SIZE``, least recently used first (their ``used`` stamp, touched by
every pod that finds or builds one), never one a live job names (``Job.environment``). One
is first renamed aside, then the live jobs asked again: a job records its digest before its pods
exist, so a pod either found the environment before the rename (and its job is seen live, and
it is put back) or finds nothing and builds it anew.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import tempfile
from pathlib import Path

from django.conf import settings

from kernel.errors import NotFoundError, PaddleCloudError
from paddlecloud_core.layout import ENVS_REL
from paddlecloud_core.requirements import REQUIREMENTS_FILE
from pfs.paths import pfs_path_parse
from pfs.storage import storage_for

from ...files import job_home
from ..base import BackendError, records
from ..environments import (
    env_digest,
    image_env_inputs,
    indexes_allowed,
    requirements_stored,
)
from .scripts import PIP_INSTALL

logger = logging.getLogger(__name__)
DIGEST = re.compile(r"[0-9a-f]{64}")


def job_env_digest(job) -> str:
    """The digest of the job's environment; "" if its package has no requirements.txt."""
    indexes = indexes_allowed(job.datacenter)
    with tempfile.TemporaryDirectory(prefix="paddlecloud-env-") as tmp:
        pkg = Path(tmp) / "pkg"
        if not package_requirements_copy(job, pkg, indexes):
            return ""
        return env_digest(image_env_inputs(pkg, job.image, ["python3", *PIP_INSTALL],
                                           indexes))


def package_requirements_copy(job, dest: Path, indexes: list[str]) -> bool:
    """Copy into the new directory ``dest`` what of the trainer package decides its
    environment: ``requirements.txt`` (read no further than its bound, and checked) and the
    package's paths it names (``envs``). False if the package has no requirements.txt. Read
    like ``package_copy``."""
    path = pfs_path_parse(job.package_run, field="package")
    storage = storage_for(job.datacenter, path)
    try:
        if not storage.is_dir(path.parts):
            raise BackendError(f"the trainer package {job.package_run} is not a directory")
        found = requirements_stored(storage, (*path.parts, REQUIREMENTS_FILE), indexes)
        if found is None:
            return False
        text, checked = found
        dest.mkdir()
        (dest / REQUIREMENTS_FILE).write_text(text)
        for token in checked.paths:
            parts = tuple(token.split("/"))
            with contextlib.suppress(NotFoundError, PaddleCloudError):
                top = storage.stat((*path.parts, *parts))
                for entry in [top, *(storage.walk(top.rel) if top.type == "dir" else ())]:
                    rel = entry.rel[len(path.parts):]
                    target = dest.joinpath(*rel)
                    if entry.type == "dir":
                        target.mkdir(parents=True, exist_ok=True)
                    elif entry.type == "file":
                        target.parent.mkdir(parents=True, exist_ok=True)
                        with target.open("wb") as out:
                            for chunk in storage.read((*path.parts, *rel)):
                                out.write(chunk)
    except NotFoundError:
        raise BackendError(f"the trainer package {job.package_run} is gone") from None
    except PaddleCloudError as exc:
        raise BackendError(f"cannot read the trainer package: {exc.message}") from None
    return True


def env_prune(job, *, keep: str = "", limit: int | None = None) -> list[str]:
    """Remove the owner's least recently used environments until the rest fit the bound,
    never ``keep`` nor one a live job uses. Returns the digests removed."""
    limit = settings.PADDLECLOUD_ENV_CACHE_BYTES if limit is None else limit
    home = job_home(job)
    try:
        entries = home.listdir(ENVS_REL)
    except PaddleCloudError:  # none yet, or not a directory
        return []
    envs = []
    for entry in entries:
        if entry.type != "dir" or not DIGEST.fullmatch(entry.name):
            continue
        with contextlib.suppress(PaddleCloudError, ValueError, KeyError, TypeError):
            built = json.loads(b"".join(home.read((*entry.rel, "built.json"), 0, 4096)))
            used = home.stat((*entry.rel, "used")).mtime
            envs.append((used, entry.rel, int(built["size"])))
    total = sum(size for _, _, size in envs)
    removed = []
    for _, rel, size in sorted(envs):
        if total <= limit:
            break
        digest = rel[-1]
        if digest == keep or records().environment_in_use(digest):
            continue
        aside = (*ENVS_REL, f"{digest}.tmp-evicted")
        try:
            with contextlib.suppress(NotFoundError):
                home.remove(aside, recursive=True)
            home.move(rel, aside)
            if records().environment_in_use(digest):  # a job started with it meanwhile: put back
                with contextlib.suppress(PaddleCloudError):
                    home.move(aside, rel)
                continue
            home.remove(aside, recursive=True)
        except PaddleCloudError as exc:
            logger.warning("environment %s of %s not pruned: %s", digest[:12],
                           job.owner.username, exc.message)
            continue
        total -= size
        removed.append(digest)
    return removed
