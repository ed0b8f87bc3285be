"""The node agent's mirror of the API server's objects (tests/real_kube/node_api.py) where a real
server cannot be made to misbehave on demand: a watch cut mid-stream resumes, a watch from a
compacted version (410 Gone) lists again and forgets what went meanwhile, and an event older
than what the mirror holds is ignored. Against the fake API server, which speaks the real
API."""

from __future__ import annotations

import threading

import pytest

from tests.k8s_api_server import fixtures, resources
from tests.real_kube.node_api import Mirror, Rest, collection_path

k8s_api = fixtures.k8s_api
CM = resources.CONFIGMAPS


@pytest.fixture
def mirror(k8s_api):
    found = Mirror(Rest(str(k8s_api.kubeconfig_path)), "no-node").start()
    try:
        assert found.synced.wait(10)
        yield found
    finally:
        found.stop()
        assert not [t for t in threading.enumerate() if t.name.startswith("node-watch-")]


def config_map(rest: Rest, name: str) -> dict:
    return rest.call("POST", collection_path(CM, "default"),
                     body={"metadata": {"name": name}, "data": {"k": name}})


def names(mirror: Mirror) -> set[str]:
    """The test's ConfigMaps in the mirror (not the namespace's CA bundle)."""
    return {o["metadata"]["name"] for o in mirror.store.list(CM.key, "default")} - \
        {"kube-root-ca.crt"}


def test_the_mirror_follows_a_cut_watch_and_lists_again_after_410(k8s_api, mirror):
    rest = mirror.rest
    config_map(rest, "first")
    k8s_api.wait_for(lambda: names(mirror) == {"first"}, message="the watch's ADDED")
    k8s_api.drop_watches()  # resumed from the last version seen
    config_map(rest, "second")
    k8s_api.wait_for(lambda: names(mirror) == {"first", "second"}, message="a resumed watch")
    # The history the watches would resume from is gone: they get 410 and list again, which
    # shows "first" was deleted meanwhile (its DELETED event is among the forgotten).
    with k8s_api.store.lock:
        k8s_api.store.remove(CM.key, "default", "first")
        k8s_api.compact()
        k8s_api.drop_watches()
    config_map(rest, "third")
    k8s_api.wait_for(lambda: names(mirror) == {"second", "third"}, message="a relist")
    # An event older than what the mirror holds (the answer to a write of the agent's own may
    # come before the watch's event) changes nothing.
    newer = mirror.store.get(CM.key, "default", "second")
    stale = {**newer, "data": {"k": "stale"},
             "metadata": {**newer["metadata"], "resourceVersion": "1"}}
    mirror.put(CM, stale)
    assert mirror.store.get(CM.key, "default", "second")["data"] == {"k": "second"}
