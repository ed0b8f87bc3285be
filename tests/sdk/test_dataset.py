"""paddlecloud_sdk.dataset: the seeds' split / convert / cluster_files_reader / dist_reader —
which samples go into which file, and which trainer reads which files and lines."""

from __future__ import annotations

import json
import marshal
import pickle
from pathlib import Path

import pytest

from paddlecloud_sdk import dataset, recordio
from tests.sdk.conftest import set_env


def numbers(n: int):
    """A reader creator of n samples, as paddle.v2.dataset readers are."""
    def reader():
        for i in range(n):
            yield (i, i / 2)
    return reader


# -- split --------------------------------------------------------------------------------------

def test_split_writes_line_count_samples_per_file(tmp_path):
    names = dataset.split(numbers(10), line_count=4, suffix=str(tmp_path / "train-%05d.pickle"))
    assert names == [str(tmp_path / f"train-{i:05d}.pickle") for i in range(3)]
    contents = [pickle.loads((tmp_path / name).read_bytes()) for name in names]  # noqa: S301
    assert [len(c) for c in contents] == [4, 4, 2]  # the original put 5 in the first
    assert [s for c in contents for s in c] == list(numbers(10)())


def test_split_default_suffix_is_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert dataset.split(numbers(3), line_count=2) == ["./00000.pickle", "./00001.pickle"]
    assert (tmp_path / "00001.pickle").exists()


def test_split_creates_the_directory_and_takes_a_dumper(tmp_path):
    suffix = str(tmp_path / "uci_housing" / "train-%05d.marshal")
    names = dataset.split(numbers(3), 3, suffix, dumper=marshal.dump)
    assert len(names) == 1
    with open(names[0], "rb") as f:
        assert marshal.load(f) == list(numbers(3)())  # noqa: S302


def test_split_with_a_text_dumper(tmp_path):
    names = dataset.split(lambda: iter([[1, 2], [3, 4]]), 1, str(tmp_path / "%d.json"),
                          dumper=json.dump, mode="w")
    assert [json.loads(Path(n).read_text()) for n in names] == [[[1, 2]], [[3, 4]]]


def test_split_of_nothing_writes_nothing(tmp_path):
    assert dataset.split(numbers(0), 5, str(tmp_path / "%05d")) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"line_count": 0}, ValueError, "line_count"),
    ({"line_count": 2.5}, ValueError, "line_count"),
    ({"suffix": "train.pickle"}, ValueError, "%d"),
    ({"dumper": "pickle"}, TypeError, "dumper"),
])
def test_split_checks_its_arguments(tmp_path, kwargs, error, match):
    args = {"line_count": 2, "suffix": str(tmp_path / "%05d"), **kwargs}
    with pytest.raises(error, match=match):
        dataset.split(numbers(3), **args)


def test_split_wants_a_reader_creator(tmp_path):
    with pytest.raises(TypeError, match="reader creator"):
        dataset.split(numbers(3)(), 2, str(tmp_path / "%05d"))


# -- cluster_files_reader -------------------------------------------------------------------

def test_each_trainer_reads_every_nth_file(tmp_path):
    dataset.split(numbers(14), 2, str(tmp_path / "train-%05d.pickle"))  # 7 files
    everything = list(numbers(14)())
    shares = {}
    for trainer_id in range(3):
        files = dataset.trainer_files(str(tmp_path / "train-*.pickle"), 3, trainer_id)
        assert [f.rsplit("-", 1)[1] for f in files] == \
            [f"{i:05d}.pickle" for i in range(7) if i % 3 == trainer_id]
        shares[trainer_id] = list(dataset.cluster_files_reader(
            str(tmp_path / "train-*.pickle"), trainer_count=3, trainer_id=trainer_id)())
    assert shares[0] == everything[0:2] + everything[6:8] + everything[12:14]
    assert shares[1] == everything[2:4] + everything[8:10]
    assert shares[2] == everything[4:6] + everything[10:12]


def test_files_are_shared_in_name_order_not_creation_order(tmp_path):
    for name in ("c", "a", "b", "d"):
        (tmp_path / f"part-{name}").write_bytes(pickle.dumps([name]))
    reader = dataset.cluster_files_reader(str(tmp_path / "part-*"), 2, 0)
    assert list(reader()) == ["a", "c"]
    assert list(reader()) == ["a", "c"]  # a reader creator: every call reads again


def test_the_trainer_defaults_come_from_the_environment(tmp_path, monkeypatch):
    dataset.split(numbers(8), 2, str(tmp_path / "%05d.pickle"))
    set_env(monkeypatch, {"PADDLE_INIT_TRAINER_ID": "1",
                          "PADDLE_INIT_NUM_GRADIENT_SERVERS": "2"})
    assert list(dataset.cluster_files_reader(str(tmp_path / "*.pickle"))()) == \
        [(2, 1.0), (3, 1.5), (6, 3.0), (7, 3.5)]


def test_outside_a_job_one_trainer_reads_everything(tmp_path):
    dataset.split(numbers(5), 2, str(tmp_path / "%05d.pickle"))
    assert list(dataset.cluster_files_reader(str(tmp_path / "*.pickle"))()) == \
        list(numbers(5)())


def test_the_seeds_train_id_and_loader(tmp_path):
    dataset.split(numbers(4), 1, str(tmp_path / "%05d.m"), dumper=marshal.dump)
    reader = dataset.cluster_files_reader(str(tmp_path / "*.m"), trainer_count=2, train_id=1,
                                          loader=marshal.load)
    assert list(reader()) == [(1, 0.5), (3, 1.5)]


@pytest.mark.parametrize(("count", "trainer_id", "error"), [
    (2, 2, ValueError), (2, -1, ValueError), (0, 0, ValueError), ("2", 0, TypeError),
])
def test_a_trainer_outside_the_job_is_an_error(tmp_path, count, trainer_id, error):
    with pytest.raises(error):
        dataset.cluster_files_reader(str(tmp_path / "*"), count, trainer_id)


def test_pfs_patterns_are_found_where_the_replica_sees_pfs(tmp_path, monkeypatch):
    home = tmp_path / "home" / "alice"
    dataset.split(numbers(4), 2, str(home / "data" / "train-%05d.pickle"))
    set_env(monkeypatch, {"PADDLE_PFS_HOME": str(home), "PADDLE_CLOUD_CURRENT_DATACENTER": "dc1",
                          "PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2"})
    reader = dataset.cluster_files_reader("/pfs/dc1/home/alice/data/train-*.pickle")
    assert list(reader()) == [(2, 1.0), (3, 1.5)]


# -- convert and the RecordIO reader ------------------------------------------------------------

def test_convert_names_shards_index_of_last_index(tmp_path):
    names = dataset.convert(tmp_path / "dataset", numbers(25), line_count=10,
                            name_prefix="uci_housing_train")
    assert [n.rsplit("/", 1)[1] for n in names] == [
        "uci_housing_train-00000-of-00002", "uci_housing_train-00001-of-00002",
        "uci_housing_train-00002-of-00002"]
    assert sorted(p.name for p in (tmp_path / "dataset").iterdir()) == \
        [n.rsplit("/", 1)[1] for n in names]  # no temporary file left
    counts = [recordio.num_records(n) for n in names]
    assert counts == [10, 10, 5]
    samples = [pickle.loads(r) for n in names for r in recordio.read_records(n)]  # noqa: S301
    assert samples == list(numbers(25)())


def test_convert_replaces_an_earlier_conversion(tmp_path):
    dataset.convert(tmp_path, numbers(30), 3, "part")  # 10 shards
    (tmp_path / "other-00000-of-00000").write_text("kept")
    names = dataset.convert(tmp_path, numbers(4), 2, "part")
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["other-00000-of-00000", "part-00000-of-00001", "part-00001-of-00001"]
    assert len(names) == 2


def test_convert_with_gzip_and_another_serializer(tmp_path):
    [name] = dataset.convert(tmp_path, numbers(3), 5, "j", dumps=lambda s: json.dumps(s).encode(),
                             compressor=recordio.GZIP)
    assert recordio.load_index(name)[0].compressor == recordio.GZIP
    assert [json.loads(r) for r in recordio.read_records(name)] == [[0, 0.0], [1, 0.5], [2, 1.0]]


@pytest.mark.parametrize("prefix", ["", "a/b"])
def test_convert_wants_a_file_name_prefix(tmp_path, prefix):
    with pytest.raises(ValueError, match="name_prefix"):
        dataset.convert(tmp_path, numbers(3), 1, prefix)


def test_recordio_reader_shares_files_between_trainers(tmp_path):
    dataset.convert(tmp_path, numbers(12), 2, "train")  # 6 shards
    shares = [list(dataset.recordio_reader(str(tmp_path / "train-*"), 4, i)())
              for i in range(4)]
    assert [len(s) for s in shares] == [4, 4, 2, 2]
    assert shares[1] == [(2, 1.0), (3, 1.5), (10, 5.0), (11, 5.5)]
    assert sorted(s for share in shares for s in share) == list(numbers(12)())


def test_recordio_reader_of_no_files_is_empty(tmp_path):
    assert list(dataset.recordio_reader(str(tmp_path / "none-*"), 1, 0)()) == []


# -- dist_reader --------------------------------------------------------------------------------

def test_dist_reader_deals_lines_round_robin(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("".join(f"{i},{i * 10},0.5\n" for i in range(7)) + "\n")
    shares = [list(dataset.dist_reader(path, trainers=3, trainer_id=i)()) for i in range(3)]
    assert shares[0] == [(0, 0, 0.5), (3, 30, 0.5), (6, 60, 0.5)]
    assert shares[1] == [(1, 10, 0.5), (4, 40, 0.5)]
    assert shares[2] == [(2, 20, 0.5), (5, 50, 0.5)]


def test_dist_reader_with_the_environment_and_a_parser(tmp_path, monkeypatch):
    path = tmp_path / "words.txt"
    path.write_text("a\nb\n\nc\nd\n")
    set_env(monkeypatch, {"TRAINER_ID": "1", "TRAINERS": "2"})  # seed 002's names
    assert list(dataset.dist_reader(path, parse=str.upper)()) == ["B", "D"]


def test_parse_csv_numbers():
    assert dataset.parse_csv_numbers("1, 2.5,-3\n") == (1, 2.5, -3)


def test_build_once_makes_one_complete_copy_appear_whatever_the_race(tmp_path):
    import threading

    root = tmp_path / "data" / "set"
    calls = []

    def build(tmp):
        calls.append(tmp)
        (tmp / "part-0").write_text("rows")
        (tmp / "meta.json").write_text("{}")  # last: the directory is complete

    threads = [threading.Thread(target=dataset.build_once, args=(root, build))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(p.name for p in root.iterdir()) == ["meta.json", "part-0"]
    assert [p.name for p in root.parent.iterdir()] == ["set"]  # no temporary left
    built = len(calls)
    assert dataset.build_once(root, build) == root and len(calls) == built  # complete: kept

    def broken(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("out of disk")

    other = tmp_path / "data" / "other"
    with pytest.raises(RuntimeError):
        dataset.build_once(other, broken)
    assert [p.name for p in root.parent.iterdir()] == ["set"]  # nothing half-built
