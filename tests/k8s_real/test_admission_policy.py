"""deploy/admission-policy.yaml enforced by the real API server: the cases of
tests/test_admission_policy.py (which evaluates the policy's CEL with cel-python, on the objects
the backend builds), sent as real requests by the portal's ServiceAccount (dry runs: nothing is
stored but the namespaces and objects a case needs to exist), and the server's answer compared
with the model's decision: admitted, or refused with the message of the first rule broken.

Where rbac.yaml does not grant the verb (deleting a namespace or a PersistentVolume), the
authorizer refuses the request before admission: the policy is never asked. Those cases say so.

The portal's rights on users' objects come with the RoleBinding it makes in each of its
namespaces (rbac.yaml): in the others, RBAC alone refuses its writes. To show that the policy
holds them too (should a rule be widened, or that role bound there by mistake), the admin binds
the portal's namespace role in every namespace the cases write in, for this module."""

from __future__ import annotations

import copy
import uuid

import pytest

from jobs.backends.kubernetes.manifests import portal_binding
from jobs.backends.kubernetes.names import MANAGED_BY, MANAGED_BY_LABEL
from tests import test_admission_policy as model
from tests.jobs.kubernetes.factories import collective_job, private_registry, pserver_job
from tests.k8s_real.api import KINDS, Answer, Api
from tests.polling import wait
from tests.test_deploy import RBAC

PREFIX = ("ValidatingAdmissionPolicy 'paddlecloud-portal' with binding 'paddlecloud-portal' "
          "denied request: ")
VERBS = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}
WIDENED = "paddlecloud-portal-widened-by-the-test"


class Cluster:
    """The namespaces the cases run in, made once for this module with fresh names (a cluster
    reused across runs keeps its namespaces): the user's, managed by the portal (which makes
    it: that request is a case too), and those it must not write in."""

    def __init__(self, admin: Api, portal: Api):
        self.admin, self.portal = admin, portal
        suffix = uuid.uuid4().hex[:6]
        self.user = model.portal_namespace()
        self.user["metadata"]["name"] = f"{self.user['metadata']['name']}-{suffix}"
        self.hand_made = copy.deepcopy(model.HAND_MADE)
        self.hand_made["metadata"]["name"] = f"team-a-{suffix}"
        self.another = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": f"other-{suffix}", "labels": {MANAGED_BY_LABEL: "helm"}}}
        self.widened: list[dict] = []

    def namespaces(self) -> dict[str, dict]:
        """The namespaces by the ids of tests/test_admission_policy.py."""
        return {"kube-system": model.KUBE_SYSTEM, "the-portals-own": model.portal_own_namespace(),
                "hand-made": self.hand_made, "managed-by-another": self.another}

    def existing(self, obj: dict) -> dict:
        """``obj`` made by the admin (whom the policy does not match), for an UPDATE or DELETE
        to find. A Job is suspended and a StatefulSet has no replica: no pod is made; no owner
        (the garbage collector would take an object whose owner does not exist)."""
        stored = copy.deepcopy(obj)
        stored["metadata"].pop("ownerReferences", None)
        stored["metadata"]["name"] = f"{stored['metadata']['name']}-{uuid.uuid4().hex[:6]}"
        if stored["kind"] == "Job":
            stored["spec"]["suspend"] = True
        if stored["kind"] == "StatefulSet":
            stored["spec"]["replicas"] = 0
        answer = self.admin.create(stored)
        assert answer.ok, answer.body
        return answer.body

    def widen(self) -> None:
        """The portal's namespace role bound (by the admin) where the portal did not make the
        namespace: RBAC lets its writes through, the policy alone decides."""
        for namespace in self.namespaces().values():
            binding = portal_binding(namespace["metadata"]["name"], model.PORTAL)
            binding["metadata"]["name"] = WIDENED
            answer = self.admin.create(binding)
            assert answer.ok, answer.body
            self.widened.append(answer.body)

    def clean(self) -> None:
        for binding in self.widened:
            self.admin.delete(binding)
        for namespace in (self.user, self.hand_made, self.another):
            self.admin.delete(namespace)


@pytest.fixture(scope="module")
def cluster(real_kube):
    admin, portal = Api(real_kube.admin_kubeconfig), Api(real_kube.portal_kubeconfig)
    made = Cluster(admin, portal)
    try:
        # The portal makes its user's namespace and its rights there, as the backend does
        # (real requests: the policy admits them).
        answer = portal.create(made.user)
        assert answer.ok, answer.body
        answer = portal.create(portal_binding(made.user["metadata"]["name"], model.PORTAL))
        assert answer.ok, answer.body
        for namespace in (made.hand_made, made.another):
            assert admin.create(namespace).ok
        made.widen()
        for namespace in made.namespaces().values():
            wait(lambda namespace=namespace: PREFIX in portal.create(
                into(model.a_job("ConfigMap"), namespace), dry_run=True).message,
                 message="the admin's bindings to reach the authorizer")
        yield made
    finally:
        made.clean()
        admin.close()
        portal.close()


def into(obj: dict, namespace: dict) -> dict:
    return model.moved(obj, namespace)


def send(cluster: Cluster, operation: str, obj: dict | None, *, old: dict | None = None,
         api: Api | None = None) -> Answer:
    """The request as the portal (or ``api``), a dry run. UPDATE and DELETE act on a copy of
    ``old`` the admin makes first (a namespace: the one there), and removes after; UPDATE
    sends ``obj`` over it."""
    api = api or cluster.portal
    if operation == "CREATE":
        return api.create(obj, dry_run=True)
    if old["kind"] == "Namespace":
        return (api.delete(old, dry_run=True) if operation == "DELETE" else
                api.update(obj, dry_run=True))
    existing = cluster.existing(old)
    try:
        if operation == "DELETE":
            return api.delete(existing, dry_run=True)
        changed = copy.deepcopy(obj)
        changed["metadata"]["name"] = existing["metadata"]["name"]
        return api.update(changed, dry_run=True)
    finally:
        cluster.admin.delete(existing)


def expected(operation: str, obj: dict | None, *, old: dict | None = None,
             namespace: dict | None = None):
    """The model's decision (tests/test_admission_policy.py), as the server would answer it:
    None when it admits, else the rule whose message the refusal shows."""
    decision = model.request(operation, obj, old=old, namespace=namespace)
    assert decision.errors == []
    return decision.refused[0] if decision.refused else None


def granted(operation: str, obj: dict) -> bool:
    group, _, resource, _ = KINDS[obj["kind"]]
    return VERBS[operation] in RBAC.get((group, resource), set())


def check(cluster: Cluster, operation: str, obj: dict | None, *, old: dict | None = None,
          namespace: dict | None = None) -> None:
    """The server decides as the model does (or the authorizer refuses first)."""
    target = obj if obj is not None else old
    answer = send(cluster, operation, obj, old=old)
    if not granted(operation, target):
        assert answer.status == 403 and "cannot" in answer.message, answer.body
        assert PREFIX not in answer.message
        return
    rule = expected(operation, obj, old=old, namespace=namespace)
    if rule is None:
        assert answer.ok, answer.body
    else:
        assert answer.status == 403, answer.body
        # '<resource> "<name>" is forbidden: ' + PREFIX + the first broken rule's message
        assert PREFIX in answer.message, answer.message
        assert answer.message.split(PREFIX, 1)[1].startswith(rule + ":"), answer.message


# --- what the backend makes is admitted ----------------------------------------------------------

@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_the_users_namespace_is_admitted(cluster, level):
    namespace = copy.deepcopy(cluster.user)
    namespace["metadata"]["name"] += f"-{level}"
    namespace["metadata"]["labels"][model.ENFORCE] = level
    check(cluster, "CREATE", namespace)
    for obj in model.namespaced_objects():
        obj = into(obj, cluster.user)
        check(cluster, "CREATE", obj, namespace=cluster.user)
        check(cluster, "UPDATE", obj, old=obj, namespace=cluster.user)


@pytest.mark.parametrize("job", [pserver_job, collective_job], ids=["pserver", "collective"])
@pytest.mark.parametrize("root_uid", [model.ROOT_UID, None], ids=["owned", "dry-run"])
def test_every_object_of_a_job_is_admitted(cluster, job, root_uid):
    for obj in model.job_objects(job(), namespace=cluster.user["metadata"]["name"],
                                 root_uid=root_uid):
        check(cluster, "CREATE", obj, namespace=cluster.user)
        check(cluster, "DELETE", None, old=obj, namespace=cluster.user)


def test_a_pull_secret_is_admitted(cluster):
    secret = model.pull_secret(cluster.user["metadata"]["name"], private_registry(), "s3cret")
    check(cluster, "CREATE", secret, namespace=cluster.user)
    check(cluster, "UPDATE", secret, old=secret, namespace=cluster.user)
    check(cluster, "DELETE", None, old=secret, namespace=cluster.user)


def test_the_portal_may_change_but_not_delete_its_own_namespace(cluster):
    """The model admits both; rbac.yaml grants update, not delete."""
    stored = cluster.portal.get("Namespace", name=cluster.user["metadata"]["name"]).body
    check(cluster, "UPDATE", stored, old=stored)
    check(cluster, "DELETE", None, old=stored)


# --- what the policy refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("where", ["kube-system", "the-portals-own", "hand-made",
                                   "managed-by-another"])
@pytest.mark.parametrize("kind", ["Job", "StatefulSet", "ConfigMap", "Service"])
def test_nothing_is_created_outside_the_managed_namespaces(cluster, where, kind):
    namespace = cluster.namespaces()[where]
    check(cluster, "CREATE", into(model.a_job(kind), namespace), namespace=namespace)


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_no_secret_is_written_or_deleted_outside(cluster, operation):
    secret = into(model.pull_secret("x", private_registry(), "s3cret"), cluster.hand_made)
    obj, old = {"CREATE": (secret, None), "UPDATE": (secret, secret),
                "DELETE": (None, secret)}[operation]
    check(cluster, operation, obj, old=old, namespace=cluster.hand_made)


def test_no_quota_is_written_in_kube_system(cluster):
    for obj in model.namespaced_objects():
        obj = into(obj, model.KUBE_SYSTEM)
        check(cluster, "UPDATE", obj, old=obj, namespace=model.KUBE_SYSTEM)


@pytest.mark.parametrize("where", ["kube-system", "the-portals-own", "hand-made", "user"])
def test_the_portal_binds_its_rights_in_its_namespaces_only(cluster, where):
    namespace = cluster.user if where == "user" else cluster.namespaces()[where]
    binding = portal_binding(namespace["metadata"]["name"], model.PORTAL)
    binding["metadata"]["name"] += "-again"
    check(cluster, "CREATE", binding, namespace=namespace)


def test_the_portal_gives_its_rights_to_nobody_else(cluster):
    """To the user's pods' ServiceAccount: RBAC lets it (the portal may bind that role), the
    policy does not."""
    binding = portal_binding(cluster.user["metadata"]["name"], model.PORTAL)
    binding["metadata"]["name"] += "-default"
    binding["subjects"] = [{"kind": "ServiceAccount", "name": "default",
                            "namespace": cluster.user["metadata"]["name"]}]
    assert expected("CREATE", binding, namespace=cluster.user) == "portal-binding"
    check(cluster, "CREATE", binding, namespace=cluster.user)


def in_user_namespace(cluster: Cluster, kind: str) -> dict:
    return into(model.a_job(kind), cluster.user)


@pytest.mark.parametrize("kind", model.WORKLOAD_KINDS)
@pytest.mark.parametrize("containers", ["containers", "initContainers"])
def test_a_privileged_container_is_refused(cluster, kind, containers):
    obj = in_user_namespace(cluster, kind)
    model.pod_spec(obj)[containers][0]["securityContext"] = {"privileged": True}
    check(cluster, "CREATE", obj, namespace=cluster.user)
    model.pod_spec(obj)[containers][0]["securityContext"] = {"privileged": False}
    check(cluster, "CREATE", obj, namespace=cluster.user)


@pytest.mark.parametrize("kind", model.WORKLOAD_KINDS)
@pytest.mark.parametrize("field", ["hostNetwork", "hostPID", "hostIPC"])
def test_host_namespaces_are_refused(cluster, kind, field):
    obj = in_user_namespace(cluster, kind)
    model.pod_spec(obj)[field] = True
    check(cluster, "CREATE", obj, namespace=cluster.user)


@pytest.mark.parametrize("kind", model.WORKLOAD_KINDS)
@pytest.mark.parametrize("field", ["serviceAccountName", "serviceAccount"])
def test_a_service_account_is_refused(cluster, kind, field):
    obj = in_user_namespace(cluster, kind)
    model.pod_spec(obj)[field] = "admin"
    check(cluster, "CREATE", obj, namespace=cluster.user)


def test_a_pod_template_is_checked_on_update_too(cluster):
    obj = in_user_namespace(cluster, "StatefulSet")
    changed = copy.deepcopy(obj)
    model.pod_spec(changed)["hostPID"] = True
    check(cluster, "UPDATE", changed, old=obj, namespace=cluster.user)


def test_every_broken_rule_is_reported_the_first_is_shown(cluster):
    obj = into(model.a_job(), model.KUBE_SYSTEM)
    model.pod_spec(obj).update({"hostNetwork": True, "serviceAccountName": "admin"})
    model.pod_spec(obj)["containers"][0]["securityContext"] = {"privileged": True}
    check(cluster, "CREATE", obj, namespace=model.KUBE_SYSTEM)


@pytest.mark.parametrize("changes", [
    {"enforce": "privileged"}, {"enforce": None}, {"enforce": None, "version": None},
    {"version": "v1.22"}, {"managed": None}, {"managed": "someone-else"},
    {"managed": None, "enforce": None}, {"version": None},
], ids=["privileged", "no-enforce", "no-pod-security", "old-version", "unmanaged",
        "managed-by-another", "neither", "no-version"])
def test_a_namespace_without_the_labels_is_refused(cluster, changes):
    namespace = model.with_labels(cluster.user, **changes)
    namespace["metadata"]["name"] += "-new"  # admitted, it must not exist already
    check(cluster, "CREATE", namespace)


def test_a_level_in_the_wrong_case_is_invalid_before_the_policy_is_asked(cluster):
    """The model: refused by namespace-pod-security. The server: Pod Security's own check of
    the namespace's labels refuses it first (422, the label named)."""
    namespace = model.with_labels(cluster.user, enforce="Restricted")
    assert expected("CREATE", namespace) == "namespace-pod-security"
    answer = send(cluster, "CREATE", namespace)
    assert answer.status == 422, answer.body
    assert [cause["field"] for cause in answer.body["details"]["causes"]] == [
        f"metadata.labels[{model.ENFORCE}]"]


def test_a_namespace_without_any_label_is_refused(cluster):
    check(cluster, "CREATE", {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": f"paddle-mallory-{uuid.uuid4().hex[:6]}"}})


def test_the_portal_cannot_relabel_its_namespace_privileged(cluster):
    old = cluster.portal.get("Namespace", name=cluster.user["metadata"]["name"]).body
    check(cluster, "UPDATE", model.with_labels(old, enforce="privileged"), old=old)


@pytest.mark.parametrize("where", ["kube-system", "the-portals-own", "hand-made"])
def test_the_portal_cannot_adopt_or_delete_a_namespace(cluster, where):
    name = cluster.namespaces()[where]["metadata"]["name"]
    old = cluster.admin.get("Namespace", name=name).body
    adopted = copy.deepcopy(old)
    adopted["metadata"].setdefault("labels", {}).update(
        {MANAGED_BY_LABEL: MANAGED_BY, model.ENFORCE: "restricted"})
    check(cluster, "UPDATE", adopted, old=old)
    check(cluster, "DELETE", None, old=old)


# --- nobody else is matched ----------------------------------------------------------------------

def test_other_users_are_not_matched(cluster, real_kube):
    """A user of system:masters but another name (impersonated by the admin): the policy's
    match condition is the portal's username, so nothing of this is refused."""
    other = Api(real_kube.admin_kubeconfig, impersonate="system:serviceaccount:other:paddlecloud",
                group="system:masters")
    try:
        obj = into(model.a_job(), model.KUBE_SYSTEM)
        model.pod_spec(obj).update({"hostNetwork": True})
        model.pod_spec(obj)["containers"][0]["securityContext"] = {"privileged": True}
        assert model.request("CREATE", obj, namespace=model.KUBE_SYSTEM,
                             user="system:serviceaccount:other:paddlecloud").matched is False
        answer = other.create(obj, dry_run=True)
        assert answer.ok, answer.body
    finally:
        other.close()


# --- a PFS volume per user namespace -------------------------------------------------------------

def test_the_pfs_volume_and_claim_are_admitted(cluster):
    volume, claim = model.pfs_pair()
    check(cluster, "CREATE", volume)
    check(cluster, "CREATE", into(claim, cluster.user), namespace=cluster.user)


# A local volume needs a node affinity, or the server finds it invalid (422) before the
# policy is asked; tests/test_admission_policy.py's has none.
NEAR_A_NODE = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}


@pytest.mark.parametrize("change", [
    lambda v: v["metadata"].update(name="other-volume"),
    lambda v: v["metadata"]["labels"].pop(MANAGED_BY_LABEL),
    lambda v: v["spec"]["claimRef"].update(name="someone-elses"),
    lambda v: (v["spec"].pop("csi"), v["spec"].update(hostPath={"path": "/"})),
    lambda v: (v["spec"].pop("csi"), v["spec"].update(local={"path": "/var"},
                                                      nodeAffinity=NEAR_A_NODE)),
], ids=["name", "label", "claim", "hostPath", "local"])
def test_a_volume_the_portal_did_not_mean_is_refused(cluster, change):
    volume, _ = model.pfs_pair()
    change(volume)
    check(cluster, "CREATE", volume)


def test_the_portal_deletes_no_volume(cluster):
    volume, _ = model.pfs_pair()
    check(cluster, "DELETE", None, old=volume)


def test_no_claim_outside_the_managed_namespaces(cluster):
    _, claim = model.pfs_pair()
    check(cluster, "CREATE", into(claim, model.KUBE_SYSTEM), namespace=model.KUBE_SYSTEM)
