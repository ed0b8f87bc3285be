"""The REST semantics of the API server, independent of HTTP: create, get, list, replace,
patch, delete and deletecollection with resourceVersions, defaulting, validation,
admission, finalizers and graceful pod deletion. Controllers write through it too, so their
pods meet the same quota admission as a user's."""

from __future__ import annotations

import base64
import binascii
import copy
import itertools
import json
import math
import time
from dataclasses import dataclass

from . import admission, crds, defaults, errors, patch, resources, rules, schemas, validation
from .config import Settings
from .events import EventRecorder
from .objects import iso_in, new_uid, now_iso, random_suffix, set_condition
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .store import Expired, Store

_SERVER_MANAGED = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                   "generation")
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list.")
_TERMINAL = ("Succeeded", "Failed")


@dataclass
class DeleteOptions:
    propagation: str | None = None  # Background, Foreground or Orphan; None: the type's default
    grace_seconds: int | None = None
    uid: str | None = None  # preconditions
    resource_version: str | None = None
    dry_run: bool = False


class Api:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.store = Store(settings.history_size)
        self.recorder = EventRecorder(self)
        self.pod_removal_due: dict[str, float] = {}  # terminating pod uid -> monotonic deadline
        # True with the process kubelet: a deleted pod on a node terminates for real, and the
        # kubelet removes it once its processes have ended (no deadline here).
        self.kubelet_stops_pods = False
        # The resource types served: the built-in ones, then the custom resources of the
        # add-ons installed (addons.py); and the add-ons' admission webhooks, called on
        # every write (``mutate(rt, obj, old)``, ``validate(rt, obj, old)``, ``old`` None on
        # create; ``validate_delete(rt, obj)``), the controllers' writes too.
        self.types: tuple[resources.ResourceType, ...] = resources.ALL
        # (kind, namespace, name) -> the monotonic time it was made: namespaces and
        # RoleBindings, which caches of a real server see a moment later.
        self._made: dict[tuple[str, str, str], float] = {}
        self.webhooks: list = []
        self._cluster_ips = itertools.count(10)
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(resources.NAMESPACES, "", {"metadata": {"name": name}}, trusted=True)
            self.create(resources.SERVICEACCOUNTS, name, {"metadata": {"name": "default"}},
                        trusted=True)

    def lookup(self, group: str, version: str, plural: str):
        """The served resource type at /apis/<group>/<version>/<plural>, or None."""
        return next((rt for rt in self.types if (rt.group, rt.version, rt.plural) ==
                     (group, version, plural)), None)

    # --- reads -------------------------------------------------------------------------

    def get(self, rt, namespace: str, name: str) -> dict:
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def matcher(self, rt, namespace: str | None, query: dict):
        """A predicate for list and watch: namespace, labelSelector and fieldSelector."""
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), rt)

        def matches(obj: dict) -> bool:
            meta = obj["metadata"]
            return ((not namespace or meta.get("namespace") == namespace)
                    and labels_match(labels, meta.get("labels")) and fields_match(fields, obj))
        return matches

    def list(self, rt, namespace: str | None, query: dict) -> dict:
        matches = self.matcher(rt, namespace, query)
        with self.store.lock:
            items, list_rv, start_after = self._list_snapshot(rt, query)
        items = [o for o in items if matches(o) and _list_key(o) > start_after]
        meta = {"resourceVersion": str(list_rv)}
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            items, rest = items[:limit], items[limit:]
            token = {"v": "meta.k8s.io/v1", "rv": list_rv, "start": _list_key(items[-1])}
            meta["continue"] = base64.b64encode(json.dumps(token).encode()).decode()
            meta["remainingItemCount"] = len(rest)
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta,
                "items": items}

    def _list_snapshot(self, rt, query: dict) -> tuple[list[dict], int, str]:
        """(objects, their resourceVersion, key to continue after) for a list request."""
        if query.get("continue"):
            token = _decode_continue(query["continue"])
            try:
                return self.store.state_at(rt.key, token["rv"]), token["rv"], token["start"]
            except Expired as exc:
                raise errors.ApiError(410, "Expired", _CONTINUE_EXPIRED) from exc
        requested = query.get("resourceVersion") or ""
        if requested not in ("", "0"):
            wanted = parse_resource_version(requested)
            self.check_not_future(wanted)
            if query.get("resourceVersionMatch") == "Exact":
                try:
                    return self.store.state_at(rt.key, wanted), wanted, ""
                except Expired as exc:
                    raise errors.expired(exc.requested, exc.oldest) from exc
        return self.store.list(rt.key), self.store.rv, ""

    def check_not_future(self, rv: int) -> None:
        if rv > self.store.rv:
            raise errors.ApiError(
                504, "Timeout", f"Too large resource version: {rv}, current: {self.store.rv}",
                details={"causes": [{"reason": "ResourceVersionTooLarge",
                                     "message": "Too large resource version"}],
                         "retryAfterSeconds": 1})

    # --- writes ------------------------------------------------------------------------

    def create(self, rt, namespace: str, body: dict, *, field_validation: str | None = None,
               dry_run: bool = False, warnings: list | None = None, trusted: bool = False) -> dict:
        """``trusted`` writes (the controllers') skip the schema check, nothing else."""
        obj = self._decode(rt, namespace, body, field_validation, warnings, trusted)
        meta = obj["metadata"]
        if meta.pop("resourceVersion", None):
            raise errors.ApiError(500, "InternalError", "Internal error occurred: "
                                  "resourceVersion should not be set on objects to be created")
        with self.store.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(rt, namespace, meta["generateName"])
            if not meta.get("name"):
                raise errors.invalid(rt, "", [errors.required(
                    "metadata.name", "name or generateName is required")])
            for key in _SERVER_MANAGED:
                meta.pop(key, None)
            meta.update(uid=new_uid(), creationTimestamp=now_iso())
            if rt.has_generation:
                meta["generation"] = 1
            defaults.prepare_create(rt, obj)
            if isinstance(rt, crds.CustomType) and rt.has_status:
                obj.pop("status", None)  # set only through /status
            if rt is resources.SERVICES:
                self._allocate_cluster_ip(obj["spec"])
            admission.mutate_create(self.store, rt, obj)
            self._call_webhooks("mutate", rt, obj, None)
            if rt is resources.PODS and obj["spec"].get("schedulingGates"):
                set_condition(obj["status"].setdefault("conditions", []), "PodScheduled",
                              "False", reason="SchedulingGated",
                              message="Scheduling is blocked due to non-empty scheduling gates")
            if isinstance(rt, crds.CustomType) and not trusted:
                crds.check(rt, obj)
            rules.validate(rt, obj)
            if not trusted:  # (the controllers retry a refused create anyway)
                self._namespace_cached(rt, namespace)
            admission.validate_create(self.store, rt, obj)
            self._call_webhooks("validate", rt, obj, None)
            if self.store.get(rt.key, meta.get("namespace", ""), meta["name"]) is not None:
                raise errors.already_exists(rt, meta["name"])
            if rt in (resources.NAMESPACES, resources.ROLEBINDINGS) and not dry_run:
                self._made[(rt.key, meta.get("namespace", ""), meta["name"])] = \
                    time.monotonic()
            return obj if dry_run else self.store.write(rt.key, obj)

    def _namespace_cached(self, rt, namespace: str) -> None:
        """``Settings.admission_namespace_lag_seconds``: the policy's informer has not seen a
        namespace made so recently; its lister's NotFound (singular resource) is the answer."""
        made = self._made.get((resources.NAMESPACES.key, "", namespace))
        if rt.namespaced and made is not None and \
                time.monotonic() - made < self.settings.admission_namespace_lag_seconds:
            raise errors.ApiError(404, "NotFound", f'namespace "{namespace}" not found',
                                  details={"name": namespace, "kind": "namespace"})

    def bindings_seen(self, namespace: str) -> list[dict]:
        """The RoleBindings of ``namespace`` the RBAC authorizer knows of: those made at least
        ``Settings.rbac_binding_lag_seconds`` ago (its informer's lag)."""
        lag, now = self.settings.rbac_binding_lag_seconds, time.monotonic()
        return [b for b in self.store.list(resources.ROLEBINDINGS.key, namespace)
                if now - self._made.get((resources.ROLEBINDINGS.key, namespace,
                                         b["metadata"]["name"]), 0.0) >= lag]

    def replace(self, rt, namespace: str, name: str, body: dict, *, subresource: str | None = None,
                field_validation: str | None = None, dry_run: bool = False,
                warnings: list | None = None) -> dict:
        new = self._decode(rt, namespace, body, field_validation, warnings, trusted=False)
        return self._update(rt, namespace, name, new, subresource=subresource, dry_run=dry_run,
                            trusted=False)

    def patch(self, rt, namespace: str, name: str, body, content_type: str, *,
              subresource: str | None = None, field_validation: str | None = None,
              dry_run: bool = False, warnings: list | None = None) -> dict:
        version = schemas.resolve_version(self.settings.kubernetes_version)
        with self.store.lock:
            old = self.get(rt, namespace, name)
            if isinstance(rt, crds.CustomType) and content_type == patch.STRATEGIC:
                raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was "
                                      "in an unknown format - accepted media types include: "
                                      f"{patch.JSON_PATCH}, {patch.MERGE}, "
                                      "application/apply-patch+yaml")
            kind_schema = {} if isinstance(rt, crds.CustomType) else \
                schemas.kind_schema(version, rt.api_version, rt.kind)
            patched = patch.apply(content_type, version, kind_schema, old, body)
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            new = self._decode(rt, namespace, patched, field_validation, warnings, trusted=False)
            return self._update(rt, namespace, name, new, subresource=subresource,
                                dry_run=dry_run, trusted=False)

    def update(self, rt, obj: dict, *, subresource: str | None = None) -> dict:
        """A controller's write of an object it just read (trusted: no schema check)."""
        meta = obj["metadata"]
        new = self._decode(rt, meta.get("namespace", ""), obj, None, None, trusted=True)
        return self._update(rt, meta.get("namespace", ""), meta["name"], new,
                            subresource=subresource)

    def _decode(self, rt, namespace: str, body: dict, field_validation: str | None,
                warnings: list | None, trusted: bool) -> dict:
        """What the server's decoder does: kind and namespace from the URL, schema, defaults."""
        if not isinstance(body, dict):
            raise errors.bad_request(f"{rt.kind} in version \"{rt.version}\" cannot be handled as "
                                     f"a {rt.kind}: body must be a JSON object")
        obj = copy.deepcopy(body)
        for field, expected in (("apiVersion", rt.api_version), ("kind", rt.kind)):
            if obj.setdefault(field, expected) != expected:
                raise errors.bad_request(f"the {field} in the data ({obj[field]}) does not match "
                                         f"the expected {field} ({expected})")
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        mode = field_validation or self.settings.field_validation
        if isinstance(rt, crds.CustomType):  # the CRD's schema: pruning, defaults
            found = crds.decode(rt, obj, "Ignore" if trusted else mode)
        elif not trusted:
            found = validation.check_schema(self.settings.kubernetes_version, rt, obj, mode)
        else:
            found = []
        if warnings is not None:
            warnings.extend(found)
        defaults.apply(rt, obj)
        return obj

    def _update(self, rt, namespace: str, name: str, new: dict, *, subresource: str | None,
                dry_run: bool = False, trusted: bool = True) -> dict:
        with self.store.lock:
            old = self.get(rt, namespace, name)
            meta = new["metadata"]
            if meta.get("name", name) != name:
                raise errors.bad_request(f"the name of the object ({meta['name']}) does not match "
                                         f"the name on the URL ({name})")
            if meta.get("resourceVersion") and meta["resourceVersion"] != \
                    old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt, name)
            new = self._merge_update(rt, old, new, subresource)
            if subresource is None:
                self._call_webhooks("mutate", rt, new, old)
            if isinstance(rt, crds.CustomType) and not trusted:
                crds.check(rt, new, old)
            if subresource is None:
                rules.validate(rt, new, _ungated(rt, old, new))
                self._call_webhooks("validate", rt, new, old)
            if _same(old, new):
                return old
            if dry_run:
                return new
            stored = self.store.write(rt.key, new)
            return self._remove_if_released(rt, stored)

    def _merge_update(self, rt, old: dict, new: dict, subresource: str | None) -> dict:
        """Keep what the request may not change: server-managed metadata, and either the status
        (main resource) or everything but the status (``/status``) or the finalizers."""
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status") or {}
            return merged
        if subresource == "finalize":
            merged = copy.deepcopy(old)
            merged["spec"]["finalizers"] = (new.get("spec") or {}).get("finalizers") or []
            return merged
        meta = new["metadata"]
        meta["name"] = old["metadata"]["name"]
        for key in _SERVER_MANAGED:
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        if rt.has_status:
            new["status"] = copy.deepcopy(old.get("status") or {})
        if rt is resources.NAMESPACES:
            new["spec"] = copy.deepcopy(old["spec"])
        if rt is resources.SERVICES:
            for key in ("clusterIP", "clusterIPs"):
                if key in old["spec"]:
                    new["spec"].setdefault(key, old["spec"][key])
        if rt.has_generation and new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        return new

    def _remove_if_released(self, rt, obj: dict) -> dict:
        """An object being deleted goes away once its last finalizer is removed."""
        meta = obj["metadata"]
        if (meta.get("deletionTimestamp") and not meta.get("finalizers")
                and not (rt is resources.NAMESPACES and obj["spec"].get("finalizers"))
                and meta["uid"] not in self.pod_removal_due):
            return self.store.remove(rt.key, meta.get("namespace", ""), meta["name"])
        return obj

    def delete(self, rt, namespace: str, name: str, options: DeleteOptions) -> tuple[int, dict]:
        """(HTTP code, body): the removed object or a Success Status, or the object marked
        for deletion when finalizers or a grace period keep it."""
        with self.store.lock:
            obj = self.get(rt, namespace, name)
            meta = obj["metadata"]
            self._check_preconditions(rt, obj, options)
            if rt is resources.NAMESPACES and name in admission.IMMORTAL_NAMESPACES:
                raise errors.forbidden(rt, name, "this namespace may not be deleted")
            policy = options.propagation or ("Orphan" if rt.orphan_by_default else "Background")
            if policy not in ("Orphan", "Background", "Foreground"):
                raise errors.invalid(rt, name, [errors.unsupported_value(
                    "propagationPolicy", policy, ["Foreground", "Background", "Orphan"])])
            self._call_webhooks("validate_delete", rt, obj)
            if options.dry_run:
                return 200, obj
            if policy == "Orphan":
                self._orphan_dependents(meta["uid"])
            if rt is resources.NAMESPACES:
                return 200, self._mark_deleting(rt, obj, 0)
            graceful = rt is resources.PODS and self._terminates_gracefully(obj, options)
            if graceful and meta.get("deletionTimestamp"):
                return 200, self._shorten_grace(obj, options)
            if policy == "Foreground" and "foregroundDeletion" not in meta.get("finalizers", []):
                meta.setdefault("finalizers", []).append("foregroundDeletion")
            if graceful:
                return 200, self._start_termination(obj, options)
            self.pod_removal_due.pop(meta["uid"], None)
            if meta.get("finalizers"):
                code = 202 if policy == "Foreground" else 200
                return code, self._mark_deleting(rt, obj, 0)
            gone = self.store.remove(rt.key, meta.get("namespace", ""), name)
            return 200, gone if rt.return_deleted_object else _success(rt, gone)

    def evict(self, namespace: str, name: str, options: DeleteOptions) -> dict:
        """The eviction subresource (no PodDisruptionBudgets here, so always allowed): a pod
        that may still run is marked ``DisruptionTarget`` and deleted gracefully."""
        with self.store.lock:
            pod = self.get(resources.PODS, namespace, name)
            if pod["status"].get("phase") not in _TERMINAL:
                set_condition(pod["status"].setdefault("conditions", []), "DisruptionTarget",
                              "True", reason="EvictionByEvictionAPI",
                              message="Eviction API: evicting")
                self.store.write(resources.PODS.key, pod)
            self.delete(resources.PODS, namespace, name, options)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}

    def lose_node(self, node: str) -> None:
        """The node stops answering: the node lifecycle controller marks its pods for deletion
        (``DisruptionTarget``, ``DeletionByTaintManager``) and they stay Terminating, as no
        kubelet is left to confirm they stopped; only a force delete removes them."""
        with self.store.lock:
            for pod in self.store.list(resources.PODS.key):
                if pod["spec"].get("nodeName") != node or \
                        pod["status"].get("phase") in _TERMINAL:
                    continue
                conditions = pod["status"].setdefault("conditions", [])
                set_condition(conditions, "DisruptionTarget", "True",
                              reason="DeletionByTaintManager",
                              message="Taint manager: deleting due to NoExecute taint")
                set_condition(conditions, "Ready", "False", reason="NodeLost",
                              message=f"Node {node} is unreachable")
                self.pod_removal_due[pod["metadata"]["uid"]] = math.inf
                self._mark_deleting(resources.PODS, self.store.write(resources.PODS.key, pod),
                                    pod["spec"].get("terminationGracePeriodSeconds", 30))

    def delete_collection(self, rt, namespace: str | None, query: dict,
                          options: DeleteOptions) -> dict:
        listed = self.list(rt, namespace, query)
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                self.delete(rt, meta.get("namespace", ""), meta["name"], options)
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
        return listed

    def remove_terminated_pod(self, pod: dict) -> None:
        """The kubelet's final delete once a terminating pod's containers have stopped."""
        meta = pod["metadata"]
        self.pod_removal_due.pop(meta["uid"], None)
        if meta.get("finalizers"):
            meta["deletionGracePeriodSeconds"] = 0
            self.store.write(resources.PODS.key, pod)
        else:
            self.store.remove(resources.PODS.key, meta["namespace"], meta["name"])

    def _check_preconditions(self, rt, obj: dict, options: DeleteOptions) -> None:
        meta = obj["metadata"]
        if options.uid and options.uid != meta["uid"]:
            raise errors.conflict(rt, meta["name"], f"Precondition failed: UID in precondition: "
                                                    f"{options.uid}, UID in object meta: "
                                                    f"{meta['uid']}")
        if options.resource_version and options.resource_version != meta["resourceVersion"]:
            raise errors.conflict(rt, meta["name"], f"Precondition failed: ResourceVersion in "
                                                    f"precondition: {options.resource_version}, "
                                                    f"ResourceVersion in object meta: "
                                                    f"{meta['resourceVersion']}")

    def _terminates_gracefully(self, pod: dict, options: DeleteOptions) -> bool:
        """Running pods on a node get a grace period; unscheduled or finished ones do not,
        and ``gracePeriodSeconds=0`` forces removal."""
        grace = options.grace_seconds
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        return (grace > 0
                and (self.kubelet_stops_pods or self.settings.pod_termination_seconds > 0)
                and bool(pod["spec"].get("nodeName"))
                and pod.get("status", {}).get("phase") not in _TERMINAL)

    def _start_termination(self, pod: dict, options: DeleteOptions) -> dict:
        grace = options.grace_seconds
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        self.pod_removal_due[pod["metadata"]["uid"]] = math.inf if self.kubelet_stops_pods \
            else time.monotonic() + self.settings.pod_termination_seconds
        return self._mark_deleting(resources.PODS, pod, grace)

    def _shorten_grace(self, pod: dict, options: DeleteOptions) -> dict:
        """A terminating pod deleted again with a shorter grace period gets that one, as the
        API server allows (never a longer one)."""
        meta, grace = pod["metadata"], options.grace_seconds
        if grace is None or grace >= meta.get("deletionGracePeriodSeconds", 0):
            return pod
        meta["deletionTimestamp"] = iso_in(grace)
        meta["deletionGracePeriodSeconds"] = grace
        if not self.kubelet_stops_pods:
            self.pod_removal_due[meta["uid"]] = min(
                self.pod_removal_due.get(meta["uid"], math.inf),
                time.monotonic() + self.settings.pod_termination_seconds)
        return self.store.write(resources.PODS.key, pod)

    def _mark_deleting(self, rt, obj: dict, grace: int) -> dict:
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = iso_in(grace)
            meta["deletionGracePeriodSeconds"] = grace
        if rt is resources.NAMESPACES:
            obj["status"]["phase"] = "Terminating"
        return self._remove_if_released(rt, self.store.write(rt.key, obj))

    def _orphan_dependents(self, owner_uid: str) -> None:
        for rt in self.types:
            for obj in self.store.list(rt.key):
                refs = obj["metadata"].get("ownerReferences") or []
                kept = [r for r in refs if r.get("uid") != owner_uid]
                if len(kept) != len(refs):
                    obj["metadata"]["ownerReferences"] = kept
                    self.store.write(rt.key, obj)

    def _call_webhooks(self, stage: str, rt, *args) -> None:
        for webhook in self.webhooks:
            call = getattr(webhook, stage, None)
            if call is not None:
                call(rt, *args)

    def _generate_name(self, rt, namespace: str, prefix: str) -> str:
        prefix = prefix[:63 - 5] if rt.name_rule != "subdomain" else prefix[:253 - 5]
        while True:
            name = prefix + random_suffix()
            if self.store.get(rt.key, namespace if rt.namespaced else "", name) is None:
                return name

    def _allocate_cluster_ip(self, spec: dict) -> None:
        if spec.get("clusterIP") in (None, ""):
            number = next(self._cluster_ips)
            spec["clusterIP"] = f"10.96.{number // 256}.{number % 256}"
        spec["clusterIPs"] = [spec["clusterIP"]]


def _ungated(rt, old: dict, new: dict) -> dict:
    """A pod's scheduling gates may be removed, never added: the old pod with the new gates,
    for the check that nothing else changed (as the server's ValidatePodUpdate does)."""
    if rt is not resources.PODS:
        return old
    before = [g.get("name") for g in old["spec"].get("schedulingGates") or []]
    added = [g.get("name") for g in new["spec"].get("schedulingGates") or []
             if g.get("name") not in before]
    if added:
        raise errors.invalid(rt, new["metadata"]["name"], [errors.forbidden_field(
            "spec.schedulingGates", f"only deletion is allowed, but found new scheduling gate "
                                    f"'{added[0]}'")])
    munged = copy.deepcopy(old)
    munged["spec"].pop("schedulingGates", None)
    if "schedulingGates" in new["spec"]:
        munged["spec"]["schedulingGates"] = copy.deepcopy(new["spec"]["schedulingGates"])
    return munged


def _same(old: dict, new: dict) -> bool:
    """No-op writes keep the resourceVersion, as on a real server."""
    def strip(obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        obj["metadata"].pop("resourceVersion", None)
        return obj
    return strip(old) == strip(new)


def _success(rt, gone: dict) -> dict:
    details = {"name": gone["metadata"]["name"], "kind": rt.plural,
               "uid": gone["metadata"]["uid"]}
    if rt.group:
        details["group"] = rt.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


def _list_key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def parse_resource_version(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise errors.bad_request(f"invalid resource version: {text!r}") from exc


def _decode_continue(token: str) -> dict:
    try:
        decoded = json.loads(base64.b64decode(token))
        return {"rv": int(decoded["rv"]), "start": str(decoded["start"])}
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc
