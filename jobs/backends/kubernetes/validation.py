"""A job's objects checked against the Kubernetes OpenAPI schemas, before anything is created:
a job whose objects would be invalid is refused at submission with the schema's message.

The schemas are those ``kubernetes-validate`` ships (its strict ones: an unknown field is an
error), and the check is the one ``kubernetes_validate.validate`` makes; but that function
reads and parses the schemas (over a megabyte of JSON per version) on every call, so the
parsed schemas and the validators built on them are kept here, one per version and kind.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

# The oldest and the newest Kubernetes we mean to run on: the trainers' Job needs
# backoffLimitPerIndex and podReplacementPolicy, the pservers' pods the pod-index label (on by
# default from 1.29 and 1.28), and deploy/'s admission policy admissionregistration.k8s.io/v1
# (served from 1.30; tests/test_deploy.py holds deploy/ to these versions too).
SUPPORTED_VERSIONS = ("1.30", "1.33")
SCHEMAS = resources.files(kubernetes_validate) / "kubernetes-json-schema"
# Kueue's and Volcano's objects: their schemas are their CRDs', installed with them, which the
# tests hold these objects to (tests/k8s_api_server/crds/); the cluster checks them on create.
CUSTOM_GROUPS = ("kueue.x-k8s.io/", "scheduling.volcano.sh/")
MESSAGE_MAX = 300


@functools.cache
def _schema_dir(version: str):
    """The newest strict schemas of that minor version (``v1.33.0-local-strict``)."""
    pattern = re.compile(rf"^v{re.escape(version)}\.\d+-local-strict$")
    found = sorted((d for d in SCHEMAS.iterdir() if pattern.match(d.name)),
                   key=lambda d: int(d.name.split(".")[2].split("-")[0]))
    if not found:
        raise ValueError(f"kubernetes-validate {kubernetes_validate.__version__} has no "
                         f"schemas for Kubernetes {version}")
    return found[-1]


@functools.cache
def _definitions(version: str) -> Registry:
    contents = json.loads((_schema_dir(version) / "_definitions.json").read_text())
    return Resource.from_contents(contents) @ Registry()


@functools.cache
def _validator(version: str, api_version: str, kind: str) -> jsonschema.Validator | None:
    """Named as kubernetes-validate names its files: ``job-batch-v1.json``, ``service-v1.json``;
    None when there is no schema for the kind."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _schema_dir(version) / f"{kind.lower()}-{group_version}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    registry = Resource.from_contents(schema) @ _definitions(version)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def field_path(parts) -> str:
    """``spec.template.spec.containers[0].env`` from the parts of a jsonschema path."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(the object)"


def object_problems(obj: dict, version: str) -> list[str]:
    """What is wrong with one object for one Kubernetes version: ``field: message`` each."""
    validator = _validator(version, obj.get("apiVersion", ""), obj.get("kind", ""))
    if validator is None:
        return [f"(the object): no {obj.get('apiVersion')} {obj.get('kind')} in Kubernetes "
                f"{version}"]
    problems = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.path]):
        message = error.message
        if len(message) > MESSAGE_MAX:
            message = message[:MESSAGE_MAX] + "…"
        problems.append(f"{field_path(error.absolute_path)}: {message}")
    return problems


def validate_objects(objects: list[dict], versions: tuple[str, ...] = SUPPORTED_VERSIONS
                     ) -> list[str]:
    """Every problem of every object, for users: ``Job fit-a-line-3f2a1-tr:
    spec.completions: -1 is less than the minimum of 0 (Kubernetes 1.30, 1.33)``. Empty when
    all are valid for every version."""
    found: dict[str, list[str]] = {}
    for obj in objects:
        if obj.get("apiVersion", "").startswith(CUSTOM_GROUPS):
            continue
        name = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        for version in versions:
            for problem in object_problems(obj, version):
                found.setdefault(f"{name}: {problem}", []).append(version)
    return [f"{problem} (Kubernetes {', '.join(found_in)})"
            for problem, found_in in found.items()]
