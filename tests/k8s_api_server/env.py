"""The environment the kubelet gives a container: downward-API fields and ``$(NAME)``
expansion, as Kubernetes does them."""

from __future__ import annotations

import re

_KEYED = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


def expand(value: str, defined: dict[str, str]) -> str:
    """Kubernetes' expansion of ``$(NAME)`` (k8s.io/kubernetes third_party/forked/golang/
    expansion): ``$$`` is ``$``, a name defined earlier in the list is replaced, anything
    else is left as it is."""
    out, cursor = [], 0
    while cursor < len(value):
        char = value[cursor]
        if char == "$" and cursor + 1 < len(value):
            after = value[cursor + 1]
            if after == "$":
                out.append("$")
                cursor += 2
                continue
            if after == "(":
                end = value.find(")", cursor + 2)
                if end != -1:
                    name = value[cursor + 2:end]
                    out.append(defined.get(name, f"$({name})"))
                    cursor = end + 1
                    continue
        out.append(char)
        cursor += 1
    return "".join(out)


def pod_env(container: dict, fields: dict[str, str]) -> dict[str, str]:
    """The container's environment, its downward-API fields being ``fields`` (field path ->
    value)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "valueFrom" in item:
            env[item["name"]] = fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "")
        else:
            env[item["name"]] = expand(item.get("value", ""), env)
    return env


def pod_fields(pod: dict) -> dict[str, str]:
    """The downward-API field paths of a pod and their values."""
    meta, status = pod["metadata"], pod.get("status") or {}
    fields = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta.get("uid", ""), "status.podIP": status.get("podIP", ""),
              "spec.nodeName": pod["spec"].get("nodeName", "")}
    for kind in ("annotations", "labels"):
        for key, value in (meta.get(kind) or {}).items():
            fields[f"metadata.{kind}['{key}']"] = value
    return fields
