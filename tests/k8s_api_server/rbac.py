"""RBAC for one account, as the API server's authorizer checks it: the requests of the bearer
token ``Settings.portal_token`` are allowed only by ``Settings.portal_rules`` (the rules of a
ClusterRole bound cluster-wide to that account) and, in a namespace, by the rules of the
ClusterRoles of ``Settings.portal_namespace_roles`` that a RoleBinding there binds it to; and
refused otherwise with 403 Forbidden and the real server's message. Every other request (the
admin token, or none) is allowed."""

from __future__ import annotations

from .errors import ApiError

# The portal's ServiceAccount, as deploy/rbac.yaml binds it.
PORTAL_USER = "system:serviceaccount:paddlecloud:paddlecloud"

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def verb(method: str, *, named: bool, watch: bool) -> str:
    """The RBAC verb of a resource request."""
    if method == "GET":
        return "get" if named else ("watch" if watch else "list")
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return _VERBS[method]


def _matches(values: list[str], value: str) -> bool:
    return "*" in values or value in values


def allowed(rules: list[dict], verb_name: str, group: str, resource: str) -> bool:
    """Whether a rule grants ``verb_name`` on ``resource`` (``plural`` or
    ``plural/subresource``) of API group ``group``."""
    return any(_matches(rule.get("verbs", []), verb_name)
               and _matches(rule.get("apiGroups", []), group)
               and _matches(rule.get("resources", []), resource)
               and not rule.get("resourceNames") for rule in rules)


def namespace_rules(bindings: list[dict], roles: dict[str, list[dict]]) -> list[dict]:
    """The rules the RoleBindings ``bindings`` (one namespace's) give the portal there: those
    of each ClusterRole of ``roles`` bound to its ServiceAccount."""
    account = PORTAL_USER.split(":")
    found = []
    for binding in bindings:
        ref = binding.get("roleRef") or {}
        if ref.get("kind") != "ClusterRole" or ref.get("name") not in roles:
            continue
        if any((s.get("kind"), s.get("namespace"), s.get("name")) == (
                "ServiceAccount", account[2], account[3]) for s in binding.get("subjects") or []):
            found += roles[ref["name"]]
    return found


def authorize(rules: list[dict], verb_name: str, rt, namespace: str | None, name: str | None,
              subresource: str | None) -> None:
    """Raise 403 unless ``rules`` grant the request."""
    resource = f"{rt.plural}/{subresource}" if subresource else rt.plural
    if allowed(rules, verb_name, rt.group, resource):
        return
    target = f'{rt.qualified} "{name}"' if name else rt.qualified
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    message = (f'{target} is forbidden: User "{PORTAL_USER}" cannot {verb_name} resource '
               f'"{resource}" in API group "{rt.group}"{where}')
    details = {"kind": rt.plural, **({"group": rt.group} if rt.group else {}),
               **({"name": name} if name else {})}
    raise ApiError(403, "Forbidden", message, details=details)


def self_subject_review(portal: bool) -> dict:
    """Who the server takes the requester for: the portal's ServiceAccount, or (the admin
    token, no token) the cluster's admin."""
    user = ({"username": PORTAL_USER, "groups": ["system:serviceaccounts",
                                                  "system:serviceaccounts:paddlecloud",
                                                  "system:authenticated"]}
            if portal else {"username": "kubernetes-admin",
                            "groups": ["system:masters", "system:authenticated"]})
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
            "metadata": {"creationTimestamp": None}, "status": {"userInfo": user}}
