"""Unsaved jobs for the builder tests: the builders never touch the database, and these
tests run without one (any query would fail them)."""

from __future__ import annotations

import uuid

from accounts.models import Datacenter, Quota, User
from jobs.backends.kubernetes.settings import KubernetesSettingsForm
from jobs.models import Job
from registries.models import Registry

NFS = {"nfs": {"server": "nfs.example.com", "path": "/exports/pfs"}}
NAMESPACE = "paddle-alice"
ROOT_UID = "11111111-2222-4333-8444-555555555555"  # the root ConfigMap's, in the tests


def alice(username: str = "alice") -> User:
    return User(id=7, username=username)


def datacenter(kube_volume: dict | None = None, **fields) -> Datacenter:
    """Jobs run as uid and gid 1000 (not the test's root, which no restricted namespace
    admits). ``fields``: the datacenter's own, and its Kubernetes settings by name."""
    settings = {"kube_volume": NFS if kube_volume is None else kube_volume,
                "kube_run_as_user": 1000, "kube_run_as_group": 1000}
    settings.update({name: fields.pop(name) for name in list(fields)
                     if name in KubernetesSettingsForm.base_fields})
    return Datacenter(name="dc1", namespace_prefix="paddle-", backend_settings=settings,
                      **fields)


def collective_job(**fields) -> Job:
    """2 data-parallel trainers, no pservers."""
    values = {
        "uid": uuid.UUID("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"),
        "owner": alice(), "datacenter": datacenter(), "name": "fit-a-line",
        "package": "/pfs/dc1/home/alice/fit_a_line", "entry": "python train.py",
        "image": "paddlepaddle/paddle:2.6.1", "trainers": 2, "cpu": 1500, "memory": 2**30,
        "passes": 3, "env": {"NUM_PASS": "3"},
    }
    values.update(fields)
    return Job(**values)


def private_registry(owner: User | None = None) -> Registry:
    return Registry(owner=owner or alice(), datacenter=datacenter(), name="private",
                    server="registry.example.com:5000", username="bob")


def pserver_job(**fields) -> Job:
    """2 pservers and 3 GPU trainers, from a private registry, with a deadline and a TTL."""
    owner = alice()
    values = {
        "uid": uuid.UUID("f9e8d7c6-b5a4-4f3e-9d2c-1b0a09f8e7d6"),
        "owner": owner, "datacenter": datacenter(), "name": "ctr",
        "package": "/pfs/dc1/home/alice/ctr", "entry": "python train.py --sparse",
        "image": "registry.example.com:5000/ctr:1", "registry": private_registry(owner),
        "trainers": 3, "cpu": 2000, "memory": 4 * 2**30, "gpu": 1,
        "pservers": 2, "pscpu": 500, "psmemory": 512 * 2**20,
        "restart_limit": 2, "deadline_seconds": 7200, "ttl_seconds_after_finished": 600,
    }
    values.update(fields)
    return Job(**values)


def quota(**fields) -> Quota:
    values = {"cpu": 8000, "memory": 16 * 2**30, "gpu": 2, "jobs": 3, "storage": 10 * 2**30}
    values.update(fields)
    return Quota(**values)
