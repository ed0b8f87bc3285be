"""kubectl against the fake server: discovery, Table responses, the objects' names."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .helpers import job_body, statefulset_body

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this "
                                                        "machine (it is at /usr/bin/kubectl in CI)")


def _kubectl(k8s_api, *args: str) -> str:
    result = subprocess.run([KUBECTL, "--kubeconfig", str(k8s_api.kubeconfig_path), *args],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kubectl_lists_statefulsets_jobs_and_pods(k8s_api, core, apps, batch, ns):
    apps.create_namespaced_stateful_set(ns, statefulset_body("ps", replicas=2))
    batch.create_namespaced_job(ns, job_body("train", completions=2))
    k8s_api.wait_for(lambda: len([p for p in core.list_namespaced_pod(ns).items
                                  if p.status.phase == "Running"]) == 4, message="4 pods")
    output = _kubectl(k8s_api, "get", "statefulsets,jobs,pods", "-n", ns)
    assert "statefulset.apps/ps" in output and "job.batch/train" in output
    for pod in core.list_namespaced_pod(ns).items:
        assert f"pod/{pod.metadata.name}" in output
    lines = {line.split()[0]: line.split() for line in output.splitlines() if line.strip()}
    assert lines["statefulset.apps/ps"][1] == "2/2"
    assert lines["pod/ps-0"][1:3] == ["1/1", "Running"]


def test_kubectl_lists_namespaces_and_reads_one_object(k8s_api, core, ns):
    assert ns in _kubectl(k8s_api, "get", "ns").split()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "settings"},
                                           "data": {"k": "v"}})
    assert "settings" in _kubectl(k8s_api, "get", "configmap", "settings", "-n", ns)
    assert '"k": "v"' in _kubectl(k8s_api, "get", "configmap", "settings", "-n", ns, "-o",
                                  "json")


def test_kubectl_apply_is_validated_by_the_server(k8s_api, core, ns, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n"
                        "datta:\n  a: '1'\n")
    result = subprocess.run([KUBECTL, "--kubeconfig", str(k8s_api.kubeconfig_path), "apply",
                             "-n", ns, "-f", str(manifest)], capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 1
    assert 'strict decoding error: unknown field "datta"' in result.stderr
    manifest.write_text(manifest.read_text().replace("datta", "data"))
    assert "configmap/cfg created" in _kubectl(k8s_api, "apply", "-n", ns, "-f", str(manifest))
    manifest.write_text(manifest.read_text().replace("'1'", "'2'"))
    assert "configmap/cfg configured" in _kubectl(k8s_api, "apply", "-n", ns, "-f",
                                                  str(manifest))
    assert core.read_namespaced_config_map("cfg", ns).data == {"a": "2"}
