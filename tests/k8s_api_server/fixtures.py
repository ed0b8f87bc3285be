"""The ``k8s_api`` pytest fixture: a fake Kubernetes API server per test. Make it available
in a test directory's conftest.py with::

    from tests.k8s_api_server import fixtures

    k8s_api = fixtures.k8s_api
"""

from __future__ import annotations

import pytest

from .server import FakeKubernetes


@pytest.fixture
def k8s_api(tmp_path):
    """A started FakeKubernetes (``.url``, ``.kubeconfig_path``, ``.controller``, ``.store``,
    ``.settings``, ``fail_next``/``hang_next``/``drop_watches``/``compact``, ``events``);
    the test fails if the fake itself hit a bug while serving it."""
    server = FakeKubernetes(kubeconfig_path=tmp_path / "kubeconfig").start()
    try:
        yield server
    finally:
        server.stop()
    problems = server.errors + server.controller.errors
    if problems:
        pytest.fail("the fake API server failed internally:\n" + "\n".join(problems))
