"""Watches through the official client's ``Watch().stream``: replay from a resourceVersion,
the in-stream 410 for compacted history, dropped streams, selectors and bookmarks."""

from __future__ import annotations

import json
import threading

import pytest
import urllib3
from kubernetes import client, watch

from .helpers import pod_body


def _cm(name: str, **labels) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def _collect(stream, count: int) -> list[tuple[str, str]]:
    """The first ``count`` events as (type, name); stops the watch once it has them."""
    seen = []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == count:
            break
    return seen


def test_watch_replays_changes_after_a_resource_version(core, ns):
    rv = core.create_namespaced_config_map(ns, _cm("a")).metadata.resource_version
    core.patch_namespaced_config_map("a", ns, {"data": {"k": "v"}})
    core.create_namespaced_config_map(ns, _cm("b"))
    core.delete_namespaced_config_map("a", ns)
    stream = watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=rv,
                                  timeout_seconds=5)
    assert _collect(stream, 3) == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]


def test_watch_without_a_version_starts_with_the_current_objects(core, ns):
    core.create_namespaced_config_map(ns, _cm("a"))
    stream = watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=5)
    first = _collect(stream, 2)
    assert sorted(first) == [("ADDED", "a"), ("ADDED", "kube-root-ca.crt")]


def test_watch_sees_live_changes_of_pods(k8s_api, core, ns):
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod_body("p"))
    phases = []
    for event in watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=rv,
                                      timeout_seconds=5):
        phases.append((event["type"], event["object"].status.phase))
        if event["object"].status.phase == "Running":
            break
    assert phases[0] == ("ADDED", "Pending")
    assert phases[-1] == ("MODIFIED", "Running")


def test_a_compacted_version_gets_an_in_stream_410_error(k8s_api, core, ns):
    old = core.create_namespaced_config_map(ns, _cm("a")).metadata.resource_version
    core.patch_namespaced_config_map("a", ns, {"data": {"k": "v"}})
    k8s_api.compact()
    response = core.list_namespaced_config_map(ns, watch=True, resource_version=old,
                                               timeout_seconds=5, _preload_content=False)
    assert response.status == 200  # the error comes inside the stream, then it ends
    lines = response.data.decode().splitlines()
    event = json.loads(lines[0])
    assert len(lines) == 1 and event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert event["object"]["message"].startswith(f"too old resource version: {old} (")
    with pytest.raises(client.ApiException) as error:
        list(watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=old,
                                  timeout_seconds=5))
    assert error.value.status == 410


def test_bounded_history_expires_old_versions(k8s_api, core, ns):
    k8s_api.store.history_size = 5
    old = core.create_namespaced_config_map(ns, _cm("a")).metadata.resource_version
    for i in range(6):
        core.patch_namespaced_config_map("a", ns, {"data": {"i": str(i)}})
    with pytest.raises(client.ApiException) as error:
        list(watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=old,
                                  timeout_seconds=5))
    assert error.value.status == 410


def test_dropped_watches_end_abruptly(k8s_api, core, ns):
    outcome = {}

    def consume():
        try:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, ns):
                pass
            outcome["ended"] = "cleanly"
        except urllib3.exceptions.ProtocolError as exc:
            outcome["ended"] = exc

    def dropped() -> bool:
        k8s_api.drop_watches()  # again until the watch had started before one of the drops
        return "ended" in outcome

    consumer = threading.Thread(target=consume)
    consumer.start()
    k8s_api.wait_for(dropped, interval=0.05, message="the watch dropped")
    consumer.join(timeout=5)
    assert isinstance(outcome["ended"], urllib3.exceptions.ProtocolError)


def test_objects_leaving_a_label_selection_are_deleted_events(core, ns):
    rv = core.create_namespaced_config_map(ns, _cm("a", team="x")).metadata.resource_version
    core.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"team": "y"}}})
    core.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"team": "x"}}})
    stream = watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=rv,
                                  label_selector="team=x", timeout_seconds=5)
    assert _collect(stream, 2) == [("DELETED", "a"), ("ADDED", "a")]


def test_bookmarks_carry_the_current_version(k8s_api, core, ns):
    k8s_api.settings.bookmark_seconds = 0.05
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_config_map, ns, resource_version=rv,
                          allow_watch_bookmarks=True, timeout_seconds=5):
        assert event["type"] == "BOOKMARK"
        assert int(event["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)
        w.stop()
    assert w.resource_version is not None


def test_watch_times_out_cleanly(core, ns):
    assert list(watch.Watch().stream(core.list_namespaced_config_map, ns,
                                     resource_version=core.list_namespaced_config_map(
                                         ns).metadata.resource_version,
                                     timeout_seconds=1)) == []
