"""Kueue v0.17.0 on a real control plane, once for the session: its webhooks called by the
API server, its manager a process of this machine (tests/real_kube/kueue.py)."""

from __future__ import annotations

import uuid

import pytest

from tests.jobs import conftest as jobs_conftest
from tests.real_kube.kueue import Kueue, cluster_queue, kueue_binary

package = jobs_conftest.package  # alice's trainer package, as the jobs tests have it


@pytest.fixture(scope="session")
def kueue(tmp_path_factory):
    """A started ``Kueue`` (``.api``: an admin's REST client; ``.kubeconfig``), stopped with
    its control plane after the session."""
    from tests.real_kube.dev_control_plane import BIN, DevControlPlane

    try:
        kueue_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    if not (BIN / "kube-apiserver").exists():
        pytest.skip(f"no kube-apiserver in {BIN}")
    state = tmp_path_factory.mktemp("kueue-cluster")
    plane = DevControlPlane(state / "control-plane").start()
    try:
        started = Kueue(plane.kubeconfig, state / "kueue").start()
        try:
            yield started
        finally:
            started.stop()
    finally:
        plane.stop()


@pytest.fixture
def queue_name(kueue):
    """A fresh ClusterQueue's name (deleted after the test); ``make(cpu)`` in the test."""
    made = []

    def make(cpu: str) -> str:
        name = f"team-{uuid.uuid4().hex[:8]}"
        cluster_queue(kueue.api, name, cpu=cpu)
        made.append(name)
        return name

    yield make
    for name in made:
        kueue.api.delete(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}")
