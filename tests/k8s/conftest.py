"""Fixtures for the fake API server's own tests: the server, official-client API objects, a
fresh namespace, and ``raw`` for requests the client's own validation would stop."""

from __future__ import annotations

import itertools

import pytest
from kubernetes import client

from tests.k8s_api_server import fixtures

k8s_api = fixtures.k8s_api  # the shared fixture, made available to this directory

_namespaces = itertools.count()


@pytest.fixture
def api_client(k8s_api):
    with k8s_api.api_client() as api:
        yield api


@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client)


@pytest.fixture
def batch(api_client):
    return client.BatchV1Api(api_client)


@pytest.fixture
def apps(api_client):
    return client.AppsV1Api(api_client)


@pytest.fixture
def ns(k8s_api, core):
    """A new namespace, once the controllers have published its kube-root-ca.crt and made
    its default ServiceAccount (pods cannot be created before)."""
    name = f"test-{next(_namespaces)}"
    core.create_namespace({"metadata": {"name": name}})
    k8s_api.wait_for(lambda: k8s_api.store.get("configmaps", name, "kube-root-ca.crt") and
                     k8s_api.store.get("serviceaccounts", name, "default"),
                     message="the namespace's root CA ConfigMap and default ServiceAccount")
    return name


@pytest.fixture
def raw(api_client):
    """``raw(method, path, body)``: a request through the official client's transport and
    error handling (ApiException on non-2xx) but without its request-side model checks;
    ``raw.headers`` holds the last response's headers."""
    def request(method: str, path: str, body=None, *, content_type: str = "application/json",
                query: list | None = None):
        params = api_client.param_serialize(
            method, path, body=body, query_params=query or [], auth_settings=["BearerToken"],
            header_params={"Content-Type": content_type, "Accept": "application/json"})
        response = api_client.call_api(*params)
        response.read()
        request.headers = response.getheaders()
        return api_client.response_deserialize(response, {"2XX": "object"}).data
    return request

