"""Discovery documents (/version, /api, /apis, /api/v1, /apis/{group}/{version}) in the legacy
format; kubectl asks for aggregated discovery first and falls back to these."""

from __future__ import annotations

import base64
import hashlib

from . import resources

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "log": ["get"],
                      "finalize": ["update"], "eviction": ["create"],
                      "pendingworkloads": ["get"]}  # Kueue's visibility API (kueue_scheduler.py)


def version(kubernetes_version: str) -> dict:
    major, minor = kubernetes_version.split(".")[:2]
    return {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0-fake",
            "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2024-08-13T07:28:49Z",
            "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64"}


def api_versions(server_address: str) -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def api_group(group: str, types: tuple = resources.ALL) -> dict:
    versions = [{"groupVersion": f"{group}/{v}", "version": v}
                for v in resources.groups(types)[group]]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
            "preferredVersion": versions[0]}


def api_group_list(types: tuple = resources.ALL) -> dict:
    groups = [api_group(g, types) for g in resources.groups(types)]
    for g in groups:
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group: str, version_name: str, types: tuple = resources.ALL
                      ) -> dict | None:
    served = [rt for rt in types if (rt.group, rt.version) == (group, version_name)]
    if not served:
        return None
    entries = []
    for rt in served:
        entries.append(_entry(rt, rt.plural, list(getattr(rt, "verbs", _VERBS))))
        entries.extend(_entry(rt, f"{rt.plural}/{sub}", _SUBRESOURCE_VERBS[sub])
                       for sub in rt.subresources)
    group_version = f"{group}/{version_name}" if group else version_name
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": entries}


def _entry(rt, name: str, verbs: list[str]) -> dict:
    entry = {"name": name, "singularName": rt.singular if "/" not in name else "",
             "namespaced": rt.namespaced, "kind": rt.kind, "verbs": verbs}
    if "/" not in name:
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        digest = hashlib.sha256(f"{rt.api_version}/{rt.kind}".encode()).digest()
        entry["storageVersionHash"] = base64.b64encode(digest[:8]).decode()
    return entry


def openapi_v3_root(types: tuple = resources.ALL) -> dict:
    """``/openapi/v3``: where each group version's document is. kubectl reads it to learn
    that the server validates fields itself (so ``kubectl apply`` needs no client schema)."""
    paths = {_gv_path(group, version): {"serverRelativeURL": f"/openapi/v3/"
                                                            f"{_gv_path(group, version)}"}
             for group, version in _group_versions(types)}
    return {"paths": paths}


def openapi_v3_document(gv_path: str, types: tuple = resources.ALL) -> dict | None:
    """A minimal OpenAPI v3 document: one PATCH operation per kind, tagged with its
    group-version-kind and the ``fieldValidation`` parameter, and no schemas."""
    match = [(g, v) for g, v in _group_versions(types) if _gv_path(g, v) == gv_path]
    if not match:
        return None
    group, version = match[0]
    paths = {}
    for rt in types:
        if (rt.group, rt.version) != (group, version) or getattr(rt, "verbs", None) == ():
            continue
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        paths[f"/{gv_path}{scope}/{rt.plural}/{{name}}"] = {"patch": {
            "x-kubernetes-group-version-kind": {"group": group, "version": version,
                                                "kind": rt.kind},
            "parameters": [{"name": "fieldValidation", "in": "query",
                            "schema": {"type": "string", "uniqueItems": True}}],
            "responses": {"200": {"description": "OK"}}}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.31.0"},
            "paths": paths}


def _group_versions(types: tuple = resources.ALL) -> list[tuple[str, str]]:
    return [("", "v1")] + [(g, v) for g, versions in resources.groups(types).items()
                           for v in versions]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"
