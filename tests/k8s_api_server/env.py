"""The environment the kubelet gives a container, as Kubernetes builds it: ``envFrom`` sources
in order, then ``env`` in order (a later name replaces an earlier one), each ``value`` with
``$(NAME)`` expanded from what is defined so far; ``valueFrom`` reads the downward API
(``fieldRef``, ``resourceFieldRef``), ConfigMaps and Secrets."""

from __future__ import annotations

import base64
import math
import re

from .quantity import Quantity

_KEYED = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# What a container with no limit gets for ``limits.*`` (the node's allocatable, as a kubelet).
NODE_ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi"}


class ContainerConfigError(Exception):
    """The container cannot be given its environment: the kubelet's ``CreateContainerConfigError``
    message."""


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


def pod_fields(pod: dict) -> dict[str, str]:
    """The downward-API field paths of a pod and their values."""
    meta, status, spec = pod["metadata"], pod.get("status") or {}, pod["spec"]
    fields = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta.get("uid", ""), "status.podIP": status.get("podIP", ""),
              "status.hostIP": status.get("hostIP", ""),
              "spec.nodeName": spec.get("nodeName", ""),
              "spec.serviceAccountName": spec.get("serviceAccountName", "")}
    for kind in ("annotations", "labels"):
        for key, value in (meta.get(kind) or {}).items():
            fields[f"metadata.{kind}['{key}']"] = value
    return fields


def resource_field(container: dict, ref: dict) -> str:
    """A ``resourceFieldRef``: the container's request or limit (a limit it does not set is
    the node's allocatable) divided by ``divisor``, rounded up, as the kubelet does."""
    section, _, name = ref["resource"].partition(".")
    amounts = (container.get("resources") or {}).get(section) or {}
    amount = amounts.get(name)
    if amount is None:
        amount = NODE_ALLOCATABLE.get(name, "0") if section == "limits" else "0"
    divisor = Quantity.parse(ref.get("divisor") or "1").value
    return str(math.ceil(Quantity.parse(amount).value / divisor))


class Sources:
    """Where ``configMapKeyRef``/``secretKeyRef``/``envFrom`` read: ``get(kind, name)`` returns
    the ConfigMap or Secret of the pod's namespace, or None. Without one, only literal values
    and the downward API are resolved (references fail)."""

    def __init__(self, get=None):
        self._get = get or (lambda kind, name: None)

    def data(self, kind: str, name: str, optional: bool) -> dict[str, str] | None:
        obj = self._get(kind, name)
        if obj is None:
            if optional:
                return None
            raise ContainerConfigError(f'{kind.lower()} "{name}" not found')
        if kind == "Secret":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})


def _key_ref(sources: Sources, kind: str, ref: dict) -> str | None:
    optional = ref.get("optional", False)
    data = sources.data(kind, ref["name"], optional)
    if data is None:
        return None
    if ref["key"] not in data:
        if optional:
            return None
        raise ContainerConfigError(f"couldn't find key {ref['key']} in {kind} "
                                   f"{ref.get('namespace', '')}/{ref['name']}".replace(" /", " "))
    return data[ref["key"]]


def pod_env(container: dict, fields: dict[str, str], sources: Sources | None = None
            ) -> dict[str, str]:
    """The container's environment, its downward-API fields being ``fields`` (field path ->
    value); ``sources`` resolves ConfigMap and Secret references."""
    sources = sources or Sources()
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind, ref = ("ConfigMap", source["configMapRef"]) if "configMapRef" in source \
            else ("Secret", source["secretRef"])
        data = sources.data(kind, ref["name"], ref.get("optional", False)) or {}
        for key, value in data.items():
            name = source.get("prefix", "") + key
            if _ENV_NAME.match(name):  # the kubelet skips invalid names (with an event)
                env[name] = value
    for item in container.get("env") or []:
        value_from = item.get("valueFrom")
        if value_from is None:
            env[item["name"]] = expand(item.get("value", ""), env)
            continue
        if "fieldRef" in value_from:
            value = fields.get(value_from["fieldRef"]["fieldPath"], "")
        elif "resourceFieldRef" in value_from:
            value = resource_field(container, value_from["resourceFieldRef"])
        elif "configMapKeyRef" in value_from:
            value = _key_ref(sources, "ConfigMap", value_from["configMapKeyRef"])
        else:
            value = _key_ref(sources, "Secret", value_from["secretKeyRef"])
        if value is not None:
            env[item["name"]] = value
    return env


def container_command(container: dict, env: dict[str, str]) -> list[str]:
    """``command`` then ``args``, each with ``$(NAME)`` expanded from the environment. Images are
    not pulled here, so a container must give a ``command`` (or ``args``, taken as one)."""
    argv = [expand(part, env) for part in
            (container.get("command") or []) + (container.get("args") or [])]
    if not argv:
        raise ContainerConfigError("no command: images are not pulled by the process kubelet, "
                                   "so a container must set command (or args)")
    return argv
