"""A faithful fake Kubernetes API server for tests (core/v1, apps/v1, batch/v1), with an
in-process controller that plays scheduler, kubelets and the Job, StatefulSet, namespace,
quota and garbage-collection controllers. See ``server.FakeKubernetes`` and
``fixtures.k8s_api``."""

from .config import Settings
from .server import FakeKubernetes

__all__ = ["FakeKubernetes", "Settings"]
