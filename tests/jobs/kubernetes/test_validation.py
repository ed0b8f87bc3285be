"""Every object the builders make is valid for every supported Kubernetes version, by the
schemas of kubernetes-validate; an invalid one is reported with its kind, name and field."""

from __future__ import annotations

import kubernetes_validate
import pytest

from jobs.backends.kubernetes.manifests import job_objects, namespace_objects, pull_secret
from jobs.backends.kubernetes.validation import (
    SUPPORTED_VERSIONS,
    object_problems,
    validate_objects,
)

from .factories import (
    NAMESPACE,
    ROOT_UID,
    alice,
    collective_job,
    datacenter,
    private_registry,
    pserver_job,
    quota,
)

VOLUMES = [
    {"cephfs": {"monitors": ["10.0.0.1:6789"], "user": "admin",
                "secretRef": {"name": "ceph-secret"}, "path": "/"}},
    {"nfs": {"server": "nfs.example.com", "path": "/pfs"}},
    {"hostPath": {"path": "/mnt/pfs", "type": "Directory"}},
    {"csi": {"driver": "nfs.csi.k8s.io", "volumeAttributes": {"server": "nfs", "share": "/"}}},
    {"persistentVolume": {"csi": {"driver": "cephfs.csi.ceph.com", "volumeHandle": "pfs",
                                  "volumeAttributes": {"clusterID": "c", "fsName": "cephfs",
                                                       "staticVolume": "true", "rootPath": "/"},
                                  "nodeStageSecretRef": {"name": "ceph", "namespace": "ceph"}}}},
]


def every_object() -> list[dict]:
    objects = [
        *job_objects(collective_job(), namespace=NAMESPACE, root_uid=ROOT_UID),
        *job_objects(collective_job(trainers=1, restart_limit=3), namespace=NAMESPACE),
        *job_objects(pserver_job(), namespace=NAMESPACE, root_uid=ROOT_UID),
        *namespace_objects(datacenter(), alice("alice@example.com"), quota()),
        pull_secret(NAMESPACE, private_registry(), "pw"),
    ]
    for source in VOLUMES:
        objects += job_objects(pserver_job(datacenter=datacenter(kube_volume=source)),
                               namespace=NAMESPACE)[1:]
        objects += namespace_objects(datacenter(kube_volume=source), alice(), quota())[3:]
    return objects


OBJECTS = every_object()


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("obj", OBJECTS,
                         ids=[f"{o['kind']}-{o['metadata']['name']}" for o in OBJECTS])
def test_every_object_is_valid(obj, version):
    assert object_problems(obj, version) == []
    # The same verdict as kubernetes-validate's own entry point (which raises when invalid).
    kubernetes_validate.validate(obj, version, strict=True)


def test_supported_versions_are_shipped_and_know_our_fields():
    """backoffLimitPerIndex and podReplacementPolicy are in the schemas: an unknown field is
    an error there (strict), so the Indexed Job above would fail without them."""
    assert len(SUPPORTED_VERSIONS) >= 2
    trainers = job_objects(collective_job(), namespace=NAMESPACE)[2]
    for version in SUPPORTED_VERSIONS:
        broken = {**trainers, "spec": {**trainers["spec"], "backoffLimitPerIndexx": 1}}
        assert object_problems(broken, version) == [
            "spec: Additional properties are not allowed ('backoffLimitPerIndexx' was "
            "unexpected)"]


def test_problems_name_the_object_the_field_and_the_versions():
    root, service, trainers = job_objects(collective_job(), namespace=NAMESPACE)
    spec = trainers["spec"]
    pod = spec["template"]["spec"]
    container = {**pod["containers"][0], "env": [{"name": "X", "valu": "1"}]}
    broken = {**trainers, "spec": {**spec, "parallelism": "two",
                                   "template": {**spec["template"],
                                                "spec": {**pod, "containers": [container]}}}}
    assert validate_objects([root, service, broken]) == [
        "Job fit-a-line-0a1b2-tr: spec.parallelism: 'two' is not of type 'integer', 'null' "
        "(Kubernetes 1.30, 1.33)",
        "Job fit-a-line-0a1b2-tr: spec.template.spec.containers[0].env[0]: Additional "
        "properties are not allowed ('valu' was unexpected) (Kubernetes 1.30, 1.33)",
    ]
    # kubernetes-validate agrees.
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33", strict=True)


def test_a_kind_without_a_schema_is_a_problem():
    thing = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    assert validate_objects([thing], ("1.33",)) == [
        "Gadget g: (the object): no example.com/v1 Gadget in Kubernetes 1.33 (Kubernetes 1.33)"]


def test_an_unshipped_version_is_a_programming_error():
    with pytest.raises(ValueError, match=r"has no schemas for Kubernetes 1\.99"):
        validate_objects(OBJECTS[:1], ("1.99",))


def test_a_job_is_validated_without_reading_a_schema_again():
    """Run on every submission: the schemas are read and parsed once a process, not per job
    (what it costs is bench's to measure, not a timed test's)."""
    from jobs.backends.kubernetes import validation

    objects = job_objects(pserver_job(), namespace=NAMESPACE)
    validate_objects(objects)  # the schemas are loaded by now
    loaded = (validation._validator.cache_info().misses,
              validation._definitions.cache_info().misses)
    for _ in range(5):
        assert validate_objects(objects) == []
    assert (validation._validator.cache_info().misses,
            validation._definitions.cache_info().misses) == loaded


@pytest.mark.parametrize("scheduler", ["kueue", "volcano"])
def test_the_gang_schedulers_objects_pass_their_projects_crd_schemas(scheduler):
    """Kueue's LocalQueue and Volcano's PodGroup, held to the CRDs those projects install
    (vendored in tests/k8s_api_server/crds/), as the cluster would hold them."""
    from tests.k8s_api_server import crds

    dc = datacenter(kube_scheduler=scheduler, kube_queue="team")
    objects = [*namespace_objects(dc, alice(), quota()),
               *job_objects(pserver_job(datacenter=dc), namespace=NAMESPACE,
                            root_uid=ROOT_UID)]
    custom = [o for o in objects if "/" in o["apiVersion"]
              and o["apiVersion"].split("/")[0] in ("kueue.x-k8s.io", "scheduling.volcano.sh")]
    assert [o["kind"] for o in custom] == ["LocalQueue" if scheduler == "kueue" else "PodGroup"]
    for obj in custom:
        assert crds.problems(obj) == []
    broken = {**custom[0], "spec": {**custom[0]["spec"], "surprise": 1}}
    assert crds.problems(broken)
