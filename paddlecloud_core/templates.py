"""Job templates (issue 39): a spec an administrator publishes, with some fields locked (their
value fixed) and some limited (a range, or a list of choices), that users submit from.

A template's ``spec`` holds values as users write them (the fields of ``spec.FIELDS``:
``{"image": "paddle:2.6", "gpu": 1, "memory": "4Gi"}``); ``locked`` names fields a submission
may not change; ``limits`` maps a field to ``{"min": …, "max": …}`` (a whole number's, or a
quantity's as written: ``"8Gi"``) or ``{"choices": [...]}``. ``template_apply`` lays a
submission over the template and names each field it breaks; ``template_problems`` checks a
template itself (the admin, the management command).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .spec import ALIASES, FIELD, INTEGERS, PRIORITIES, QUANTITIES, quantity, trainers_range

LIMIT_KEYS = frozenset({"min", "max", "choices"})


def _normal(name: str, value: Any) -> Any:
    """A field's value as it compares: a quantity's amount, a whole number, a priority's
    number, the larger end of a range of trainers; else the text as written."""
    if name in QUANTITIES:
        amount, problem = quantity(name, value)
        return value if problem else amount
    if name == "trainers" and isinstance(found := trainers_range(value), tuple):
        return found[1]
    if name in INTEGERS and str(value).strip().isdigit():
        return int(value)
    if name == "priority" and str(value).strip().lower() in PRIORITIES:
        return PRIORITIES[str(value).strip().lower()]
    return value.strip() if isinstance(value, str) else value


def template_problems(spec: Mapping[str, Any], locked, limits: Mapping[str, Any]
                      ) -> dict[str, str]:
    """What is wrong with a template, by its part (``spec``, ``locked``, ``limits``)."""
    problems = {}
    unknown = sorted({ALIASES.get(k, k) for k in spec} - set(FIELD))
    if unknown:
        problems["spec"] = f"not fields of a job: {', '.join(unknown)}"
    if not isinstance(locked, list | tuple) or not all(isinstance(n, str) for n in locked):
        problems["locked"] = "a list of field names"
    elif bad := sorted(set(locked) - set(FIELD)):
        problems["locked"] = f"not fields of a job: {', '.join(bad)}"
    elif missing := sorted(set(locked) - set(spec)):
        problems["locked"] = f"locked without a value in spec: {', '.join(missing)}"
    if not isinstance(limits, Mapping):
        problems["limits"] = 'an object: {"FIELD": {"min": …, "max": …} or {"choices": […]}}'
    else:
        for name, rule in limits.items():
            if name not in FIELD:
                problems["limits"] = f"{name}: not a field of a job"
            elif not isinstance(rule, Mapping) or not rule or set(rule) - LIMIT_KEYS:
                problems["limits"] = (f"{name}: {{\"min\": …, \"max\": …}} or "
                                      "{\"choices\": […]}")
            elif "choices" in rule and not isinstance(rule["choices"], list):
                problems["limits"] = f"{name}: choices is a list"
    return problems


def template_apply(name: str, spec: Mapping[str, Any], locked, limits: Mapping[str, Any],
                   data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The submission ``data`` laid over template ``name``'s ``spec`` (its ``env`` merged),
    and each field it breaks: a locked one given another value, a limited one out of its
    range or choices."""
    given = {ALIASES.get(k, k): v for k, v in data.items()}
    merged = {**spec, **given}
    if isinstance(spec.get("env"), Mapping) and isinstance(given.get("env"), Mapping):
        merged["env"] = {**spec["env"], **given["env"]}
    problems: dict[str, str] = {}
    for field in locked:
        if field in given and _normal(field, given[field]) != _normal(field, spec[field]) \
                and not (field == "env" and merged["env"] == spec["env"]):
            problems[field] = (f"locked by template {name!r} to {str(spec[field])!r}: "
                               "leave it out or give that value")
    for field, rule in limits.items():
        if field in problems or merged.get(field) in (None, ""):
            continue
        value = _normal(field, merged[field])
        if "choices" in rule and value not in [_normal(field, c) for c in rule["choices"]]:
            problems[field] = (f"template {name!r} allows "
                               f"{', '.join(map(str, rule['choices']))}, not {merged[field]!r}")
            continue
        low = _normal(field, rule["min"]) if "min" in rule else None
        high = _normal(field, rule["max"]) if "max" in rule else None
        try:
            if (low is not None and value < low) or (high is not None and value > high):
                span = (f"{rule.get('min', '')}…{rule.get('max', '')}")
                problems[field] = (f"template {name!r} allows {span}, not "
                                   f"{merged[field]!r}")
        except TypeError:  # not a number: spec_check names it
            pass
    return merged, problems
