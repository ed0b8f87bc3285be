"""A checkpoint's manifest: what it says and whether the checkpoint is what it says (issue 37).

The SDK (``paddlecloud_sdk.checkpoint``) writes a checkpoint as a directory
``step-<step, 12 digits>/`` (``paddlecloud_core.layout``) holding the state's files and, written
last, ``manifest.json``::

    {"format": 1, "step": 120, "pass": 3, "time": 1764300000.5, "job": "fit",
     "job_uid": "6f1c…", "trainers": 2, "kind": "paddle",
     "files": {"state.pdparams": {"size": 5120, "sha256": "9f…"}},
     "master": {"pass": 0, "done": [0, 1, 4], "read": {"2": 12}}}

Everyone who reads one — the SDK resuming from it, the portal listing a job's checkpoints
and checking the one a new job is to start from (``-resume-from``) — reads and verifies it
here, each opening the files its own way (the SDK on its disk, the portal through the owner's
PFS home, following no link): ``verify(step, open_file)``.

Standard library only: a trainer image imports this through the SDK.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import BinaryIO

from .layout import CHECKPOINT_MANIFEST, checkpoint_step

MANIFEST_FORMAT = 1
PADDLE_FILE = "state.pdparams"
BYTES_FILE = "state.bin"
KINDS = ("paddle", "bytes", "files")
CHUNK = 1 << 20
MAX_MANIFEST = 16 << 20  # bytes: a manifest larger than this is no manifest of ours


# What trainer 0's SDK reports (``paddlecloud_sdk.report``, the job's metrics) for the portal
# to make events of: at the step of the checkpoint ``load()`` resumed from, and of one it
# skipped as corrupt or partial.
RESUMED_METRIC = "checkpoint_resumed"
SKIPPED_METRIC = "checkpoint_skipped"
# ... and after each checkpoint it saves, at its step: the time preemption reads (its cost).
SAVED_METRIC = "checkpoint"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used as its manifest says (the message says why)."""


def file_name_check(name: object) -> None:
    """A file of a checkpoint's state is named like a file in one directory; ValueError
    saying so otherwise."""
    if not isinstance(name, str) or not name or name in (".", "..", CHECKPOINT_MANIFEST) \
            or "/" in name or "\0" in name or name.startswith("."):
        raise ValueError(f"checkpoint.save: a file of the state is named like a file in one "
                         f"directory (no '/', not hidden, not {CHECKPOINT_MANIFEST}), not "
                         f"{name!r}")


def described(source: BinaryIO) -> dict:
    """A file's size and SHA-256, read from ``source`` to its end."""
    digest, size = hashlib.sha256(), 0
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def newest_first(names: Iterable[str]) -> list[tuple[int, str]]:
    """The complete checkpoints among a checkpoint directory's entry names, as (step, name),
    newest first (one being written, a marker, anything else is no checkpoint)."""
    return sorted(((step, name) for name in names
                   if (step := checkpoint_step(name)) is not None), reverse=True)


OpenFile = Callable[[str], BinaryIO]
"""Opens a file of the checkpoint (its name in the step directory) for reading; raises
``FileNotFoundError`` when it is not there, another ``OSError`` when it cannot be read."""


def manifest_read(step: int, open_file: OpenFile) -> dict:
    """The manifest of the checkpoint of ``step``, checked for form (not against the files):
    ``CheckpointError`` saying what is wrong."""
    try:
        with open_file(CHECKPOINT_MANIFEST) as source:
            raw = source.read(MAX_MANIFEST + 1)
    except FileNotFoundError:
        raise CheckpointError(f"it has no {CHECKPOINT_MANIFEST}") from None
    except OSError as exc:
        raise CheckpointError(f"its {CHECKPOINT_MANIFEST} cannot be read: {exc}") from None
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise CheckpointError(f"its {CHECKPOINT_MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT \
            or manifest.get("step") != step or manifest.get("kind") not in KINDS \
            or not isinstance(manifest.get("files"), dict) or not manifest["files"]:
        raise CheckpointError(f"its {CHECKPOINT_MANIFEST} is not a manifest of step {step} "
                              f"(format {MANIFEST_FORMAT})")
    return manifest


def verify(step: int, open_file: OpenFile,
           size_of: Callable[[str], int] | None = None) -> dict:
    """The manifest of the checkpoint of ``step``, read and every file it lists checked for
    the size and digest it says; ``CheckpointError`` saying what is wrong.

    ``size_of`` (a file's name to its size; ``OSError`` as ``open_file``): only the sizes
    are checked, not the digests — what a listing can afford for every checkpoint; what is
    loaded, or started from, is read whole."""
    manifest = manifest_read(step, open_file)
    for name, expected in manifest["files"].items():
        if not isinstance(expected, dict):
            raise CheckpointError(f"its manifest's entry for {name!r} is not an object")
        try:
            file_name_check(name)
            if size_of is not None:
                actual = {"size": size_of(name), "sha256": expected.get("sha256")}
            else:
                with open_file(name) as source:
                    actual = described(source)
        except (ValueError, OSError) as exc:
            raise CheckpointError(f"its file {name!r} cannot be read: {exc}") from None
        if actual["size"] != expected.get("size"):
            raise CheckpointError(f"its file {name!r} has {actual['size']} bytes, its "
                                  f"manifest says {expected.get('size')}")
        if actual["sha256"] != expected.get("sha256"):
            raise CheckpointError(f"its file {name!r} does not have the digest its manifest "
                                  "says")
    return manifest


def size(manifest: dict) -> int:
    """The bytes of a verified checkpoint's state (its files, as its manifest lists them)."""
    return sum(int(entry.get("size") or 0) for entry in manifest["files"].values())
