"""Label and field selectors with the server's grammar: ``a=b``, ``a!=b``, ``a``, ``!a``,
``a in (x,y)``, ``a notin (x)``, ``a>1``; field selectors limited to each resource's fields."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import bad_request

_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_BINARY_REQUIREMENT = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|=|!=|<|>)\s*([^\s,()]*)\s*$")
_EXISTS_REQUIREMENT = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in, notin, =, !=, exists, !, <, >
    values: tuple[str, ...] = ()

    def matches(self, labels: dict) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("in", "="):
            return present and value in self.values
        if self.op in ("notin", "!="):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        return present and _compare_int(value, self.op, self.values[0])


def _compare_int(value: str, op: str, bound: str) -> bool:
    try:
        return int(value) < int(bound) if op == "<" else int(value) > int(bound)
    except ValueError:
        return False


def _split_top_level(text: str) -> list[str]:
    """Commas separate requirements, except inside ``in (…)`` value sets."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    return [_parse_requirement(part) for part in _split_top_level(text or "")]


def _parse_requirement(part: str) -> Requirement:
    if match := _SET_REQUIREMENT.match(part):
        values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
        return Requirement(match.group(1), match.group(2), values)
    if match := _BINARY_REQUIREMENT.match(part):
        op = "=" if match.group(2) == "==" else match.group(2)
        return Requirement(match.group(1), op, (match.group(3),))
    if match := _EXISTS_REQUIREMENT.match(part):
        return Requirement(match.group(2), "!" if match.group(1) else "exists")
    raise bad_request(f"unable to parse requirement: {part.strip()!r}")


def selector_from_spec(selector: dict | None) -> list[Requirement]:
    """A LabelSelector object (matchLabels / matchExpressions) as requirements."""
    selector = selector or {}
    reqs = [Requirement(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(Requirement(expr["key"], ops[expr["operator"]],
                                tuple(expr.get("values") or ())))
    return reqs


def labels_match(requirements: list[Requirement], labels: dict | None) -> bool:
    return all(r.matches(labels or {}) for r in requirements)


def parse_field_selector(text: str | None, rt) -> list[tuple[str, str, str]]:
    """Terms as (object path, op, value); ``rt.field_selectors`` maps selectable names to
    paths (events' ``source`` reads ``source.component``)."""
    terms = []
    for part in _split_top_level(text or ""):
        match = re.match(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = match.groups()
        if field not in rt.field_selectors:
            raise bad_request(f"field label not supported: {field}")
        terms.append((rt.field_selectors[field], "!=" if op == "!=" else "=", value))
    return terms


def field_value(obj: dict, path: str) -> str:
    """The string a field selector compares: missing fields read as "" (``spec.nodeName=``
    selects unscheduled pods), booleans as "true"/"false"."""
    value = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def fields_match(terms: list[tuple[str, str, str]], obj: dict) -> bool:
    return all((field_value(obj, f) == v) == (op == "=") for f, op, v in terms)
