"""What the API server does with a custom resource against its CRD's structural schema
(``openAPIV3Schema``): prune unknown fields (reported for strict decoding) and nulls of
non-nullable fields, apply ``default`` values, validate with kube-openapi's wording,
check ``x-kubernetes-list-type`` invariants and run ``x-kubernetes-validations`` (CEL, with
cel-python; a rule it cannot evaluate is skipped)."""

from __future__ import annotations

import copy
import functools
import json
import re

from .. import errors
from ..validation import path_text

# What the server decodes into a custom resource's ObjectMeta; anything else there is unknown.
OBJECT_META_FIELDS = frozenset((
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields"))
_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))
_INT_OR_STRING = ({"type": "integer"}, {"type": "string"})
BLOCKED_RULES = ("some validation rules were not checked because the object was invalid; "
                 "correct the existing errors to complete validation")


def json_type(value) -> str:
    if value is None:
        return "null"
    return next(name for kind, name in _JSON_TYPES if isinstance(value, kind))


# --- decoding: pruning and defaulting -------------------------------------------------------

def prune(schema: dict, value, path: tuple = ()) -> list[tuple]:
    """Drop, in place, the fields ``schema`` does not know and the nulls of non-nullable
    fields; return the unknown fields' paths, in document order."""
    unknown: list[tuple] = []
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        for key in list(value):
            child = properties.get(key)
            if child is None and isinstance(extra, dict):
                child = extra
            if not path and key in ("apiVersion", "kind"):
                continue
            if not path and key == "metadata":
                unknown += [("metadata", k) for k in list(value[key] or {})
                            if k not in OBJECT_META_FIELDS]
                for k in [k for k in value[key] or {} if k not in OBJECT_META_FIELDS]:
                    del value[key][k]
                continue
            if child is None:
                if not keep:
                    unknown.append((*path, key))
                    del value[key]
                continue
            if value[key] is None and not child.get("nullable"):
                del value[key]
                continue
            unknown += prune(child, value[key], (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            unknown += prune(schema["items"], item, (*path, index))
    return unknown


def default(schema: dict, value) -> None:
    """Fill in, in place, the ``default`` of every absent property whose parent is present."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, child in properties.items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if child is not None:
                default(child, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            default(schema["items"], item)


# --- validation ------------------------------------------------------------------------------

def validate(schema: dict, value, old=None, *, root: bool = True) -> list[dict]:
    """Every problem of ``value`` as ``details.causes`` entries (``old``: the stored object,
    for transition rules). Schema errors first; CEL rules only when no value has a wrong type,
    as the server does."""
    causes: list[dict] = []
    _check(schema, value, [], causes)
    if any(c["reason"] == "FieldValueTypeInvalid" for c in causes):
        return [*causes, errors.cause("<nil>", "FieldValueInvalid",
                                      f'Invalid value: "null": {BLOCKED_RULES}')]
    _rules(schema, value, old, [], causes, root=root)
    return causes


def _name(path: list) -> str:
    return path_text(path) or "."


def _error(causes: list, path: list, reason: str, body: str) -> None:
    causes.append(errors.cause(path_text(path), reason, body))


def _invalid(causes: list, path: list, value, detail: str) -> None:
    _error(causes, path, "FieldValueInvalid", f"Invalid value: {_go_value(value)}: {detail}")


def _check(schema: dict, value, path: list, causes: list) -> None:
    if not _type_ok(schema, value, path, causes):
        return
    if value is None:
        return
    if schema.get("x-kubernetes-int-or-string") and not schema.get("anyOf"):
        schema = {**schema, "anyOf": _INT_OR_STRING}
    if schema.get("anyOf") and not _any_of(schema, value, path, causes):
        return
    for branch in schema.get("allOf") or []:
        _check(branch, value, path, causes)
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(f'"{v}"' if isinstance(v, str) else json.dumps(v)
                            for v in schema["enum"])
        _error(causes, path, "FieldValueNotSupported",
               f"Unsupported value: {_go_value(value)}: supported values: {choices}")
    if isinstance(value, str):
        _check_string(schema, value, path, causes)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(schema, value, path, causes)
    elif isinstance(value, list):
        _check_array(schema, value, path, causes)
    elif isinstance(value, dict):
        _check_object(schema, value, path, causes)


def _type_ok(schema: dict, value, path: list, causes: list) -> bool:
    wanted = schema.get("type")
    if value is None:
        if wanted and not schema.get("nullable"):
            _type_error(path, wanted, "null", causes)
            return False
        return True
    if not wanted:
        return True
    got = json_type(value)
    if got == wanted or (wanted == "number" and got == "integer") or (
            wanted == "integer" and got == "number" and float(value).is_integer()):
        return True
    _type_error(path, wanted, got, causes)
    return False


def _type_error(path: list, wanted: str, got: str, causes: list) -> None:
    _error(causes, path, "FieldValueTypeInvalid",
           f'Invalid value: "{got}": {_name(path)} in body must be of type {wanted}: "{got}"')


def _any_of(schema: dict, value, path: list, causes: list) -> bool:
    found = []
    for branch in schema["anyOf"]:
        branch_causes: list[dict] = []
        _check(branch, value, path, branch_causes)
        if not branch_causes:
            return True
        found += branch_causes
    causes.extend(found)
    _error(causes, path, "FieldValueInvalid",
           f'Invalid value: "": "{_name(path)}" must validate at least one schema (anyOf)')
    return False


def _check_string(schema: dict, value: str, path: list, causes: list) -> None:
    name = _name(path)
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        limit = schema["maxLength"]
        _error(causes, path, "FieldValueTooLong",
               f"Too long: may not be more than {limit} byte{'s' if limit != 1 else ''}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        _invalid(causes, path, value,
                 f"{name} in body should be at least {schema['minLength']} chars long")
    if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
        _invalid(causes, path, value, f"{name} in body should match '{schema['pattern']}'")


@functools.cache
def _pattern(text: str) -> re.Pattern:
    return re.compile(text)


def _check_number(schema: dict, value, path: list, causes: list) -> None:
    name = _name(path)
    if "maximum" in schema:
        bound = _number(schema["maximum"])
        if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
            _invalid(causes, path, value, f"{name} in body should be less than {bound}")
        elif value > schema["maximum"]:
            _invalid(causes, path, value,
                     f"{name} in body should be less than or equal to {bound}")
    if "minimum" in schema:
        bound = _number(schema["minimum"])
        if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
            _invalid(causes, path, value, f"{name} in body should be greater than {bound}")
        elif value < schema["minimum"]:
            _invalid(causes, path, value,
                     f"{name} in body should be greater than or equal to {bound}")
    if schema.get("multipleOf") and value % schema["multipleOf"]:
        _invalid(causes, path, value,
                 f"{name} in body should be a multiple of {_number(schema['multipleOf'])}")


def _check_array(schema: dict, value: list, path: list, causes: list) -> None:
    name = _name(path)
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        _error(causes, path, "FieldValueTooMany",
               f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
    if "minItems" in schema and len(value) < schema["minItems"]:
        _invalid(causes, path, value,
                 f"{name} in body should have at least {schema['minItems']} items")
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check(items, item, [*path, index], causes)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type in ("map", "set"):
        seen = set()
        for index, item in enumerate(value):
            key = _list_key(schema, item)
            if key in seen:
                shown = _go_map(dict(zip(schema.get("x-kubernetes-list-map-keys") or [],
                                         json.loads(key), strict=False))) \
                    if list_type == "map" else _go_value(item)
                _error(causes, [*path, index], "FieldValueDuplicate",
                       f"Duplicate value: {shown}")
            seen.add(key)


def _list_key(schema: dict, item) -> str:
    if schema.get("x-kubernetes-list-type") == "map" and isinstance(item, dict):
        keys = schema.get("x-kubernetes-list-map-keys") or []
        defaults = (schema.get("items") or {}).get("properties") or {}
        return json.dumps([item.get(k, defaults.get(k, {}).get("default")) for k in keys])
    return json.dumps(item, sort_keys=True)


def _check_object(schema: dict, value: dict, path: list, causes: list) -> None:
    name = _name(path)
    for key in schema.get("required") or []:
        if key not in value:
            _error(causes, [*path, key], "FieldValueRequired", "Required value")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        _error(causes, path, "FieldValueTooMany",
               f"Too many: {len(value)}: must have at most {schema['maxProperties']} items")
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        _invalid(causes, path, value, f"{name} in body should have at least "
                                      f"{schema['minProperties']} properties")
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if not path and key == "metadata":
            continue  # ObjectMeta: the server's own checks (rules.metadata_causes)
        child = properties.get(key) or (extra if isinstance(extra, dict) else None)
        if child is not None:
            _check(child, item, [*path, key], causes)


# --- x-kubernetes-validations ------------------------------------------------------------------

def _rules(schema: dict, value, old, path: list, causes: list, *, root: bool = False) -> None:
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        _rule(rule, schema, value, old, path, causes)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key == "metadata":
                continue
            child = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if child is not None:
                before = old.get(key) if isinstance(old, dict) else None
                _rules(child, item, before, [*path, key], causes)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        olds = {}
        if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            olds = {_list_key(schema, o): o for o in old}
        for index, item in enumerate(value):
            _rules(schema["items"], item, olds.get(_list_key(schema, item)), [*path, index],
                   causes)


def _rule(rule: dict, schema: dict, value, old, path: list, causes: list) -> None:
    text = rule.get("rule") or ""
    transition = re.search(r"\boldSelf\b", text) is not None
    if transition and old is None:
        return  # a transition rule: only on updates, where the old value correlates
    program = _program(text)
    if program is None:
        return
    import celpy
    from celpy import celtypes

    try:
        activation = {"self": celpy.json_to_cel(value)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = program.evaluate(activation)
    except Exception:  # a rule cel-python cannot evaluate is not checked
        return
    if isinstance(result, celtypes.BoolType) and not result:
        where = [*path, *[p for p in (rule.get("fieldPath") or "").split(".") if p]]
        message = rule.get("message") or f"failed rule: {text}"
        reason = rule.get("reason") or "FieldValueInvalid"
        shown = f'"{schema.get("type", "")}"'
        body = {"FieldValueForbidden": f"Forbidden: {message}",
                "FieldValueRequired": f"Required value: {message}",
                "FieldValueDuplicate": f"Duplicate value: {shown}"}.get(
            reason, f"Invalid value: {shown}: {message}")
        _error(causes, where, reason, body)


@functools.cache
def _program(text: str):
    try:
        import celpy
    except ImportError:  # cel-python is a test dependency; without it rules go unchecked
        return None
    try:
        environment = celpy.Environment()
        return environment.program(environment.compile(text))
    except Exception:  # an extension cel-python lacks: the rule is skipped
        return None


# --- Go's formatting of values in messages ------------------------------------------------

def _number(value) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _go_value(value) -> str:
    """field.Error's rendering: strings quoted, numbers and booleans bare, others %#v."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value) if isinstance(value, float) else str(value)
    if isinstance(value, dict):
        return _go_map(value)
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_value(v) for v in value) + "}"
    return "null"


def _go_map(value: dict) -> str:
    inner = ", ".join(f"{json.dumps(k)}:{_go_value(v)}" for k, v in sorted(value.items()))
    return "map[string]interface {}{" + inner + "}"
