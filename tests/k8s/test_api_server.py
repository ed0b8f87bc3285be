"""The REST surface of the fake API server, through the official ``kubernetes`` client: every
resource's verbs, the Status bodies of errors, selectors, pagination, patches, subresources."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from .helpers import job_body, pod_body, statefulset_body, status_of


def _cm(name: str, **data) -> dict:
    return {"metadata": {"name": name}, "data": data}


# Per resource: the client API fixture, the method-name stem, a body, a patch to apply.
RESOURCES = {
    "configmap": ("core", "config_map", _cm("cm", a="1"), {"data": {"b": "2"}}),
    "secret": ("core", "secret", {"metadata": {"name": "s"}, "stringData": {"a": "1"}},
               {"metadata": {"annotations": {"x": "y"}}}),
    "service": ("core", "service", {"metadata": {"name": "svc"}, "spec": {
        "selector": {"app": "x"}, "ports": [{"port": 80}]}}, {"spec": {"selector": {"b": "c"}}}),
    "resourcequota": ("core", "resource_quota", {"metadata": {"name": "q"}, "spec": {
        "hard": {"pods": "10"}}}, {"spec": {"hard": {"pods": "11"}}}),
    "limitrange": ("core", "limit_range", {"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "default": {"cpu": "1"}}]}}, {"metadata": {"labels": {"a": "b"}}}),
    "pod": ("core", "pod", pod_body("p"), {"metadata": {"labels": {"a": "b"}}}),
    "event": ("core", "event", {"metadata": {"name": "e"}, "reason": "Tested", "message": "m",
                                "type": "Normal", "involvedObject": {"kind": "Pod", "name": "p"}},
              {"message": "m2"}),
    "statefulset": ("apps", "stateful_set", statefulset_body("sts"), {"spec": {"replicas": 1}}),
    "job": ("batch", "job", job_body("job"), {"metadata": {"labels": {"a": "b"}}}),
}


@pytest.mark.parametrize("kind", RESOURCES)
def test_each_namespaced_resource_supports_every_verb(kind, request, ns, k8s_api):
    fixture, stem, body, patch = RESOURCES[kind]
    api = request.getfixturevalue(fixture)
    verb = {v: getattr(api, f"{v}_namespaced_{stem}") for v in
            ("create", "read", "list", "replace", "patch", "delete")}
    created = verb["create"](ns, body)
    name = created.metadata.name
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.namespace == ns
    assert [o.metadata.name for o in verb["list"](ns).items if o.metadata.name == name] == [name]

    if kind == "pod":  # its spec changes once, when the scheduler binds it: read it after
        k8s_api.wait_for(lambda: verb["read"](name, ns).spec.node_name)
    current = verb["read"](name, ns)
    current.metadata.labels = {**(current.metadata.labels or {}), "replaced": "yes"}
    current.metadata.resource_version = None  # unconditional: controllers write status too
    replaced = verb["replace"](name, ns, current)
    assert replaced.metadata.labels["replaced"] == "yes"
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)

    patched = verb["patch"](name, ns, patch)
    assert patched.metadata.resource_version != replaced.metadata.resource_version
    verb["delete"](name, ns, propagation_policy="Background")
    with pytest.raises(client.ApiException) as missing:
        verb["read"](name, ns)
    assert missing.value.status == 404


def test_namespaces_are_cluster_scoped_and_terminate_before_going(k8s_api, core):
    created = core.create_namespace({"metadata": {"name": "team-a"}})
    assert created.status.phase == "Active"
    assert created.metadata.labels == {"kubernetes.io/metadata.name": "team-a"}
    assert created.spec.finalizers == ["kubernetes"]
    patched = core.patch_namespace("team-a", {"metadata": {"labels": {"owner": "x"}}})
    assert patched.metadata.labels["owner"] == "x"
    deleted = core.delete_namespace("team-a")  # the client declares "object": a dict
    assert deleted["status"]["phase"] == "Terminating"
    k8s_api.wait_for(lambda: "team-a" not in [n.metadata.name for n in
                                              core.list_namespace().items])


def test_server_fills_defaults_like_a_real_one(core, ns):
    pod = core.create_namespaced_pod(ns, pod_body("p", resources={"limits": {"cpu": "1"}}))
    container = pod.spec.containers[0]
    assert (pod.spec.restart_policy, pod.spec.dns_policy, pod.spec.scheduler_name) == (
        "Always", "ClusterFirst", "default-scheduler")
    assert pod.spec.termination_grace_period_seconds == 30
    assert container.image_pull_policy == "IfNotPresent"
    assert container.resources.requests == {"cpu": "1"}
    assert pod.status.phase == "Pending" and pod.status.qos_class == "Burstable"
    secret = core.create_namespaced_secret(ns, {"metadata": {"name": "s"},
                                                "string_data": {"token": "abc"}})
    assert secret.type == "Opaque" and secret.string_data is None
    assert base64.b64decode(secret.data["token"]) == b"abc"
    service = core.create_namespaced_service(ns, {"metadata": {"name": "svc"},
                                                  "spec": {"ports": [{"port": 8080}]}})
    assert service.spec.cluster_ip.startswith("10.96.")
    assert service.spec.ports[0].target_port == 8080


def test_job_gets_selector_and_labels_from_its_uid(batch, ns):
    job = batch.create_namespaced_job(ns, job_body("train"))
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels == {
        "app": "train", "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "train", "controller-uid": uid, "job-name": "train"}
    assert job.metadata.labels == {"app": "train"}
    assert (job.spec.backoff_limit, job.metadata.generation) == (6, 1)


def test_create_of_an_existing_name_is_409_already_exists(core, ns):
    core.create_namespaced_config_map(ns, _cm("cm"))
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_config_map(ns, _cm("cm"))
    assert error.value.status == 409
    assert status_of(error.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'configmaps "cm" already exists', "reason": "AlreadyExists",
        "details": {"name": "cm", "kind": "configmaps"}, "code": 409}


def test_missing_object_is_404_naming_the_group_resource(batch, ns):
    with pytest.raises(client.ApiException) as error:
        batch.read_namespaced_job("nope", ns)
    body = status_of(error.value)
    assert (error.value.status, body["reason"], body["message"]) == (
        404, "NotFound", 'jobs.batch "nope" not found')
    assert body["details"] == {"name": "nope", "kind": "jobs", "group": "batch"}


def test_replace_with_a_stale_resource_version_is_409_conflict(core, ns):
    stale = core.create_namespaced_config_map(ns, _cm("cm", a="1"))
    core.patch_namespaced_config_map("cm", ns, {"data": {"a": "2"}})
    stale.data = {"a": "3"}
    with pytest.raises(client.ApiException) as error:
        core.replace_namespaced_config_map("cm", ns, stale)
    body = status_of(error.value)
    assert (error.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "cm": the object has '
                               'been modified; please apply your changes to the latest version '
                               'and try again')
    assert core.read_namespaced_config_map("cm", ns).data == {"a": "2"}


def test_an_unchanged_write_keeps_the_resource_version(core, ns):
    created = core.create_namespaced_config_map(ns, _cm("cm", a="1"))
    again = core.patch_namespaced_config_map("cm", ns, {"data": {"a": "1"}})
    assert again.metadata.resource_version == created.metadata.resource_version


def test_unknown_fields_fail_strict_decoding_with_400(raw, ns):
    body = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "main", "image": "busybox", "imagePullPolicyy": "Always"}], "bogus": 1}}
    with pytest.raises(client.ApiException) as error:
        raw("POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert error.value.status == 400
    assert status_of(error.value)["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
        '"spec.containers[0].imagePullPolicyy", unknown field "spec.bogus"')


def test_unknown_fields_are_dropped_with_a_warning_when_asked(raw, ns):
    body = {"metadata": {"name": "cm"}, "data": {"a": "1"}, "extra": True}
    created = raw("POST", f"/api/v1/namespaces/{ns}/configmaps", body,
                  query=[("fieldValidation", "Warn")])
    assert "extra" not in created
    assert raw.headers["Warning"] == '299 - "unknown field \\"extra\\""'


def test_schema_violations_are_422_invalid_naming_the_field(raw, ns):
    body = {"metadata": {"name": "p"}, "spec": {"containers": [{"image": "busybox"}]}}
    with pytest.raises(client.ApiException) as error:
        raw("POST", f"/api/v1/namespaces/{ns}/pods", body)
    status = status_of(error.value)
    assert (error.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"] == 'Pod "p" is invalid: spec.containers[0].name: Required value'
    assert status["details"]["causes"] == [{"reason": "FieldValueRequired",
                                            "message": "Required value",
                                            "field": "spec.containers[0].name"}]


def test_wrong_json_types_are_400_bad_request(raw, ns):
    body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "m", "image": 7}]}}
    with pytest.raises(client.ApiException) as error:
        raw("POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert error.value.status == 400
    assert "cannot unmarshal number into Go struct field" in status_of(error.value)["message"]


@pytest.mark.parametrize(("method", "body", "field", "rule"), [
    ("create_namespace", {"metadata": {"name": "Team_A"}}, "metadata.name", "RFC 1123 label"),
    ("create_namespaced_service", {"metadata": {"name": "1svc"}, "spec": {
        "ports": [{"port": 80}]}}, "metadata.name", "DNS-1035 label"),
    ("create_namespaced_pod", pod_body("p", labels={"user": "a b"}), "metadata.labels",
     "a valid label must be an empty string"),
    ("create_namespaced_pod", pod_body("p", resources={"requests": {"cpu": "2"},
                                                      "limits": {"cpu": "1"}}),
     "spec.containers[0].resources.requests", "must be less than or equal to cpu limit of 1"),
])
def test_names_labels_and_resources_are_validated(core, ns, method, body, field, rule):
    args = (body,) if method == "create_namespace" else (ns, body)
    with pytest.raises(client.ApiException) as error:
        getattr(core, method)(*args)
    status = status_of(error.value)
    assert error.value.status == 422
    assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert rule in status["message"]


def test_job_rules_and_immutable_template(batch, ns):
    with pytest.raises(client.ApiException) as error:
        batch.create_namespaced_job(ns, job_body("j", restart_policy="Always"))
    assert status_of(error.value)["message"] == (
        'Job "j" is invalid: spec.template.spec.restartPolicy: Unsupported value: "Always": '
        'supported values: "OnFailure", "Never"')
    batch.create_namespaced_job(ns, job_body("j"))
    with pytest.raises(client.ApiException) as error:
        batch.patch_namespaced_job("j", ns, {"spec": {"template": {"spec": {"containers": [
            {"name": "trainer", "image": "paddle:3.0"}]}}}})
    assert error.value.status == 422
    assert "spec.template: Invalid value" in status_of(error.value)["message"]
    assert "field is immutable" in status_of(error.value)["message"]


def test_pod_spec_is_immutable_except_images(core, ns):
    core.create_namespaced_pod(ns, pod_body("p"))
    patched = core.patch_namespaced_pod("p", ns, {"spec": {"containers": [
        {"name": "main", "image": "busybox:1.37"}]}})
    assert patched.spec.containers[0].image == "busybox:1.37"
    with pytest.raises(client.ApiException) as error:
        core.patch_namespaced_pod("p", ns, {"spec": {"restartPolicy": "Never"}})
    assert error.value.status == 422
    assert status_of(error.value)["message"].startswith(
        'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than')


def test_generate_name_gets_a_random_suffix(core, ns):
    created = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "cfg-"}})
    assert created.metadata.name.startswith("cfg-") and len(created.metadata.name) == 9


def test_creating_in_a_missing_namespace_is_404(core):
    with pytest.raises(client.ApiException) as error:
        core.create_namespaced_config_map("nowhere", _cm("cm"))
    assert (error.value.status, status_of(error.value)["message"]) == (
        404, 'namespaces "nowhere" not found')


def test_label_selectors(core, ns):
    for name, labels in (("a", {"app": "web", "tier": "fe"}), ("b", {"app": "db"}),
                         ("c", {"app": "cache", "tier": "be"})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})

    def names(selector: str) -> list[str]:
        return [o.metadata.name for o in core.list_namespaced_config_map(
            ns, label_selector=selector).items]

    assert names("app=web") == ["a"]
    assert names("app!=web") == ["b", "c", "kube-root-ca.crt"]
    assert names("tier") == ["a", "c"]
    assert names("!tier,app") == ["b"]
    assert names("app in (web, db)") == ["a", "b"]
    assert names("app notin (web),tier") == ["c"]
    with pytest.raises(client.ApiException) as error:
        names("app in web")
    assert error.value.status == 400


def test_field_selectors(k8s_api, core, ns):
    core.create_namespaced_pod(ns, pod_body("p1"))
    k8s_api.controller.hold_pods("p2", reason="Unschedulable")
    core.create_namespaced_pod(ns, pod_body("p2"))
    k8s_api.wait_for(lambda: core.read_namespaced_pod("p1", ns).status.phase == "Running")
    running = core.list_namespaced_pod(ns, field_selector="status.phase=Running").items
    assert [p.metadata.name for p in running] == ["p1"]
    assert [p.metadata.name for p in core.list_namespaced_pod(
        ns, field_selector="metadata.name!=p1,spec.nodeName=").items] == ["p2"]
    uid = running[0].metadata.uid
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.uid={uid}").items
    assert {e.reason for e in events} >= {"Scheduled", "Started"}
    by_name = core.list_namespaced_event(ns, field_selector="involvedObject.name=p1").items
    assert {e.metadata.uid for e in by_name} == {e.metadata.uid for e in events}
    with pytest.raises(client.ApiException) as error:
        core.list_namespaced_pod(ns, field_selector="spec.image=x")
    assert status_of(error.value)["message"] == "field label not supported: spec.image"


def test_cluster_wide_lists_span_namespaces(core, batch, ns):
    core.create_namespace({"metadata": {"name": "other"}})
    for namespace in (ns, "other"):
        batch.create_namespaced_job(namespace, job_body("j", completions=1))
    jobs = batch.list_job_for_all_namespaces().items
    assert sorted(j.metadata.namespace for j in jobs) == sorted([ns, "other"])
    listing = core.list_config_map_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert int(listing.metadata.resource_version) > 0


def test_lists_page_consistently_and_expire(k8s_api, core, ns):
    for i in range(5):
        core.create_namespaced_config_map(ns, _cm(f"cm-{i}"))
    first = core.list_namespaced_config_map(ns, limit=2)
    assert [o.metadata.name for o in first.items] == ["cm-0", "cm-1"]
    assert first.metadata.remaining_item_count == 4
    core.delete_namespaced_config_map("cm-3", ns)  # the pages still show the first snapshot
    second = core.list_namespaced_config_map(ns, limit=10, _continue=first.metadata._continue)
    assert [o.metadata.name for o in second.items] == ["cm-2", "cm-3", "cm-4",
                                                       "kube-root-ca.crt"]
    k8s_api.compact()
    with pytest.raises(client.ApiException) as error:
        core.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    assert (error.value.status, status_of(error.value)["reason"]) == (410, "Expired")


def test_exact_list_at_an_old_resource_version(k8s_api, core, ns):
    before = core.create_namespaced_config_map(ns, _cm("cm", v="1")).metadata.resource_version
    core.patch_namespaced_config_map("cm", ns, {"data": {"v": "2"}})
    old = core.list_namespaced_config_map(ns, resource_version=before,
                                          resource_version_match="Exact")
    assert [o.data for o in old.items if o.metadata.name == "cm"] == [{"v": "1"}]
    k8s_api.compact()
    with pytest.raises(client.ApiException) as error:
        core.list_namespaced_config_map(ns, resource_version=before,
                                        resource_version_match="Exact")
    status = status_of(error.value)
    assert (error.value.status, status["reason"]) == (410, "Expired")
    assert status["message"].startswith(f"too old resource version: {before} (")


def test_patch_flavours(core, ns, api_client):
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "busybox:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "busybox:1"}]}})
    # strategic merge (the client's default for dicts): lists merge by their key, "name"
    merged = core.patch_namespaced_pod("p", ns, {"spec": {"containers": [
        {"name": "b", "image": "busybox:2"}]}})
    assert [(c.name, c.image) for c in merged.spec.containers] == [("a", "busybox:1"),
                                                                   ("b", "busybox:2")]
    assert merged.spec.containers[0].env[0].value == "1"
    # JSON patch (a list)
    patched = core.patch_namespaced_pod("p", ns, [
        {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:3"}])
    assert patched.metadata.labels == {"k": "v"}
    assert patched.spec.containers[0].image == "busybox:3"
    # JSON merge patch replaces lists wholesale
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm", "finalizers": ["a/b"]}})
    api_client.set_default_header("Content-Type", "application/merge-patch+json")
    cleared = core.patch_namespaced_config_map("cm", ns, {"metadata": {"finalizers": None}})
    assert cleared.metadata.finalizers is None


def test_status_is_written_only_through_the_subresource(batch, ns):
    batch.create_namespaced_job(ns, job_body("j", suspend=True))
    job = batch.read_namespaced_job("j", ns)
    job.status.active = 5
    job.metadata.resource_version = None  # the controller may have written status meanwhile
    assert batch.replace_namespaced_job("j", ns, job).status.active != 5
    job = batch.read_namespaced_job("j", ns)
    patched = batch.patch_namespaced_job_status("j", ns, {"status": {"failed": 3}})
    assert patched.status.failed == 3
    assert patched.metadata.generation == job.metadata.generation


def test_spec_changes_bump_generation(apps, ns):
    created = apps.create_namespaced_stateful_set(ns, statefulset_body("s", replicas=0))
    scaled = apps.patch_namespaced_stateful_set("s", ns, {"spec": {"replicas": 2}})
    assert (created.metadata.generation, scaled.metadata.generation) == (1, 2)
    relabelled = apps.patch_namespaced_stateful_set("s", ns, {"metadata": {"labels": {"a": "b"}}})
    assert relabelled.metadata.generation == 2


def test_dry_run_does_not_store(core, ns):
    created = core.create_namespaced_config_map(ns, _cm("cm"), dry_run="All")
    assert created.metadata.uid
    with pytest.raises(client.ApiException):
        core.read_namespaced_config_map("cm", ns)


def test_delete_answers_the_pod_but_a_status_for_others(core, ns):
    core.create_namespaced_pod(ns, pod_body("p"))
    assert core.delete_namespaced_pod("p", ns).metadata.name == "p"
    uid = core.create_namespaced_config_map(ns, _cm("cm")).metadata.uid
    status = core.delete_namespaced_config_map("cm", ns)
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                      "details": {"name": "cm", "kind": "configmaps", "uid": uid}}


def test_delete_preconditions(core, ns):
    core.create_namespaced_config_map(ns, _cm("cm"))
    with pytest.raises(client.ApiException) as error:
        core.delete_namespaced_config_map("cm", ns, body={"preconditions": {"uid": "other"}})
    assert error.value.status == 409
    assert "Precondition failed: UID in precondition: other" in status_of(error.value)["message"]


def test_delete_collection_by_label(core, ns):
    for name, labels in (("a", {"job": "x"}), ("b", {"job": "x"}), ("c", {"job": "y"})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    core.delete_collection_namespaced_config_map(ns, label_selector="job=x")
    assert [o.metadata.name for o in core.list_namespaced_config_map(
        ns, label_selector="job").items] == ["c"]


def test_finalizers_keep_an_object_until_removed(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm",
                                                        "finalizers": ["example.com/hold"]}})
    core.delete_namespaced_config_map("cm", ns)
    held = core.read_namespaced_config_map("cm", ns)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("cm", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers":
                                                             ["example.com/hold"]}})
    with pytest.raises(client.ApiException) as error:
        core.read_namespaced_config_map("cm", ns)
    assert error.value.status == 404


def test_discovery_and_version(api_client):
    version = client.VersionApi(api_client).get_code()
    assert (version.major, version.minor) == ("1", "31")
    groups = client.ApisApi(api_client).get_api_versions().groups
    assert {g.name: g.preferred_version.group_version for g in groups} == {
        "apps": "apps/v1", "batch": "batch/v1", "discovery.k8s.io": "discovery.k8s.io/v1",
        "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1",
        "networking.k8s.io": "networking.k8s.io/v1"}
    core_resources = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/log", "pods/status", "namespaces", "events", "resourcequotas",
            "limitranges", "secrets", "configmaps", "services"} <= core_resources
    batch_resources = client.BatchV1Api(api_client).get_api_resources().resources
    assert [r.name for r in batch_resources] == ["jobs", "jobs/status"]


def test_a_wrong_token_is_401(k8s_api, tmp_path):
    from kubernetes import config

    from tests.k8s_api_server.kubeconfig import write_kubeconfig

    path = write_kubeconfig(tmp_path / "wrong", k8s_api.url, "not-the-token")
    with config.new_client_from_config(config_file=str(path)) as api, \
            pytest.raises(client.ApiException) as error:
        client.CoreV1Api(api).list_namespace()
    assert (error.value.status, status_of(error.value)["reason"]) == (401, "Unauthorized")
