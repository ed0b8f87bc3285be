"""The ``k8s_api`` and ``k8s_cluster`` pytest fixtures: a fake Kubernetes API server per test
(scripted pods, or pods that really run). Make them available
in a test directory's conftest.py with::

    from tests.k8s_api_server import fixtures

    k8s_api = fixtures.k8s_api
    k8s_cluster = fixtures.k8s_cluster
"""

from __future__ import annotations

import pytest

from .server import FakeKubernetes


def _serve(tmp_path, kubelet: str):
    server = FakeKubernetes(kubeconfig_path=tmp_path / "kubeconfig", kubelet=kubelet).start()
    try:
        yield server
    finally:
        server.stop()
    problems = server.errors + server.controller.errors + \
        getattr(server.controller.kubelet, "errors", [])
    if problems:
        pytest.fail("the fake API server failed internally:\n" + "\n".join(problems))


@pytest.fixture
def k8s_api(tmp_path):
    """A started FakeKubernetes (``.url``, ``.kubeconfig_path``, ``.controller``, ``.store``,
    ``.settings``, ``fail_next``/``hang_next``/``drop_watches``/``compact``, ``events``);
    the test fails if the fake itself hit a bug while serving it. Its pods run as scripted."""
    yield from _serve(tmp_path, "scripted")


@pytest.fixture
def k8s_cluster(tmp_path):
    """A FakeKubernetes whose pods really run, as processes of this machine (the process
    kubelet); its network namespaces, processes and files are gone after the test."""
    yield from _serve(tmp_path, "process")
