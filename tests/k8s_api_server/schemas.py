"""The real Kubernetes OpenAPI schemas, as shipped by the ``kubernetes-validate`` package
(strict variant: unknown fields are errors), loaded once per version. Validation and
strategic merge patch (its merge keys) both read them."""

from __future__ import annotations

import functools
import re

import jsonschema
import referencing
from kubernetes_validate import utils as kv_utils

_DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"


def resolve_version(desired: str) -> str:
    """The newest shipped schema version not newer than ``desired`` (as kubernetes-validate
    does), e.g. "1.31" -> "1.31.0"."""
    wanted = tuple(int(p) for p in desired.lstrip("v").split(".")[:2])
    shipped = [v for v in kv_utils.all_versions() if re.fullmatch(r"\d+\.\d+\.\d+", v)]
    usable = [v for v in shipped if tuple(int(p) for p in v.split(".")[:2]) <= wanted]
    if not usable:
        raise ValueError(f"kubernetes-validate ships no schema for Kubernetes {desired}")
    return max(usable, key=lambda v: tuple(int(p) for p in v.split(".")))


@functools.cache
def _definitions(version: str) -> dict:
    return kv_utils.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version)


@functools.cache
def kind_schema(version: str, api_version: str, kind: str) -> dict:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return kv_utils.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/{kind.lower()}-{group_version}.json",
        version)


@functools.cache
def validator(version: str, api_version: str, kind: str) -> jsonschema.Validator:
    definitions = referencing.Resource.from_contents(_definitions(version))
    schema = kind_schema(version, api_version, kind)
    registry = referencing.Registry().with_resources([
        (_DEFINITIONS_URI, definitions), (schema["$id"], referencing.Resource.from_contents(
            schema))])
    return jsonschema.Draft202012Validator(schema, registry=registry)


def resolve(version: str, schema: dict | None) -> dict:
    """Follow ``$ref`` (and one-element ``allOf``) to the definition itself."""
    while schema and "$ref" in schema:
        schema = _definitions(version)["$defs"][schema["$ref"].split("/$defs/")[-1]]
    return schema or {}


def property_schema(version: str, schema: dict | None, key: str) -> dict:
    """The schema of ``key`` inside an object schema; {} when unknown (anything goes)."""
    return resolve(version, (resolve(version, schema).get("properties") or {}).get(key))


def items_schema(version: str, schema: dict | None) -> dict:
    return resolve(version, resolve(version, schema).get("items"))
