"""Checks every written object goes through: the OpenAPI schema (as the server's strict JSON
decoding plus its required-field validation do) and the name and label syntax rules, with
the server's own wording so clients see the messages a real cluster gives."""

from __future__ import annotations

import re

from . import errors, schemas

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

LABEL_MESSAGE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                 "or '-', and must start and end with an alphanumeric character (e.g. "
                 "'my-name',  or '123-abc', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035_MESSAGE = ("a DNS-1035 label must consist of lower case alphanumeric characters or "
                   "'-', start with an alphabetic character, and end with an alphanumeric "
                   "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                   "'[a-z]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                     "characters, '-' or '.', and must start and end with an alphanumeric "
                     "character (e.g. 'example.com', regex used for validation is "
                     r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_VALUE_MESSAGE = ("a valid label must be an empty string or consist of alphanumeric "
                       "characters, '-', '_' or '.', and must start and end with an "
                       "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                       "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
                       "[A-Za-z0-9])?')")
QUALIFIED_NAME_MESSAGE = ("name part must consist of alphanumeric characters, '-', '_' or '.', "
                          "and must start and end with an alphanumeric character (e.g. "
                          "'MyName',  or 'my.name',  or '123-abc', regex used for validation "
                          "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
CONFIG_KEY_MESSAGE = ("a valid config key must consist of alphanumeric characters, '-', '_' or "
                      "'.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for "
                      "validation is '[-._a-zA-Z0-9]+')")
_NAME_RULES = {"label": (_LABEL, LABEL_MESSAGE, 63), "dns1035": (_DNS1035, DNS1035_MESSAGE, 63),
               "subdomain": (_SUBDOMAIN, SUBDOMAIN_MESSAGE, 253)}
_GO_TYPES = {"string": "string", "integer": "int32", "number": "float64", "boolean": "bool",
             "object": "map", "array": "slice"}


def path_text(path) -> str:
    """``spec.containers[0].image`` from a JSON path."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def check_schema(version: str, rt, obj: dict, field_validation: str) -> list[str]:
    """Validate ``obj`` against the real schema. Unknown fields fail (Strict, 400 like the
    server's strict decoding), or are dropped with a warning (Warn) or silently (Ignore);
    wrong JSON types fail with 400; everything else (required, enums…) is 422 Invalid.
    Returns the warnings to send."""
    resolved = schemas.resolve_version(version)
    unknown, undecodable, invalid = [], [], []
    for error in schemas.validator(resolved, rt.api_version, rt.kind).iter_errors(obj):
        if _defaulted(error):
            continue
        if error.validator == "additionalProperties":
            unknown.extend((error, name) for name in _unexpected(error))
        elif error.validator in ("type", "oneOf", "anyOf"):
            undecodable.append(error)
        else:
            invalid.append(error)
    prefix = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
    order = _document_order(obj)
    unknown.sort(key=lambda found: order[(*found[0].absolute_path, found[1])])
    if unknown and field_validation == "Strict":
        fields = ", ".join(f'unknown field "{path_text([*e.absolute_path, n])}"'
                           for e, n in unknown)
        raise errors.bad_request(prefix + "strict decoding error: " + fields)
    if undecodable:
        raise errors.bad_request(prefix + _decode_message(undecodable[0]))
    if invalid:
        name = obj.get("metadata", {}).get("name") or ""
        raise errors.invalid(rt, name, [_invalid_cause(e) for e in invalid])
    for error, field_name in unknown:
        del error.instance[field_name]
    if field_validation == "Warn":
        return [f'unknown field "{path_text([*e.absolute_path, n])}"' for e, n in unknown]
    return []


def _defaulted(error) -> bool:
    """A required field the server defaults before validating: podFailurePolicy
    ``onPodConditions[*].status`` (True)."""
    path = list(error.absolute_path)
    return error.validator == "required" and "'status' is a required property" in \
        error.message and len(path) >= 2 and path[-2] == "onPodConditions" and \
        isinstance(path[-1], int)


def _document_order(value, path: tuple = (), order: dict | None = None) -> dict:
    """Each path's position in the request body: the server reports fields as it decodes."""
    order = {} if order is None else order
    order[path] = len(order)
    children = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        _document_order(child, (*path, key), order)
    return order


def _unexpected(error) -> list[str]:
    known = set(error.schema.get("properties") or {})
    return sorted(k for k in error.instance if k not in known)


def _decode_message(error) -> str:
    value = error.instance
    got = {dict: "object", list: "array", str: "string", bool: "bool"}.get(type(value), "number")
    wanted = error.schema.get("type") or "string"
    wanted = next((t for t in wanted if t != "null"), "string") if isinstance(wanted, list) \
        else wanted
    dotted = ".".join(str(p) for p in error.absolute_path if not isinstance(p, int))
    return (f"json: cannot unmarshal {got} into Go struct field .{dotted} of type "
            f"{_GO_TYPES.get(wanted, wanted)}")


def _invalid_cause(error) -> dict:
    if error.validator == "required":
        missing = re.match(r"'([^']*)' is a required property", error.message)
        field = path_text([*error.absolute_path, missing.group(1) if missing else ""])
        return errors.required(field)
    field = path_text(error.absolute_path)
    if error.validator == "enum":
        return errors.unsupported_value(field, error.instance, [str(v) for v in
                                                                error.validator_value])
    return errors.invalid_value(field, error.instance, error.message)


def name_errors(value: str, rule: str) -> list[str]:
    pattern, message, limit = _NAME_RULES[rule]
    problems = []
    if len(value) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not pattern.match(value):
        problems.append(message)
    return problems


def check_name(field: str, value: str, rule: str) -> list[dict]:
    return [errors.invalid_value(field, value, p) for p in name_errors(value, rule)]


def check_labels(field: str, labels: dict | None) -> list[dict]:
    causes = []
    for key, value in (labels or {}).items():
        causes += check_qualified_name(field, key)
        if len(value) > 63:
            causes.append(errors.invalid_value(field, value, "must be no more than 63 "
                                                             "characters"))
        if not _LABEL_VALUE.match(value):
            causes.append(errors.invalid_value(field, value, LABEL_VALUE_MESSAGE))
    return causes


def check_qualified_name(field: str, key: str) -> list[dict]:
    """Label and annotation keys: ``[prefix/]name``, a DNS subdomain prefix, a 63-char name."""
    prefix, _, name = key.rpartition("/")
    causes = []
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        causes.append(errors.invalid_value(field, key, "prefix part " + SUBDOMAIN_MESSAGE))
    if len(name) > 63:
        causes.append(errors.invalid_value(field, key, "name part must be no more than 63 "
                                                       "characters"))
    if not _QUALIFIED_NAME.match(name):
        causes.append(errors.invalid_value(field, key, QUALIFIED_NAME_MESSAGE))
    return causes


def check_config_keys(field: str, data: dict | None) -> list[dict]:
    return [errors.invalid_value(f"{field}[{key}]", key, CONFIG_KEY_MESSAGE)
            for key in (data or {}) if not _CONFIG_KEY.match(key) or len(key) > 253]
