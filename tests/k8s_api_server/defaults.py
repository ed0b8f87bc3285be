"""Defaulting the real API server applies to every object it decodes (SetDefaults_* plus the
create-time strategy bits), so objects read back look like a real cluster's."""

from __future__ import annotations

import base64

_NOT_READY_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300} for taint in ("not-ready", "unreachable")]


def apply(rt, obj: dict) -> None:
    """Defaults for any write (create or update) of ``obj``, in place."""
    fill = _BY_KIND.get(rt.kind)
    if fill:
        fill(obj)


def prepare_create(rt, obj: dict) -> None:
    """What only a create adds (admission and the strategy's PrepareForCreate)."""
    if rt.kind == "Pod":
        spec = obj["spec"]
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("priority", 0)
        spec.setdefault("tolerations", [dict(t) for t in _NOT_READY_TOLERATIONS])
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    elif rt.kind == "Job":
        _job_selector(obj)
        obj["status"] = {}
    elif rt.kind in ("StatefulSet", "Service", "ResourceQuota"):
        obj["status"] = {"Service": {"loadBalancer": {}}, "StatefulSet": {
            "replicas": 0, "availableReplicas": 0}}.get(rt.kind, {})
    elif rt.kind == "PersistentVolumeClaim":
        obj["spec"].setdefault("volumeMode", "Filesystem")
        obj["status"] = {"phase": "Pending"}
    elif rt.kind == "PersistentVolume":
        obj["spec"].setdefault("persistentVolumeReclaimPolicy", "Retain")
        obj["spec"].setdefault("volumeMode", "Filesystem")
        obj["status"] = {"phase": "Available"}
    elif rt.kind == "Namespace":
        finalizers = obj["spec"]["finalizers"]
        if "kubernetes" not in finalizers:
            finalizers.append("kubernetes")
        obj["status"] = {"phase": "Active"}


def pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            _container(container)


def _container(container: dict) -> None:
    image = container.get("image") or ""
    tag = image.rsplit("/", 1)[-1].partition(":")[2] if "@" not in image else "digest"
    container.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def qos_class(spec: dict) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    requests = [c.get("resources", {}).get("requests") or {} for c in containers]
    limits = [c.get("resources", {}).get("limits") or {} for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        all(lim.get(r) is not None and str(lim.get(r)) == str(req.get(r, lim.get(r)))
            for r in ("cpu", "memory")) and set(req) <= set(lim)
        for req, lim in zip(requests, limits, strict=True))
    return "Guaranteed" if guaranteed else "Burstable"


def _pod(obj: dict) -> None:
    pod_spec(obj.setdefault("spec", {}))


def _template(obj: dict) -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    template.setdefault("metadata", {})
    pod_spec(template.setdefault("spec", {}))


def _job(obj: dict) -> None:
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    per_index = spec.get("backoffLimitPerIndex") is not None
    spec.setdefault("backoffLimit", 2147483647 if per_index else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if not spec.get("podFailurePolicy"):
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    else:  # with a policy only Failed is allowed, and a condition's status defaults to True
        spec.setdefault("podReplacementPolicy", "Failed")
        for rule in spec["podFailurePolicy"].get("rules") or []:
            for condition in rule.get("onPodConditions") or []:
                condition.setdefault("status", "True")
    _template(obj)
    labels = spec["template"]["metadata"].get("labels")
    if labels and not obj["metadata"].get("labels"):
        obj["metadata"]["labels"] = dict(labels)


def _job_selector(obj: dict) -> None:
    """Jobs select their pods by the Job's uid unless the user chose a manual selector."""
    if obj["spec"].get("manualSelector"):
        return
    uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
    labels = obj["spec"]["template"]["metadata"].setdefault("labels", {})
    labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                   "controller-uid": uid, "job-name": name})
    obj["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def _statefulset(obj: dict) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                       "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy",
                    {"whenDeleted": "Retain", "whenScaled": "Retain"})
    _template(obj)


def _service(obj: dict) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))


def _namespace(obj: dict) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = \
        obj["metadata"]["name"]


def _secret(obj: dict) -> None:
    """``stringData`` is write-only: merged into base64 ``data``, never stored."""
    obj.setdefault("type", "Opaque")
    for key, value in (obj.pop("stringData", None) or {}).items():
        obj.setdefault("data", {})[key] = base64.b64encode(value.encode()).decode()


def _limitrange(obj: dict) -> None:
    for item in (obj.get("spec") or {}).get("limits") or []:
        if item.get("type") != "Container":
            continue
        for name, value in (item.get("max") or {}).items():
            item.setdefault("default", {}).setdefault(name, value)
        for source in ("default", "min"):
            for name, value in (item.get(source) or {}).items():
                item.setdefault("defaultRequest", {}).setdefault(name, value)


def _endpointslice(obj: dict) -> None:
    for port in obj.get("ports") or []:
        port.setdefault("name", "")
        port.setdefault("protocol", "TCP")


_BY_KIND = {"Pod": _pod, "Job": _job, "StatefulSet": _statefulset, "Service": _service,
            "Namespace": _namespace, "Secret": _secret, "LimitRange": _limitrange,
            "EndpointSlice": _endpointslice}
