"""Per-kind validation the real API server does beyond the schema (its ``validation.go``):
names, labels, container names, requests within limits, Job and StatefulSet invariants and
the fields an update may not change. Everything here answers 422 Invalid."""

from __future__ import annotations

import ipaddress
import itertools

from . import errors
from .quantity import Quantity, QuantityError
from .selectors import labels_match, selector_from_spec
from .validation import (
    check_config_keys,
    check_labels,
    check_name,
    check_qualified_name,
)

POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)")
STATEFULSET_UPDATE_MESSAGE = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are "
    "forbidden")
_STATEFULSET_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy",
                        "persistentVolumeClaimRetentionPolicy", "minReadySeconds")


def validate(rt, obj: dict, old: dict | None = None) -> None:
    """Raise 422 Invalid listing every problem with ``obj`` (``old`` set on updates)."""
    causes = metadata_causes(rt, obj)
    check = _KIND_CHECKS.get(rt.kind)
    if check:
        causes += check(obj, old)
    if causes:
        raise errors.invalid(rt, obj["metadata"].get("name", ""), causes)


def metadata_causes(rt, obj: dict) -> list[dict]:
    meta = obj["metadata"]
    causes = check_name("metadata.name", meta["name"], rt.name_rule)
    causes += check_labels("metadata.labels", meta.get("labels"))
    for key in meta.get("annotations") or {}:
        causes += check_qualified_name("metadata.annotations", key)
    return causes


def pod_spec_causes(spec: dict, path: str, claim_names: tuple[str, ...] = ()) -> list[dict]:
    """``claim_names``: a StatefulSet's volumeClaimTemplates, which its pods get as volumes."""
    causes, seen = [], set()
    volumes = {v.get("name") for v in spec.get("volumes") or []} | set(claim_names)
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            where = f"{path}.{group}[{i}]"
            name = container.get("name", "")
            causes += check_name(f"{where}.name", name, "label")
            if name in seen:
                causes.append(errors.duplicate(f"{where}.name", name))
            seen.add(name)
            if not container.get("image"):
                causes.append(errors.required(f"{where}.image"))
            causes += _resources_causes(container.get("resources") or {}, f"{where}.resources")
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    causes.append(errors.cause(
                        f"{where}.volumeMounts[{j}].name", "FieldValueNotFound",
                        f"Not found: {errors.go_repr(mount.get('name'))}"))
    policy = spec.get("restartPolicy", "Always")
    if policy not in ("Always", "OnFailure", "Never"):
        causes.append(errors.unsupported_value(f"{path}.restartPolicy", policy,
                                               ["Always", "OnFailure", "Never"]))
    for field in ("hostname", "subdomain"):
        if spec.get(field):
            causes += check_name(f"{path}.{field}", spec[field], "label")
    return causes


def _resources_causes(resources: dict, path: str) -> list[dict]:
    causes = []
    limits = resources.get("limits") or {}
    for name, request in (resources.get("requests") or {}).items():
        if name in limits and parse_quantity(request).value > parse_quantity(limits[name]).value:
            causes.append(errors.invalid_value(f"{path}.requests", str(request),
                                               f"must be less than or equal to {name} limit of "
                                               f"{limits[name]}"))
    return causes


def parse_quantity(text) -> Quantity:
    try:
        return Quantity.parse(text)
    except QuantityError as exc:
        raise errors.bad_request(f"quantities must match the regular expression "
                                 f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {exc}") from exc


def _pod(obj: dict, old: dict | None) -> list[dict]:
    causes = pod_spec_causes(obj.get("spec") or {}, "spec")
    if old is not None and _pod_spec_changed(old["spec"], obj["spec"]):
        causes.append(errors.forbidden_field("spec", POD_UPDATE_MESSAGE))
    return causes


def _pod_spec_changed(old: dict, new: dict) -> bool:
    """True when ``new`` changes a pod field that is immutable after creation."""
    def frozen(spec: dict) -> dict:
        spec = {k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds",
                                                             "tolerations")}
        for group in ("containers", "initContainers"):
            spec[group] = [{k: v for k, v in c.items() if k != "image"}
                           for c in spec.get(group) or []]
        return spec
    return frozen(old) != frozen(new)


def _job(obj: dict, old: dict | None) -> list[dict]:
    spec, causes = obj.get("spec") or {}, []
    template = spec.get("template") or {}
    causes += pod_spec_causes(template.get("spec") or {}, "spec.template.spec")
    policy = (template.get("spec") or {}).get("restartPolicy")
    if policy not in ("OnFailure", "Never"):
        causes.append(errors.unsupported_value("spec.template.spec.restartPolicy", policy,
                                               ["OnFailure", "Never"]))
    elif spec.get("podFailurePolicy") is not None and policy != "Never":
        causes.append(errors.invalid_value("spec.template.spec.restartPolicy", policy,
                                           'only "Never" is supported when podFailurePolicy is '
                                           'specified'))
    indexed = spec.get("completionMode") == "Indexed"
    if indexed and spec.get("completions") is None:
        causes.append(errors.required("spec.completions", "when completion mode is Indexed"))
    if spec.get("backoffLimitPerIndex") is not None and not indexed:
        causes.append(errors.forbidden_field("spec.backoffLimitPerIndex",
                                             "requires indexed completion mode"))
    if spec.get("maxFailedIndexes") is not None and spec.get("backoffLimitPerIndex") is None:
        causes.append(errors.required("spec.backoffLimitPerIndex",
                                      "when maxFailedIndexes is specified"))
    if spec.get("podFailurePolicy") is not None:
        causes += _pod_failure_policy_causes(spec, "spec.podFailurePolicy")
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None and spec.get("podFailurePolicy") is not None and \
            replacement != "Failed":
        causes.append(errors.unsupported_value("spec.podReplacementPolicy", replacement,
                                               ["Failed"]))
    elif replacement not in (None, "Failed", "TerminatingOrFailed"):
        causes.append(errors.unsupported_value("spec.podReplacementPolicy", replacement,
                                               ["Failed", "TerminatingOrFailed"]))
    causes += _selector_matches_template(spec)
    if old is not None:
        for field in ("template", "completionMode", "selector"):
            if spec.get(field) != old["spec"].get(field):
                causes.append(errors.invalid_value(f"spec.{field}", spec.get(field),
                                                   "field is immutable"))
        causes += _completions_update_causes(spec, old["spec"])
    return causes


def _completions_update_causes(spec: dict, old: dict) -> list[dict]:
    """validateCompletions: completions is immutable, except for an Indexed Job (an elastic
    Indexed Job, GA in 1.31), whose completions may change in tandem with parallelism: to the
    same value."""
    if spec.get("completionMode") != "Indexed" or old.get("completionMode") != "Indexed":
        if spec.get("completions") != old.get("completions"):
            return [errors.invalid_value("spec.completions", spec.get("completions"),
                                         "field is immutable")]
        return []
    if spec.get("completions") == old.get("completions") or spec.get("completions") is None:
        return []  # an Indexed Job without completions is refused already
    if spec.get("completions") != spec.get("parallelism"):
        return [errors.invalid_value("spec.completions", spec.get("completions"),
                                     "can only be modified in tandem with spec.parallelism")]
    return []


def _pod_failure_policy_causes(spec: dict, path: str) -> list[dict]:
    """validatePodFailurePolicy: at most 20 rules, each with a known action (FailIndex only
    with backoffLimitPerIndex) and exactly one of onExitCodes and onPodConditions."""
    causes, rules = [], (spec["podFailurePolicy"] or {}).get("rules") or []
    if len(rules) > 20:
        causes.append(_too_many(f"{path}.rules", len(rules), 20))
    template = (spec.get("template") or {}).get("spec") or {}
    names = {c.get("name") for c in (template.get("containers") or []) +
             (template.get("initContainers") or [])}
    for i, rule in enumerate(rules):
        where = f"{path}.rules[{i}]"
        action = rule.get("action") or ""
        if not action:
            causes.append(errors.required(f"{where}.action", 'valid values: ["Count" "FailIndex" '
                                                             '"FailJob" "Ignore"]'))
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                causes.append(errors.invalid_value(f"{where}.action", action,
                                                   "requires the backoffLimitPerIndex to be set"))
        elif action not in ("Count", "FailJob", "Ignore"):
            causes.append(errors.unsupported_value(f"{where}.action", action,
                                                   ["Count", "FailIndex", "FailJob", "Ignore"]))
        on_exit, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
        if on_exit is not None:
            causes += _on_exit_codes_causes(on_exit, f"{where}.onExitCodes", names)
        if on_conditions:
            causes += _on_pod_conditions_causes(on_conditions, f"{where}.onPodConditions")
        if on_exit is not None and on_conditions:
            causes.append(errors.cause(where, "FieldValueInvalid", "Invalid value: specifying "
                                       "both OnExitCodes and OnPodConditions is not supported"))
        if on_exit is None and not on_conditions:
            causes.append(errors.cause(where, "FieldValueInvalid", "Invalid value: specifying "
                                       "one of OnExitCodes and OnPodConditions is required"))
    return causes


def _on_exit_codes_causes(requirement: dict, path: str, names: set) -> list[dict]:
    causes, operator = [], requirement.get("operator") or ""
    if not operator:
        causes.append(errors.required(f"{path}.operator", 'valid values: ["In" "NotIn"]'))
    elif operator not in ("In", "NotIn"):
        causes.append(errors.unsupported_value(f"{path}.operator", operator, ["In", "NotIn"]))
    name = requirement.get("containerName")
    if name is not None and name not in names:
        causes.append(errors.invalid_value(f"{path}.containerName", name, "must be one of the "
                                           "container or initContainer names in the pod "
                                           "template"))
    values = requirement.get("values") or []
    if not values:
        causes.append(errors.cause(f"{path}.values", "FieldValueInvalid",
                                   f"Invalid value: {_go_ints(requirement.get('values'))}: at "
                                   f"least one value is required"))
    elif len(values) > 255:
        causes.append(_too_many(f"{path}.values", len(values), 255))
    seen = set()
    for j, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append(errors.invalid_value(f"{path}.values[{j}]", value,
                                               "must not be 0 for the In operator"))
        if value in seen:
            causes.append(errors.duplicate(f"{path}.values[{j}]", value))
        seen.add(value)
    if any(a > b for a, b in itertools.pairwise(values)):
        causes.append(errors.cause(f"{path}.values", "FieldValueInvalid",
                                   f"Invalid value: {_go_ints(values)}: must be ordered"))
    return causes


def _go_ints(values: list | None) -> str:
    """A []int32 as Go's %#v prints it."""
    return "[]int32(nil)" if values is None else \
        "[]int32{" + ", ".join(str(v) for v in values) + "}"


def _on_pod_conditions_causes(patterns: list[dict], path: str) -> list[dict]:
    causes = []
    if len(patterns) > 20:
        causes.append(_too_many(path, len(patterns), 20))
    for j, pattern in enumerate(patterns):
        causes += check_qualified_name(f"{path}[{j}].type", pattern.get("type") or "")
        status = pattern.get("status", "True")  # the server defaults it to True
        if status not in ("False", "True", "Unknown"):
            causes.append(errors.unsupported_value(f"{path}[{j}].status", status,
                                                   ["False", "True", "Unknown"]))
    return causes


def _too_many(field: str, actual: int, limit: int) -> dict:
    return errors.cause(field, "FieldValueTooMany",
                        f"Too many: {actual}: must have at most {limit} items")


def _selector_matches_template(spec: dict) -> list[dict]:
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not spec.get("selector"):
        return [errors.required("spec.selector")]
    if not labels_match(selector_from_spec(spec["selector"]), labels):
        return [errors.invalid_value("spec.template.metadata.labels", labels,
                                     "`selector` does not match template `labels`")]
    return []


def _statefulset(obj: dict, old: dict | None) -> list[dict]:
    spec = obj.get("spec") or {}
    template_spec = (spec.get("template") or {}).get("spec") or {}
    claims = tuple(c.get("metadata", {}).get("name")
                   for c in spec.get("volumeClaimTemplates") or [])
    causes = pod_spec_causes(template_spec, "spec.template.spec", claims)
    causes += _selector_matches_template(spec)
    if template_spec.get("restartPolicy", "Always") != "Always":
        causes.append(errors.unsupported_value("spec.template.spec.restartPolicy",
                                               template_spec["restartPolicy"], ["Always"]))
    if old is not None:
        def frozen(s: dict) -> dict:
            return {k: v for k, v in s.items() if k not in _STATEFULSET_MUTABLE}
        if frozen(spec) != frozen(old["spec"]):
            causes.append(errors.forbidden_field("spec", STATEFULSET_UPDATE_MESSAGE))
    return causes


def _service(obj: dict, old: dict | None) -> list[dict]:
    spec, causes = obj.get("spec") or {}, []
    ports = spec.get("ports") or []
    for i, port in enumerate(ports):
        if len(ports) > 1 and not port.get("name"):
            causes.append(errors.required(f"spec.ports[{i}].name"))
    causes += check_labels("spec.selector", spec.get("selector"))
    if old is not None and spec.get("clusterIP") != old["spec"].get("clusterIP"):
        causes.append(errors.invalid_value("spec.clusterIP", spec.get("clusterIP"),
                                           "field is immutable"))
    return causes


def _config_data(obj: dict, old: dict | None) -> list[dict]:
    causes = check_config_keys("data", obj.get("data"))
    causes += check_config_keys("binaryData", obj.get("binaryData"))
    if old is not None and old.get("immutable"):
        why = "field is immutable when `immutable` is set"
        for field in ("data", "binaryData", "immutable"):
            if obj.get(field) != old.get(field):
                causes.append(errors.forbidden_field(field, why))
    return causes


def _event(obj: dict, old: dict | None) -> list[dict]:
    involved_ns = (obj.get("involvedObject") or {}).get("namespace")
    if involved_ns and involved_ns != obj["metadata"].get("namespace"):
        return [errors.invalid_value("involvedObject.namespace", involved_ns,
                                     "does not match event.namespace")]
    return []


def _endpointslice(obj: dict, old: dict | None) -> list[dict]:
    """The address type and the addresses (one an endpoint, of that type); the type may not
    change."""
    address_type, causes = obj.get("addressType"), []
    if address_type not in ("IPv4", "IPv6", "FQDN"):
        causes.append(errors.unsupported_value("addressType", address_type,
                                               ["FQDN", "IPv4", "IPv6"]))
    for i, endpoint in enumerate(obj.get("endpoints") or []):
        addresses = endpoint.get("addresses") or []
        if not addresses:
            causes.append(errors.required(f"endpoints[{i}].addresses",
                                          "must contain at least 1 address"))
        for j, address in enumerate(addresses):
            if address_type == "IPv4" and not _ipv4(address):
                causes.append(errors.invalid_value(f"endpoints[{i}].addresses[{j}]", address,
                                                   "must be a valid IPv4 address"))
    if old is not None and address_type != old.get("addressType"):
        causes.append(errors.invalid_value("addressType", address_type, "field is immutable"))
    return causes


def _ipv4(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address)
    except ValueError:
        return False


_KIND_CHECKS = {"Pod": _pod, "Job": _job, "StatefulSet": _statefulset, "Service": _service,
                "ConfigMap": _config_data, "Secret": _config_data, "Event": _event,
                "EndpointSlice": _endpointslice}
