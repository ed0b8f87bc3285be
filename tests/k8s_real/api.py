"""Raw requests to a real API server as a kubeconfig's user: the status and the message of
the answer, whatever the kind (custom ones too), for tests that compare what the server
decides with what the project expects."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tests.real_kube.control_plane import api_client

# kind -> (API group, version, resource, namespaced)
KINDS = {
    "Namespace": ("", "v1", "namespaces", False),
    "Node": ("", "v1", "nodes", False),
    "PersistentVolume": ("", "v1", "persistentvolumes", False),
    "ResourceQuota": ("", "v1", "resourcequotas", True),
    "LimitRange": ("", "v1", "limitranges", True),
    "Secret": ("", "v1", "secrets", True),
    "ConfigMap": ("", "v1", "configmaps", True),
    "Service": ("", "v1", "services", True),
    "Pod": ("", "v1", "pods", True),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims", True),
    "StatefulSet": ("apps", "v1", "statefulsets", True),
    "Job": ("batch", "v1", "jobs", True),
    "LocalQueue": ("kueue.x-k8s.io", "v1beta1", "localqueues", True),
    "PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups", True),
    "RoleBinding": ("rbac.authorization.k8s.io", "v1", "rolebindings", True),
    "NetworkPolicy": ("networking.k8s.io", "v1", "networkpolicies", True),
}


@dataclasses.dataclass
class Answer:
    status: int
    body: dict

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return self.body.get("message", "")


def path_of(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    group, version, resource, namespaced = KINDS[kind]
    path = "/api/v1" if not group else f"/apis/{group}/{version}"
    if namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{resource}"
    return f"{path}/{name}" if name else path


class Api:
    def __init__(self, kubeconfig: Path, *, impersonate: str | None = None,
                 group: str | None = None):
        """As ``kubeconfig``'s user, or as the user (in the group) it impersonates."""
        self.client = api_client(kubeconfig)
        if impersonate:
            self.client.set_default_header("Impersonate-User", impersonate)
        if group:
            self.client.set_default_header("Impersonate-Group", group)

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, path: str, body: dict | None = None, *,
                dry_run: bool = False) -> Answer:
        query = [("dryRun", "All")] if dry_run else []
        serialized = self.client.param_serialize(
            method, path, query_params=query, body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"])
        response = self.client.call_api(*serialized[:4])
        data = response.read()
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            answer = {"message": data.decode(errors="replace")}
        return Answer(response.status, answer)

    def create(self, obj: dict, *, dry_run: bool = False) -> Answer:
        meta = obj["metadata"]
        return self.request("POST", path_of(obj["kind"], meta.get("namespace")), obj,
                            dry_run=dry_run)

    def update(self, obj: dict, *, dry_run: bool = False) -> Answer:
        meta = obj["metadata"]
        return self.request("PUT", path_of(obj["kind"], meta.get("namespace"), meta["name"]),
                            obj, dry_run=dry_run)

    def delete(self, obj: dict, *, dry_run: bool = False) -> Answer:
        meta = obj["metadata"]
        return self.request("DELETE", path_of(obj["kind"], meta.get("namespace"), meta["name"]),
                            dry_run=dry_run)

    def get(self, kind: str, namespace: str | None = None, name: str | None = None) -> Answer:
        return self.request("GET", path_of(kind, namespace, name))
