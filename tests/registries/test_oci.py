"""registries.oci against a real registry (Distribution 2.8, ``tests/registry_server.py``):
open, with htpasswd users (Basic), and with a token service (Bearer, as Docker Hub does).
Images are pushed with the registry's own upload API, then read back with the client."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time

import pytest
import requests

from registries.oci import (
    ImageRef,
    RegistryError,
    blob_get,
    docker_config_json,
    image_ref_parse,
    manifest_digest,
    manifest_get,
)
from tests.registry_server import free_port, registry_server

USERS = {"alice": "s3cret-Pa55"}
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class Pusher:
    """Pushing with the registry's upload API (``POST``/``PUT`` blobs, ``PUT`` manifests)."""

    def __init__(self, server, repository: str, user: str | None = None):
        self.server = server
        self.base = f"{server.url}/v2/{repository}"
        self.session = requests.Session()
        if user and server.realm:
            token = requests.get(server.realm, auth=(user, server.users[user]), timeout=10,
                                 params={"service": "paddlecloud-test-registry",
                                         "scope": f"repository:{repository}:pull,push"})
            self.session.headers["Authorization"] = f"Bearer {token.json()['token']}"
        elif user:
            self.session.auth = (user, server.users[user])

    def blob(self, data: bytes) -> dict:
        started = self.session.post(f"{self.base}/blobs/uploads/", timeout=10)
        assert started.status_code == 202, started.text
        location = requests.compat.urljoin(self.base, started.headers["Location"])
        done = self.session.put(location, params={"digest": sha256(data)}, data=data,
                                headers={"Content-Type": "application/octet-stream"},
                                timeout=10)
        assert done.status_code == 201, done.text
        return {"digest": sha256(data), "size": len(data)}

    def manifest(self, reference: str, manifest: dict, media_type: str) -> tuple[str, bytes]:
        body = json.dumps(manifest, indent=3).encode()  # not the canonical form: bytes count
        put = self.session.put(f"{self.base}/manifests/{reference}", data=body,
                               headers={"Content-Type": media_type}, timeout=10)
        assert put.status_code == 201, put.text
        return put.headers["Docker-Content-Digest"], body

    def image(self, tag: str, media_type: str = OCI_MANIFEST, layer: bytes = b"layer") -> dict:
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"WorkingDir": "/train"},
                             "rootfs": {"type": "layers", "diff_ids": [sha256(layer)]}}).encode()
        docker = media_type == DOCKER_MANIFEST
        manifest = {
            "schemaVersion": 2, "mediaType": media_type,
            "config": {"mediaType": ("application/vnd.docker.container.image.v1+json" if docker
                                     else "application/vnd.oci.image.config.v1+json"),
                       **self.blob(config)},
            "layers": [{"mediaType": ("application/vnd.docker.image.rootfs.diff.tar" if docker
                                      else "application/vnd.oci.image.layer.v1.tar"),
                        **self.blob(layer)}],
        }
        digest, body = self.manifest(tag, manifest, media_type)
        return {"digest": digest, "body": body, "config": config, "layer": layer,
                "manifest": manifest}


# --- references ----------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "canonical", "fields"), [
    ("ubuntu", "docker.io/library/ubuntu:latest",
     ("docker.io", "library/ubuntu", "latest", None)),
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04",
     ("docker.io", "library/ubuntu", "22.04", None)),
    ("paddlepaddle/paddle:2.6.1", "docker.io/paddlepaddle/paddle:2.6.1",
     ("docker.io", "paddlepaddle/paddle", "2.6.1", None)),
    ("docker.io/ubuntu", "docker.io/library/ubuntu:latest",
     ("docker.io", "library/ubuntu", "latest", None)),
    ("index.docker.io/library/ubuntu", "docker.io/library/ubuntu:latest",
     ("docker.io", "library/ubuntu", "latest", None)),
    ("registry.example.com:5000/team/trainer:v1.2_rc-3",
     "registry.example.com:5000/team/trainer:v1.2_rc-3",
     ("registry.example.com:5000", "team/trainer", "v1.2_rc-3", None)),
    ("localhost/trainer", "localhost/trainer:latest", ("localhost", "trainer", "latest", None)),
    ("127.0.0.1:5000/base/bookworm-python:1", "127.0.0.1:5000/base/bookworm-python:1",
     ("127.0.0.1:5000", "base/bookworm-python", "1", None)),
    ("[::1]:5000/a/b__c.d-e:1", "[::1]:5000/a/b__c.d-e:1", ("[::1]:5000", "a/b__c.d-e", "1", None)),
    ("ubuntu@sha256:" + "a" * 64, "docker.io/library/ubuntu@sha256:" + "a" * 64,
     ("docker.io", "library/ubuntu", None, "sha256:" + "a" * 64)),
    ("quay.io/x/y:1@sha256:" + "b" * 64, "quay.io/x/y:1@sha256:" + "b" * 64,
     ("quay.io", "x/y", "1", "sha256:" + "b" * 64)),
])
def test_references_read_as_docker_reads_them(given, canonical, fields):
    ref = image_ref_parse(given)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == fields
    assert str(ref) == canonical
    assert image_ref_parse(str(ref)) == ref  # the canonical form reads back the same


def test_docker_hub_is_asked_at_its_api_host():
    assert image_ref_parse("ubuntu").api_host == "registry-1.docker.io"
    assert image_ref_parse("quay.io/x/y").api_host == "quay.io"
    assert image_ref_parse("ubuntu@sha256:" + "c" * 64).reference == "sha256:" + "c" * 64


@pytest.mark.parametrize(("given", "rule"), [
    ("", "empty"),
    ("Ubuntu", "must be lower-case"),
    ("registry.example.com/Team/trainer", "must be lower-case"),
    ("https://registry.example.com/trainer", "without https://"),
    ("trainer:1 ", "spaces"),
    ("trainer:-1", "a tag is at most 128"),
    ("trainer:" + "1" * 129, "a tag is at most 128"),
    ("trainer@sha256:abc", "64 lower-case hexadecimal"),
    ("trainer@md5:" + "a" * 32, "64 lower-case hexadecimal"),
    ("registry.example.com/", "names no repository"),
    ("a//b", "path components"),
    ("team/-trainer", "path components"),
    ("bad_host.example.com:5000/x", "registry host"),
    ("registry.example.com:70000/x", "between 1 and 65535"),
    ("example.com/" + "a" * 250, "longer than 255"),
])
def test_a_bad_reference_names_the_rule_it_breaks(given, rule):
    with pytest.raises(ValueError, match="is not an image reference") as raised:
        image_ref_parse(given)
    assert rule in str(raised.value)


def test_an_image_ref_is_a_value():
    ref = image_ref_parse("registry.example.com/a:1")
    assert ref == ImageRef("registry.example.com", "a", "1")
    assert {ref: 1}[image_ref_parse("registry.example.com/a:1")] == 1
    with pytest.raises(AttributeError):
        ref.tag = "2"


# --- credentials as config.json ------------------------------------------------------------

def test_docker_config_json_is_what_docker_login_writes():
    config = json.loads(docker_config_json("registry.example.com:5000", "bob", "pa:ss"))
    entry = config["auths"]["registry.example.com:5000"]
    assert base64.b64decode(entry["auth"]) == b"bob:pa:ss"
    assert list(config) == ["auths"]


# --- an open registry ----------------------------------------------------------------------

@pytest.fixture
def registry(tmp_path):
    with registry_server(tmp_path) as server:
        yield server


def test_an_image_that_is_not_there_has_no_digest(registry):
    assert manifest_digest(f"{registry.host}/team/trainer:1", insecure=True) is None
    Pusher(registry, "team/trainer").image("1")
    assert manifest_digest(f"{registry.host}/team/trainer:2", insecure=True) is None
    assert manifest_digest(f"{registry.host}/team/trainer@{sha256(b'x')}", insecure=True) is None


@pytest.mark.parametrize("media_type", [OCI_MANIFEST, DOCKER_MANIFEST])
def test_the_digest_is_the_registrys_and_names_the_bytes_pushed(registry, media_type):
    pushed = Pusher(registry, "team/trainer").image("1", media_type)
    assert pushed["digest"] == sha256(pushed["body"])
    ref = f"{registry.host}/team/trainer:1"
    assert manifest_digest(ref, insecure=True) == pushed["digest"]
    by_digest = f"{registry.host}/team/trainer@{pushed['digest']}"
    assert manifest_digest(by_digest, insecure=True) == pushed["digest"]

    digest, got_type, manifest = manifest_get(ref, insecure=True)
    assert (digest, got_type, manifest) == (pushed["digest"], media_type, pushed["manifest"])
    assert manifest_get(by_digest, insecure=True)[0] == pushed["digest"]
    config = blob_get(ref, manifest["config"]["digest"], insecure=True)
    assert config == pushed["config"]
    assert json.loads(config)["config"]["WorkingDir"] == "/train"
    assert blob_get(ref, manifest["layers"][0]["digest"], insecure=True) == pushed["layer"]


def test_a_multi_platform_index_is_asked_for_and_named_by_its_own_digest(registry):
    pusher = Pusher(registry, "team/trainer")
    amd64 = pusher.image("amd64")
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": amd64["digest"], "size": len(amd64["body"]),
         "platform": {"architecture": "amd64", "os": "linux"}}]}
    digest, _ = pusher.manifest("1", index, OCI_INDEX)
    ref = f"{registry.host}/team/trainer:1"
    assert manifest_digest(ref, insecure=True) == digest != amd64["digest"]
    assert manifest_get(ref, insecure=True) == (digest, OCI_INDEX, index)


def test_what_is_not_there_is_an_error_naming_the_registry(registry):
    ref = f"{registry.host}/team/trainer:1"
    with pytest.raises(RegistryError, match=f"the registry {registry.host} answered "
                                            "MANIFEST_UNKNOWN|NAME_UNKNOWN") as raised:
        manifest_get(ref, insecure=True)
    assert (raised.value.status, raised.value.refused) == (404, False)
    Pusher(registry, "team/trainer").image("1")
    with pytest.raises(RegistryError, match="BLOB_UNKNOWN") as raised:
        blob_get(ref, sha256(b"never pushed"), insecure=True)
    assert (raised.value.status, raised.value.refused) == (404, False)
    with pytest.raises(ValueError, match="not a sha256 digest"):
        blob_get(ref, "sha256:abc", insecure=True)


def test_a_registry_without_tls_is_not_asked_over_https_unless_insecure(registry):
    with pytest.raises(RegistryError, match=f"the registry {registry.host} cannot be reached "
                                            "over HTTPS") as raised:
        manifest_digest(f"{registry.host}/team/trainer:1")
    assert not raised.value.refused


def test_a_registry_that_is_not_there_fails_within_the_timeout():
    host = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RegistryError, match=f"the registry {host} cannot be reached") as raised:
        manifest_digest(f"{host}/team/trainer:1", insecure=True, timeout=3)
    assert not raised.value.refused
    assert time.monotonic() - started < 5


def test_the_registry_server_stops_whatever_happens(tmp_path):
    with pytest.raises(RuntimeError, match="a test fails"), \
            registry_server(tmp_path, users=USERS) as server:
        assert requests.get(f"{server.url}/v2/", timeout=5).status_code == 401
        pid = server.pid
        raise RuntimeError("a test fails")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- registries that ask for credentials ---------------------------------------------------

@pytest.fixture(params=["basic", "bearer"])
def private(request, tmp_path):
    """A registry with a user: htpasswd (Basic), or a token service (Bearer)."""
    with registry_server(tmp_path, users=USERS, token=request.param == "bearer") as server:
        yield server


def test_credentials_are_asked_for_and_given(private):
    pushed = Pusher(private, "team/trainer", "alice").image("1")
    ref = f"{private.host}/team/trainer:1"
    assert manifest_digest(ref, auth=("alice", USERS["alice"]), insecure=True) == (
        pushed["digest"])
    with requests.Session() as session:  # one sequence: the challenge is answered once
        asked = len(private.token_requests)
        digest, _, manifest = manifest_get(ref, auth=("alice", USERS["alice"]), insecure=True,
                                           session=session)
        for blob in (manifest["config"], *manifest["layers"]):
            blob_get(ref, blob["digest"], auth=("alice", USERS["alice"]), insecure=True,
                     session=session)
    assert digest == pushed["digest"]
    if private.realm:
        assert len(private.token_requests) == asked + 1
        assert private.token_requests[-1] == {
            "user": "alice", "query": {"service": ["paddlecloud-test-registry"],
                                       "scope": ["repository:team/trainer:pull"]}}


def test_refused_credentials_are_told_without_the_password(private):
    ref = f"{private.host}/team/trainer:1"
    with pytest.raises(RegistryError) as raised:
        manifest_digest(ref, auth=("alice", "not-the-Pa55word"), insecure=True)
    assert raised.value.refused
    message = str(raised.value)
    assert f"the registry {private.host} refused the credentials of 'alice'" in message
    assert "not-the-Pa55word" not in message and USERS["alice"] not in message
    with pytest.raises(RegistryError, match="refused the credentials") as raised:
        manifest_get(ref, auth=("mallory", USERS["alice"]), insecure=True)
    assert raised.value.refused and USERS["alice"] not in str(raised.value)


def test_no_credentials_for_a_private_registry_says_it_needs_some(private):
    with pytest.raises(RegistryError, match=f"the registry {private.host} refused anonymous "
                                            "access.*needs credentials") as raised:
        manifest_digest(f"{private.host}/team/trainer:1", insecure=True)
    assert raised.value.refused
