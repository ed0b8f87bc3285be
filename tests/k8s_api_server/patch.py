"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (lists merged by the
``x-kubernetes-patch-merge-key`` the real schema declares, ``$patch`` directives) and JSON
patch (RFC 6902)."""

from __future__ import annotations

import copy

from . import errors, schemas

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def apply(content_type: str, version: str, kind_schema: dict, target: dict, body) -> dict:
    if content_type == JSON_PATCH:
        return json_patch(target, body)
    if not isinstance(body, dict):
        raise errors.bad_request("the body of a merge patch must be a JSON object")
    if content_type == MERGE:
        return merge_patch(target, body)
    if content_type == STRATEGIC:
        return _strategic_object(version, kind_schema, target, body)
    raise errors.ApiError(415, "UnsupportedMediaType",
                          f"the body of the request was in an unknown format - accepted media "
                          f"types include: {JSON_PATCH}, {MERGE}, {STRATEGIC}")


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _value_schema(version: str, schema: dict, key: str) -> dict:
    resolved = schemas.resolve(version, schema)
    if key in (resolved.get("properties") or {}):
        return schemas.property_schema(version, resolved, key)
    extra = resolved.get("additionalProperties")
    return schemas.resolve(version, extra) if isinstance(extra, dict) else {}


def _strategic_object(version: str, schema: dict, target, patch: dict):
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [x for x in result.get(field) or [] if x not in value]
        elif key.startswith("$"):
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = _strategic_object(version, _value_schema(version, schema, key),
                                                result.get(key), value)
        elif isinstance(value, list):
            result[key] = _strategic_list(version, _value_schema(version, schema, key),
                                          result.get(key), value)
        else:
            result[key] = value
    return result


def _strategic_list(version: str, schema: dict, current, patch: list) -> list:
    if "merge" not in schema.get("x-kubernetes-patch-strategy", "") or any(
            isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [e for e in patch if not (isinstance(e, dict) and "$patch" in e)]
    merged = list(current or [])
    key = schema.get("x-kubernetes-patch-merge-key")
    if key is None:
        return merged + [e for e in patch if e not in merged]
    item_schema = schemas.items_schema(version, schema)
    for element in patch:
        index = next((i for i, e in enumerate(merged) if e.get(key) == element.get(key)), None)
        if element.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(_strategic_object(version, item_schema, {}, element))
        else:
            merged[index] = _strategic_object(version, item_schema, merged[index], element)
    return merged


def json_patch(target: dict, operations) -> dict:
    if not isinstance(operations, list):
        raise errors.bad_request("json: cannot unmarshal object into Go value of type "
                                 "jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for op in operations:
        try:
            doc = _json_patch_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise errors.ApiError(422, "Invalid", f"the server rejected our request due to an "
                                                  f"error in our request: {exc}") from exc
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc, parts: list[str]):
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _get(doc, path: str):
    parts = _pointer(path)
    parent = _parent(doc, parts) if parts else None
    if not parts:
        return doc
    return parent[int(parts[-1])] if isinstance(parent, list) else parent[parts[-1]]


def _json_patch_op(doc, op: dict):
    kind, path = op["op"], op["path"]
    if kind == "test":
        if _get(doc, path) != op["value"]:
            raise ValueError(f"testing value {path} failed")
        return doc
    if kind in ("move", "copy"):
        value = copy.deepcopy(_get(doc, op["from"]))
        if kind == "move":
            doc = _json_patch_op(doc, {"op": "remove", "path": op["from"]})
        return _json_patch_op(doc, {"op": "add", "path": path, "value": value})
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(op["value"]) if kind in ("add", "replace") else None
    parent, last = _parent(doc, parts), parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind == "remove":
            del parent[index]
        else:
            parent[index] = copy.deepcopy(op["value"])
    elif kind == "add":
        parent[last] = copy.deepcopy(op["value"])
    elif kind == "remove":
        del parent[last]
    elif kind == "replace":
        if last not in parent:
            raise KeyError(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = copy.deepcopy(op["value"])
    else:
        raise ValueError(f"unexpected operation {kind!r}")
    return doc
