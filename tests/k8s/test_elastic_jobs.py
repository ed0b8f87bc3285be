"""Elastic Indexed Jobs (GA in Kubernetes 1.31): completions may change, in tandem with
parallelism, on an Indexed Job only. Growing one starts pods for its new indexes; shrinking
one deletes the pods past it and forgets their indexes, as the real controller does."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiException

from .helpers import job_body, status_of
from .test_jobs import INDEX, _pods


def _live(core, ns: str, name: str) -> list[int]:
    return sorted(int(p.metadata.annotations[INDEX]) for p in _pods(core, ns, name)
                  if not p.metadata.deletion_timestamp)


def test_completions_change_only_with_parallelism_and_only_when_indexed(batch, ns):
    batch.create_namespaced_job(ns, job_body("j", completions=2))
    with pytest.raises(ApiException) as alone:
        batch.patch_namespaced_job("j", ns, {"spec": {"completions": 3}})
    assert alone.value.status == 422
    assert status_of(alone.value)["message"].endswith(
        '"j" is invalid: spec.completions: Invalid value: 3: can only be modified in tandem '
        "with spec.parallelism")
    batch.create_namespaced_job(ns, job_body("n", completions=2, indexed=False))
    with pytest.raises(ApiException) as not_indexed:
        batch.patch_namespaced_job("n", ns, {"spec": {"completions": 3, "parallelism": 3}})
    assert status_of(not_indexed.value)["message"].endswith(
        '"n" is invalid: spec.completions: Invalid value: 3: field is immutable')
    grown = batch.patch_namespaced_job("j", ns, {"spec": {"completions": 3, "parallelism": 3}})
    assert (grown.spec.completions, grown.spec.parallelism) == (3, 3)


def test_an_indexed_job_grows_and_shrinks(k8s_api, core, batch, ns):
    batch.create_namespaced_job(ns, job_body("j", completions=2))
    k8s_api.wait_for(lambda: _live(core, ns, "j") == [0, 1], message="two pods")
    batch.patch_namespaced_job("j", ns, {"spec": {"completions": 4, "parallelism": 4}})
    k8s_api.wait_for(lambda: _live(core, ns, "j") == [0, 1, 2, 3], message="four pods")
    batch.patch_namespaced_job("j", ns, {"spec": {"completions": 1, "parallelism": 1}})
    k8s_api.wait_for(lambda: _live(core, ns, "j") == [0], message="the pods past 1 deleted")
    job = k8s_api.wait_for(lambda: (j := batch.read_namespaced_job("j", ns)).status.active == 1
                           and j, message="one active pod")
    assert not job.status.failed  # pods deleted by a shrink are not failures
    running = k8s_api.wait_for(lambda: [p for p in _pods(core, ns, "j")
                                        if not p.metadata.deletion_timestamp
                                        and p.status.phase == "Running"], message="running")
    k8s_api.controller.terminate_container(ns, running[0].metadata.name, exit_code=0)
    done = k8s_api.wait_for(lambda: (j := batch.read_namespaced_job("j", ns)).status.conditions
                            and j, message="the Job to finish")
    assert [c.type for c in done.status.conditions if c.status == "True"] == [
        "SuccessCriteriaMet", "Complete"]
    assert done.status.completed_indexes == "0"
