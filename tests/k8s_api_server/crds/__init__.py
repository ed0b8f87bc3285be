"""Custom resources, served from the real CustomResourceDefinitions vendored here (README.md
says where each comes from): the resource types of an add-on (``kueue``, ``volcano``), and
what the API server does with their objects: strict decoding against the CRD's
``openAPIV3Schema``, defaults, validation (``schema.py``) with the server's messages, and
Tables from ``additionalPrinterColumns``.

``problems(obj)`` checks an object without a server::

    from tests.k8s_api_server import crds

    assert crds.problems(pod_group) == []
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .. import errors, rules
from ..errors import ApiError
from ..objects import seconds_since
from ..resources import ResourceType
from ..tables import human_duration
from ..validation import path_text
from . import schema as structural

HERE = Path(__file__).parent
# The CRDs of each add-on, in the order an admin applies them.
ADDONS = {
    "kueue": ("kueue.x-k8s.io_resourceflavors.yaml", "kueue.x-k8s.io_clusterqueues.yaml",
              "kueue.x-k8s.io_localqueues.yaml", "kueue.x-k8s.io_workloads.yaml"),
    "volcano": ("scheduling.volcano.sh_queues.yaml", "scheduling.volcano.sh_podgroups.yaml"),
}
# The one version served per CRD. Kueue's CRDs also define v1beta2 (their storage version
# since Kueue 0.16, the two converted by Kueue's webhook): the fake serves only the v1beta1
# the portal writes, storing it as is.
VERSION = "v1beta1"
_NAME_COLUMN = {"name": "Name", "type": "string", "format": "name",
                "description": "Name must be unique within a namespace.", "priority": 0}
_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@dataclass(frozen=True)
class CustomType(ResourceType):
    """A resource type defined by a CRD: its version's schema, columns and deprecation."""

    schema: dict = field(default_factory=dict, compare=False, repr=False)
    columns: tuple = field(default=(), compare=False, repr=False)
    deprecation: str | None = None  # the Warning a deprecated version's requests get

    @property
    def qualified_kind(self) -> str:
        """How invalid-object messages name the kind: ``PodGroup.scheduling.volcano.sh``."""
        return f"{self.kind}.{self.group}"


# --- loading ---------------------------------------------------------------------------------

@functools.cache
def definition(filename: str) -> dict:
    """A vendored CRD, parsed (the Workload CRD is 1.4 MB: libyaml when available)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(HERE / filename, encoding="utf-8") as f:
        return yaml.load(f, Loader=loader)  # noqa: S506 - a safe loader


@functools.cache
def types(addon: str) -> tuple[CustomType, ...]:
    """The resource types an add-on's CRDs define (``VERSION`` of each)."""
    if addon not in ADDONS:
        raise ValueError(f"unknown add-on {addon!r}: one of {', '.join(ADDONS)}")
    return tuple(_custom_type(definition(name)) for name in ADDONS[addon])


def _custom_type(crd: dict) -> CustomType:
    spec, names = crd["spec"], crd["spec"]["names"]
    version = next(v for v in spec["versions"] if v["name"] == VERSION and v.get("served"))
    subresources = tuple(version.get("subresources") or {})
    return CustomType(
        names["plural"], names.get("singular") or names["kind"].lower(), names["kind"],
        spec["group"], VERSION, namespaced=spec["scope"] == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()), has_status="status" in subresources,
        has_generation=True, subresources=subresources,
        schema=version["schema"]["openAPIV3Schema"],
        columns=tuple(version.get("additionalPrinterColumns") or (_AGE_COLUMN,)),
        deprecation=version.get("deprecationWarning") if version.get("deprecated") else None)


def type_of(api_version: str, kind: str) -> CustomType:
    for addon in ADDONS:
        for rt in types(addon):
            if (rt.api_version, rt.kind) == (api_version, kind):
                return rt
    raise ValueError(f"no vendored CRD serves {kind} in {api_version}")


# --- what the server does on a write ----------------------------------------------------------

def decode(rt: CustomType, obj: dict, field_validation: str) -> list[str]:
    """The decoder's part, in place: unknown fields fail (Strict, 400), or are dropped with a
    warning (Warn) or silently (Ignore); nulls of non-nullable fields are dropped; defaults
    are applied. Returns the warnings to send."""
    unknown = structural.prune(rt.schema, obj)
    texts = [f'unknown field "{path_text(p)}"' for p in unknown]
    if texts and field_validation == "Strict":
        raise errors.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                                 f"{rt.kind}: strict decoding error: " + ", ".join(texts))
    structural.default(rt.schema, obj)
    return texts if field_validation == "Warn" else []


def check(rt: CustomType, obj: dict, old: dict | None = None) -> None:
    """The strategy's validation: 422 naming ``<Kind>.<group>``, one cause per problem."""
    causes = rules.metadata_causes(rt, obj) + structural.validate(rt.schema, obj, old)
    if causes:
        raise invalid(rt, obj["metadata"].get("name") or "", causes)


def invalid(rt: CustomType, name: str, causes: list[dict]) -> ApiError:
    texts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(422, "Invalid", f'{rt.qualified_kind} "{name}" is invalid: {joined}',
                    details={"name": name, "group": rt.group, "kind": rt.kind,
                             "causes": causes})


def problems(obj: dict, old: dict | None = None) -> list[str]:
    """What the API server would refuse in ``obj`` (a Kueue or Volcano object, its
    apiVersion and kind set), as its messages: ``unknown field "spec.x"`` (strict decoding),
    then ``spec.minMember: Invalid value: -1: …`` (validation, after defaulting). ``old``:
    the stored object, for update-only (transition) rules. [] when it would be accepted."""
    rt = type_of(obj.get("apiVersion"), obj.get("kind"))
    obj = copy.deepcopy(obj)
    if not isinstance(obj.get("metadata"), dict):
        obj["metadata"] = {}
    obj["metadata"].setdefault("name", obj["metadata"].get("generateName") or "")
    found = [f'unknown field "{path_text(p)}"' for p in structural.prune(rt.schema, obj)]
    structural.default(rt.schema, obj)
    causes = rules.metadata_causes(rt, obj) if obj["metadata"]["name"] else []
    causes += structural.validate(rt.schema, obj, old)
    return found + [f"{c['field']}: {c['message']}" for c in causes]


def defaulted(obj: dict) -> dict:
    """``obj`` with the defaults its CRD's schema gives, as the server would store it."""
    obj = copy.deepcopy(obj)
    structural.default(type_of(obj.get("apiVersion"), obj.get("kind")).schema, obj)
    return obj


# --- Tables ----------------------------------------------------------------------------------

def table(rt: CustomType, listing: dict) -> dict:
    """kubectl's Table: Name, then the version's additionalPrinterColumns (or Age)."""
    definitions = [_NAME_COLUMN] + [
        {"name": c["name"], "type": c["type"], "format": c.get("format", ""),
         "description": c.get("description", ""), "priority": c.get("priority", 0)}
        for c in rt.columns]
    rows = [{"cells": [obj["metadata"]["name"], *(_cell(c, obj) for c in rt.columns)],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj["metadata"]}} for obj in listing["items"]]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": listing["metadata"],
            "columnDefinitions": definitions, "rows": rows}


def _cell(column: dict, obj: dict):
    value = jsonpath(obj, column["jsonPath"])
    if value is None:
        return None
    if column["type"] == "date":
        return human_duration(seconds_since(value)) if isinstance(value, str) else "<invalid>"
    if column["type"] == "string" and not isinstance(value, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


_STEP = re.compile(r"\.([\w-]+)|\[(\d+)\]|\[\?\(@\.([\w-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]")


def jsonpath(obj, path: str):
    """The first value a simple JSONPath (``.a.b``, ``[0]``, ``[?(@.type=='X')]``) finds."""
    values, position = [obj], 0
    while position < len(path):
        step = _STEP.match(path, position)
        if step is None:
            return None
        position = step.end()
        key, index, filter_key, filter_value = step.groups()
        found = []
        for value in values:
            if key is not None and isinstance(value, dict) and key in value:
                found.append(value[key])
            elif index is not None and isinstance(value, list) and int(index) < len(value):
                found.append(value[int(index)])
            elif filter_key is not None and isinstance(value, list):
                found += [v for v in value if isinstance(v, dict)
                          and str(v.get(filter_key)) == filter_value]
        values = found
    return values[0] if values else None
