"""A session (a notebook) on Kubernetes: its server's token and its owner's API token are in
the job's Secret, which its pod references, never in the pod spec nor in a dry run; it reaches
the portal where a master's calls do, as its owner, with ``PADDLE_NOTEBOOK=YES``; a training
job gets none of it, and users cannot set these variables."""

from __future__ import annotations

import base64
import json

import pytest

from jobs.backends.kubernetes.manifests import job_children, job_objects
from jobs.backends.kubernetes.pods import job_secret_name
from paddlecloud_core.contract import (
    RESERVED_ENV,
    SECRET_ENV,
    SESSION_VARIABLES,
    session_api_token,
    session_token,
)
from paddlecloud_core.spec import spec_check

from .factories import NAMESPACE, ROOT_UID, collective_job

SECRETS = ("PADDLECLOUD_SESSION_TOKEN", "PADDLECLOUD_API_TOKEN")


def notebook():
    return collective_job(name="notebook-abcde", trainers=1, session="notebook",
                          entry="python -m paddlecloud_sdk.sessions notebook")


def container_env(objects) -> dict:
    job = next(o for o in objects if o["kind"] == "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item for item in container["env"]}


def test_a_notebooks_tokens_are_in_its_secret_and_its_pod_refers_to_them(settings):
    settings.PADDLECLOUD_MASTER_BASE_URL = "http://portal.paddlecloud.svc:8000"
    job = notebook()
    secret, *rest = job_children(job, NAMESPACE, ROOT_UID)
    assert secret["kind"] == "Secret"
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values == {"PADDLECLOUD_API_TOKEN": session_api_token(settings.SECRET_KEY, job.uid),
                      "PADDLECLOUD_SESSION_TOKEN": session_token(settings.SECRET_KEY, job.uid)}
    env = container_env(rest)
    for name in SECRETS:
        assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {
            "name": job_secret_name(job), "key": name}}}
    assert env["PADDLE_NOTEBOOK"]["value"] == "YES"
    assert env["PADDLECLOUD_PORTAL"]["value"] == "http://portal.paddlecloud.svc:8000"
    assert env["PADDLECLOUD_USER"]["value"] == "alice"
    assert env["PADDLECLOUD_SESSION_PORT"]["value"] == "6170"  # its replica's port
    shown = json.dumps(job_objects(job, namespace=NAMESPACE))  # a dry run
    assert not any(value in shown for value in values.values())


def test_a_training_job_gets_none_of_it_and_nobody_sets_them():
    env = container_env(job_children(collective_job(), NAMESPACE, ROOT_UID))
    assert not set(SESSION_VARIABLES) & set(env)
    assert set(SECRETS) <= SECRET_ENV and set(SESSION_VARIABLES) <= RESERVED_ENV


@pytest.mark.parametrize("name", SESSION_VARIABLES)
def test_users_cannot_set_a_sessions_variables(name):
    checked = spec_check({"name": "j", "package": "/pfs/dc1/home/alice/p",
                          "entry": "python train.py", "env": {name: "x"}},
                         default_image="paddlepaddle/paddle:2.6.1")
    assert f"env.{name}" in checked.errors, checked.errors
