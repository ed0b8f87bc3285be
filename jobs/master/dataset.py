"""A job master's dataset (``-dataset``, a glob in the PFS): the files it matches, checked
as a job is submitted, and cut into tasks as ``-dataset-unit`` says (a file, a RecordIO chunk,
or ``-task-records`` records or lines each)."""

from __future__ import annotations

import fnmatch
import struct

from kernel.errors import PaddleCloudError, ValidationError
from pfs.services import pfs_target

RECORDIO_MAGIC = b"\x04\x03\x02\x01"
CHUNK_HEADER = struct.Struct("<IIIII")  # magic, crc32, compressor, stored size, records


def dataset_problem(user, datacenter, dataset: str) -> str | None:
    """Why ``dataset`` (a glob) cannot be the job's, or None: it must match files the user may
    read (their home or the public directory), with wildcards in its last part only."""
    try:
        return None if dataset_files(user, datacenter, dataset) else (
            f"{dataset} matches no file")
    except PaddleCloudError as exc:
        return exc.fields.get("dataset", [exc.message])[0]


def dataset_files(user, datacenter, dataset: str) -> list[tuple[str, object, tuple]]:
    """The files ``dataset`` matches, sorted: (their path as replicas see it, storage, rel)."""
    head, _, pattern = dataset.rpartition("/")
    if any(c in head for c in "*?["):
        raise ValidationError.for_field(
            "dataset", "only the last part of the path may hold *, ? or [...]: "
                       "/pfs/{dc}/home/{user}/data/part-*.recordio")
    target = pfs_target(user, datacenter, head or "/", field="dataset")
    storage = target.storage
    found = []
    for entry in storage.listdir(target.rel):
        if fnmatch.fnmatchcase(entry.name, pattern) and entry.type == "file":
            found.append((f"{str(target.path).rstrip('/')}/{entry.name}", storage,
                          (*target.rel, entry.name)))
    return sorted(found, key=lambda f: f[0])


def _read(storage, rel, start: int, end: int) -> bytes:
    return b"".join(storage.read(rel, start, end))


def _chunks(storage, rel) -> list[tuple[int, int]]:
    """A RecordIO file's chunks: (byte offset, records), from their headers alone."""
    chunks, offset = [], 0
    while True:
        header = _read(storage, rel, offset, offset + CHUNK_HEADER.size)
        if not header:
            return chunks
        if len(header) < CHUNK_HEADER.size or header[:4] != RECORDIO_MAGIC:
            raise ValidationError.for_field("dataset", f"not a RecordIO file: {rel[-1]} "
                                                       f"(at byte {offset})")
        _, _, _, size, records = CHUNK_HEADER.unpack(header)
        chunks.append((offset, records))
        offset += CHUNK_HEADER.size + size


def _lines(storage, rel) -> int:
    count, last = 0, b""
    for block in storage.read(rel):
        count += block.count(b"\n")
        last = block[-1:] or last
    return count + (1 if last and last != b"\n" else 0)


def _is_recordio(storage, rel) -> bool:
    return _read(storage, rel, 0, 4) == RECORDIO_MAGIC


def dataset_spans(job) -> list[list[dict]]:
    """The job's dataset cut into tasks (each a list of spans), as ``dataset_unit`` says."""
    tasks = []
    for path, storage, rel in dataset_files(job.owner, job.datacenter, job.dataset):
        if job.dataset_unit == "file":
            tasks.append([{"path": path, "kind": "file"}])
        elif job.dataset_unit == "chunk":
            tasks += [[{"path": path, "kind": "chunk", "offset": offset}]
                      for offset, _ in _chunks(storage, rel)]
        else:
            total = (sum(n for _, n in _chunks(storage, rel)) if _is_recordio(storage, rel)
                     else _lines(storage, rel))
            size = job.task_records
            tasks += [[{"path": path, "kind": "records", "start": start,
                        "count": min(size, total - start)}] for start in range(0, total, size)]
    return tasks
