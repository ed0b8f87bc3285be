"""PaddleJob's arguments (the seeds' names among them) and what it checks before sending
anything; dist_train's two sides. No server here: nothing may need one."""

from __future__ import annotations

import socket

import pytest

from paddlecloud_client.api import ApiClient
from paddlecloud_sdk import CephFSVolume, PaddleJob, dist_train
from paddlecloud_sdk.errors import (
    ApiError,
    ConfigError,
    JobSpecError,
    NetworkError,
    PaddlectlError,
)
from paddlecloud_sdk.job import IgnoredParameterWarning
from tests.factories import PACKAGE
from tests.sdk.conftest import set_env, write_config


def job(**kwargs) -> PaddleJob:
    args = {"job_name": "fit-a-line", "entry_point": "python train.py", "trainer_package": PACKAGE}
    return PaddleJob(**{**args, **kwargs})


def refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def offline_config(tmp_path, monkeypatch):
    """A config whose endpoint refuses connections."""
    config = write_config(tmp_path / ".paddle" / "config", f"http://127.0.0.1:{refused_port()}")
    monkeypatch.setenv("PADDLE_CONFIG", str(config))
    return config


def test_defaults_make_the_apis_defaults():
    assert job().spec() == {
        "name": "fit-a-line", "package": PACKAGE, "entry": "python train.py", "trainers": 1,
        "pservers": 0, "cpu": "1", "memory": "1Gi", "gpu": 0}


def test_every_parameter_reaches_the_api():
    spec = job(memory="2Gi", cpu_nums=0.5, gpu_nums=1, runtime_image="paddle:2.6",
               pservers=2, trainers=3, passes=5, env={"NUM_PASS": 4, "MODE": "x"},
               topology="trainer_config.py", pscpu="500m", psmemory="512Mi",
               restart_limit=2, deadline_seconds=3600, ttl_seconds_after_finished=60,
               trainer_package=PACKAGE + "/").spec()
    assert spec == {
        "name": "fit-a-line", "package": PACKAGE, "entry": "python train.py", "trainers": 3,
        "pservers": 2, "cpu": "0.5", "memory": "2Gi", "gpu": 1, "passes": 5,
        "image": "paddle:2.6", "topology": "trainer_config.py", "pscpu": "500m",
        "psmemory": "512Mi", "restart_limit": 2, "deadline_seconds": 3600,
        "ttl_seconds_after_finished": 60, "env": {"NUM_PASS": "4", "MODE": "x"}}


def test_the_seeds_names_are_accepted():
    """Seed 002's example, and seed 001's names."""
    with pytest.warns(IgnoredParameterWarning) as warned:
        seed = PaddleJob(pservers=3, runtime_image="yancey1989/paddle-job",
                         job_name="paddle-job", namespace="yanxu", use_gpu=False, cpu_num=3,
                         trainer_package_path="/pfs/dc/home/u/word2vec",
                         entry_point="python train.py",
                         cephfs_volume=CephFSVolume(monitors_addr="172.19.32.166:6789"))
    assert {str(w.message).split(" is ignored")[0] for w in warned} == \
        {"PaddleJob(namespace=...)", "PaddleJob(cephfs_volume=...)"}
    assert "configured per datacenter" in str(warned[1].message)
    assert (seed.cpu_nums, seed.gpu_nums, seed.pservers) == (3, 0, 3)
    assert seed.trainer_package == "/pfs/dc/home/u/word2vec"
    assert seed.runtime_image == "yancey1989/paddle-job"

    other = PaddleJob(jobname="quickstart", entry="python t.py", package=PACKAGE, use_gpu=True,
                      base_image="paddlepaddle/paddle:0.10.rc2", memory="512M", parallelism=4,
                      gpu_num=2, cpu=2)
    assert (other.job_name, other.entry_point, other.runtime_image) == \
        ("quickstart", "python t.py", "paddlepaddle/paddle:0.10.rc2")
    assert (other.trainers, other.gpu_nums, other.cpu_nums, other.memory) == (4, 2, 2, "512M")
    assert job(use_gpu=True).gpu_nums == 1


def test_cephfs_volume_defaults_are_the_seeds():
    assert CephFSVolume("m:6789") == CephFSVolume(
        monitors_addr="m:6789", user="admin", secret_name="cephfs-secret",
        mount_path="/mnt/cephfs", path="/")


def test_an_unknown_argument_is_a_type_error():
    with pytest.raises(TypeError, match="'volume'"):
        job(volume="quickstart")


def test_a_parameter_given_twice_differently():
    with pytest.raises(JobSpecError, match="cpu_nums: given twice, as cpu_nums and as cpu_num"):
        job(cpu_nums=2, cpu_num=3)
    assert job(cpu_nums=2, cpu_num=2).cpu_nums == 2
    with pytest.raises(JobSpecError, match="use_gpu=False"):
        job(gpu_nums=1, use_gpu=False)


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"job_name": None}, "job_name", "required"),
    ({"job_name": "my_job"}, "job_name", "'_'"),
    ({"job_name": "My-Job"}, "job_name", "lower-case"),
    ({"job_name": "-job"}, "job_name", "starting and ending"),
    ({"job_name": "x" * 41}, "job_name", "at most 40"),
    ({"entry_point": " "}, "entry_point", "required"),
    ({"trainer_package": None}, "trainer_package", "required"),
    ({"trainer_package": 7}, "trainer_package", "a path"),
    ({"memory": "lots"}, "memory", "not an amount of bytes"),
    ({"psmemory": 1.5}, "psmemory", "not a whole number of bytes"),
    ({"cpu_nums": "two"}, "cpu_nums", "not a CPU amount"),
    ({"cpu_nums": 0}, "cpu_nums", "more than 0"),
    ({"pscpu": True}, "pscpu", "not a CPU amount"),
    ({"trainers": 0}, "trainers", "between 1 and 1000"),
    ({"trainers": "2"}, "trainers", "not a whole number"),
    ({"pservers": -1}, "pservers", "between 0 and 1000"),
    ({"gpu_nums": 1.0}, "gpu_nums", "not a whole number"),
    ({"passes": 0}, "passes", "between 1 and 100000"),
    ({"deadline_seconds": 0}, "deadline_seconds", "between 1 and"),
    ({"runtime_image": ""}, "runtime_image", "non-empty"),
    ({"env": ["A=1"]}, "env", "mapping"),
    ({"env": {"1A": "x"}}, "env.1A", "not a valid variable name"),
    ({"env": {"A": None}}, "env.A", "a string or a number"),
    ({"env": {"A": True}}, "env.A", "a string or a number"),
])
def test_mistakes_are_named(kwargs, field, words):
    with pytest.raises(JobSpecError) as caught:
        job(**kwargs)
    assert field in caught.value.fields, caught.value.fields
    assert words in caught.value.fields[field][0]
    assert f"{field}: " in str(caught.value)


def test_every_mistake_at_once():
    with pytest.raises(JobSpecError) as caught:
        PaddleJob(job_name="A_b", trainers=0, memory="x")
    assert set(caught.value.fields) == {"job_name", "entry_point", "trainer_package",
                                        "trainers", "memory"}
    error = caught.value
    assert isinstance(error, ValueError) and isinstance(error, PaddlectlError)
    assert error.exit_code == 1


def test_a_local_package_goes_to_the_jobs_directory(offline_config, tmp_path, monkeypatch):
    """Where paddlectl submit puts it: jobs/NAME/DIRNAME, beside the job's output."""
    local = job(trainer_package="./fit_a_line")
    assert local.package_path == "/pfs/datacenter1/home/alice/jobs/fit-a-line/fit_a_line"
    assert local.output_path == "/pfs/datacenter1/home/alice/jobs/fit-a-line/output"
    assert local.spec()["package"] == local.package_path
    (tmp_path / "quick_start" / "output").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "quick_start")
    assert job(trainer_package=".").package_path.endswith("/jobs/fit-a-line/quick_start")
    assert job(trainer_package="output").package_path.endswith("/jobs/fit-a-line/package")


def test_a_topology_outside_the_package_is_found_before_any_request(offline_config, tmp_path):
    with pytest.raises(JobSpecError, match=r"topology: conf\.py is not a file in the package"):
        job(trainer_package=tmp_path, topology="conf.py").submit()


def test_a_missing_local_package_is_found_before_any_request(offline_config, tmp_path):
    with pytest.raises(JobSpecError, match="is not a directory here"):
        job(trainer_package=tmp_path / "nowhere").submit()


def test_an_unreachable_portal_is_a_network_error(offline_config, tmp_path):
    (tmp_path / "pkg").mkdir()
    with pytest.raises(NetworkError, match="connection refused"):
        job(trainer_package=tmp_path / "pkg").submit()
    with pytest.raises(NetworkError):
        job().status()


def test_no_config_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLE_CONFIG", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no config at"):
        job().status()


def test_config_and_datacenter_arguments(tmp_path):
    config = write_config(tmp_path / "c", "http://127.0.0.1:1", datacenter="dc9")
    assert job(config=config).connection.datacenter.name == "dc9"
    assert job(config=str(config), datacenter="dc9").connection.home == "/pfs/dc9/home/alice"
    with pytest.raises(ConfigError, match="no datacenter named 'dc2'"):
        job(config=config, datacenter="dc2").connection  # noqa: B018


def test_the_sdk_raises_its_own_errors_which_are_the_clients_too(tmp_path):
    import paddlecloud_client.errors

    port = refused_port()
    config = write_config(tmp_path / "c", f"http://127.0.0.1:{port}")
    with pytest.raises(NetworkError) as refused:
        job(config=config, trainer_package="/pfs/dc1/home/alice/pkg").submit()
    assert type(refused.value).__module__ == "paddlecloud_sdk.errors"
    assert isinstance(refused.value, paddlecloud_client.errors.NetworkError)  # caught either way
    assert f"127.0.0.1:{port}" in str(refused.value)
    with pytest.raises(ConfigError) as missing:
        job(config=tmp_path / "nowhere").connection  # noqa: B018
    assert type(missing.value).__module__ == "paddlecloud_sdk.errors"
    assert issubclass(ApiError, paddlecloud_client.errors.ApiError)


# -- dist_train ---------------------------------------------------------------------------------

class Recorder:
    """A paddle v2 SGD stand-in: train(reader=, num_passes=, event_handler=, feeding=)."""

    def __init__(self):
        self.calls = []

    def train(self, **kwargs):
        self.calls.append(kwargs)
        return "trained"


class FakeJob:
    def __init__(self, passes=None):
        self.passes, self.submitted = passes, False

    def submit(self):
        self.submitted = True
        return self


def reader():
    return iter([1, 2])


JOB_ENV = {"JOB_NAME": "quickstart", "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "1",
           "PADDLE_TRAINERS_NUM": "2", "PADDLE_INIT_NUM_PASSES": "4"}


def test_dist_train_inside_a_job_trains(monkeypatch):
    set_env(monkeypatch, JOB_ENV)
    trainer, paddle_job = Recorder(), FakeJob()
    handler = object()
    assert dist_train(trainer, reader, num_passes=2, event_handler=handler, feeding={"x": 0},
                      paddle_job=paddle_job) == "trained"
    assert trainer.calls == [{"reader": reader, "num_passes": 4,  # the job's passes
                              "event_handler": handler, "feeding": {"x": 0}}]
    assert not paddle_job.submitted


def test_dist_train_inside_a_seed_era_job(monkeypatch):
    set_env(monkeypatch, {"JOB_NAME": "q", "PADDLE_INIT_TRAINER_ID": "0"})
    trainer = Recorder()
    dist_train(trainer, reader, num_passes=3, paddle_job=FakeJob())
    assert trainer.calls[0]["num_passes"] == 3


def test_dist_train_with_a_plain_function(monkeypatch):
    set_env(monkeypatch, JOB_ENV)
    seen = []
    assert dist_train(lambda r, n: seen.append((list(r()), n)) or "done", reader,
                      paddle_job=FakeJob()) == "done"
    assert seen == [([1, 2], 4)]

    def with_handler(r, n, event_handler=None):
        seen.append(event_handler)

    dist_train(with_handler, reader, event_handler="h")
    assert seen[-1] == "h"


def test_dist_train_outside_a_job_submits(monkeypatch):
    trainer, paddle_job = Recorder(), FakeJob()
    assert dist_train(trainer, reader, num_passes=6, paddle_job=paddle_job) is paddle_job
    assert paddle_job.submitted and paddle_job.passes == 6
    assert trainer.calls == []
    explicit = FakeJob(passes=2)
    dist_train(trainer, reader, num_passes=6, paddle_job=explicit)
    assert explicit.passes == 2


def test_dist_train_in_a_notebook_submits_even_with_a_job_environment(monkeypatch):
    set_env(monkeypatch, {**JOB_ENV, "PADDLE_NOTEBOOK": "YES"})
    paddle_job = FakeJob()
    dist_train(Recorder(), reader, paddle_job=paddle_job)
    assert paddle_job.submitted


def test_dist_train_without_a_job_trains_here():
    trainer = Recorder()
    dist_train(trainer, reader, num_passes=2)
    assert trainer.calls[0]["num_passes"] == 2


def test_dist_train_needs_a_trainer():
    with pytest.raises(TypeError, match="train"):
        dist_train(object(), reader)


# -- logs over a connection that breaks ------------------------------------------------------

class Response:
    def __init__(self, offset: str | None):
        self.headers = {} if offset is None else {"Log-Offset": offset}

    def close(self):
        pass


class BreakingClient(ApiClient):
    """The SDK's client (``ApiClient.job_log_blocks``, what ``PaddleJob.logs`` reads) over a
    connection that breaks: each request answers the next stream, an exception in a stream
    breaks it; ``offsets`` are the ``Log-Offset`` headers of the answers."""

    def __init__(self, *streams, offsets=("0",)):  # no portal: only the log's transport
        self.streams, self.requests = list(streams), []
        self.offsets = list(offsets)

    def job_logs(self, name, *, worker=None, tail=None, follow=False, offset=None):
        params = {"worker": worker, "tail": tail, "offset": offset}
        self.requests.append((name, {k: v for k, v in params.items() if v is not None}, follow))
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        self._stream = stream
        return Response(self.offsets.pop(0) if self.offsets else None)

    def iter_content(self, response):
        for block in self._stream:
            if isinstance(block, Exception):
                raise block
            yield block


def with_client(client) -> PaddleJob:
    paddle_job = job()
    paddle_job._connection = type("C", (), {"client": client})()
    return paddle_job


def test_following_logs_goes_on_from_the_byte_after_the_last_one_given(monkeypatch):
    monkeypatch.setattr("paddlecloud_client.api.LOG_RECONNECT_BACKOFF", (0, 0))
    lost = NetworkError("connection lost while receiving")
    client = BreakingClient([b"one\ntw", "é".encode()[:1], lost],
                            ["é".encode()[1:], b"o\nthree"])
    lines = list(with_client(client).logs(worker="trainer-1", follow=True))
    assert lines == ["one", "twéo", "three"]  # no line twice, the half-written one whole
    assert client.requests == [
        ("fit-a-line", {"worker": "trainer-1"}, True),
        ("fit-a-line", {"worker": "trainer-1", "offset": "7"}, True)]


def test_following_logs_gives_up_once_the_portal_stays_away(monkeypatch):
    monkeypatch.setattr("paddlecloud_client.api.LOG_RECONNECT_BACKOFF", (0, 0))
    monkeypatch.setattr("paddlecloud_client.api.LOG_RECONNECT_SECONDS", 0.2)
    refused = NetworkError("connection refused")
    client = BreakingClient([b"a\n", NetworkError("lost")], *[refused] * 10_000)
    with pytest.raises(NetworkError, match="asked for again"):
        list(with_client(client).logs(follow=True))
    assert all(params.get("offset") == "2" for _, params, _ in client.requests[1:])


def test_logs_without_follow_do_not_retry():
    client = BreakingClient([b"a\n", NetworkError("lost")], [b"b\n"])
    lines = with_client(client).logs(tail=5)
    assert next(lines) == "a"
    with pytest.raises(NetworkError):
        next(lines)
    assert client.requests == [("fit-a-line", {"tail": 5}, False)]


@pytest.mark.parametrize("tail", [-1, 1.5, "3"])
def test_logs_tail_is_a_number_of_lines(tail):
    with pytest.raises(ValueError, match="tail"):
        job().logs(tail=tail)


def test_a_dataset_reaches_the_api():
    data = "/pfs/datacenter1/home/alice/data/part-*.recordio"
    assert job(dataset=data, task_records=40).spec() == {
        **job().spec(), "dataset": data, "task_records": 40}
    assert job(dataset=data, dataset_unit="chunk").spec() == {
        **job().spec(), "dataset": data, "dataset_unit": "chunk"}
    assert "dataset" not in job().spec()


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"dataset": "data/part-*"}, "dataset", "a glob of files in PFS"),
    ({"dataset": ""}, "dataset", "a non-empty string"),
    ({"dataset": ["/pfs/a"]}, "dataset", "a non-empty string"),
    ({"task_records": 20}, "dataset", "required with dataset_unit or task_records"),
    ({"dataset_unit": "file"}, "dataset", "required with dataset_unit or task_records"),
    ({"dataset": "/pfs/dc/x/*", "dataset_unit": "pages"}, "dataset_unit",
     "one of file, chunk, records"),
    ({"dataset": "/pfs/dc/x/*", "dataset_unit": "records"}, "task_records", "required"),
    ({"dataset": "/pfs/dc/x/*", "dataset_unit": "chunk", "task_records": 5}, "task_records",
     "only with dataset_unit records"),
    ({"dataset": "/pfs/dc/x/*", "task_records": 0}, "task_records", "between 1 and"),
    ({"dataset": "/pfs/dc/x/*", "task_records": "20"}, "task_records", "not a whole number"),
])
def test_dataset_mistakes_are_named(kwargs, field, words):
    with pytest.raises(JobSpecError) as caught:
        job(**kwargs)
    assert list(caught.value.fields) == [field], caught.value.fields
    assert words in caught.value.fields[field][0]
