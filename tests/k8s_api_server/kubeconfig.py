"""A kubeconfig for the fake server that kubectl and the official Python client both accept:
cluster ``fake`` (plain http), user ``fake`` with a bearer token, context ``fake``."""

from __future__ import annotations

from pathlib import Path

import yaml


def kubeconfig(url: str, token: str, namespace: str = "default") -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "fake", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                   "namespace": namespace}}],
        "current-context": "fake",
    }


def write_kubeconfig(path: Path, url: str, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(url, token), sort_keys=False))
    path.chmod(0o600)
    return path
