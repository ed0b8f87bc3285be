"""``Table`` responses (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``), the way
``kubectl get`` asks for lists: a few columns per kind, as the server's printers give."""

from __future__ import annotations

from .objects import seconds_since

_NAME = {"name": "Name", "type": "string", "format": "name",
         "description": "Name must be unique within a namespace.", "priority": 0}
_AGE = {"name": "Age", "type": "string", "format": "",
        "description": "CreationTimestamp is a timestamp representing the server time when this "
                       "object was created.", "priority": 0}


def _column(name: str, type_: str = "string", priority: int = 0) -> dict:
    return {"name": name, "type": type_, "format": "", "description": name, "priority": priority}


def human_duration(seconds: float) -> str:
    """kubectl's short ages: 45s, 3m12s, 17m, 5h3m, 3d4h, 40d."""
    seconds = max(int(seconds), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if days < 2:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def _age(obj: dict) -> str:
    return human_duration(seconds_since(obj["metadata"]["creationTimestamp"]))


def pod_status_text(pod: dict) -> str:
    """The STATUS column: the phase, or the reason a container waits or ended."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    inits = status.get("initContainerStatuses") or []
    done = sum(1 for e in inits if (e.get("state") or {}).get("terminated", {}).get(
        "exitCode") == 0)
    if inits and done < len(inits):  # kubectl's Init:N/M, or why an init container stopped
        entry = inits[done]
        state = entry.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        if "terminated" in state:
            ended = state["terminated"]
            return "Init:" + (ended.get("reason") or f"ExitCode:{ended.get('exitCode')}")
        if waiting and waiting != "PodInitializing":
            return f"Init:{waiting}"
        return "Terminating" if pod["metadata"].get("deletionTimestamp") else \
            f"Init:{done}/{len(inits)}"
    for entry in reversed(status.get("containerStatuses") or []):
        state = entry.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            terminated = state["terminated"]
            reason = terminated.get("reason") or f"ExitCode:{terminated.get('exitCode', 0)}"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_cells(pod: dict) -> list:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    total = len(pod["spec"].get("containers") or [])
    restarts = sum(s.get("restartCount", 0) for s in statuses)
    status = pod.get("status") or {}
    return [f"{ready}/{total}", pod_status_text(pod), restarts, _age(pod),
            status.get("podIP", "<none>"), pod["spec"].get("nodeName", "<none>")]


def _job_cells(job: dict) -> list:
    status, spec = job.get("status") or {}, job["spec"]
    conditions = {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}
    state = "Complete" if "Complete" in conditions else "Failed" if "Failed" in conditions \
        else "Terminating" if job["metadata"].get("deletionTimestamp") \
        else next((c for c in ("Suspended", "FailureTarget", "SuccessCriteriaMet")
                   if c in conditions), "Running")
    completions = spec.get("completions")
    done = f"{status.get('succeeded', 0)}/{completions}" if completions is not None else \
        f"{status.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}"
    return [state, done, _age(job)]


def _statefulset_cells(sts: dict) -> list:
    status = sts.get("status") or {}
    return [f"{status.get('readyReplicas', 0)}/{sts['spec'].get('replicas', 1)}", _age(sts)]


def _event_cells(event: dict) -> list:
    involved = event["involvedObject"]
    return [human_duration(seconds_since(event["lastTimestamp"])), event["type"],
            event["reason"], f"{involved['kind'].lower()}/{involved['name']}", event["message"],
            event["metadata"]["name"]]


def _name(obj: dict) -> list:
    return [obj["metadata"]["name"]]


_COLUMNS = {
    "Pod": ([_NAME, _column("Ready"), _column("Status"), _column("Restarts", "integer"), _AGE,
             _column("IP", priority=1), _column("Node", priority=1)],
            lambda o: [*_name(o), *_pod_cells(o)]),
    "Job": ([_NAME, _column("Status"), _column("Completions"), _AGE],
            lambda o: [*_name(o), *_job_cells(o)]),
    "StatefulSet": ([_NAME, _column("Ready"), _AGE], lambda o: [*_name(o), *_statefulset_cells(o)]),
    "Namespace": ([_NAME, _column("Status"), _AGE],
                  lambda o: [*_name(o), (o.get("status") or {}).get("phase", ""), _age(o)]),
    "Event": ([_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"),
               _column("Message"), {**_NAME, "priority": 1}], _event_cells),
}


def table(rt, listing: dict) -> dict:
    columns, cells = _COLUMNS.get(rt.kind, ([_NAME, _AGE], lambda o: [*_name(o), _age(o)]))
    rows = []
    for obj in listing["items"]:
        rows.append({"cells": cells(obj),
                     "object": {"kind": "PartialObjectMetadata",
                                "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": listing["metadata"],
            "columnDefinitions": columns, "rows": rows}
