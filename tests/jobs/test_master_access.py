"""How replicas reach their job's master (docs/master.md), on both backends: the environment
contract gives every replica of a job with a dataset ``PADDLECLOUD_MASTER_URL`` and
``PADDLECLOUD_MASTER_TOKEN`` (and no other job any), the token is the one the portal checks and
never appears in a dry run, a pod template or a log, users cannot set either name, and a
sandboxed local replica really reaches the portal's master through its job's relay."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import time
import uuid
from types import SimpleNamespace

import pytest

from jobs import engine
from jobs.backends import backend_for
from jobs.backends.base import Status
from jobs.backends.kubernetes.client import kube_for
from jobs.backends.kubernetes.pods import job_secret_name
from jobs.backends.local.backend import job_dir, relay_file
from jobs.backends.local.relay import relay_read
from jobs.backends.netns import netns_read
from jobs.files import output_dir
from jobs.master import dispatch
from jobs.models import Job
from jobs.services import job_submit
from kernel.errors import ValidationError
from paddlecloud_core.contract import (
    MASTER_VARIABLES,
    RESERVED_ENV,
    SECRET_ENV,
    Paths,
    TaskMaster,
    Topology,
    job_namespace,
    master_token,
    replica_env,
)
from paddlecloud_core.spec import spec_check
from tests.factories import HOME, PACKAGE, package_write
from tests.jobs.files import log_path
from tests.jobs.master_scenario import one_trainer_job
from tests.processes import run_python

URL, TOKEN = MASTER_VARIABLES
DATASET = f"{HOME}/data/part-*.txt"


# --- the contract ---------------------------------------------------------------------------

# What replica_env reads of a job.
Plain = SimpleNamespace(name="j", trainers=2, pservers=1, passes=1, gpu=0, env={},
                        keep_checkpoints=3, uid="5a0c8f1e-0000-4000-8000-00000000000a",
                        resume_from="",
                        datacenter=SimpleNamespace(name="dc1"))


def test_replicas_get_the_master_exactly_when_the_topology_has_one():
    paths = Paths(output="/o", pfs_home="/h", pfs_public="/p", checkpoints="/c")
    plain = Topology(pservers=("127.0.0.1:1",), trainers=("127.0.0.1:2", "127.0.0.1:3"),
                     master=None)
    access = TaskMaster(url="http://portal/api/v1/master/u", token="pcm_secret")
    with_master = dataclasses.replace(plain, task_master=access)
    for role, index in (("trainer", 0), ("trainer", 1), ("pserver", 0)):
        assert not set(MASTER_VARIABLES) & set(
            replica_env(Plain, role, index, plain, paths, "ns"))
        env = replica_env(Plain, role, index, with_master, paths, "ns")
        assert (env[URL], env[TOKEN]) == (access.url, access.token)
    assert "pcm_secret" not in repr(with_master)  # a topology may be logged, its token not
    assert TOKEN in SECRET_ENV and set(MASTER_VARIABLES) <= RESERVED_ENV


@pytest.mark.parametrize("name", MASTER_VARIABLES)
def test_users_cannot_set_the_master_variables(name):
    checked = spec_check({"name": "j", "package": PACKAGE, "entry": "python train.py",
                          "env": {name: "http://elsewhere"}}, default_image="img")
    assert any(name in key for key in checked.errors), checked.errors


@pytest.mark.django_db
def test_users_cannot_set_them_through_the_portal(alice, datacenter, package):
    with pytest.raises(ValidationError) as refused:
        job_submit(alice, datacenter, {"name": "j", "package": PACKAGE,
                                       "entry": "python train.py", "env": {TOKEN: "mine"}})
    assert any(TOKEN in key for key in refused.value.fields), refused.value.fields


def test_the_backends_token_is_the_one_the_portal_checks(settings):
    job = Job(uid=uuid.uuid4())
    assert master_token(settings.SECRET_KEY, job.uid) == dispatch.master_token(job)
    assert master_token(settings.SECRET_KEY, uuid.uuid4()) != dispatch.master_token(job)


SETTINGS_PROBE = """
import django, json
django.setup()
from django.conf import settings
print(json.dumps([settings.PADDLECLOUD_PORTAL_URL, settings.PADDLECLOUD_MASTER_BASE_URL]))
"""


def test_the_portals_addresses_are_settings_with_defaults(tmp_path):
    found = run_python(["-c", SETTINGS_PROBE], tmp_path / "var")
    assert json.loads(found.stdout) == ["http://127.0.0.1:8000",  # runportal's, ./dev up's
                                        "http://paddlecloud.paddlecloud.svc"], found.stderr
    given = run_python(["-c", SETTINGS_PROBE], tmp_path / "var",
                       PADDLECLOUD_PORTAL_URL="http://127.0.0.1:9000/",
                       PADDLECLOUD_MASTER_BASE_URL="http://portal.tools.svc:8080/pc")
    assert json.loads(given.stdout) == ["http://127.0.0.1:9000",
                                        "http://portal.tools.svc:8080/pc"], given.stderr
    for wrong in ("127.0.0.1:8000", "ftp://host", "http://host/?x=1"):
        refused = run_python(["-c", SETTINGS_PROBE], tmp_path / "var",
                             PADDLECLOUD_PORTAL_URL=wrong)
        assert "ImproperlyConfigured: PADDLECLOUD_PORTAL_URL=" in refused.stderr, wrong


# --- on both backends ------------------------------------------------------------------------

@pytest.fixture
def package(pfs_home) -> str:
    """The package, and a dataset beside it."""
    (pfs_home / "data").mkdir()
    (pfs_home / "data" / "part-0.txt").write_text("a\nb\nc\n")
    return package_write(pfs_home, REPLICA)


# Prints where its master is, and a digest of the token (never the token).
REPLICA = """\
import hashlib, json, os
print("MASTER " + json.dumps({
    "url": os.environ.get("PADDLECLOUD_MASTER_URL"),
    "token": hashlib.sha256(os.environ["PADDLECLOUD_MASTER_TOKEN"].encode()).hexdigest()
    if "PADDLECLOUD_MASTER_TOKEN" in os.environ else None}), flush=True)
"""


@pytest.fixture(params=["local", "kubernetes"])
def backend(request, datacenter):
    if request.param == "kubernetes":
        request.getfixturevalue("kube_datacenter")
    elif request.param == "kubernetes-pods":
        request.getfixturevalue("kube_pods_datacenter")
    return backend_for(datacenter)


@pytest.fixture
def make_job(package, prepared_jobs):
    def make(dataset: str = DATASET, trainers: int = 1, pservers: int = 0) -> Job:
        return prepared_jobs("m", trainers, pservers, dataset=dataset,
                             dataset_unit="file" if dataset else "")

    return make


def envs(backend, job) -> dict[str, dict[str, str]]:
    """Each replica's environment as the engine builds it."""
    replicas = list(job.replicas.order_by("role", "index"))
    topology = engine.job_topology(job, backend, replicas)
    return {r.name: replica_env(job, r.role, r.index, topology, backend.paths(job),
                                job_namespace(job.datacenter, job.owner.username))
            for r in replicas}


def expected_url(backend, job, settings) -> str:
    if backend.name == "kubernetes":
        return f"{settings.PADDLECLOUD_MASTER_BASE_URL}/api/v1/master/{job.uid}"
    return f"http://127.0.0.1:80/api/v1/master/{job.uid}"  # its relay, in its sandbox


@pytest.mark.django_db
def test_every_replica_of_a_job_with_a_dataset_gets_its_master(backend, make_job, settings):
    settings.PADDLECLOUD_MASTER_BASE_URL = "http://portal.example.svc"
    job = make_job(trainers=2, pservers=1)
    seen = envs(backend, job)
    assert set(seen) == {"pserver-0", "trainer-0", "trainer-1"}
    for env in seen.values():
        assert env[URL] == expected_url(backend, job, settings)
        assert dispatch.master_job(job.uid, env[TOKEN]).pk == job.pk  # the token the views accept
    other = make_job(dataset="")
    for env in envs(backend, other).values():
        assert not set(MASTER_VARIABLES) & set(env)


@pytest.mark.django_db
@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_without_a_sandbox_local_replicas_call_the_portal_itself(backend, make_job, settings):
    settings.PADDLECLOUD_LOCAL_SANDBOX = "off"
    settings.PADDLECLOUD_PORTAL_URL = "http://127.0.0.1:8123/prefix"
    job = make_job()
    assert envs(backend, job)["trainer-0"][URL] == (
        f"http://127.0.0.1:8123/prefix/api/v1/master/{job.uid}")


@pytest.mark.django_db
@pytest.mark.parametrize("backend", ["local", "kubernetes-pods"], indirect=True)
def test_a_running_replica_finds_its_master_in_its_environment(backend, make_job, settings,
                                                               caplog):
    caplog.set_level(logging.DEBUG)
    job = make_job()
    replica = job.replicas.get()
    token = dispatch.master_token(job)
    env = envs(backend, job)[replica.name]
    backend.start(job, replica, env)
    deadline = time.monotonic() + 60
    while (seen := backend.observe(job, replica)).status != Status.EXITED:
        assert seen.status != Status.LOST and time.monotonic() < deadline, seen
        time.sleep(0.05)
    assert seen.exit_code == 0
    log = log_path(job, replica)
    deadline = time.monotonic() + 5
    while "MASTER " not in (text := log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    printed = json.loads(text.split("MASTER ", 1)[1].splitlines()[0])
    assert printed == {"url": expected_url(backend, job, settings),
                       "token": hashlib.sha256(token.encode()).hexdigest()}
    backend.stop(job, [replica], grace=1)
    # Never logged: not by the portal, not in the job's output (its log, setup), nor in the
    # local backend's own files (the runners' logs).
    assert token not in caplog.text
    for path in [*output_dir(job).rglob("*"), *(job_dir(job) / "run").glob("*.log")]:
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path


# --- Kubernetes: the token is in a Secret, never in a pod template or a dry run -----------------

@pytest.mark.django_db
def test_on_kubernetes_the_token_is_in_the_jobs_secret_and_pods_reference_it(
        kube_datacenter, k8s_api, alice, datacenter, package, token_client):
    backend = backend_for(datacenter)
    dry = token_client.post("/api/v1/jobs/", {
        "name": "reader", "package": PACKAGE, "entry": "python train.py", "trainers": 2,
        "pservers": 1, "dataset": DATASET, "dry_run": True}, format="json")
    assert dry.status_code == 200, dry.content
    shown = dry.json()["objects"]
    secret = next(o for o in shown if o["kind"] == "Secret")
    assert set(secret["stringData"]) == {TOKEN} and "data" not in secret
    assert "pcm_" not in json.dumps(dry.json())  # no token, in the objects nor the YAML
    for obj in shown:
        if obj["kind"] in ("Job", "StatefulSet"):
            spec = obj["spec"]["template"]["spec"]
            for container in spec["containers"] + spec["initContainers"]:
                named = {item["name"]: item for item in container.get("env", [])}
                if container["name"] == "setup":
                    continue
                assert named[TOKEN] == {"name": TOKEN, "valueFrom": {"secretKeyRef": {
                    "name": secret["metadata"]["name"], "key": TOKEN}}}
                assert "/api/v1/master/" in named[URL]["value"]

    job = job_submit(alice, datacenter, {"name": "reader", "package": PACKAGE,
                                         "entry": "python train.py", "trainers": 2,
                                         "pservers": 1, "dataset": DATASET}).job
    try:
        backend.prepare(job)
        token = dispatch.master_token(job)
        namespace = job_namespace(datacenter, alice.username)
        made = kube_for(datacenter).get("Secret", namespace, job_secret_name(job))
        assert base64.b64decode(made["data"][TOKEN]).decode() == token
        assert made["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap"  # the root's
        assert made["immutable"] is True
        for kind in ("configmaps", "services", "statefulsets.apps", "jobs.batch"):
            for obj in k8s_api.store.list(kind, namespace):
                assert token not in json.dumps(obj), (kind, obj["metadata"]["name"])
    finally:
        backend.stop(job, list(job.replicas.all()), grace=0)
        backend.cleanup(job)
    deadline = time.monotonic() + 10
    while kube_for(datacenter).get("Secret", namespace, job_secret_name(job)) is not None:
        assert time.monotonic() < deadline, "the job's Secret outlived it"
        time.sleep(0.05)


# --- a sandboxed replica and the portal's master, for real -------------------------------------

READER = """\
import json, os, urllib.request
url = os.environ["PADDLECLOUD_MASTER_URL"]
request = urllib.request.Request(
    url + "/next", data=json.dumps({"trainer": int(os.environ["PADDLE_TRAINER_ID"])}).encode(),
    headers={"Authorization": "Bearer " + os.environ["PADDLECLOUD_MASTER_TOKEN"],
             "Content-Type": "application/json"})
print("ANSWER " + urllib.request.urlopen(request, timeout=30).read().decode(), flush=True)
"""


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_local_replica_reads_a_task_from_the_portals_master(live_portal, held_tasks,
                                                              settings, sandbox, caplog):
    caplog.set_level(logging.DEBUG)
    settings.PADDLECLOUD_LOCAL_SANDBOX = sandbox
    with one_trainer_job(live_portal, READER) as (job, log):
        assert job.state == "succeeded", (job.state_reason, log)
        answer = json.loads(log.split("ANSWER ", 1)[1].splitlines()[0])
        assert answer["task"]["spans"] == [
            {"path": f"{HOME}/data/part-0.txt", "kind": "file"}]
        assert dispatch.master_token(job) not in caplog.text + log
        # The job's network and its relay went when it ended; nothing is left of them.
        run = job_dir(job) / "run"
        assert netns_read(run / "netns.pid") is None
        assert relay_read(relay_file(job_dir(job))) is None
        assert not relay_file(job_dir(job)).exists()
