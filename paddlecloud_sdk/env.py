"""What a replica knows about its job: the environment contract (README.md, "The environment
of a replica"; ``paddlecloud_core/contract.py`` builds it).

Every helper reads today's Paddle (fleet) variable first, then the seeds' legacy ones, and
has a sensible answer outside a job: trainer 0 of 1, role ``TRAINER``, output in
``./output``. A variable that is set but malformed is a ``ValueError`` naming it.

    from paddlecloud_sdk import env

    if env.trainer_id() == 0:
        save(model, env.output_dir() / "model")

Standard library only: a trainer image needs nothing else to import this module.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

TRAINER = "TRAINER"
PSERVER = "PSERVER"

# Most specific first: today's Paddle, then the seeds' names.
TRAINER_ID_VARS = ("PADDLE_TRAINER_ID", "TRAINER_ID", "PADDLE_INIT_TRAINER_ID")
TRAINER_COUNT_VARS = ("PADDLE_TRAINERS_NUM", "TRAINERS", "PADDLE_INIT_NUM_GRADIENT_SERVERS",
                      "PADDLE_NNODES")
DEFAULT_OUTPUT = "output"


def _get(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _int(names: tuple[str, ...], default: int | None, *, minimum: int = 0) -> int | None:
    for name in names:
        value = _get(name)
        if value is None:
            continue
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not a whole number") from None
        if number < minimum:
            raise ValueError(f"{name}={value!r}: must be at least {minimum}")
        return number
    return default


def _list(name: str) -> list[str]:
    return [item.strip() for item in (_get(name) or "").split(",") if item.strip()]


def in_job() -> bool:
    """Whether this process is a replica of a PaddleCloud job (``JOB_NAME`` with a role or a
    trainer id, as every replica gets them). The seeds' ``PADDLE_NOTEBOOK=YES`` marks a
    notebook: never a job."""
    if (_get("PADDLE_NOTEBOOK") or "").upper() == "YES":
        return False
    return _get("JOB_NAME") is not None and any(
        _get(name) is not None for name in ("TRAINING_ROLE", *TRAINER_ID_VARS))


def job_name() -> str | None:
    return _get("JOB_NAME")


def job_uid() -> str | None:
    """Which run of its name the job is (``PADDLE_JOB_UID``); None outside a job."""
    return _get("PADDLE_JOB_UID")


def namespace() -> str | None:
    return _get("JOB_NAMESPACE")


def datacenter() -> str | None:
    """The datacenter the job runs in (``PADDLE_CLOUD_CURRENT_DATACENTER``)."""
    return _get("PADDLE_CLOUD_CURRENT_DATACENTER")


def role() -> str:
    """``TRAINER`` or ``PSERVER`` (``TRAINING_ROLE``; ``TRAINER`` when unset)."""
    value = (_get("TRAINING_ROLE") or TRAINER).upper()
    if value not in (TRAINER, PSERVER):
        raise ValueError(f"TRAINING_ROLE={value!r}: expected TRAINER or PSERVER")
    return value


def is_trainer() -> bool:
    return role() == TRAINER


def is_pserver() -> bool:
    return role() == PSERVER


def trainer_id() -> int:
    """This trainer's index, from 0 (``PADDLE_TRAINER_ID``, ``TRAINER_ID``,
    ``PADDLE_INIT_TRAINER_ID``); 0 outside a job."""
    return _int(TRAINER_ID_VARS, 0)


def trainer_count() -> int:
    """The number of trainers (``PADDLE_TRAINERS_NUM``, ``TRAINERS``,
    ``PADDLE_INIT_NUM_GRADIENT_SERVERS``, ``PADDLE_NNODES``); 1 outside a job."""
    return _int(TRAINER_COUNT_VARS, 1, minimum=1)


def pserver_id() -> int | None:
    """This pserver's index (``PADDLE_PSERVER_ID``); None for a trainer."""
    return _int(("PADDLE_PSERVER_ID",), None)


def pserver_endpoints() -> list[str]:
    """``host:port`` of every pserver, in index order (``PADDLE_PSERVERS_IP_PORT_LIST``, else
    the seeds' ``PADDLE_INIT_PSERVERS`` hosts with ``PADDLE_INIT_PORT``); empty for a
    collective job."""
    endpoints = _list("PADDLE_PSERVERS_IP_PORT_LIST")
    if endpoints:
        return endpoints
    hosts = _list("PADDLE_INIT_PSERVERS")
    port = _int(("PADDLE_INIT_PORT",), None)
    if hosts and port is None:
        raise ValueError("PADDLE_INIT_PSERVERS is set but PADDLE_INIT_PORT is not")
    return [f"{host}:{port}" for host in hosts]


def pserver_count() -> int:
    return len(pserver_endpoints())


def trainer_endpoints() -> list[str]:
    """``host:port`` of every trainer, in index order (``PADDLE_TRAINER_ENDPOINTS``)."""
    return _list("PADDLE_TRAINER_ENDPOINTS")


def current_endpoint() -> str | None:
    """Where this replica listens (``PADDLE_CURRENT_ENDPOINT``, else ``POD_IP:PADDLE_PORT``)."""
    endpoint = _get("PADDLE_CURRENT_ENDPOINT")
    if endpoint is None and _get("POD_IP") and _get("PADDLE_PORT"):
        endpoint = f"{_get('POD_IP')}:{_get('PADDLE_PORT')}"
    return endpoint


def master_endpoint() -> str | None:
    """The rendezvous endpoint of a collective job (``PADDLE_MASTER``, else the first trainer's
    endpoint); None without either."""
    return _get("PADDLE_MASTER") or next(iter(trainer_endpoints()), None)


def num_passes(default: int = 1) -> int:
    """The job's ``passes`` (``PADDLE_INIT_NUM_PASSES``), else ``default``."""
    return _int(("PADDLE_INIT_NUM_PASSES",), default, minimum=1)


def use_gpu() -> bool:
    """Whether the job asked for GPUs (``PADDLE_INIT_USE_GPU=1``)."""
    return (_get("PADDLE_INIT_USE_GPU") or "0").lower() in ("1", "true", "yes")


def output_dir(default: str | os.PathLike = DEFAULT_OUTPUT) -> Path:
    """The job's output directory, shared by its replicas (``PADDLE_OUTPUT_DIR``; ``default``,
    ``./output``, outside a job), as an absolute path. Not created."""
    return Path(_get("PADDLE_OUTPUT_DIR") or default).absolute()


def pfs_home() -> Path | None:
    """The owner's PFS home as this replica sees it (``PADDLE_PFS_HOME``)."""
    value = _get("PADDLE_PFS_HOME")
    return Path(value) if value else None


def dataset_dir(name: str) -> Path:
    """Where a job keeps the dataset ``name`` it generates: in the owner's PFS home
    (``datasets/<name>``, kept for later jobs), or in the job's output directory
    (``data/<name>``) when there is no home (a run by hand)."""
    home = pfs_home()
    if home is not None:
        return home / "datasets" / name
    return output_dir() / "data" / name


def pfs_public() -> Path | None:
    """The datacenter's public dataset directory as this replica sees it
    (``PADDLE_PFS_PUBLIC``)."""
    value = _get("PADDLE_PFS_PUBLIC")
    return Path(value) if value else None


def pfs_path(path: str | os.PathLike) -> Path:
    """Where a ``/pfs/{datacenter}/home/{user}/…`` or ``/pfs/{datacenter}/public/…`` path is
    for this replica.

    Replicas may see PFS somewhere else than ``/pfs`` (the local backend runs them on the
    portal's disk): the home and public directories of the contract stand in for those
    prefixes. Any other path — or a ``/pfs`` path that exists as it is, another datacenter's,
    or another user's home — is returned unchanged.
    """
    text = os.fspath(path)
    parts = PurePosixPath(text).parts
    if len(parts) < 4 or parts[:2] != ("/", "pfs") or os.path.exists(text):
        return Path(text)
    dc, area = parts[2], parts[3]
    if datacenter() is not None and dc != datacenter():
        return Path(text)
    if area == "home" and len(parts) >= 5:
        home = pfs_home()
        if home is not None and home.name == parts[4]:
            return home.joinpath(*parts[5:])
    elif area == "public":
        public = pfs_public()
        if public is not None:
            return public.joinpath(*parts[4:])
    return Path(text)


def summary() -> dict:
    """Everything above, for a log line."""
    return {
        "in_job": in_job(), "job_name": job_name(), "datacenter": datacenter(),
        "role": role(), "trainer_id": trainer_id(), "trainer_count": trainer_count(),
        "pserver_id": pserver_id(), "pserver_endpoints": pserver_endpoints(),
        "trainer_endpoints": trainer_endpoints(), "current_endpoint": current_endpoint(),
        "num_passes": num_passes(), "use_gpu": use_gpu(), "output_dir": str(output_dir()),
    }
