"""Object bodies and small assertions shared by the fake API server's tests."""

from __future__ import annotations

import json

from kubernetes import client


def pod_body(name: str, *, image: str = "busybox:1.36", labels: dict | None = None,
             resources: dict | None = None, **spec) -> dict:
    container = {"name": "main", "image": image}
    if resources:
        container["resources"] = resources
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [container], **spec}}


def job_body(name: str, *, completions: int = 2, parallelism: int | None = None,
             indexed: bool = True, restart_policy: str = "Never", **spec) -> dict:
    template = {"metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": restart_policy, "subdomain": f"{name}-svc",
                         "containers": [{"name": "trainer", "image": "paddle:2.6"}]}}
    body_spec = {"completions": completions, "parallelism": parallelism or completions,
                 "template": template, **spec}
    if indexed:
        body_spec["completionMode"] = "Indexed"
    return {"metadata": {"name": name}, "spec": body_spec}


def statefulset_body(name: str, *, replicas: int = 2, image: str = "paddle:2.6",
                     **spec) -> dict:
    return {"metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "pserver", "image": image}]}},
                     **spec}}


def status_of(exc: client.ApiException) -> dict:
    """The Status body the server sent with an error."""
    return json.loads(exc.body)


def condition(obj, type_: str):
    """The condition of a client model (job, pod) with that type, or None."""
    return next((c for c in obj.status.conditions or [] if c.type == type_), None)
