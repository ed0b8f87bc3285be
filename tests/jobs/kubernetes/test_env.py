"""One pod template per role, yet every replica's environment is the contract's: expanded as
Kubernetes expands it for index i, it is ``replica_env`` for i (the local backend's), save
POD_IP, which is the pod's IP. The secret ones (a job master's token) come from the job's Secret,
never from the template."""

from __future__ import annotations

import pytest

from jobs.backends.kubernetes.manifests import job_children
from jobs.backends.kubernetes.pods import paths, topology
from paddlecloud_core.contract import REPLICA_DEFAULT_ENV, RESERVED_ENV, SECRET_ENV, replica_env
from paddlecloud_core.layout import log_relpath
from tests.k8s_api_server.env import Sources, pod_env

from .factories import NAMESPACE, ROOT_UID, collective_job, pserver_job

# What the main container has beyond the contract (not compared with replica_env).
RUNTIME_ENV = ("PYTHONPATH", "PADDLECLOUD_LOG", "PADDLECLOUD_PEERS", "HOME", "XDG_CACHE_HOME")


def containers(job) -> dict[str, dict]:
    found = {}
    for obj in job_children(job, NAMESPACE, None):
        if obj["kind"] in ("Job", "StatefulSet"):
            container = obj["spec"]["template"]["spec"]["containers"][0]
            found[container["name"]] = container
    return found


def secrets(job) -> Sources:
    """The job's Secrets as the kubelet reads them (as made, with the root's uid)."""
    made = {obj["metadata"]["name"]: obj for obj in job_children(job, NAMESPACE, ROOT_UID)
            if obj["kind"] == "Secret"}
    return Sources(lambda kind, name: made.get(name) if kind == "Secret" else None)


def index_fields(role: str, index: int) -> dict[str, str]:
    pod_ip = f"10.1.{0 if role == 'trainer' else 1}.{index}"
    if role == "trainer":
        return {"metadata.annotations['batch.kubernetes.io/job-completion-index']": str(index),
                "status.podIP": pod_ip}
    return {"metadata.labels['apps.kubernetes.io/pod-index']": str(index),
            "status.podIP": pod_ip}


JOBS = {
    "collective 1": lambda: collective_job(trainers=1),
    "collective 2": lambda: collective_job(),
    "collective 12": lambda: collective_job(trainers=12),
    "pservers 1+1": lambda: pserver_job(trainers=1, pservers=1),
    "pservers 2+3": lambda: pserver_job(),
    "pservers 11+10": lambda: pserver_job(trainers=10, pservers=11),
    "odd env": lambda: collective_job(env={"X": "$(PADDLE_TRAINER_ID)", "Y": "$$ and $",
                                           "Z": "$("}),
    "dataset 2": lambda: collective_job(dataset="/pfs/dc1/home/alice/data/*",
                                        dataset_unit="file"),
    "dataset pservers 2+3": lambda: pserver_job(dataset="/pfs/dc1/home/alice/data/*",
                                                dataset_unit="file"),
}


@pytest.mark.parametrize("make_job", JOBS.values(), ids=JOBS.keys())
def test_every_index_gets_the_contract_environment(make_job):
    job = make_job()
    pods = containers(job)
    job_topology, job_paths = topology(job, NAMESPACE), paths(job)
    for role, count in (("trainer", job.trainers), ("pserver", job.pservers)):
        if not count:
            assert role not in pods
            continue
        for index in range(count):
            fields = index_fields(role, index)
            env = pod_env(pods[role], fields, secrets(job))
            expected = replica_env(job, role, index, job_topology, job_paths, NAMESPACE)
            assert env.pop("POD_IP") == fields["status.podIP"]
            expected.pop("POD_IP")
            runtime = {name: env.pop(name) for name in RUNTIME_ENV}
            listening = env.pop("PADDLECLOUD_PEERS_LISTENING", "")
            ended = env.pop("PADDLECLOUD_PEERS_ENDED", None)
            assert env == expected, (role, index)
            # A collective job's trainers say they succeeded, in the output (run.sh).
            collective = role == "trainer" and not job.pservers
            assert ended == (f"{job_paths.output}/.paddlecloud-ended/0" if collective
                             else None)
            # HOME writable whatever the uid (an emptyDir), caches under it.
            assert (runtime["HOME"], runtime["XDG_CACHE_HOME"]) == (
                "/home/paddlecloud", "/home/paddlecloud/.cache")
            assert runtime["PADDLECLOUD_LOG"] == (
                f"{job_paths.output}/{log_relpath(role, index)}")
            # run.sh waits for itself and the pservers, or a collective job's trainers.
            peers = job_topology.pservers if job.pservers else job_topology.trainers
            assert runtime["PADDLECLOUD_PEERS"].split(",") == [
                expected["PADDLE_CURRENT_ENDPOINT"], *peers]
            # ... and until a pserver job's trainers can connect to the pservers.
            waits = job.pservers and role == "trainer"
            assert listening.split(",") == (list(job_topology.pservers) if waits else [""])


def test_the_index_comes_first_so_that_later_values_may_use_it():
    for container in containers(pserver_job()).values():
        first = container["env"][0]
        assert first["name"] in ("PADDLE_TRAINER_ID", "PADDLE_PSERVER_ID")
        assert "valueFrom" in first


def test_the_pods_set_every_contract_variable_they_are_given():
    """Nothing of the contract is left out or renamed on the way into the pod template."""
    job = pserver_job()
    for role, container in containers(job).items():
        names = [item["name"] for item in container["env"]]
        assert len(names) == len(set(names))  # each once
        contract = set(replica_env(job, role, 0, topology(job, NAMESPACE), paths(job),
                                   NAMESPACE))
        assert contract <= set(names)
        assert contract <= RESERVED_ENV | set(REPLICA_DEFAULT_ENV) | set(job.env)


def test_secret_variables_are_references_to_the_jobs_secret_only():
    job = pserver_job(dataset="/pfs/dc1/home/alice/data/*", dataset_unit="file")
    token = replica_env(job, "trainer", 0, topology(job, NAMESPACE), paths(job),
                        NAMESPACE)["PADDLECLOUD_MASTER_TOKEN"]
    for container in containers(job).values():
        for item in container["env"]:
            if item["name"] in SECRET_ENV:
                assert "value" not in item and "secretKeyRef" in item["valueFrom"]
            assert token not in item.get("value", "")
    for role in ("trainer", "pserver"):
        assert "PADDLECLOUD_MASTER_TOKEN" not in {item["name"] for item in containers(
            pserver_job())[role]["env"]}


def test_a_jobs_own_env_replaces_the_quiet_log_defaults():
    """Replicas get unbuffered output, no ccache warning and no glog INFO lines by default; a
    job that asks for PaddlePaddle's INFO lines (or other warnings) with -env gets them."""
    quiet = replica_env(collective_job(), "trainer", 0, topology(collective_job(), NAMESPACE),
                        paths(collective_job()), NAMESPACE)
    assert {name: quiet[name] for name in REPLICA_DEFAULT_ENV} == {
        "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore:No ccache found:UserWarning",
        "GLOG_minloglevel": "1"}
    job = collective_job(env={"GLOG_minloglevel": "0", "PYTHONWARNINGS": "error"})
    chatty = replica_env(job, "trainer", 0, topology(job, NAMESPACE), paths(job), NAMESPACE)
    assert (chatty["GLOG_minloglevel"], chatty["PYTHONWARNINGS"]) == ("0", "error")
    assert chatty["PYTHONUNBUFFERED"] == "1"
