"""``dist_train``: one training script for both sides, as the seeds describe it.

    trainer = ...                                    # paddle v2 SGD, or any train(reader, n)
    job = PaddleJob(job_name="quickstart", entry_point="python train.py",
                    trainer_package=".", trainers=2)
    dist_train(trainer, reader, num_passes=5, paddle_job=job)

Run on your machine, it submits ``paddle_job`` (the package holds this very script) and
returns it; run by the job's replicas, it trains. Inside a job is decided by the environment
contract (``env.in_job()``: ``JOB_NAME`` with a role or trainer id, as every replica gets;
the seeds' ``PADDLE_NOTEBOOK=YES`` means outside).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import env


def dist_train(trainer: Any, reader: Callable, num_passes: int = 1,
               event_handler: Callable | None = None, feeding: Any = None,
               paddle_job: Any = None) -> Any:
    """Outside a job, submit ``paddle_job`` and return it (``passes`` defaults to
    ``num_passes``). Inside one — or outside without a ``paddle_job``: a local run — train:
    ``trainer.train(reader=..., num_passes=..., event_handler=..., feeding=...)`` (paddle v2's
    SGD), or, for a plain function, ``trainer(reader, num_passes)`` (``event_handler`` and
    ``feeding`` are passed as keywords when given). In a job, the job's ``passes``
    (``PADDLE_INIT_NUM_PASSES``) wins over ``num_passes``. Returns what the trainer returns.
    """
    if not env.in_job() and paddle_job is not None:
        if getattr(paddle_job, "passes", 0) is None:
            paddle_job.passes = num_passes
        return paddle_job.submit()
    passes = env.num_passes(default=num_passes) if env.in_job() else num_passes
    train = getattr(trainer, "train", None)
    if callable(train):
        return train(reader=reader, num_passes=passes, event_handler=event_handler,
                     feeding=feeding)
    if callable(trainer):
        extra = {key: value for key, value in
                 (("event_handler", event_handler), ("feeding", feeding)) if value is not None}
        return trainer(reader, passes, **extra)
    raise TypeError(f"trainer must have a train() method or be callable, not "
                    f"{type(trainer).__name__}")
