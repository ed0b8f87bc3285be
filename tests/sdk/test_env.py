"""paddlecloud_sdk.env: the environment contract as functions — today's (fleet) names first,
the seeds' legacy names as the fallback, and sensible answers outside a job."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from paddlecloud_core.contract import Paths, Topology, replica_env
from paddlecloud_sdk import env
from tests.sdk.conftest import set_env


def contract_env(role: str, index: int, *, trainers=3, pservers=2, passes=4, gpu=0,
                 tmp=Path("/tmp/x")) -> dict[str, str]:
    """What paddlecloud_core/contract.py gives a replica of a job."""
    job = SimpleNamespace(env={"EXTRA": "1"}, name="fit-a-line", trainers=trainers,
                          passes=passes, gpu=gpu, datacenter=SimpleNamespace(name="dc1"),
                          keep_checkpoints=3, uid="5a0c8f1e-0000-4000-8000-00000000000b",
                          resume_from="")
    topology = Topology(
        pservers=tuple(f"10.0.0.{i}:700{i}" for i in range(pservers)),
        trainers=tuple(f"10.0.1.{i}:800{i}" for i in range(trainers)),
        master=None if pservers else "10.0.1.0:9000")
    paths = Paths(output=str(tmp / "out"), pfs_home=str(tmp / "home" / "alice"),
                  pfs_public=str(tmp / "public"), checkpoints=str(tmp / "ckpt"))
    return replica_env(job, role, index, topology, paths, "paddle-alice")


def test_outside_a_job():
    assert env.in_job() is False
    assert env.trainer_id() == 0
    assert env.trainer_count() == 1
    assert env.role() == "TRAINER" and env.is_trainer() and not env.is_pserver()
    assert env.pserver_id() is None
    assert env.datacenter() is None and env.job_name() is None and env.namespace() is None
    assert env.pserver_endpoints() == [] and env.pserver_count() == 0
    assert env.trainer_endpoints() == []
    assert env.current_endpoint() is None and env.master_endpoint() is None
    assert env.num_passes() == 1 and env.num_passes(default=7) == 7
    assert env.use_gpu() is False
    assert env.output_dir() == Path("output").absolute()
    assert env.output_dir(default="/tmp/o") == Path("/tmp/o")
    assert env.pfs_home() is None and env.pfs_public() is None


def test_a_trainer_of_the_portal_sees_its_job(monkeypatch, tmp_path):
    set_env(monkeypatch, contract_env("trainer", 2, tmp=tmp_path))
    assert env.in_job() is True
    assert env.job_name() == "fit-a-line"
    assert env.namespace() == "paddle-alice"
    assert env.datacenter() == "dc1"
    assert env.role() == "TRAINER"
    assert env.trainer_id() == 2
    assert env.trainer_count() == 3
    assert env.pserver_id() is None
    assert env.pserver_endpoints() == ["10.0.0.0:7000", "10.0.0.1:7001"]
    assert env.trainer_endpoints() == ["10.0.1.0:8000", "10.0.1.1:8001", "10.0.1.2:8002"]
    assert env.current_endpoint() == "10.0.1.2:8002"
    assert env.num_passes() == 4
    assert env.use_gpu() is False
    assert env.output_dir() == tmp_path / "out"
    assert env.pfs_home() == tmp_path / "home" / "alice"
    assert env.pfs_public() == tmp_path / "public"


def test_a_pserver_of_the_portal(monkeypatch):
    set_env(monkeypatch, contract_env("pserver", 1, gpu=1))
    assert env.in_job() is True
    assert env.role() == "PSERVER" and env.is_pserver()
    assert env.pserver_id() == 1
    assert env.current_endpoint() == "10.0.0.1:7001"
    assert env.use_gpu() is True


def test_a_collective_job_has_a_master(monkeypatch):
    set_env(monkeypatch, contract_env("trainer", 0, pservers=0))
    assert env.pserver_endpoints() == []
    assert env.master_endpoint() == "10.0.1.0:9000"
    monkeypatch.delenv("PADDLE_MASTER")
    assert env.master_endpoint() == "10.0.1.0:8000"  # the first trainer, as paddle does


def test_fleet_names_win_over_legacy_ones(monkeypatch):
    set_env(monkeypatch, {"PADDLE_TRAINER_ID": "1", "TRAINER_ID": "5",
                          "PADDLE_INIT_TRAINER_ID": "6", "PADDLE_TRAINERS_NUM": "2",
                          "TRAINERS": "9", "PADDLE_INIT_NUM_GRADIENT_SERVERS": "9"})
    assert (env.trainer_id(), env.trainer_count()) == (1, 2)


@pytest.mark.parametrize(("variables", "expected"), [
    ({"TRAINER_ID": "3", "TRAINERS": "4"}, (3, 4)),  # seed 002
    ({"PADDLE_INIT_TRAINER_ID": "2", "PADDLE_INIT_NUM_GRADIENT_SERVERS": "5"}, (2, 5)),  # 003
    ({"PADDLE_NNODES": "6"}, (0, 6)),
])
def test_legacy_names_are_the_fallback(monkeypatch, variables, expected):
    set_env(monkeypatch, variables)
    assert (env.trainer_id(), env.trainer_count()) == expected


def test_legacy_pserver_list_with_its_port(monkeypatch):
    set_env(monkeypatch, {"PADDLE_INIT_PSERVERS": "172.17.29.47,172.17.37.46",
                          "PADDLE_INIT_PORT": "7164"})
    assert env.pserver_endpoints() == ["172.17.29.47:7164", "172.17.37.46:7164"]
    monkeypatch.delenv("PADDLE_INIT_PORT")
    with pytest.raises(ValueError, match="PADDLE_INIT_PORT"):
        env.pserver_endpoints()


def test_current_endpoint_from_pod_ip_and_port(monkeypatch):
    set_env(monkeypatch, {"POD_IP": "10.1.2.3", "PADDLE_PORT": "6170"})
    assert env.current_endpoint() == "10.1.2.3:6170"


def test_blank_values_count_as_unset(monkeypatch):
    set_env(monkeypatch, {"PADDLE_TRAINER_ID": " ", "TRAINER_ID": "2",
                          "PADDLE_PSERVERS_IP_PORT_LIST": ""})
    assert env.trainer_id() == 2
    assert env.pserver_endpoints() == []


@pytest.mark.parametrize(("name", "value", "call", "message"), [
    ("PADDLE_TRAINER_ID", "one", env.trainer_id, "PADDLE_TRAINER_ID='one' is not a whole"),
    ("PADDLE_TRAINER_ID", "-1", env.trainer_id, "at least 0"),
    ("PADDLE_TRAINERS_NUM", "0", env.trainer_count, "at least 1"),
    ("PADDLE_INIT_NUM_PASSES", "x", env.num_passes, "PADDLE_INIT_NUM_PASSES"),
    ("TRAINING_ROLE", "MASTER", env.role, "TRAINER or PSERVER"),
])
def test_malformed_values_name_the_variable(monkeypatch, name, value, call, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        call()


def test_role_is_case_insensitive(monkeypatch):
    monkeypatch.setenv("TRAINING_ROLE", "pserver")
    assert env.role() == "PSERVER"


@pytest.mark.parametrize(("variables", "inside"), [
    ({"JOB_NAME": "x", "TRAINING_ROLE": "TRAINER"}, True),
    ({"JOB_NAME": "x", "PADDLE_INIT_TRAINER_ID": "0"}, True),  # a seed-era job
    ({"JOB_NAME": "x"}, False),  # a name alone is not a replica
    ({"PADDLE_TRAINER_ID": "0"}, False),  # paddle.distributed.launch on a laptop
    ({"JOB_NAME": "x", "TRAINING_ROLE": "TRAINER", "PADDLE_NOTEBOOK": "YES"}, False),  # seed
])
def test_in_job(monkeypatch, variables, inside):
    set_env(monkeypatch, variables)
    assert env.in_job() is inside


def test_pfs_paths_are_found_where_the_replica_sees_them(monkeypatch, tmp_path):
    set_env(monkeypatch, contract_env("trainer", 0, tmp=tmp_path))
    home, public = tmp_path / "home" / "alice", tmp_path / "public"
    assert env.pfs_path("/pfs/dc1/home/alice/data/a.txt") == home / "data" / "a.txt"
    assert env.pfs_path("/pfs/dc1/home/alice") == home
    assert env.pfs_path("/pfs/dc1/public/uci/train-*") == public / "uci" / "train-*"
    # Not ours to translate: another user, another datacenter, not PFS, too short.
    for path in ("/pfs/dc1/home/bob/x", "/pfs/dc2/home/alice/x", "/data/x", "/pfs/dc1",
                 "relative/x"):
        assert env.pfs_path(path) == Path(path)


def test_pfs_paths_without_the_contract_are_left_alone():
    assert env.pfs_path("/pfs/dc1/home/alice/x") == Path("/pfs/dc1/home/alice/x")


def test_generated_datasets_go_to_the_home_or_else_the_output(monkeypatch, tmp_path):
    set_env(monkeypatch, contract_env("trainer", 0, tmp=tmp_path))
    assert env.dataset_dir("uci") == tmp_path / "home" / "alice" / "datasets" / "uci"
    monkeypatch.delenv("PADDLE_PFS_HOME")
    monkeypatch.setenv("PADDLE_OUTPUT_DIR", str(tmp_path / "out"))
    assert env.dataset_dir("uci") == tmp_path / "out" / "data" / "uci"


def test_summary_is_plain_data(monkeypatch, tmp_path):
    import json

    set_env(monkeypatch, contract_env("trainer", 1, tmp=tmp_path))
    summary = env.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["trainer_id"] == 1 and summary["trainer_count"] == 3
    assert summary["in_job"] is True


def test_env_imports_nothing_but_the_standard_library():
    """A trainer image has neither Django nor paddlectl's dependencies."""
    import subprocess
    import sys

    code = ("import sys; import paddlecloud_sdk.env, paddlecloud_sdk.dataset, "
            "paddlecloud_sdk.recordio, paddlecloud_sdk.checkpoint; "
            "bad = sorted(m for m in ('django', 'requests', 'yaml', 'paddlectl', 'jobs') "
            "if m in sys.modules); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out
