"""deploy/admission-policy.yaml, evaluated: its CEL (matchConditions and validations, read from
the file) runs on cel-python with the variables the API server binds (``object``,
``oldObject``, ``request``, ``namespaceObject``), for the objects the Kubernetes backend really
builds and for the requests the policy must refuse. No cluster here: what Kubernetes would check
when it loads the policy (the expressions compile, name declared variables and existing fields,
compare like with like, return a bool) is checked statically against the types the API server
declares and the OpenAPI schemas of the matched kinds."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from importlib import resources

import celpy
import pytest
import yaml
from celpy import celtypes
from lark import Token, Tree

from jobs.backends.kubernetes.manifests import (
    job_objects,
    namespace_objects,
    portal_binding,
    pull_secret,
)
from jobs.backends.kubernetes.names import MANAGED_BY, MANAGED_BY_LABEL
from tests.jobs.kubernetes.factories import (
    ROOT_UID,
    alice,
    collective_job,
    datacenter,
    private_registry,
    pserver_job,
    quota,
)
from tests.test_deploy import (
    DEPLOY,
    KUBECTL,
    NAMESPACE,
    NAMESPACE_RBAC,
    RBAC,
    VERSIONS,
    kustomize,
)

POLICY_FILE = DEPLOY / "admission-policy.yaml"
PORTAL = f"system:serviceaccount:{NAMESPACE}:paddlecloud"
ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
# The name label the API server gives every namespace.
NAME_LABEL = "kubernetes.io/metadata.name"

# kind -> (API group, resource) of the requests the tests make.
RESOURCES = {
    "Namespace": ("", "namespaces"), "ResourceQuota": ("", "resourcequotas"),
    "LimitRange": ("", "limitranges"), "Secret": ("", "secrets"),
    "ConfigMap": ("", "configmaps"), "Service": ("", "services"), "Pod": ("", "pods"),
    "StatefulSet": ("apps", "statefulsets"), "Job": ("batch", "jobs"),
    "PersistentVolume": ("", "persistentvolumes"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "LocalQueue": ("kueue.x-k8s.io", "localqueues"),
    "PodGroup": ("scheduling.volcano.sh", "podgroups"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
}
# Kinds whose schema is a CRD's: the type checker knows Kubernetes' own kinds only (the
# rules name no field of these beyond their metadata).
CUSTOM_KINDS = ("LocalQueue", "PodGroup")
WORKLOAD_KINDS = ("Job", "StatefulSet")


def documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(POLICY_FILE.read_text()) if doc is not None]


def policy() -> dict:
    found, = [doc for doc in documents() if doc["kind"] == "ValidatingAdmissionPolicy"]
    return found


def binding() -> dict:
    found, = [doc for doc in documents() if doc["kind"] == "ValidatingAdmissionPolicyBinding"]
    return found


def rule_name(validation: dict) -> str:
    """The rule a validation's message names: the words before its first colon."""
    return validation["message"].split(":", 1)[0]


def expressions() -> list[tuple[str, str]]:
    spec = policy()["spec"]
    return ([(f"matchCondition {c['name']}", c["expression"]) for c in spec["matchConditions"]]
            + [(f"validation {rule_name(v)}", v["expression"]) for v in spec["validations"]])


# --- evaluating a request ------------------------------------------------------------------------

ENV = celpy.Environment()


@functools.cache
def program(expression: str):
    return ENV.program(ENV.compile(expression))


def evaluate(expression: str, activation: dict) -> bool | str:
    """True or False, or the error (a string) that failurePolicy Fail turns into a refusal."""
    try:
        result = program(expression).evaluate(activation)
    except celpy.CELEvalError as exc:
        return f"error: {exc}"
    if isinstance(result, celpy.CELEvalError):
        return f"error: {result}"
    if not isinstance(result, celtypes.BoolType):  # Kubernetes refuses a non-bool expression
        return f"error: {expression!r} gave {type(result).__name__}"
    return bool(result)


@dataclasses.dataclass
class Decision:
    matched: bool  # by the policy's resources and its matchConditions
    refused: list[str]  # the rules whose validation failed, in the policy's order
    errors: list[str]  # expressions that could not be evaluated (refused too: Fail)

    @property
    def admitted(self) -> bool:
        return not self.refused and not self.errors


def stored(namespace: dict) -> dict:
    """A Namespace as the API server keeps it, and passes it as namespaceObject."""
    stored = copy.deepcopy(namespace)
    stored.setdefault("metadata", {}).setdefault("labels", {})[NAME_LABEL] = (
        stored["metadata"]["name"])
    stored.setdefault("spec", {"finalizers": ["kubernetes"]})
    stored.setdefault("status", {"phase": "Active"})
    return stored


def request(operation: str, obj: dict | None = None, *, old: dict | None = None,
            namespace: dict | None = None, user: str = PORTAL) -> Decision:
    """What the policy decides on ``operation`` of ``obj`` (``old`` before it, for UPDATE and
    DELETE) by ``user``, in ``namespace`` (the Namespace object, for a namespaced kind)."""
    target = obj if obj is not None else old
    kind = target["kind"]
    group, resource = RESOURCES[kind]
    name = target["metadata"]["name"]
    if kind == "Namespace":
        # The API server gives a Namespace request the namespace's own name, and no
        # namespaceObject.
        assert namespace is None
        request_namespace, namespace_object = name, None
    elif kind == "PersistentVolume":  # cluster-scoped: no namespace at all
        assert namespace is None
        request_namespace, namespace_object = "", None
    else:
        assert namespace is not None and namespace["metadata"]["name"] == (
            target["metadata"]["namespace"]), "a namespaced object needs its namespace"
        request_namespace, namespace_object = namespace["metadata"]["name"], stored(namespace)
    version = "v1beta1" if kind in CUSTOM_KINDS else "v1"
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    admission_request = {
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": name, "namespace": request_namespace, "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]}, "dryRun": False,
    }
    spec = policy()["spec"]
    if not any(group in rule["apiGroups"] and version in rule["apiVersions"]
               and resource in rule["resources"] and operation in rule["operations"]
               for rule in spec["matchConstraints"]["resourceRules"]):
        return Decision(matched=False, refused=[], errors=[])
    activation = {"object": obj, "oldObject": old, "request": admission_request,
                  "namespaceObject": namespace_object}
    activation = {key: celpy.json_to_cel(json.loads(json.dumps(value)))
                  for key, value in activation.items()}
    errors = []
    for condition in spec["matchConditions"]:
        outcome = evaluate(condition["expression"], activation)
        if outcome is False:
            return Decision(matched=False, refused=[], errors=[])
        if outcome is not True:
            errors.append(outcome)
    refused = []
    for validation in spec["validations"]:
        outcome = evaluate(validation["expression"], activation)
        if outcome is False:
            refused.append(rule_name(validation))
        elif outcome is not True:
            errors.append(f"{rule_name(validation)}: {outcome}")
    return Decision(matched=True, refused=refused, errors=errors)


def assert_admitted(decision: Decision) -> None:
    assert decision.matched
    assert decision.refused == [] and decision.errors == []


# --- the objects ---------------------------------------------------------------------------------

def built_namespace() -> dict:
    """The user's Namespace exactly as the backend builds it."""
    namespace, = [o for o in namespace_objects(datacenter(), alice(), quota())
                  if o["kind"] == "Namespace"]
    return namespace


def portal_namespace(level: str = "restricted") -> dict:
    """The user's Namespace as the backend builds it (its name, its managed-by label), with
    the Pod Security labels the portal gives it, written out here: ``level``, at ``latest``."""
    namespace = built_namespace()
    namespace["metadata"]["labels"].update({ENFORCE: level, ENFORCE_VERSION: "latest"})
    return namespace


def namespaced_objects() -> list[dict]:
    """The ResourceQuota and LimitRange made with the user's namespace."""
    return [o for o in namespace_objects(datacenter(), alice(), quota())
            if o["kind"] != "Namespace"]


def the_namespace() -> str:
    return built_namespace()["metadata"]["name"]


def a_job(kind: str = "Job") -> dict:
    """The first object of ``kind`` of a pserver job, as the backend builds it: the trainers'
    Job, the pservers' StatefulSet, the root ConfigMap, the pservers' Service."""
    objects = job_objects(pserver_job(), namespace=the_namespace(), root_uid=ROOT_UID)
    return next(o for o in objects if o["kind"] == kind)


def moved(obj: dict, namespace: dict) -> dict:
    moved = copy.deepcopy(obj)
    moved["metadata"]["namespace"] = namespace["metadata"]["name"]
    return moved


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


KUBE_SYSTEM = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}
HAND_MADE = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "team-a", "labels": {"team": "a"}}}


def portal_own_namespace() -> dict:
    """deploy/namespace.yaml: the portal's own namespace (restricted, not managed-by)."""
    found, = [doc for doc in yaml.safe_load_all((DEPLOY / "namespace.yaml").read_text())
              if doc and doc["kind"] == "Namespace"]
    return found


# --- the file ------------------------------------------------------------------------------------

def test_the_policy_fails_closed_and_is_bound_to_deny():
    spec = policy()["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert binding()["spec"] == {"policyName": policy()["metadata"]["name"],
                                 "validationActions": ["Deny"]}
    assert "matchResources" not in binding()["spec"]  # every request the policy matches


def test_every_validation_names_its_rule():
    validations = policy()["spec"]["validations"]
    names = [rule_name(v) for v in validations]
    assert len(set(names)) == len(names)
    for validation in validations:
        assert set(validation) <= {"expression", "message", "reason"}
        assert rule_name(validation) and " " not in rule_name(validation), validation["message"]
        assert "\n" not in validation["message"]  # Kubernetes refuses a message with breaks
        assert validation["reason"] == "Forbidden"


def test_the_match_condition_names_the_portal_service_account():
    """The username is written in the CEL: it must be the ServiceAccount of rbac.yaml in the
    namespace of kustomization.yaml."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    account, = [doc for doc in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text())
                if doc and doc["kind"] == "ServiceAccount"]
    username = (f"system:serviceaccount:{kustomization['namespace']}:"
                f"{account['metadata']['name']}")
    assert username == PORTAL
    condition, = policy()["spec"]["matchConditions"]
    assert condition["expression"].strip() == f"request.userInfo.username == '{username}'"


# A command run in a replica and a connection to its port: a WebSocket upgrade the API server
# admits as CONNECT (never a write of an object), which RBAC authorizes as create. The portal
# may do it only where the namespace role is bound: its own namespaces (the policy holds those
# bindings: test_a_binding_of_other_rights_or_to_others_is_refused).
CONNECTS = {("", "pods/exec"), ("", "pods/portforward")}


def test_the_policy_covers_every_write_the_cluster_role_allows():
    """Every resource the portal may create, update or delete, for all three operations:
    widening a verb in rbac.yaml cannot open a way around the policy."""
    assert {key for key in CONNECTS if key in RBAC} == {
        key for key in CONNECTS if key in NAMESPACE_RBAC} == CONNECTS
    writable = {key for key, verbs in RBAC.items()
                if verbs & {"create", "update", "delete"} and key not in CONNECTS}
    matched = set()
    for rule in policy()["spec"]["matchConstraints"]["resourceRules"]:
        assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
        custom = rule["apiGroups"][0].endswith((".x-k8s.io", ".volcano.sh"))
        assert rule["apiVersions"] == (["v1beta1"] if custom else ["v1"])
        matched |= {(group, resource) for group in rule["apiGroups"]
                    for resource in rule["resources"]}
    assert matched == writable


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kustomize_renders_the_policy_unchanged():
    """kustomize (v5) takes the two cluster-scoped kinds for namespaced and gives them the
    kustomization's namespace, which the API server drops; nothing else changes."""
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in kustomize()}
    for document in documents():
        got = copy.deepcopy(rendered[(document["kind"], document["metadata"]["name"])])
        assert got["metadata"].pop("namespace", NAMESPACE) == NAMESPACE
        assert got == document


# --- the CEL, statically -------------------------------------------------------------------------

@pytest.mark.parametrize(("where", "expression"), expressions(), ids=lambda v: str(v)[:40])
def test_every_expression_compiles(where, expression):
    program(expression)


# The variables Kubernetes declares for a policy without params or authorizer, and their types
# (k8s.io/apiserver/pkg/admission/plugin/cel/compile.go: object and oldObject are dyn, request
# and namespaceObject are declared types). A type is a field dict (an object), a scalar name, or
# ("list", T) / ("map", T) (string keys).
GVK = {"group": "string", "version": "string", "kind": "string"}
GVR = {"group": "string", "version": "string", "resource": "string"}
REQUEST_TYPE = {
    "kind": GVK, "resource": GVR, "subResource": "string", "requestKind": GVK,
    "requestResource": GVR, "requestSubResource": "string", "name": "string",
    "namespace": "string", "operation": "string",
    "userInfo": {"username": "string", "uid": "string", "groups": ("list", "string"),
                 "extra": ("map", ("list", "string"))},
    "dryRun": "boolean", "options": "dyn",
}
NAMESPACE_TYPE = {
    "metadata": {"name": "string", "generateName": "string", "namespace": "string",
                 "labels": ("map", "string"), "annotations": ("map", "string"), "UID": "string",
                 "creationTimestamp": "timestamp", "deletionGracePeriodSeconds": "integer",
                 "deletionTimestamp": "timestamp", "generation": "integer",
                 "resourceVersion": "string", "finalizers": ("list", "string")},
    "spec": {"finalizers": ("list", "string")},
    "status": {"conditions": ("list", {"status": "string", "type": "string",
                                       "lastTransitionTime": "timestamp", "message": "string",
                                       "reason": "string"}),
               "phase": "string"},
}
DECLARED = {"request": REQUEST_TYPE, "namespaceObject": NAMESPACE_TYPE}
OBJECTS = ("object", "oldObject")
MACROS = {"all", "exists", "exists_one", "map", "filter"}
# Functions both Kubernetes' CEL and cel-python have, alike.
FUNCTIONS = {"has", "size", "startsWith", "endsWith", "contains", "matches"}
WRAPPERS = {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
            "unary", "member", "primary", "paren_expr"}
LIST_ELEMENT = "[]"  # a list's item or a map's value, in a path


def normalized(declared) -> tuple:
    """A declared type as (kind, element): ("object", None), ("list", T), ("string", None)…"""
    if isinstance(declared, dict):
        return ("object", None)
    if isinstance(declared, tuple):
        return (declared[0], normalized(declared[1]))
    return (declared, None)


def declared_type(root: str, path: tuple[str, ...]) -> tuple | None:
    declared = DECLARED[root]
    for step in path:
        if step == LIST_ELEMENT and isinstance(declared, tuple):
            declared = declared[1]
        elif isinstance(declared, dict) and step in declared:
            declared = declared[step]
        else:
            return None
    return normalized(declared)


@functools.cache
def definitions(version: str) -> dict:
    schemas = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    return json.loads((schemas / f"v{version}.0-local-strict" / "_definitions.json").read_text())[
        "$defs"]


def schema_name(kind: str) -> str:
    group = RESOURCES[kind][0].split(".")[0] or "core"  # rbac.authorization.k8s.io: rbac
    return f"io.k8s.api.{group}.v1.{kind}"


def dereferenced(version: str, node: dict) -> dict:
    while "$ref" in node:
        node = definitions(version)[node["$ref"].rsplit("/", 1)[1]]
    return node


def schema_type(version: str, node: dict) -> tuple:
    node = dereferenced(version, node)
    types = node.get("type", [])
    types = [t for t in ([types] if isinstance(types, str) else types) if t != "null"]
    if types == ["array"]:
        return ("list", schema_type(version, node["items"]))
    if types == ["object"] and isinstance(node.get("additionalProperties"), dict):
        return ("map", schema_type(version, node["additionalProperties"]))
    if types == ["object"] or "properties" in node:
        return ("object", None)
    return (types[0], None) if len(types) == 1 else ("dyn", None)


def object_type(version: str, kind: str, path: tuple[str, ...]) -> tuple | None:
    """The type of ``path`` in ``kind``'s OpenAPI schema, None where it has no such field."""
    node = definitions(version)[schema_name(kind)]
    for step in path:
        node = dereferenced(version, node)
        if step == LIST_ELEMENT:
            node = node.get("items") or node.get("additionalProperties")
            if not isinstance(node, dict):
                return None
        elif step in node.get("properties", {}):
            node = node["properties"][step]
        else:
            return None
    return schema_type(version, node)


def matched_kinds() -> set[str]:
    by_resource = {(group, resource): kind for kind, (group, resource) in RESOURCES.items()}
    return {by_resource[(group, resource)]
            for rule in policy()["spec"]["matchConstraints"]["resourceRules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}


class TypeChecker:
    """What the API server's CEL checker would say about one expression, as far as this
    subset goes: every identifier is a declared variable (or a macro's), every field exists
    (in the declared type, or for object/oldObject in the schema of every matched kind that
    has it: all of them, or the pod-template kinds), comparisons and `in` compare like with
    like, `!` negates a bool, and the whole is a bool."""

    def __init__(self, expression: str):
        self.expression = expression
        self.problems: list[str] = []
        self.object_paths: dict[tuple[str, ...], set[str]] = {}
        tree = ENV.compile(expression)
        if self.result_type(tree) != ("boolean", None):
            self.problems.append("does not evaluate to a bool")
        self.walk(tree, {})

    @staticmethod
    def strip(node):
        while (isinstance(node, Tree) and node.data in WRAPPERS
               and len(node.children) == 1 and isinstance(node.children[0], Tree)):
            node = node.children[0]
        return node

    def path(self, node, scope: dict) -> tuple[str, ...] | None:
        """The variable and fields ``node`` selects, if it is such a chain."""
        node = self.strip(node)
        if not isinstance(node, Tree):
            return None
        if node.data == "ident":
            name = str(node.children[0])
            return scope.get(name, (name,))
        if node.data == "member_dot":
            base = self.path(node.children[0], scope)
            return None if base is None else (*base, str(node.children[1]))
        if node.data == "member_index":
            base = self.path(node.children[0], scope)
            return None if base is None else (*base, LIST_ELEMENT)
        return None

    def path_type(self, path: tuple[str, ...]) -> tuple | None:
        root, fields = path[0], path[1:]
        if root in DECLARED:
            found = declared_type(root, fields)
            if found is None:
                self.problems.append(f"{'.'.join(path)}: no such field in {root}'s type")
            return found
        if root not in OBJECTS:
            return None
        if not fields:
            return ("dyn", None)
        types = {}
        for version in VERSIONS:
            for kind in sorted(matched_kinds() - set(CUSTOM_KINDS)):
                found = object_type(version, kind, fields)
                if found is not None:
                    types.setdefault(found, set()).add(kind)
                    self.object_paths.setdefault(fields, set()).add(kind)
        if len(types) != 1:
            self.problems.append(f"{'.'.join(path)}: {types or 'in no matched kind'}")
            return None
        return next(iter(types))

    def operand_type(self, node, scope: dict) -> tuple | None:
        node = self.strip(node)
        if isinstance(node, Tree) and node.data == "literal":
            token = node.children[0].type
            return {"STRING_LIT": ("string", None), "BOOL_LIT": ("boolean", None),
                    "INT_LIT": ("integer", None)}.get(token)
        if isinstance(node, Tree) and node.data == "list_lit":
            items = {self.operand_type(item, scope) for item in node.children[0].children}
            return ("list", items.pop()) if len(items) == 1 else None
        path = self.path(node, scope)
        return None if path is None else self.path_type(path)

    def result_type(self, node) -> tuple | None:
        node = self.strip(node)
        if not isinstance(node, Tree):
            return None
        if node.data in ("conditionalor", "conditionaland") and len(node.children) == 2:
            return ("boolean", None)
        if node.data == "relation" and len(node.children) == 2:
            return ("boolean", None)
        if node.data == "unary" and node.children[0].data == "unary_not":
            return ("boolean", None)
        if node.data == "member_dot_arg" and str(node.children[1]) in {"all", "exists",
                                                                      "exists_one"}:
            return ("boolean", None)
        if node.data == "ident_arg" and str(node.children[0]) == "has":
            return ("boolean", None)
        path = self.path(node, {})
        return None if path is None or path[0] in OBJECTS else self.path_type(path)

    def check(self, node, scope: dict) -> None:
        if node.data == "ident":
            name = str(node.children[0])
            if name not in scope and name not in DECLARED and name not in OBJECTS:
                self.problems.append(f"undeclared reference to {name}")
        elif node.data in ("member_dot", "member_index"):
            path = self.path(node, scope)
            if path is not None:
                self.path_type(path)
        elif node.data in ("ident_arg", "member_dot_arg"):
            name = str(node.children[0 if node.data == "ident_arg" else 1])
            if name not in FUNCTIONS | MACROS:
                self.problems.append(f"{name}(): not a function both CELs have")
        elif node.data == "relation" and len(node.children) == 2:
            operator, right = node.children
            left = self.operand_type(operator.children[0], scope)
            right = self.operand_type(right, scope)
            if None in (left, right) or "dyn" in (left[0], right[0]):
                return
            if operator.data in ("relation_eq", "relation_ne") and left != right:
                self.problems.append(f"{left[0]} {operator.data} {right[0]}")
            if operator.data == "relation_in":
                wanted = right[1] if right[0] == "list" else ("string", None)
                if right[0] not in ("list", "map") or left != wanted:
                    self.problems.append(f"{left[0]} in {right[0]} of {right[1]}")
        elif node.data == "unary" and node.children[0].data == "unary_not":
            operand = self.operand_type(node.children[1], scope)
            if operand is not None and operand[0] not in ("boolean", "dyn"):
                self.problems.append(f"!{operand[0]}")

    def walk(self, node, scope: dict) -> None:
        if isinstance(node, Token):
            return
        if node.data == "member_dot_arg" and str(node.children[1]) in MACROS:
            receiver, _, arguments = node.children
            self.walk(receiver, scope)
            variable, *body = arguments.children
            base = self.path(receiver, scope)
            inner = {**scope, str(self.strip(variable).children[0]):
                     (*base, LIST_ELEMENT) if base else ("?",)}
            for part in body:
                self.walk(part, inner)
            return
        self.check(node, scope)
        for child in node.children:
            self.walk(child, scope)


@pytest.mark.parametrize(("where", "expression"), expressions(), ids=lambda v: str(v)[:40])
def test_every_expression_type_checks(where, expression):
    checker = TypeChecker(expression)
    assert checker.problems == []
    for fields, kinds in checker.object_paths.items():
        # The rules read a Namespace (its labels), the pod template of both workload kinds, a
        # PersistentVolume's source or a RoleBinding's role and subjects.
        assert (set(WORKLOAD_KINDS) <= kinds or "Namespace" in kinds
                or "PersistentVolume" in kinds or "RoleBinding" in kinds), (fields, kinds)


@pytest.mark.parametrize("expression", [
    "object.spec.template.spec.hostNetworks == true",  # no such field
    "request.userInfo.user == 'x'",  # not in the declared request type
    "request.operation == 1",  # string == int
    "!object.spec.template.spec.serviceAccountName",  # ! of a string
    "namespaceObject.metadata.labels",  # a map, not a bool
    "objects.metadata.name == 'x'",  # undeclared
    "'x' in object.spec.template.spec.containers",  # a string in a list of objects
    "object.spec.template.spec.containers.all(c, has(c.securityContexts))",
])
def test_the_type_checker_sees_mistakes(expression):
    assert TypeChecker(expression).problems


# --- what the backend makes is admitted ----------------------------------------------------------

@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_the_users_namespace_is_admitted(level):
    namespace = portal_namespace(level)
    assert_admitted(request("CREATE", namespace))
    for obj in namespaced_objects():
        assert_admitted(request("CREATE", obj, namespace=namespace))
        assert_admitted(request("UPDATE", obj, old=obj, namespace=namespace))


def test_the_namespace_as_built_is_admitted():
    """namespace_objects()'s own labels, whichever level it picks for the datacenter."""
    assert_admitted(request("CREATE", built_namespace()))


@pytest.mark.parametrize("job", [pserver_job, collective_job], ids=["pserver", "collective"])
@pytest.mark.parametrize("root_uid", [ROOT_UID, None], ids=["owned", "dry-run"])
def test_every_object_of_a_job_is_admitted(job, root_uid):
    namespace = portal_namespace()
    objects = job_objects(job(), namespace=the_namespace(), root_uid=root_uid)
    kinds = [o["kind"] for o in objects]
    assert set(kinds) == ({"ConfigMap", "Service", "StatefulSet", "Job"} if job is pserver_job
                          else {"ConfigMap", "Service", "Job"})
    for obj in objects:
        assert_admitted(request("CREATE", obj, namespace=namespace))
        assert_admitted(request("DELETE", old=obj, namespace=namespace))


def test_a_pull_secret_is_admitted():
    namespace = portal_namespace()
    secret = pull_secret(the_namespace(), private_registry(), "s3cret")
    for operation, obj, old in (("CREATE", secret, None), ("UPDATE", secret, secret),
                                ("DELETE", None, secret)):
        assert_admitted(request(operation, obj, old=old, namespace=namespace))


def test_the_portal_may_change_and_delete_its_own_namespace():
    """Not granted by rbac.yaml today; the policy allows it for a managed namespace."""
    namespace = stored(portal_namespace())
    assert_admitted(request("UPDATE", namespace, old=namespace))
    assert_admitted(request("DELETE", old=namespace))


# --- what the policy refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("namespace", [
    KUBE_SYSTEM, portal_own_namespace(), HAND_MADE,
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": "other", "labels": {MANAGED_BY_LABEL: "helm"}}},
], ids=["kube-system", "the-portals-own", "hand-made", "managed-by-another"])
@pytest.mark.parametrize("kind", ["Job", "StatefulSet", "ConfigMap", "Service"])
def test_nothing_is_created_outside_the_managed_namespaces(namespace, kind):
    obj = moved(a_job(kind), namespace)
    decision = request("CREATE", obj, namespace=namespace)
    assert decision.matched and decision.refused == ["managed-namespace"]
    assert decision.errors == []


def test_the_portals_own_namespace_is_not_managed():
    assert portal_own_namespace()["metadata"]["labels"].get(MANAGED_BY_LABEL) != MANAGED_BY


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_no_secret_is_written_or_deleted_outside(operation):
    secret = moved(pull_secret(the_namespace(), private_registry(), "s3cret"), HAND_MADE)
    obj, old = {"CREATE": (secret, None), "UPDATE": (secret, secret),
                "DELETE": (None, secret)}[operation]
    decision = request(operation, obj, old=old, namespace=HAND_MADE)
    assert decision.refused == ["managed-namespace"] and decision.errors == []


def test_no_quota_is_written_in_kube_system():
    for obj in namespaced_objects():
        decision = request("UPDATE", moved(obj, KUBE_SYSTEM), old=moved(obj, KUBE_SYSTEM),
                           namespace=KUBE_SYSTEM)
        assert decision.refused == ["managed-namespace"]


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize("containers", ["containers", "initContainers"])
def test_a_privileged_container_is_refused(kind, containers):
    obj = a_job(kind)
    pod_spec(obj)[containers][0]["securityContext"] = {"privileged": True}
    decision = request("CREATE", obj, namespace=portal_namespace())
    assert decision.refused == ["pod-privileged"] and decision.errors == []
    pod_spec(obj)[containers][0]["securityContext"] = {"privileged": False}
    assert_admitted(request("CREATE", obj, namespace=portal_namespace()))


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize("field", ["hostNetwork", "hostPID", "hostIPC"])
def test_host_namespaces_are_refused(kind, field):
    obj = a_job(kind)
    pod_spec(obj)[field] = True
    decision = request("CREATE", obj, namespace=portal_namespace())
    assert decision.refused == ["pod-host-namespaces"] and decision.errors == []
    pod_spec(obj)[field] = False
    assert_admitted(request("CREATE", obj, namespace=portal_namespace()))


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
@pytest.mark.parametrize("field", ["serviceAccountName", "serviceAccount"])
def test_a_service_account_is_refused(kind, field):
    obj = a_job(kind)
    pod_spec(obj)[field] = "admin"
    decision = request("CREATE", obj, namespace=portal_namespace())
    assert decision.refused == ["pod-service-account"] and decision.errors == []
    pod_spec(obj)[field] = "default"
    assert_admitted(request("CREATE", obj, namespace=portal_namespace()))


def test_a_pod_template_is_checked_on_update_too():
    obj = a_job("StatefulSet")
    changed = copy.deepcopy(obj)
    pod_spec(changed)["hostPID"] = True
    decision = request("UPDATE", changed, old=obj, namespace=portal_namespace())
    assert decision.refused == ["pod-host-namespaces"]


def test_every_broken_rule_is_reported_the_first_is_shown():
    """The API server shows the first refusal's message: where the object is, then what it
    asks for."""
    obj = moved(a_job(), KUBE_SYSTEM)
    pod_spec(obj).update({"hostNetwork": True, "serviceAccountName": "admin"})
    pod_spec(obj)["containers"][0]["securityContext"] = {"privileged": True}
    decision = request("CREATE", obj, namespace=KUBE_SYSTEM)
    assert decision.refused == ["managed-namespace", "pod-host-namespaces", "pod-privileged",
                                "pod-service-account"]


def with_labels(namespace: dict, **changes: str | None) -> dict:
    namespace = copy.deepcopy(namespace)
    labels = namespace["metadata"]["labels"]
    for key, value in changes.items():
        key = {"enforce": ENFORCE, "version": ENFORCE_VERSION,
               "managed": MANAGED_BY_LABEL}[key]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return namespace


@pytest.mark.parametrize(("changes", "refused"), [
    ({"enforce": "privileged"}, ["namespace-pod-security"]),
    ({"enforce": None}, ["namespace-pod-security"]),
    ({"enforce": None, "version": None}, ["namespace-pod-security"]),
    ({"enforce": "Restricted"}, ["namespace-pod-security"]),
    ({"version": "v1.22"}, ["namespace-pod-security"]),
    ({"managed": None}, ["namespace-managed"]),
    ({"managed": "someone-else"}, ["namespace-managed"]),
    ({"managed": None, "enforce": None}, ["namespace-managed", "namespace-pod-security"]),
], ids=["privileged", "no-enforce", "no-pod-security", "wrong-case", "old-version",
        "unmanaged", "managed-by-another", "neither"])
def test_a_namespace_without_the_labels_is_refused(changes, refused):
    namespace = with_labels(portal_namespace(), **changes)
    decision = request("CREATE", namespace)
    assert decision.refused == refused and decision.errors == []


def test_a_namespace_without_any_label_is_refused():
    decision = request("CREATE", {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "paddle-mallory"}})
    assert decision.refused == ["namespace-managed", "namespace-pod-security"]


def test_an_enforce_version_is_optional():
    assert_admitted(request("CREATE", with_labels(portal_namespace(), version=None)))


def test_the_portal_cannot_relabel_its_namespace_privileged():
    old = stored(portal_namespace())
    new = with_labels(old, enforce="privileged")
    assert request("UPDATE", new, old=old).refused == ["namespace-pod-security"]


@pytest.mark.parametrize("namespace", [KUBE_SYSTEM, portal_own_namespace(), HAND_MADE],
                         ids=["kube-system", "the-portals-own", "hand-made"])
def test_the_portal_cannot_adopt_or_delete_a_namespace(namespace):
    old = stored(namespace)
    adopted = copy.deepcopy(old)
    adopted["metadata"]["labels"].update({MANAGED_BY_LABEL: MANAGED_BY, ENFORCE: "restricted"})
    assert request("UPDATE", adopted, old=old).refused == ["namespace-adoption"]
    assert request("DELETE", old=old).refused == ["namespace-adoption"]


# --- nobody else is matched ----------------------------------------------------------------------

@pytest.mark.parametrize("user", [
    "kubernetes-admin",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:serviceaccount:other:paddlecloud",  # the same name in another namespace
    "system:serviceaccount:paddlecloud:default",
])
def test_other_users_are_not_matched(user):
    obj = moved(a_job(), KUBE_SYSTEM)
    pod_spec(obj).update({"hostNetwork": True, "serviceAccountName": "admin"})
    pod_spec(obj)["containers"][0]["securityContext"] = {"privileged": True}
    assert request("CREATE", obj, namespace=KUBE_SYSTEM, user=user) == Decision(
        matched=False, refused=[], errors=[])
    assert not request("CREATE", {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "anything"}}, user=user).matched
    assert not request("DELETE", old=stored(KUBE_SYSTEM), user=user).matched


def test_the_portal_deletes_a_pod_only_in_its_namespaces():
    """Pods: the portal deletes one only to force away a trainer's pod stranded on a lost node
    (rbac.yaml) — in a namespace it made, never in another."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "kube-system"}, "spec": {"hostNetwork": True}}
    decision = request("DELETE", old=pod, namespace=KUBE_SYSTEM)
    assert decision.refused == ["managed-namespace"] and decision.errors == []
    mine = moved(pod, portal_namespace())
    assert_admitted(request("DELETE", old=mine, namespace=portal_namespace()))
    assert request("CREATE", moved(a_job(), KUBE_SYSTEM), namespace=KUBE_SYSTEM).matched


# --- the portal's rights in its namespaces -------------------------------------------------------

def test_the_portals_binding_in_its_namespace_is_admitted():
    """The RoleBinding the backend makes right after the namespace (rbac.yaml: the portal's
    rights there)."""
    assert_admitted(request("CREATE", portal_binding(the_namespace(), PORTAL),
                            namespace=portal_namespace()))


@pytest.mark.parametrize("namespace", [KUBE_SYSTEM, HAND_MADE, portal_own_namespace()],
                         ids=["kube-system", "hand-made", "the-portals-own"])
def test_the_portal_gives_itself_no_rights_outside_its_namespaces(namespace):
    binding = moved(portal_binding(the_namespace(), PORTAL), namespace)
    decision = request("CREATE", binding, namespace=namespace)
    assert decision.refused == ["managed-namespace"] and decision.errors == []


@pytest.mark.parametrize(("change", "what"), [
    (lambda b: b["roleRef"].update(name="admin"), "another role"),
    (lambda b: b["roleRef"].update(kind="Role", name="paddlecloud-portal-namespace"), "a Role"),
    (lambda b: b["subjects"].append({"kind": "ServiceAccount", "name": "default",
                                     "namespace": b["metadata"]["namespace"]}),
     "the user's pods too"),
    (lambda b: b.update(subjects=[{"kind": "User", "name": PORTAL,
                                   "apiGroup": "rbac.authorization.k8s.io"}]), "as a User"),
    (lambda b: b.pop("subjects"), "no subjects"),
], ids=["role", "kind", "subject", "user", "none"])
def test_a_binding_of_other_rights_or_to_others_is_refused(change, what):
    binding = portal_binding(the_namespace(), PORTAL)
    change(binding)
    decision = request("CREATE", binding, namespace=portal_namespace())
    assert decision.refused == ["portal-binding"] and decision.errors == [], what


# --- a PFS volume per user namespace -------------------------------------------------------------

PV_DATACENTER = {"kube_volume": {"persistentVolume": {"csi": {
    "driver": "cephfs.csi.ceph.com", "volumeHandle": "pfs"}}}}


def pfs_pair() -> tuple[dict, dict]:
    found = {o["kind"]: o for o in namespace_objects(datacenter(**PV_DATACENTER), alice(),
                                                      quota())}
    return found["PersistentVolume"], found["PersistentVolumeClaim"]


def test_the_pfs_volume_and_claim_are_admitted():
    volume, claim = pfs_pair()
    assert_admitted(request("CREATE", volume))
    assert_admitted(request("CREATE", claim, namespace=portal_namespace()))


@pytest.mark.parametrize(("change", "what"), [
    (lambda v: v["metadata"].update(name="other-volume"), "named"),
    (lambda v: v["metadata"]["labels"].pop(MANAGED_BY_LABEL), "labelled"),
    (lambda v: v["spec"]["claimRef"].update(name="someone-elses"), "claim"),
    (lambda v: (v["spec"].pop("csi"), v["spec"].update(hostPath={"path": "/"})), "hostPath"),
    (lambda v: (v["spec"].pop("csi"), v["spec"].update(local={"path": "/var"})), "local"),
], ids=["name", "label", "claim", "hostPath", "local"])
def test_a_volume_the_portal_did_not_mean_is_refused(change, what):
    volume, _ = pfs_pair()
    change(volume)
    decision = request("CREATE", volume)
    assert decision.refused == ["pfs-volume"] and decision.errors == [], what


def test_the_portal_deletes_no_volume():
    volume, _ = pfs_pair()
    decision = request("DELETE", old=volume)
    assert decision.refused == ["pfs-volume"] and decision.errors == []


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "LocalQueue", "PodGroup"])
def test_no_claim_queue_or_gang_outside_the_managed_namespaces(kind):
    objects = {"PersistentVolumeClaim": pfs_pair()[1],
               "LocalQueue": {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                              "metadata": {"name": "paddlecloud", "namespace": "x"},
                              "spec": {"clusterQueue": "all"}},
               "PodGroup": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                            "metadata": {"name": "g", "namespace": "x"},
                            "spec": {"minMember": 1}}}
    assert_admitted(request("CREATE", moved(objects[kind], portal_namespace()),
                            namespace=portal_namespace()))
    decision = request("CREATE", moved(objects[kind], KUBE_SYSTEM), namespace=KUBE_SYSTEM)
    assert decision.refused == ["managed-namespace"] and decision.errors == []
