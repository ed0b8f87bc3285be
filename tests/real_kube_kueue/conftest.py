"""Kueue v0.17.0 on a real control plane, once for the session: its webhooks called by the
API server, its manager a process of this machine (tests/real_kube/kueue.py)."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest

from tests.jobs import conftest as jobs_conftest
from tests.real_kube.kueue import Kueue, cluster_queue, kueue_binary

package = jobs_conftest.package  # alice's trainer package, as the jobs tests have it


@pytest.fixture(scope="session")
def kube_plane(request, tmp_path_factory) -> tuple[Path, Path]:
    """(an admin's kubeconfig, the portal's) of a running control plane: the session's
    ``real_kube`` (tests/real_kube/control_plane.py) where there is one, else a bare one of
    dev_control_plane.py, where the portal uses the admin's kubeconfig too."""
    if importlib.util.find_spec("tests.real_kube.control_plane") is not None:
        cluster = request.getfixturevalue("real_kube")
        yield cluster.admin_kubeconfig, cluster.portal_kubeconfig
        return
    from tests.real_kube.dev_control_plane import BIN, DevControlPlane

    if not (BIN / "kube-apiserver").exists():
        pytest.skip(f"no kube-apiserver in {BIN}")
    plane = DevControlPlane(tmp_path_factory.mktemp("control-plane")).start()
    try:
        yield plane.kubeconfig, plane.kubeconfig
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kueue(kube_plane, tmp_path_factory):
    """A started ``Kueue`` (``.api``: an admin's REST client; ``.portal_kubeconfig``),
    stopped after the session."""
    try:
        kueue_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    admin, portal = kube_plane
    started = Kueue(admin, tmp_path_factory.mktemp("kueue")).start()
    started.portal_kubeconfig = portal
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def queue_name(kueue):
    """``make(cpu)``: a fresh ClusterQueue of that much CPU, its name; deleted after the
    test."""
    made = []

    def make(cpu: str) -> str:
        name = f"team-{uuid.uuid4().hex[:8]}"
        cluster_queue(kueue.api, name, cpu=cpu)
        made.append(name)
        return name

    yield make
    for name in made:
        kueue.api.delete(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}")
