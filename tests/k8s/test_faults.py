"""Injected faults as the official client sees them: error statuses and hung requests."""

from __future__ import annotations

import time

import pytest
import urllib3
from kubernetes import client

from .helpers import status_of


@pytest.mark.parametrize(("code", "reason"), [(500, "InternalError"),
                                              (503, "ServiceUnavailable"), (504, "Timeout")])
def test_the_next_matching_requests_fail(k8s_api, core, ns, code, reason):
    k8s_api.fail_next(code, count=2, method="GET", path=r"/namespaces/[^/]+/pods$")
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "main", "image": "busybox"}]}})  # a POST: not matched
    for _ in range(2):
        with pytest.raises(client.ApiException) as error:
            core.list_namespaced_pod(ns)
        assert (error.value.status, status_of(error.value)["reason"]) == (code, reason)
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["p"]


def test_429_with_retry_after_is_retried_by_the_client(k8s_api, core):
    k8s_api.fail_next(429, path="/api/v1/namespaces$", retry_after=0)
    assert core.list_namespace().items
    assert [p for m, p in k8s_api.request_log if p.startswith("/api/v1/namespaces")] == [
        "/api/v1/namespaces", "/api/v1/namespaces"]


def test_a_hung_request_times_out_in_the_client(k8s_api, core, ns):
    k8s_api.hang_next(2.0, count=10, method="GET", path="/configmaps")
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.MaxRetryError) as error:
        core.list_namespaced_config_map(ns, _request_timeout=0.2)
    assert isinstance(error.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert time.monotonic() - started < 1.9
    k8s_api.faults.clear()
    assert core.list_namespaced_config_map(ns).items is not None


def test_a_write_that_hung_past_the_client_timeout_still_happens(k8s_api, core, ns):
    k8s_api.hang_next(0.3, method="POST", path="/configmaps")
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}},
                                          _request_timeout=0.1)
    k8s_api.wait_for(lambda: "late" in [c.metadata.name for c in
                                        core.list_namespaced_config_map(ns).items])
