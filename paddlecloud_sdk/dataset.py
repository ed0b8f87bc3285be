"""Preparing a dataset for distributed training, and reading each trainer's share of it: the
seeds' helpers (``paddle.v2.dataset.common.split``, ``convert``, ``cluster_files_reader``,
the RecordIO reader of "Submit PaddlePaddle Cluster Jobs" and ``dist_reader`` of "PaddlePaddle
Job"), for Python 3.

A *reader* is what PaddlePaddle calls a reader creator: a function without arguments that
returns an iterable of samples. The sharing rule is the seeds': files sorted by name, file
``i`` belongs to trainer ``i % trainer_count``; lines of one file likewise.

    split(uci_housing.train(), line_count=500, suffix="./uci_housing/train-%05d.pickle")
    convert("./dataset", uci_housing.train(), line_count=10, name_prefix="uci_housing_train")

    # in the job, on every trainer
    reader = cluster_files_reader("/pfs/dc1/public/dataset/uci_housing/train-*.pickle")
    reader = recordio_reader("/pfs/dc1/home/alice/dataset/uci_housing_train-*")

``trainer_count`` and ``trainer_id`` default to the job's (``paddlecloud_sdk.env``), and
``/pfs/…`` patterns are found where the replica sees PFS (``env.pfs_path``).

Differences from the originals: ``split`` and ``convert`` put exactly ``line_count`` samples in
each file (the originals put ``line_count + 1`` in the first); nothing is printed; a
``trainer_id`` outside ``0..trainer_count-1`` is an error rather than an empty reader; files
are opened in binary mode (pickle and marshal need it; pass ``mode="w"``/``"r"`` for a text
dumper such as ``json.dump``).
"""

from __future__ import annotations

import glob
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from . import env, recordio

Reader = Callable[[], Iterable[Any]]


def _batches(reader: Reader, line_count: int) -> Iterator[list]:
    if not isinstance(line_count, int) or isinstance(line_count, bool) or line_count < 1:
        raise ValueError(f"line_count must be a whole number of at least 1, not {line_count!r}")
    if not callable(reader):
        raise TypeError("reader must be a reader creator: a function returning an iterable "
                        "of samples (e.g. uci_housing.train(), not uci_housing.train()())")
    batch: list = []
    for sample in reader():
        batch.append(sample)
        if len(batch) == line_count:
            yield batch
            batch = []
    if batch:
        yield batch


def split(reader: Reader, line_count: int, suffix: str = "./%05d.pickle",
          dumper: Callable[[Any, Any], Any] = pickle.dump, *, mode: str = "wb") -> list[str]:
    """Write the samples of ``reader`` to files of ``line_count`` samples each (the last may
    have fewer): file ``i`` is ``suffix % i`` and holds ``dumper(list_of_samples, file)``.
    Missing parent directories are created. Returns the file names, in order."""
    if not callable(dumper):
        raise TypeError("dumper must be callable as dumper(obj, file), e.g. pickle.dump")
    try:
        suffix % 0
    except TypeError:
        raise ValueError(f"suffix {suffix!r} must contain one %d-style field for the file "
                         "number, e.g. './train-%05d.pickle'") from None
    names = []
    for index, batch in enumerate(_batches(reader, line_count)):
        name = suffix % index
        parent = os.path.dirname(name)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(name, mode) as out:
            dumper(batch, out)
        names.append(name)
    return names


def shard_name(name_prefix: str, index: int, last: int) -> str:
    """``name_prefix-00003-of-00009``: shard 3 of shards 0 to 9."""
    return f"{name_prefix}-{index:05d}-of-{last:05d}"


def convert(output_path: str | os.PathLike, reader: Reader, line_count: int,
            name_prefix: str, *, dumps: Callable[[Any], bytes] = pickle.dumps,
            compressor: int = recordio.NO_COMPRESSION) -> list[str]:
    """Write the samples of ``reader`` as RecordIO files of ``line_count`` records each, one
    record per sample (``dumps(sample)``, pickle by default), named
    ``output_path/name_prefix-00000-of-00009`` … (index, and the last index). Shards of an
    earlier conversion with the same prefix are replaced. Returns the file names, in order.

    The files are written under temporary names and renamed once all are complete, so a
    reader never sees a partial set.
    """
    if not name_prefix or "/" in name_prefix:
        raise ValueError(f"name_prefix must be a file name prefix, not {name_prefix!r}")
    out = Path(output_path)
    out.mkdir(parents=True, exist_ok=True)
    temporary: list[Path] = []
    try:
        for index, batch in enumerate(_batches(reader, line_count)):
            path = out / f".{name_prefix}-{index:05d}.tmp"
            temporary.append(path)
            with recordio.Writer(path, compressor=compressor) as writer:
                for sample in batch:
                    writer.write(dumps(sample))
        old = re.compile(re.escape(name_prefix) + r"-\d{5,}-of-\d{5,}")
        for stale in out.iterdir():
            if old.fullmatch(stale.name):
                stale.unlink()
        names = []
        for index, path in enumerate(temporary):
            final = out / shard_name(name_prefix, index, len(temporary) - 1)
            os.replace(path, final)
            names.append(str(final))
        return names
    finally:
        for path in temporary:
            path.unlink(missing_ok=True)


def build_once(root: str | os.PathLike, build: Callable[[Path], None], *,
               done: str = "meta.json") -> Path:
    """Build the directory ``root`` with ``build(tmp)`` unless it is complete already (it holds
    the file ``done``, which ``build`` writes last).

    Every trainer of a job may call this at the same moment: each builds a complete copy in a
    temporary directory beside ``root`` and renames it into place. The rename is atomic, so
    readers only ever see a complete directory; the losers of the race drop their copy.
    """
    root = Path(root)
    if (root / done).exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        build(tmp)
        try:
            tmp.rename(root)  # replaces a missing or empty root, fails on a complete one
        except OSError:
            if not (root / done).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _share(trainer_count: int | None, trainer_id: int | None) -> tuple[int, int]:
    count = env.trainer_count() if trainer_count is None else trainer_count
    index = env.trainer_id() if trainer_id is None else trainer_id
    for name, value in (("trainer_count", count), ("trainer_id", index)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be a whole number, not {value!r}")
    if count < 1:
        raise ValueError(f"trainer_count must be at least 1, not {count}")
    if not 0 <= index < count:
        raise ValueError(f"trainer_id {index} is not in 0..{count - 1}")
    return count, index


def trainer_files(files_pattern: str | os.PathLike, trainer_count: int | None = None,
                  trainer_id: int | None = None) -> list[str]:
    """This trainer's files among those matching ``files_pattern``: sorted by name, file
    ``i`` for trainer ``i % trainer_count``."""
    count, index = _share(trainer_count, trainer_id)
    files = sorted(glob.glob(str(env.pfs_path(files_pattern))))
    return [name for i, name in enumerate(files) if i % count == index]


def cluster_files_reader(files_pattern: str | os.PathLike, trainer_count: int | None = None,
                         trainer_id: int | None = None,
                         loader: Callable[[Any], Iterable[Any]] = pickle.load, *,
                         train_id: int | None = None, mode: str = "rb") -> Reader:
    """A reader of this trainer's share of the files ``split`` wrote: each of its files is
    ``loader(file)`` (a list of samples), and the samples are yielded in order.

    ``train_id`` is the seeds' misspelling of ``trainer_id``, accepted.
    """
    if train_id is not None:
        if trainer_id is not None and trainer_id != train_id:
            raise TypeError("give trainer_id or train_id, not both")
        trainer_id = train_id
    if not callable(loader):
        raise TypeError("loader must be callable as loader(file), e.g. pickle.load")
    count, index = _share(trainer_count, trainer_id)

    def reader() -> Iterator[Any]:
        for name in trainer_files(files_pattern, count, index):
            with open(name, mode) as f:
                yield from loader(f)

    return reader


def recordio_reader(files_pattern: str | os.PathLike, trainer_count: int | None = None,
                    trainer_id: int | None = None,
                    loads: Callable[[bytes], Any] = pickle.loads) -> Reader:
    """A reader of this trainer's share of the RecordIO files ``convert`` wrote: each record
    is ``loads(record)`` (pickle by default). The seeds' ``recordio_reader(filepath,
    parallelism, trainer_id)``."""
    count, index = _share(trainer_count, trainer_id)

    def reader() -> Iterator[Any]:
        files = trainer_files(files_pattern, count, index)
        if not files:
            return
        with recordio.Reader(files) as records:
            for record in records:
                yield loads(record)

    return reader


def parse_csv_numbers(line: str) -> tuple:
    """``"1,2.5,3"`` -> ``(1, 2.5, 3)``: the seeds' dist_reader parsing (whole numbers as int,
    others as float)."""
    values = []
    for cell in line.strip().split(","):
        cell = cell.strip()
        try:
            values.append(int(cell))
        except ValueError:
            values.append(float(cell))
    return tuple(values)


def dist_reader(filename: str | os.PathLike, trainers: int | None = None,
                trainer_id: int | None = None,
                parse: Callable[[str], Any] = parse_csv_numbers) -> Reader:
    """A reader of this trainer's lines of one text file: line ``i`` (from 0) for trainer
    ``i % trainers``, each ``parse(line)`` — comma-separated numbers as a tuple by default.
    Blank lines are skipped (and not counted).

    The seeds' example counted lines from 1 (its trainer 0 read lines 2, 4, …); counting from
    0 gives trainer 0 the first line, so it reads something even when the file has fewer lines
    than there are trainers.
    """
    count, index = _share(trainers, trainer_id)
    path = env.pfs_path(filename)

    def reader() -> Iterator[Any]:
        with open(path, encoding="utf-8") as f:
            number = 0
            for line in f:
                if not line.strip():
                    continue
                if number % count == index:
                    yield parse(line.rstrip("\n"))
                number += 1

    return reader
