"""The namespace controller: a terminating namespace has its content deleted, then its
``kubernetes`` finalizer removed (so it goes); every live namespace gets the
``kube-root-ca.crt`` ConfigMap, as the root-CA publisher does on a real cluster."""

from __future__ import annotations

from . import resources
from .api import DeleteOptions
from .errors import ApiError

ROOT_CA = "kube-root-ca.crt"
_FAKE_CA = ("-----BEGIN CERTIFICATE-----\nMIIBfakefakefakefakefakefakefakefakefakefakefake\n"
            "-----END CERTIFICATE-----\n")


class NamespaceController:
    def __init__(self, api):
        self.api = api

    def sync(self) -> None:
        for namespace in self.api.store.list(resources.NAMESPACES.key):
            if namespace["metadata"].get("deletionTimestamp"):
                self._empty(namespace)
            else:
                self._publish_root_ca(namespace["metadata"]["name"])

    def _empty(self, namespace: dict) -> None:
        name = namespace["metadata"]["name"]
        content = [(rt, obj) for rt in self.api.types if rt.namespaced
                   for obj in self.api.store.list(rt.key, name)]
        for rt, obj in content:
            if not obj["metadata"].get("deletionTimestamp"):
                try:
                    self.api.delete(rt, name, obj["metadata"]["name"],
                                    DeleteOptions(propagation="Background"))
                except ApiError as exc:
                    if exc.code != 404:
                        raise
        if not content and "kubernetes" in namespace["spec"].get("finalizers", []):
            namespace["spec"]["finalizers"].remove("kubernetes")
            self.api.update(resources.NAMESPACES, namespace, subresource="finalize")

    def _publish_root_ca(self, namespace: str) -> None:
        if self.api.store.get(resources.CONFIGMAPS.key, namespace, ROOT_CA) is None:
            self.api.create(resources.CONFIGMAPS, namespace, {
                "metadata": {"name": ROOT_CA, "annotations": {
                    "kubernetes.io/description": "Contains a CA bundle that can be used to "
                                                 "verify the kube-apiserver when using internal "
                                                 "endpoints such as the internal service IP or "
                                                 "kubernetes.default.svc. No other usage is "
                                                 "guaranteed across distributions of "
                                                 "Kubernetes clusters."}},
                "data": {"ca.crt": _FAKE_CA}}, trusted=True)
