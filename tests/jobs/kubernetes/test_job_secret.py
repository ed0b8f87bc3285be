"""A job with a dataset on Kubernetes: its master's token is in a Secret of its own, made before
its pods and owned by its root, which its pods reference; a dry run (no root yet) shows the
Secret and the references, never the token; every version's schemas accept both forms."""

from __future__ import annotations

import base64
import json

from jobs.backends.kubernetes.manifests import SECRET_HIDDEN, job_children, job_objects
from jobs.backends.kubernetes.pods import job_secret_name
from jobs.backends.kubernetes.validation import validate_objects
from paddlecloud_core.contract import master_token

from .factories import NAMESPACE, ROOT_UID, collective_job, pserver_job

DATASET = {"dataset": "/pfs/dc1/home/alice/data/part-*", "dataset_unit": "file"}
TOKEN = "PADDLECLOUD_MASTER_TOKEN"


def test_the_secret_comes_first_owned_by_the_root(settings):
    job = pserver_job(**DATASET)
    secret, *rest = job_children(job, NAMESPACE, ROOT_UID)
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == job_secret_name(job)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == ROOT_UID
    assert secret["immutable"] is True and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"][TOKEN]).decode() == master_token(
        settings.SECRET_KEY, job.uid)
    assert [o["kind"] for o in rest] == ["Service", "StatefulSet", "Service", "Job"]
    # Without a dataset: no Secret, as before.
    assert "Secret" not in [o["kind"] for o in job_children(pserver_job(), NAMESPACE, ROOT_UID)]


def test_a_dry_run_shows_the_secret_and_its_references_but_no_token(settings):
    job = collective_job(**DATASET)
    objects = job_objects(job, namespace=NAMESPACE)
    token = master_token(settings.SECRET_KEY, job.uid)
    assert token not in json.dumps(objects)
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert secret["stringData"] == {TOKEN: SECRET_HIDDEN} and "data" not in secret
    assert "ownerReferences" not in secret["metadata"]
    trainers = next(o for o in objects if o["kind"] == "Job")
    for container in trainers["spec"]["template"]["spec"]["containers"]:
        assert {"name": TOKEN, "valueFrom": {"secretKeyRef": {
            "name": job_secret_name(job), "key": TOKEN}}} in container["env"]


def test_every_version_accepts_the_secret():
    assert validate_objects([
        *job_objects(collective_job(**DATASET), namespace=NAMESPACE),
        *job_objects(pserver_job(**DATASET), namespace=NAMESPACE, root_uid=ROOT_UID),
    ]) == []
