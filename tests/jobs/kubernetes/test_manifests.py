"""The objects a job and a user's namespace become, compared with literal dicts: what the
Kubernetes backend will POST. Unsaved instances only: the builders never touch the database."""

from __future__ import annotations

import base64
import json
import re
import uuid

import pytest
import yaml

from jobs.backends.kubernetes import names
from jobs.backends.kubernetes.manifests import (
    ManifestError,
    job_children,
    job_objects,
    job_root,
    namespace_objects,
    pull_secret,
)
from jobs.backends.kubernetes.scripts import INIT_SCRIPT, RUN_SCRIPT
from jobs.documents import to_json, to_yaml

from .factories import (
    NAMESPACE,
    ROOT_UID,
    alice,
    collective_job,
    datacenter,
    private_registry,
    pserver_job,
    quota,
)

INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
POD_INDEX_FIELD = "metadata.labels['apps.kubernetes.io/pod-index']"


# --- a collective job: 2 trainers ----------------------------------------------------------------

FIT_UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
FIT_ROOT_REF = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "fit-a-line-0a1b2",
                 "uid": ROOT_UID, "blockOwnerDeletion": True}]
FIT_TRAINER_LABELS = {
    "app.kubernetes.io/managed-by": "paddlecloud",
    "app.kubernetes.io/component": "trainer",
    "app.kubernetes.io/instance": "fit-a-line-0a1b2",
    "paddlecloud.org/job": "fit-a-line",
    "paddlecloud.org/job-uid": FIT_UID,
    "paddlecloud.org/role": "trainer",
    "paddlecloud.org/owner": "7",
}
ALICE_MOUNTS = [
    {"name": "pfs", "mountPath": "/pfs/dc1/home/alice", "subPath": "home/alice"},
    {"name": "pfs", "mountPath": "/pfs/dc1/public", "subPath": "public", "readOnly": True},
    {"name": "workspace", "mountPath": "/workspace"},
    # HOME, writable whatever the uid
    {"name": "home", "mountPath": "/home/paddlecloud"},
    {"name": "paddlecloud", "mountPath": "/paddlecloud", "readOnly": True},
]
# Where every container's HOME and caches are: an emptyDir (the uid may have no passwd entry).
HOME_ENV = [{"name": "HOME", "value": "/home/paddlecloud"},
            {"name": "XDG_CACHE_HOME", "value": "/home/paddlecloud/.cache"}]
# Each container's ephemeral storage, requested and limited: the default, 4Gi.
DISK = {"ephemeral-storage": "4294967296"}
FIT_HOSTS = "fit-a-line-0a1b2-tr.paddle-alice.svc"
FIT_RESOURCES = {"requests": {"cpu": "1500m", "memory": "1073741824", **DISK},
                 "limits": {"cpu": "1500m", "memory": "1073741824", **DISK}}

FIT_TRAINER_ENV = [
        {"name": "PADDLE_TRAINER_ID",
         "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
        {"name": "POD_IP",
         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NUM_PASS", "value": "3"},
        {"name": "JOB_NAME", "value": "fit-a-line"},
        {"name": "JOB_NAMESPACE", "value": "paddle-alice"},
        {"name": "PADDLE_CLOUD_CURRENT_DATACENTER", "value": "dc1"},
        {"name": "TRAINERS", "value": "2"},
        {"name": "PADDLE_TRAINERS_NUM", "value": "2"},
        {"name": "PADDLE_INIT_NUM_GRADIENT_SERVERS", "value": "2"},
        {"name": "PADDLE_NNODES", "value": "2"},
        {"name": "PADDLE_INIT_NUM_PASSES", "value": "3"},
        {"name": "PADDLE_INIT_USE_GPU", "value": "0"},
        {"name": "PADDLE_PSERVERS_IP_PORT_LIST", "value": ""},
        {"name": "PADDLE_INIT_PSERVERS", "value": ""},
        {"name": "PADDLE_INIT_PORT", "value": "6170"},
        {"name": "PADDLE_INIT_PORTS_NUM", "value": "1"},
        {"name": "PADDLE_INIT_PORTS_NUM_FOR_SPARSE", "value": "0"},
        {"name": "PADDLE_TRAINER_ENDPOINTS",
         "value": f"fit-a-line-0a1b2-tr-0.{FIT_HOSTS}:6170,"
                  f"fit-a-line-0a1b2-tr-1.{FIT_HOSTS}:6170"},
        {"name": "PADDLE_CURRENT_ENDPOINT",
         "value": f"fit-a-line-0a1b2-tr-$(PADDLE_TRAINER_ID).{FIT_HOSTS}:6170"},
        {"name": "PADDLE_PORT", "value": "6170"},
        {"name": "PADDLE_OUTPUT_DIR",
         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/output"},
        {"name": "PADDLE_PFS_HOME", "value": "/pfs/dc1/home/alice"},
        {"name": "PADDLE_PFS_PUBLIC", "value": "/pfs/dc1/public"},
        {"name": "PADDLE_CHECKPOINT_DIR",
         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/checkpoints"},
        {"name": "PADDLE_KEEP_CHECKPOINTS", "value": "3"},
        {"name": "PADDLE_JOB_UID", "value": FIT_UID},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONWARNINGS", "value": "ignore:No ccache found:UserWarning"},
        {"name": "GLOG_minloglevel", "value": "1"},
        {"name": "TRAINING_ROLE", "value": "TRAINER"},
        {"name": "TRAINER_ID", "value": "$(PADDLE_TRAINER_ID)"},
        {"name": "PADDLE_INIT_TRAINER_ID", "value": "$(PADDLE_TRAINER_ID)"},
        {"name": "PADDLE_MASTER",
         "value": f"fit-a-line-0a1b2-tr-0.{FIT_HOSTS}:6171"},
        {"name": "PYTHONPATH",
         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/.site-packages-0a1b2"
                  ":/workspace"},
        {"name": "PADDLECLOUD_LOG",
         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/output/"
                  "node_$(PADDLE_TRAINER_ID)/train.log"},
        {"name": "PADDLECLOUD_PEERS",  # itself, then the trainers
         "value": f"$(PADDLE_CURRENT_ENDPOINT),fit-a-line-0a1b2-tr-0.{FIT_HOSTS}"
                  f":6170,fit-a-line-0a1b2-tr-1.{FIT_HOSTS}:6170"},
        {"name": "PADDLECLOUD_PEERS_ENDED",  # those that succeeded, for the others to know
         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/output/.paddlecloud-ended/0"},
        *HOME_ENV,
]
FIT_POD_SECURITY = {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"}}
LOCKED_DOWN = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
FIT_ATTEMPT_LABELS = {**FIT_TRAINER_LABELS, "paddlecloud.org/first-attempt": "0"}

FIT_TRAINERS_SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "fit-a-line-0a1b2-tr", "namespace": "paddle-alice",
                 "labels": FIT_TRAINER_LABELS, "ownerReferences": FIT_ROOT_REF},
    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
             "selector": {"paddlecloud.org/job-uid": FIT_UID, "paddlecloud.org/role": "trainer"},
             "ports": [{"name": "paddle", "port": 6170}]},
}
FIT_TRAINERS_JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "fit-a-line-0a1b2-tr", "namespace": "paddle-alice",
                 "labels": FIT_ATTEMPT_LABELS, "ownerReferences": FIT_ROOT_REF},
    "spec": {
        "completionMode": "Indexed", "completions": 2, "parallelism": 2,
        # A collective job's trainers restart together: the Job fails at the first failure
        # (a disruption says so), and the portal makes it again.
        "backoffLimitPerIndex": 0, "maxFailedIndexes": 0, "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": [{
            "action": "FailJob",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
        "template": {
            "metadata": {"labels": FIT_ATTEMPT_LABELS},
            "spec": {
                "restartPolicy": "Never",
                "subdomain": "fit-a-line-0a1b2-tr",
                "terminationGracePeriodSeconds": 10,  # the portal's grace
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "securityContext": FIT_POD_SECURITY,
                "initContainers": [{
                    "name": "setup",
                    "image": "paddlepaddle/paddle:2.6.1",
                    "command": ["/bin/sh", "/paddlecloud/init.sh"],
                    "env": [
                        {"name": "PADDLECLOUD_PACKAGE", "value": "/pfs/dc1/home/alice/fit_a_line"},
                        {"name": "PADDLECLOUD_WORKSPACE", "value": "/workspace"},
                        {"name": "PADDLECLOUD_SITE_PACKAGES",
                         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/.site-packages-0a1b2"},
                        {"name": "PADDLECLOUD_REQUIREMENTS_LOG",
                         "value": "/pfs/dc1/home/alice/jobs/fit-a-line/output/requirements.log"},
                        *HOME_ENV,
                    ],
                    "resources": FIT_RESOURCES,
                    "volumeMounts": ALICE_MOUNTS,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": LOCKED_DOWN,
                }, {
                    "name": "peers",  # until the other trainers have addresses
                    "image": "paddlepaddle/paddle:2.6.1",
                    "command": ["/bin/sh", "/paddlecloud/run.sh", "--peers"],
                    "env": FIT_TRAINER_ENV,
                    "resources": {"requests": {"cpu": "100m", "memory": "67108864", **DISK},
                                  "limits": {"cpu": "100m", "memory": "67108864", **DISK}},
                    "volumeMounts": ALICE_MOUNTS,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": LOCKED_DOWN,
                }],
                "containers": [{
                    "name": "trainer",
                    "image": "paddlepaddle/paddle:2.6.1",
                    "command": ["/bin/sh", "/paddlecloud/run.sh", "python train.py"],
                    "workingDir": "/workspace",
                    "env": FIT_TRAINER_ENV,
                    "ports": [{"name": "paddle", "containerPort": 6170}],
                    "resources": FIT_RESOURCES,
                    "volumeMounts": [*ALICE_MOUNTS, {"name": "dshm", "mountPath": "/dev/shm"}],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": LOCKED_DOWN,
                }],
                "volumes": [
                    {"name": "pfs", "nfs": {"server": "nfs.example.com", "path": "/exports/pfs"}},
                    {"name": "workspace", "emptyDir": {}},
                    {"name": "home", "emptyDir": {}},
                    {"name": "paddlecloud", "configMap": {"name": "fit-a-line-0a1b2"}},
                    # half the trainer's 1 GiB of memory
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "536870912"}},
                ],
            },
        },
    },
}


def test_collective_job_root():
    root = job_root(collective_job(), NAMESPACE)
    assert {key: value for key, value in root.items() if key != "data"} == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "fit-a-line-0a1b2", "namespace": "paddle-alice",
            "labels": {"app.kubernetes.io/managed-by": "paddlecloud",
                       "app.kubernetes.io/component": "job",
                       "app.kubernetes.io/instance": "fit-a-line-0a1b2",
                       "paddlecloud.org/job": "fit-a-line", "paddlecloud.org/job-uid": FIT_UID,
                       "paddlecloud.org/owner": "7"},
            "annotations": {"paddlecloud.org/owner-name": "alice"},
        },
        "immutable": True,
    }
    assert sorted(root["data"]) == ["init.sh", "job.json", "run.sh"]
    assert root["data"]["init.sh"] == INIT_SCRIPT
    assert root["data"]["run.sh"] == RUN_SCRIPT
    assert json.loads(root["data"]["job.json"]) == {
        "uid": FIT_UID, "owner": "alice", "datacenter": "dc1", "name": "fit-a-line",
        "package": "/pfs/dc1/home/alice/fit_a_line", "entry": "python train.py",
        "image": "paddlepaddle/paddle:2.6.1", "topology": "", "registry": "",
        "trainers": 2, "cpu": 1500, "memory": 1073741824, "gpu": 0,
        "pservers": 0, "pscpu": 1000, "psmemory": 1073741824, "passes": 3,
        "env": {"NUM_PASS": "3"}, "restart_limit": 0, "keep_checkpoints": 3, "resume_from": "",
        "after": "", "rerun_of": "",
        "deadline_seconds": None,
        "ttl_seconds_after_finished": None, "dataset": "", "dataset_unit": "",
        "task_records": None, "trainers_min": None, "trainers_lost_limit": None,
        "trainers_below_min_seconds": None, "priority": 0,
    }


def test_collective_job_children():
    assert job_children(collective_job(), NAMESPACE, ROOT_UID) == [
        FIT_TRAINERS_SERVICE, FIT_TRAINERS_JOB]


def test_job_objects_are_the_root_then_the_children():
    job = collective_job()
    assert job_objects(job, namespace=NAMESPACE, root_uid=ROOT_UID) == [
        job_root(job, NAMESPACE), FIT_TRAINERS_SERVICE, FIT_TRAINERS_JOB]


def test_a_dry_run_has_no_owner_references():
    """Before the root exists its uid is unknown; a made-up one would have the garbage
    collector delete whatever was applied with it."""
    objects = job_objects(collective_job(), namespace=NAMESPACE)
    for obj in objects:
        assert "ownerReferences" not in obj["metadata"]
    with_root = job_objects(collective_job(), namespace=NAMESPACE, root_uid=ROOT_UID)
    for obj in with_root[1:]:
        del obj["metadata"]["ownerReferences"]
    assert objects == with_root


# --- a pserver job: 2 pservers, 3 GPU trainers, registry, deadline, TTL --------------------------

CTR_UID = "f9e8d7c6-b5a4-4f3e-9d2c-1b0a09f8e7d6"
CTR_ROOT_REF = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "ctr-f9e8d",
                 "uid": ROOT_UID, "blockOwnerDeletion": True}]


def ctr_labels(role: str) -> dict:
    return {"app.kubernetes.io/managed-by": "paddlecloud", "app.kubernetes.io/component": role,
            "app.kubernetes.io/instance": "ctr-f9e8d", "paddlecloud.org/job": "ctr",
            "paddlecloud.org/job-uid": CTR_UID, "paddlecloud.org/role": role,
            "paddlecloud.org/owner": "7"}


PS = "ctr-f9e8d-ps.paddle-alice.svc"
TR = "ctr-f9e8d-tr.paddle-alice.svc"
CTR_OUTPUT = "/pfs/dc1/home/alice/jobs/ctr/output"
CTR_SITE = "/pfs/dc1/home/alice/jobs/ctr/.site-packages-f9e8d"
CTR_SETUP_ENV = [
    {"name": "PADDLECLOUD_PACKAGE", "value": "/pfs/dc1/home/alice/ctr"},
    {"name": "PADDLECLOUD_WORKSPACE", "value": "/workspace"},
    {"name": "PADDLECLOUD_SITE_PACKAGES", "value": CTR_SITE},
    {"name": "PADDLECLOUD_REQUIREMENTS_LOG", "value": f"{CTR_OUTPUT}/requirements.log"},
    *HOME_ENV,
]
CTR_SHARED_ENV = [  # the same for pservers and trainers, after the index and POD_IP
    {"name": "JOB_NAME", "value": "ctr"},
    {"name": "JOB_NAMESPACE", "value": "paddle-alice"},
    {"name": "PADDLE_CLOUD_CURRENT_DATACENTER", "value": "dc1"},
    {"name": "TRAINERS", "value": "3"},
    {"name": "PADDLE_TRAINERS_NUM", "value": "3"},
    {"name": "PADDLE_INIT_NUM_GRADIENT_SERVERS", "value": "3"},
    {"name": "PADDLE_NNODES", "value": "3"},
    {"name": "PADDLE_INIT_NUM_PASSES", "value": "1"},
    {"name": "PADDLE_INIT_USE_GPU", "value": "1"},
    {"name": "PADDLE_PSERVERS_IP_PORT_LIST",
     "value": f"ctr-f9e8d-ps-0.{PS}:6174,ctr-f9e8d-ps-1.{PS}:6174"},
    {"name": "PADDLE_INIT_PSERVERS", "value": f"ctr-f9e8d-ps-0.{PS},ctr-f9e8d-ps-1.{PS}"},
    {"name": "PADDLE_INIT_PORT", "value": "6174"},
    {"name": "PADDLE_INIT_PORTS_NUM", "value": "1"},
    {"name": "PADDLE_INIT_PORTS_NUM_FOR_SPARSE", "value": "0"},
    {"name": "PADDLE_TRAINER_ENDPOINTS",
     "value": f"ctr-f9e8d-tr-0.{TR}:6170,ctr-f9e8d-tr-1.{TR}:6170,ctr-f9e8d-tr-2.{TR}:6170"},
]
# What run.sh waits for before the entry: itself and the pservers (for both roles).
CTR_PEERS = {"name": "PADDLECLOUD_PEERS",
             "value": f"$(PADDLE_CURRENT_ENDPOINT),ctr-f9e8d-ps-0.{PS}:6174,"
                      f"ctr-f9e8d-ps-1.{PS}:6174"}
CTR_VOLUMES = [
    {"name": "pfs", "nfs": {"server": "nfs.example.com", "path": "/exports/pfs"}},
    {"name": "workspace", "emptyDir": {}},
    {"name": "home", "emptyDir": {}},
    {"name": "paddlecloud", "configMap": {"name": "ctr-f9e8d"}},
]
CTR_PSERVER_ENV = [
        {"name": "PADDLE_PSERVER_ID",
         "valueFrom": {"fieldRef": {"fieldPath": POD_INDEX_FIELD}}},
        {"name": "POD_IP",
         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        *CTR_SHARED_ENV,
        {"name": "PADDLE_CURRENT_ENDPOINT",
         "value": f"ctr-f9e8d-ps-$(PADDLE_PSERVER_ID).{PS}:6174"},
        {"name": "PADDLE_PORT", "value": "6174"},
        {"name": "PADDLE_OUTPUT_DIR", "value": CTR_OUTPUT},
        {"name": "PADDLE_PFS_HOME", "value": "/pfs/dc1/home/alice"},
        {"name": "PADDLE_PFS_PUBLIC", "value": "/pfs/dc1/public"},
        {"name": "PADDLE_CHECKPOINT_DIR",
         "value": "/pfs/dc1/home/alice/jobs/ctr/checkpoints"},
        {"name": "PADDLE_KEEP_CHECKPOINTS", "value": "3"},
        {"name": "PADDLE_JOB_UID", "value": CTR_UID},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONWARNINGS", "value": "ignore:No ccache found:UserWarning"},
        {"name": "GLOG_minloglevel", "value": "1"},
        {"name": "TRAINING_ROLE", "value": "PSERVER"},
        {"name": "PYTHONPATH", "value": f"{CTR_SITE}:/workspace"},
        {"name": "PADDLECLOUD_LOG",
         "value": f"{CTR_OUTPUT}/node_$(PADDLE_PSERVER_ID)/server.log"},
        CTR_PEERS,
        *HOME_ENV,
]
CTR_TRAINER_ENV = [
        {"name": "PADDLE_TRAINER_ID",
         "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
        {"name": "POD_IP",
         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        *CTR_SHARED_ENV,
        {"name": "PADDLE_CURRENT_ENDPOINT",
         "value": f"ctr-f9e8d-tr-$(PADDLE_TRAINER_ID).{TR}:6170"},
        {"name": "PADDLE_PORT", "value": "6170"},
        {"name": "PADDLE_OUTPUT_DIR", "value": CTR_OUTPUT},
        {"name": "PADDLE_PFS_HOME", "value": "/pfs/dc1/home/alice"},
        {"name": "PADDLE_PFS_PUBLIC", "value": "/pfs/dc1/public"},
        {"name": "PADDLE_CHECKPOINT_DIR",
         "value": "/pfs/dc1/home/alice/jobs/ctr/checkpoints"},
        {"name": "PADDLE_KEEP_CHECKPOINTS", "value": "3"},
        {"name": "PADDLE_JOB_UID", "value": CTR_UID},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "PYTHONWARNINGS", "value": "ignore:No ccache found:UserWarning"},
        {"name": "GLOG_minloglevel", "value": "1"},
        {"name": "TRAINING_ROLE", "value": "TRAINER"},
        {"name": "TRAINER_ID", "value": "$(PADDLE_TRAINER_ID)"},
        {"name": "PADDLE_INIT_TRAINER_ID", "value": "$(PADDLE_TRAINER_ID)"},
        {"name": "PYTHONPATH", "value": f"{CTR_SITE}:/workspace"},
        {"name": "PADDLECLOUD_LOG",
         "value": f"{CTR_OUTPUT}/node_$(PADDLE_TRAINER_ID)/train.log"},
        CTR_PEERS,  # the pservers, not the other trainers
    # ... and until they accept connections
    {"name": "PADDLECLOUD_PEERS_LISTENING",
     "value": f"ctr-f9e8d-ps-0.{PS}:6174,ctr-f9e8d-ps-1.{PS}:6174"},
    *HOME_ENV,
]
PEERS_RESOURCES = {"requests": {"cpu": "100m", "memory": "67108864", **DISK},
                   "limits": {"cpu": "100m", "memory": "67108864", **DISK}}


def ctr_init_containers(resources: dict, env: list[dict]) -> list[dict]:
    return [{
        "name": "setup", "image": "registry.example.com:5000/ctr:1",
        "command": ["/bin/sh", "/paddlecloud/init.sh"], "env": CTR_SETUP_ENV,
        "resources": resources, "volumeMounts": ALICE_MOUNTS,
        "terminationMessagePolicy": "FallbackToLogsOnError", "securityContext": LOCKED_DOWN,
    }, {
        "name": "peers", "image": "registry.example.com:5000/ctr:1",
        "command": ["/bin/sh", "/paddlecloud/run.sh", "--peers"], "env": env,
        "resources": PEERS_RESOURCES, "volumeMounts": ALICE_MOUNTS,
        "terminationMessagePolicy": "FallbackToLogsOnError", "securityContext": LOCKED_DOWN,
    }]


PS_RESOURCES = {"requests": {"cpu": "500m", "memory": "536870912", **DISK},
                "limits": {"cpu": "500m", "memory": "536870912", **DISK}}
TR_RESOURCES = {"requests": {"cpu": "2000m", "memory": "4294967296", **DISK},
                "limits": {"cpu": "2000m", "memory": "4294967296", **DISK,
                           "nvidia.com/gpu": "1"}}

CTR_PSERVERS_SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "ctr-f9e8d-ps", "namespace": "paddle-alice",
                 "labels": ctr_labels("pserver"), "ownerReferences": CTR_ROOT_REF},
    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
             "selector": {"paddlecloud.org/job-uid": CTR_UID, "paddlecloud.org/role": "pserver"},
             "ports": [{"name": "paddle", "port": 6174}]},
}
CTR_PSERVERS = {
    "apiVersion": "apps/v1", "kind": "StatefulSet",
    "metadata": {"name": "ctr-f9e8d-ps", "namespace": "paddle-alice",
                 "labels": ctr_labels("pserver"), "ownerReferences": CTR_ROOT_REF},
    "spec": {
        "serviceName": "ctr-f9e8d-ps",
        "replicas": 2,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {"paddlecloud.org/job-uid": CTR_UID,
                                     "paddlecloud.org/role": "pserver"}},
        "template": {
            "metadata": {"labels": ctr_labels("pserver")},
            "spec": {
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 10,  # the portal's grace
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "securityContext": FIT_POD_SECURITY,
                "imagePullSecrets": [{"name": "paddlecloud-registry-private"}],
                "initContainers": ctr_init_containers(PS_RESOURCES, CTR_PSERVER_ENV),
                "containers": [{
                    "name": "pserver", "image": "registry.example.com:5000/ctr:1",
                    "command": ["/bin/sh", "/paddlecloud/run.sh", "python train.py --sparse"],
                    "workingDir": "/workspace",
                    "env": CTR_PSERVER_ENV,
                    "ports": [{"name": "paddle", "containerPort": 6174}],
                    "resources": PS_RESOURCES, "volumeMounts": ALICE_MOUNTS,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": LOCKED_DOWN,
                }],
                "volumes": CTR_VOLUMES,
            },
        },
    },
}
CTR_TRAINERS_SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "ctr-f9e8d-tr", "namespace": "paddle-alice",
                 "labels": ctr_labels("trainer"), "ownerReferences": CTR_ROOT_REF},
    "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
             "selector": {"paddlecloud.org/job-uid": CTR_UID, "paddlecloud.org/role": "trainer"},
             "ports": [{"name": "paddle", "port": 6170}]},
}
CTR_TRAINER_LABELS = {**ctr_labels("trainer"), "paddlecloud.org/first-attempt": "0"}
CTR_TRAINERS = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "ctr-f9e8d-tr", "namespace": "paddle-alice",
                 "labels": CTR_TRAINER_LABELS, "ownerReferences": CTR_ROOT_REF},
    "spec": {
        "completionMode": "Indexed", "completions": 3, "parallelism": 3,
        "backoffLimitPerIndex": 2, "maxFailedIndexes": 0, "podReplacementPolicy": "Failed",
        # A pod the cluster took away is replaced without counting against the limit.
        "podFailurePolicy": {"rules": [{
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
        "activeDeadlineSeconds": 7200, "ttlSecondsAfterFinished": 600,
        "template": {
            "metadata": {"labels": CTR_TRAINER_LABELS},
            "spec": {
                "restartPolicy": "Never",
                "subdomain": "ctr-f9e8d-tr",
                "terminationGracePeriodSeconds": 10,  # the portal's grace
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "securityContext": FIT_POD_SECURITY,
                "imagePullSecrets": [{"name": "paddlecloud-registry-private"}],
                "initContainers": ctr_init_containers(TR_RESOURCES, CTR_TRAINER_ENV),
                "containers": [{
                    "name": "trainer", "image": "registry.example.com:5000/ctr:1",
                    "command": ["/bin/sh", "/paddlecloud/run.sh", "python train.py --sparse"],
                    "workingDir": "/workspace",
                    "env": CTR_TRAINER_ENV,
                    "ports": [{"name": "paddle", "containerPort": 6170}],
                    "resources": TR_RESOURCES,
                    "volumeMounts": [*ALICE_MOUNTS, {"name": "dshm", "mountPath": "/dev/shm"}],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "securityContext": LOCKED_DOWN,
                }],
                "volumes": [*CTR_VOLUMES, {"name": "dshm", "emptyDir": {
                    "medium": "Memory", "sizeLimit": "2147483648"}}],
            },
        },
    },
}


def test_pserver_job_children():
    """Pservers first (trainers look for them), each role with its headless Service."""
    assert job_children(pserver_job(), NAMESPACE, ROOT_UID) == [
        CTR_PSERVERS_SERVICE, CTR_PSERVERS, CTR_TRAINERS_SERVICE, CTR_TRAINERS]


def test_pserver_job_root_names_its_registry():
    spec = json.loads(job_root(pserver_job(), NAMESPACE)["data"]["job.json"])
    assert (spec["registry"], spec["pservers"], spec["deadline_seconds"]) == ("private", 2, 7200)


# --- names ---------------------------------------------------------------------------------------

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("first", ["a", "9"])
def test_names_of_a_40_character_job_fit(first):
    job = pserver_job(name=first + "x" * 38 + "z", uid=uuid.uuid4(), trainers=1000,
                      pservers=1000)
    assert len(job.name) == 40
    objects = job_objects(job, namespace=NAMESPACE, root_uid=ROOT_UID)
    for obj in objects:
        name = obj["metadata"]["name"]
        assert DNS_1123_LABEL.match(name) and len(name) <= 63, name
        if obj["kind"] in ("StatefulSet", "Job"):
            assert len(name) <= 52, name  # room for controller-revision-hash / pod suffixes
        if obj["kind"] == "Service":
            assert DNS_1035_LABEL.match(name), name
    last = 999
    for host in (names.trainer_host(job, last), names.pserver_host(job, last),
                 f"{names.trainer_host(job, last)}-abcde"):  # an Indexed Job's pod name
        assert DNS_1123_LABEL.match(host) and len(host) <= 63, host
    for endpoint in (names.trainer_endpoint(job, "n" * 63, last),
                     names.pserver_endpoint(job, "n" * 63, last)):
        host, _port = endpoint.rsplit(":", 1)
        assert all(len(label) <= 63 for label in host.split(".")) and len(host) <= 253


def test_a_job_of_the_same_name_never_shares_object_names():
    first, again = collective_job(uid=uuid.uuid4()), collective_job(uid=uuid.uuid4())
    first_names = {obj["metadata"]["name"] for obj in job_objects(first, namespace=NAMESPACE)}
    again_names = {obj["metadata"]["name"] for obj in job_objects(again, namespace=NAMESPACE)}
    assert not first_names & again_names


def test_job_selector_picks_the_job_by_uid():
    assert names.job_selector(collective_job()) == f"paddlecloud.org/job-uid={FIT_UID}"
    for obj in job_objects(pserver_job(), namespace=NAMESPACE):
        assert obj["metadata"]["labels"][names.JOB_UID_LABEL] == CTR_UID


# --- volumes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    {"cephfs": {"monitors": ["10.0.0.1:6789"], "user": "admin",
                "secretRef": {"name": "ceph-secret"}, "path": "/"}},
    {"nfs": {"server": "nfs.example.com", "path": "/pfs"}},
    {"hostPath": {"path": "/mnt/pfs", "type": "Directory"}},
    {"csi": {"driver": "nfs.csi.k8s.io", "volumeAttributes": {"server": "nfs", "share": "/"}}},
], ids=lambda source: next(iter(source)))
def test_every_pod_mounts_the_datacenter_volume_as_given(source):
    job = pserver_job(datacenter=datacenter(kube_volume=source))
    for obj in job_children(job, NAMESPACE, ROOT_UID):
        if obj["kind"] in ("StatefulSet", "Job"):
            pod = obj["spec"]["template"]["spec"]
            assert pod["volumes"][0] == {"name": "pfs", **source}
            for container in pod["initContainers"] + pod["containers"]:
                assert container["volumeMounts"][:len(ALICE_MOUNTS)] == ALICE_MOUNTS


PV_CSI = {"driver": "cephfs.csi.ceph.com", "volumeHandle": "pfs-{namespace}",
          "volumeAttributes": {"clusterID": "ceph", "fsName": "cephfs", "staticVolume": "true",
                               "rootPath": "/volumes/pfs"},
          "nodeStageSecretRef": {"name": "csi-cephfs", "namespace": "ceph-csi"}}


def test_a_persistent_volume_becomes_a_volume_and_claim_in_each_user_namespace():
    """A claim is seen only in its namespace, and a volume binds one claim: each user
    namespace gets a PersistentVolume of the datacenter's source and its claim, bound to each
    other; the pods mount the claim."""
    dc = datacenter(kube_volume={"persistentVolume": {"csi": PV_CSI}})
    found = {o["kind"]: o for o in namespace_objects(dc, alice(), quota())}
    volume, claim = found["PersistentVolume"], found["PersistentVolumeClaim"]
    assert volume["metadata"]["name"] == "paddlecloud-pfs-paddle-alice"
    assert volume["spec"] == {
        "capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
        "claimRef": {"namespace": "paddle-alice", "name": "paddlecloud-pfs"},
        # CephFS's driver takes one handle for one volume: the namespace's own, as the
        # administrator's template says
        "csi": {**PV_CSI, "volumeHandle": "pfs-paddle-alice"}}
    assert claim["metadata"]["namespace"] == "paddle-alice"
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                             "volumeName": "paddlecloud-pfs-paddle-alice",
                             "resources": {"requests": {"storage": "1Ti"}}}
    job = pserver_job(datacenter=dc)
    for obj in job_children(job, NAMESPACE, ROOT_UID):
        if obj["kind"] in ("StatefulSet", "Job"):
            assert obj["spec"]["template"]["spec"]["volumes"][0] == {
                "name": "pfs", "persistentVolumeClaim": {"claimName": "paddlecloud-pfs"}}
    assert PV_CSI["volumeHandle"] == "pfs-{namespace}"  # the datacenter's setting is left


@pytest.mark.parametrize(("handle", "problem"), [
    (None, "names its volumeHandle"),
    ("", "names its volumeHandle"),
    ("pfs-{user}", "{namespace} is the only field a handle may hold"),
    ("pfs-{namespace", "{namespace} is the only field a handle may hold"),
])
def test_a_csi_volume_without_a_usable_handle_is_refused_naming_the_rule(handle, problem):
    csi = {"driver": "efs.csi.aws.com", **({} if handle is None else {"volumeHandle": handle})}
    job = collective_job(datacenter=datacenter(kube_volume={"persistentVolume": {"csi": csi}}))
    with pytest.raises(ManifestError, match=re.escape(problem)):
        job_objects(job, namespace=NAMESPACE)


GCSFUSE = "gcsfuse.csi.storage.gke.io"


@pytest.mark.parametrize(("volume", "asked"), [
    ({"persistentVolume": {"csi": {"driver": GCSFUSE, "volumeHandle": "team-pfs-bucket"}}}, True),
    ({"csi": {"driver": GCSFUSE, "volumeAttributes": {"bucketName": "team-pfs-bucket"}}}, True),
    ({"persistentVolume": {"csi": {"driver": "efs.csi.aws.com",
                                   "volumeHandle": "fs-0123::fsap-4567"}}}, False),
], ids=["gcsfuse", "gcsfuse-inline", "efs"])
def test_pods_on_a_gcs_fuse_pfs_ask_for_its_sidecar(volume, asked):
    """GKE's Cloud Storage FUSE driver mounts a bucket only in a pod annotated
    ``gke-gcsfuse/volumes: "true"`` (the sidecar it injects); beside a gang scheduler's own
    annotations. Other drivers' pods say nothing of it."""
    job = pserver_job(datacenter=datacenter(kube_volume=volume, kube_scheduler="volcano",
                                            kube_queue="team"))
    templates = [o["spec"]["template"]["metadata"] for o in job_children(job, NAMESPACE, ROOT_UID)
                 if o["kind"] in ("StatefulSet", "Job")]
    assert len(templates) == 2
    for metadata in templates:
        assert (metadata["annotations"].get("gke-gcsfuse/volumes") == "true") is asked
        assert metadata["annotations"]["scheduling.k8s.io/group-name"]


def test_a_claim_named_as_the_pfs_volume_is_refused_with_the_way_that_works():
    job = collective_job(datacenter=datacenter(
        kube_volume={"persistentVolumeClaim": {"claimName": "pfs"}}))
    with pytest.raises(ManifestError, match=r"seen in its own namespace only.*persistentVolume"):
        job_objects(job, namespace=NAMESPACE)


def _pod_specs(job) -> list[dict]:
    return [o["spec"]["template"]["spec"] for o in job_children(job, NAMESPACE, ROOT_UID)
            if o["kind"] in ("StatefulSet", "Job")]


@pytest.mark.parametrize(("uid", "gid"), [(1000, 1000), (999, 50)])
def test_pods_run_as_the_datacenters_user_without_privileges(uid, gid):
    job = pserver_job(datacenter=datacenter(kube_run_as_user=uid, kube_run_as_group=gid))
    for pod in _pod_specs(job):
        assert pod["securityContext"] == {"runAsUser": uid, "runAsGroup": gid,
                                          "runAsNonRoot": True,
                                          "seccompProfile": {"type": "RuntimeDefault"}}
        for container in pod["initContainers"] + pod["containers"]:
            assert container["securityContext"] == LOCKED_DOWN


def test_pods_run_as_the_portals_own_user_by_default():
    import os

    job = collective_job(datacenter=datacenter(kube_run_as_user=None, kube_run_as_group=None))
    context = _pod_specs(job)[0]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (os.getuid(), os.getgid())
    # root (this test's user) cannot be runAsNonRoot, nor its namespace restricted
    assert context.get("runAsNonRoot") is (True if os.getuid() else None)


def test_gpu_trainers_get_the_datacenters_tolerations_and_node_selector():
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    dc = datacenter(kube_gpu_tolerations=tolerations,
                    kube_gpu_node_selector={"nvidia.com/gpu.present": "true"})
    pservers, trainers = _pod_specs(pserver_job(datacenter=dc))  # trainers with 1 GPU each
    assert (trainers["tolerations"], trainers["nodeSelector"]) == (
        tolerations, {"nvidia.com/gpu.present": "true"})
    assert "tolerations" not in pservers and "nodeSelector" not in pservers
    cpu_only = _pod_specs(collective_job(datacenter=dc))[0]
    assert "tolerations" not in cpu_only and "nodeSelector" not in cpu_only


def test_a_collective_jobs_trainers_job_is_made_anew_for_each_attempt():
    """Its pods say which attempt they begin (and the Job too, so the portal can tell an
    earlier attempt's Job)."""
    from jobs.backends.kubernetes.manifests import trainers_job

    made = trainers_job(collective_job(), NAMESPACE, None, first_attempt=3)
    assert made["metadata"]["labels"]["paddlecloud.org/first-attempt"] == "3"
    assert made["spec"]["template"]["metadata"]["labels"]["paddlecloud.org/first-attempt"] == "3"


def test_volcano_gets_a_pod_group_of_every_pod_of_the_job():
    dc = datacenter(kube_scheduler="volcano", kube_queue="research")
    job = pserver_job(datacenter=dc)  # 2 pservers, 3 trainers with 1 GPU
    group, *rest = job_children(job, NAMESPACE, ROOT_UID)
    assert group == {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "ctr-f9e8d", "namespace": "paddle-alice",
                     "labels": {k: v for k, v in ctr_labels("job").items()
                                if k != "paddlecloud.org/role"},
                     "ownerReferences": CTR_ROOT_REF},
        "spec": {"minMember": 5, "queue": "research",
                 "minResources": {"cpu": "7000m", "memory": "13958643712",
                                  "nvidia.com/gpu": "3"}}}
    for obj in rest:
        if obj["kind"] in ("StatefulSet", "Job"):
            template = obj["spec"]["template"]
            assert template["spec"]["schedulerName"] == "volcano"
            assert template["metadata"]["annotations"] == {
                "scheduling.k8s.io/group-name": "ctr-f9e8d"}


def test_kueue_queues_the_objects_suspended_and_each_namespace_gets_a_local_queue():
    dc = datacenter(kube_scheduler="kueue", kube_queue="gpu-cluster")
    job = job_children(collective_job(datacenter=dc), NAMESPACE, ROOT_UID)[-1]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "paddlecloud"
    assert job["spec"]["suspend"] is True
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]
    local_queue = namespace_objects(dc, alice(), quota())[-1]
    assert local_queue["kind"] == "LocalQueue"
    assert (local_queue["metadata"]["name"], local_queue["spec"]) == (
        "paddlecloud", {"clusterQueue": "gpu-cluster"})


def test_kueue_admits_a_pserver_jobs_pods_as_one_group():
    """Queued owners would be two Workloads (the pservers running while the trainers wait):
    the pods are queued instead, one pod group of both roles."""
    dc = datacenter(kube_scheduler="kueue", kube_queue="gpu-cluster")
    job = pserver_job(datacenter=dc)
    children = {o["kind"]: o for o in job_children(job, NAMESPACE, ROOT_UID)}
    for kind in ("StatefulSet", "Job"):
        owner = children[kind]
        assert "kueue.x-k8s.io/queue-name" not in owner["metadata"]["labels"]
        template = owner["spec"]["template"]["metadata"]
        assert template["labels"]["kueue.x-k8s.io/queue-name"] == "paddlecloud"
        assert template["labels"]["kueue.x-k8s.io/pod-group-name"] == names.object_base(job)
        assert template["annotations"] == {
            "kueue.x-k8s.io/pod-group-total-count": str(job.pservers + job.trainers),
            # The group ends once none of its pods runs (its pservers end Failed, stopped).
            "kueue.x-k8s.io/retriable-in-group": "false"}
    assert "suspend" not in children["Job"]["spec"]


@pytest.mark.parametrize("kube_volume", [{}, None])
def test_a_datacenter_without_a_pfs_volume_cannot_run_jobs(kube_volume):
    job = collective_job(datacenter=datacenter(kube_volume={}))
    job.datacenter.backend_settings["kube_volume"] = kube_volume
    with pytest.raises(ManifestError, match=r"^datacenter dc1 has no PFS volume for pods: "
                                            r"set its kube_volume"):
        job_objects(job, namespace=NAMESPACE)


def test_an_unusable_pfs_volume_is_named():
    job = collective_job(datacenter=datacenter(kube_volume={"emptyDir": {}}))
    with pytest.raises(ManifestError, match="datacenter dc1 has an unusable PFS volume"):
        job_objects(job, namespace=NAMESPACE)


def test_values_reach_the_replica_as_written():
    """Kubernetes expands $(NAME) in env values and commands: a job's own $ are doubled."""
    job = collective_job(entry='echo "$(date)" $HOME', env={"PATTERN": "a$(B)c$$"})
    container = job_children(job, NAMESPACE, None)[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][2] == 'echo "$$(date)" $$HOME'
    assert {"name": "PATTERN", "value": "a$$(B)c$$$$"} in container["env"]


def test_the_job_may_set_its_own_pythonpath():
    """As on the local backend, the job's own variables win over the defaults."""
    job = collective_job(env={"PYTHONPATH": "/pfs/dc1/public/lib"})
    container = job_children(job, NAMESPACE, None)[1]["spec"]["template"]["spec"]["containers"][0]
    assert [e["value"] for e in container["env"] if e["name"] == "PYTHONPATH"] == [
        "/pfs/dc1/public/lib"]


# --- the namespace -------------------------------------------------------------------------------

def test_namespace_objects_for_a_username_that_needs_a_hash():
    """An e-mail address is no namespace name nor label value: the namespace gets a safe form
    and a hash suffix, the labels the user's id, an annotation the username."""
    labels = {"app.kubernetes.io/managed-by": "paddlecloud",
              "app.kubernetes.io/component": "namespace", "paddlecloud.org/owner": "7"}
    name = "paddle-alice-example-com-ff8d9819"
    objects = namespace_objects(datacenter(), alice("alice@example.com"), quota())
    assert [o["kind"] for o in objects[3:]] == ["NetworkPolicy"] * 5
    assert objects[:3] == [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": name, "labels": {
             **labels, "pod-security.kubernetes.io/enforce": "baseline",
             "pod-security.kubernetes.io/enforce-version": "latest"},
                      "annotations": {"paddlecloud.org/owner-name": "alice@example.com"}}},
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": {"name": "paddlecloud", "namespace": name, "labels": labels},
         "spec": {"hard": {"requests.cpu": "8000m", "limits.cpu": "8000m",
                           "requests.memory": "17179869184", "limits.memory": "17179869184",
                           "requests.nvidia.com/gpu": "2"}}},
        {"apiVersion": "v1", "kind": "LimitRange",
         "metadata": {"name": "paddlecloud", "namespace": name, "labels": labels},
         "spec": {"limits": [{"type": "Container",
                              "default": {"cpu": "1000m", "memory": "1073741824"},
                              "defaultRequest": {"cpu": "1000m", "memory": "1073741824"},
                              "max": {"cpu": "8000m", "memory": "17179869184"}}]}},
    ]


@pytest.mark.parametrize(("volume", "level"), [
    (None, "baseline"),  # NFS, which restricted refuses
    ({"persistentVolume": {"nfs": {"server": "nfs", "path": "/"}}}, "restricted"),
    ({"csi": {"driver": "nfs.csi.k8s.io"}}, "restricted"),
    ({"hostPath": {"path": "/mnt/pfs"}}, "privileged"),  # which baseline refuses
])
def test_the_namespace_enforces_the_strictest_pod_security_its_pods_pass(volume, level):
    namespace = namespace_objects(datacenter(volume), alice(), quota())[0]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == level


def test_a_small_quota_caps_the_container_defaults():
    limit_range = namespace_objects(datacenter(), alice(), quota(cpu=500, memory=2**28))[2]
    assert limit_range["spec"]["limits"][0]["default"] == {"cpu": "500m", "memory": "268435456"}


# --- registry credentials ------------------------------------------------------------------------

def test_pull_secret_carries_the_credential():
    secret = pull_secret(NAMESPACE, private_registry(), "s3cret:pw")
    data = secret.pop("data")
    assert secret == {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "paddlecloud-registry-private", "namespace": "paddle-alice",
                     "labels": {"app.kubernetes.io/managed-by": "paddlecloud",
                                "app.kubernetes.io/component": "registry",
                                "paddlecloud.org/registry": "private",
                                "paddlecloud.org/owner": "7"}},
        "type": "kubernetes.io/dockerconfigjson",
    }
    assert "ownerReferences" not in secret["metadata"]  # it belongs to the credential
    config = json.loads(base64.b64decode(data[".dockerconfigjson"]))
    assert config == {"auths": {"registry.example.com:5000": {
        "username": "bob", "password": "s3cret:pw",
        "auth": base64.b64encode(b"bob:s3cret:pw").decode()}}}
    assert base64.b64decode(config["auths"]["registry.example.com:5000"]["auth"]) == (
        b"bob:s3cret:pw")


def test_jobs_name_the_pull_secret_of_their_registry():
    job = pserver_job()
    secret = pull_secret(NAMESPACE, job.registry, "pw")
    for obj in job_children(job, NAMESPACE, ROOT_UID)[1::2]:
        assert obj["spec"]["template"]["spec"]["imagePullSecrets"] == [
            {"name": secret["metadata"]["name"]}]


# --- documents -----------------------------------------------------------------------------------

def test_yaml_documents_read_back_as_the_objects():
    objects = job_objects(pserver_job(), namespace=NAMESPACE, root_uid=ROOT_UID)
    text = to_yaml(objects)
    assert text.startswith("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ctr-f9e8d\n")
    assert text.count("\n---\n") == len(objects) - 1
    assert list(yaml.safe_load_all(text)) == objects
    assert "  init.sh: |\n    # paddlecloud init.sh" in text  # scripts stay readable
    assert "&id" not in text and "*id" not in text  # no YAML aliases


def test_documents_put_keys_in_kubectl_order():
    shuffled = {"spec": {"a": 1}, "metadata": {"labels": {}, "name": "x"}, "kind": "Service",
                "apiVersion": "v1"}
    assert to_yaml([shuffled]) == (
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels: {}\nspec:\n  a: 1\n")
    listed = json.loads(to_json([shuffled]))
    assert listed == {"apiVersion": "v1", "kind": "List", "items": [shuffled]}
    assert list(listed["items"][0]) == ["apiVersion", "kind", "metadata", "spec"]


def test_builders_are_json_serializable():
    objects = [*job_objects(pserver_job(), namespace=NAMESPACE, root_uid=ROOT_UID),
               *namespace_objects(datacenter(), alice(), quota()),
               pull_secret(NAMESPACE, private_registry(), "pw")]
    assert json.loads(json.dumps(objects)) == objects


@pytest.mark.parametrize(("chosen", "grace", "disk"), [
    ({}, 10, "4294967296"),  # the defaults: the portal's grace, 4Gi
    ({"kube_termination_grace": 300, "kube_ephemeral_storage": "20Gi"}, 300, "21474836480"),
    ({"kube_ephemeral_storage": "0"}, 10, None),
    # Kueue admits no pod asking for a resource its ClusterQueue does not cover: none by
    # default, what the administrator gives once theirs does
    ({"kube_scheduler": "kueue", "kube_queue": "team"}, 10, None),
    ({"kube_scheduler": "kueue", "kube_queue": "team", "kube_ephemeral_storage": "1Gi"}, 10,
     "1073741824"),
], ids=["defaults", "given", "none", "kueue", "kueue-given"])
def test_every_container_gets_the_datacenters_disk_and_every_pod_its_grace(chosen, grace,
                                                                            disk):
    job = pserver_job(datacenter=datacenter(**chosen))
    pods = [o["spec"]["template"]["spec"] for o in job_children(job, NAMESPACE, ROOT_UID)
            if o["kind"] in ("StatefulSet", "Job")]
    assert len(pods) == 2
    for pod in pods:
        assert pod["terminationGracePeriodSeconds"] == grace
        for container in pod["initContainers"] + pod["containers"]:
            for kind in ("requests", "limits"):
                assert container["resources"][kind].get("ephemeral-storage") == disk
            assert container["env"][-2:] == HOME_ENV, container["name"]
        assert {"name": "home", "emptyDir": {}} in pod["volumes"]


# --- NetworkPolicies -----------------------------------------------------------------------------

def policies(**fields) -> dict[str, dict]:
    """The user namespace's NetworkPolicies by name: their specs."""
    return {o["metadata"]["name"]: o["spec"]
            for o in namespace_objects(datacenter(**fields), alice(), quota())
            if o["kind"] == "NetworkPolicy"}


def test_a_user_namespace_is_closed_but_to_itself_dns_and_the_portal():
    found = policies()
    assert found["paddlecloud-isolate"] == {"podSelector": {},
                                            "policyTypes": ["Ingress", "Egress"]}
    assert found["paddlecloud-namespace"] == {
        "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {}}]}], "egress": [{"to": [{"podSelector": {}}]}]}
    assert found["paddlecloud-dns"] == {
        "podSelector": {}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}
    # PADDLECLOUD_MASTER_BASE_URL: http://paddlecloud.paddlecloud.svc (deploy/config.yaml)
    assert found["paddlecloud-master"] == {
        "podSelector": {}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "paddlecloud"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "paddlecloud",
                                            "app.kubernetes.io/component": "web"}}}],
            "ports": [{"protocol": "TCP", "port": "http"}]}]}


def test_egress_is_anywhere_but_the_instance_metadata_by_default():
    assert policies()["paddlecloud-egress"] == {
        "podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}}]}]}


def test_egress_is_the_datacenters_choice():
    found = policies(kube_egress=["10.0.0.0/8", "169.254.0.0/16", "169.254.169.254/32"])
    assert found["paddlecloud-egress"]["egress"] == [{"to": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}},
        {"ipBlock": {"cidr": "169.254.0.0/16", "except": ["169.254.169.254/32"]}},
        {"ipBlock": {"cidr": "169.254.169.254/32"}}]}]  # named alone: the admin lets it in
    # Nowhere else: the policy allows nothing (left out, it would stay as it was).
    assert policies(kube_egress=[])["paddlecloud-egress"] == {"podSelector": {},
                                                             "policyTypes": ["Egress"]}


def test_a_portal_outside_the_cluster_is_reached_through_the_egress(settings):
    settings.PADDLECLOUD_MASTER_BASE_URL = "https://paddlecloud.example.com"
    assert policies()["paddlecloud-master"] == {"podSelector": {}, "policyTypes": ["Egress"]}


def test_a_job_resumed_from_another_gets_its_checkpoint_under_the_mount():
    """``resume_from`` (``JOB:STEP``, as the portal checked it): every replica finds that
    checkpoint at its PFS path in the pod, as in a local sandbox (PADDLE_RESUME_FROM)."""
    job = collective_job(resume_from="base:120")
    for pod in _pod_specs(job):
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["PADDLE_RESUME_FROM"] == (
            "/pfs/dc1/home/alice/jobs/base/checkpoints/step-000000000120")
    plain = _pod_specs(collective_job())[0]["containers"][0]["env"]
    assert "PADDLE_RESUME_FROM" not in {e["name"] for e in plain}
