"""The PaddleCloud Python SDK.

- ``PaddleJob`` (``paddlecloud_sdk.job``): submit a job, follow its state, workers and logs,
  wait for it, kill it — through ``paddlecloud_client``: paddlectl's config, token cache and
  API client.
- ``Sweep`` (``paddlecloud_sdk.sweep``): a base job over a search space, its trials ordinary
  jobs, stopped early from what they ``report()`` (docs/users/experiments.md).
- ``dist_train`` (``paddlecloud_sdk.train``): submits when run outside a job, trains inside.
- ``paddlecloud_sdk.env``: the environment contract as functions (``trainer_id()``,
  ``trainer_count()``, ``output_dir()`` …).
- ``paddlecloud_sdk.dataset``: ``split``, ``convert``, ``cluster_files_reader``,
  ``recordio_reader``, ``dist_reader``.
- ``paddlecloud_sdk.recordio``: PaddlePaddle's RecordIO format, pure Python.
- ``paddlecloud_sdk.master``: a trainer's share of a job's dataset, task by task, from the job's
  master (``master.reader()``, ``master.tasks()``; docs/master.md).
- ``paddlecloud_sdk.checkpoint``: ``save(state, step)``, ``latest()``, ``load()``: checkpoints
  in the job's ``PADDLE_CHECKPOINT_DIR``, written whole or not at all, that a restarted job
  resumes from (with its master's position).
- ``report(step=…, **metrics)`` (``paddlecloud_sdk.metrics``): append a line of training
  metrics beside the replica's log, for the job's page to plot.
- ``paddlecloud_sdk.errors``: what it raises, its own classes (each also the client's of the
  same name, which paddlectl reports).

``env``, ``dataset``, ``master``, ``metrics``, ``checkpoint`` and ``recordio`` need only the
standard library (and ``paddlecloud_core``, which does too), so a trainer can import them in
any image; ``PaddleJob`` and ``dist_train`` are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import checkpoint, dataset, env, master, metrics, recordio
from .metrics import report

_LAZY = {
    "PaddleJob": "job", "CephFSVolume": "job", "Connection": "job", "connect": "job",
    "dist_train": "train", "errors": None, "job": None, "train": None, "Sweep": "sweep",
    "sweep": None,
}

__all__ = ["CephFSVolume", "Connection", "PaddleJob", "Sweep", "checkpoint", "connect", "dataset",
           "dist_train", "env", "errors", "master", "metrics", "recordio", "report"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _LAZY[name]
    if module is None:
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
