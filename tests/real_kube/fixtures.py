"""The pytest fixtures ``real_kube``: a real control plane (control_plane.py) started once per
test session in a temporary directory and stopped at its end, or the cluster whose admin
kubeconfig PADDLECLOUD_TEST_KUBECONFIG names (``./dev kube up``'s, say: started once, reused
by many runs). Either way the portal's ServiceAccount (deploy/rbac.yaml) has a kubeconfig of
its own and deploy/admission-policy.yaml is enforced. ``real_kueue``: Kueue installed on that
cluster, once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.real_kube import build, control_plane
from tests.real_kube.control_plane import ControlPlane


def reused(kubeconfig: Path, scratch: Path) -> ControlPlane:
    """The cluster of ``kubeconfig``: the portal's kubeconfig beside it where ``up`` wrote one,
    else one made in ``scratch`` (the namespace, RBAC and policy of deploy/ applied first)."""
    from kubernetes import client, config

    settings = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=settings)
    portal = kubeconfig.parent / "portal.kubeconfig"
    if not portal.exists():
        portal = scratch / "portal.kubeconfig"
        admin = control_plane.api_client(kubeconfig)
        try:
            control_plane.portal_access(admin, portal, settings.host, Path(settings.ssl_ca_cert))
        finally:
            admin.close()
    return ControlPlane(kubeconfig.parent, settings.host, kubeconfig, portal)


@pytest.fixture(scope="session")
def real_kube(tmp_path_factory) -> ControlPlane:
    named = os.environ.get("PADDLECLOUD_TEST_KUBECONFIG")
    if named:
        yield reused(Path(named).resolve(), tmp_path_factory.mktemp("real-kube"))
        return
    state_dir = tmp_path_factory.mktemp("real-kube")
    try:
        cluster = control_plane.up(state_dir)
    except build.BuildError as exc:  # no Go: say how to get one, as ./dev does
        pytest.fail(f"the real control plane cannot be built: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        control_plane.down(state_dir)


@pytest.fixture(scope="session")
def real_kueue(real_kube, tmp_path_factory):
    """Kueue (kueue.py) on the session's ``real_kube`` cluster, installed once and stopped at
    the session's end; the one ``up --kueue`` runs there already, where it does (left
    running). A ``Kueue``: ``.api`` is an admin's REST client."""
    from tests.real_kube import kueue

    running = kueue.Kueue(real_kube.admin_kubeconfig, real_kube.dir)
    if running.running:
        yield running
        running.api.close()
        return
    running.api.close()
    started = kueue.Kueue(real_kube.admin_kubeconfig,
                          tmp_path_factory.mktemp("real-kueue")).start()
    try:
        yield started
    finally:
        started.stop()
