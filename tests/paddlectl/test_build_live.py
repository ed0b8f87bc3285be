"""Runtime images from paddlectl (issue 19), against the live portal.

``paddlectl build`` end to end with real parts: the portal's Celery worker builds with buildah on
this machine (the local backend's builder) FROM a base image in a real registry (Distribution,
with a user), pip installing from PyPI, and pushes to that registry with alice's credentials;
the test reads the pushed manifest and layers back through the registry's HTTP API.

``paddlectl logs`` of a job being built on Kubernetes (the fake API server, its builder pod
scripted) follows the build's log."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pytest

from accounts.models import Datacenter
from registries.oci import manifest_digest, manifest_get
from tests.factories import PACKAGE, package_write
from tests.images import base_image_push, mounts_under
from tests.k8s_api_server import fixtures
from tests.kube import on_kubernetes, portal_kubeconfig
from tests.package_index import make_wheel, package_index
from tests.registry_server import layer_files, registry_server

k8s_api = fixtures.k8s_api
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

USER, PASSWORD = "alice-at-registry", "registry-Pa55"
TRAIN_PY = 'import six\nprint("training with six", six.__version__)\n'


def ok(result):
    assert result.returncode == 0, (result.stdout + "\n" + result.stderr)
    return result


def test_build_pushes_a_runtime_image_prints_it_and_builds_it_once(
        live_cli, celery_worker, tmp_path, settings):
    settings.PADDLECLOUD_BUILDAH_DIR = tmp_path / "buildah"
    settings.PADDLECLOUD_LOCAL_BUILDS = True
    with registry_server(tmp_path, users={USER: PASSWORD}) as registry:
        base = base_image_push(registry.host, (USER, PASSWORD), tmp_path / "base")
        Datacenter.objects.filter(name="datacenter1").update(
            build_registry=f"{registry.host}/paddlecloud", build_registry_insecure=True)
        ok(live_cli("registry", "-name", "mine", "-server", registry.host, "-username", USER,
                    "-password", PASSWORD))
        pkg = live_cli.cwd / "trainer"
        pkg.mkdir()
        (pkg / "train.py").write_text(TRAIN_PY)
        (pkg / "requirements.txt").write_text("six==1.16.0\n")

        built = ok(live_cli("build", "trainer", "-base", base, timeout=600))
        reference = built.stdout.strip()
        match = re.fullmatch(rf"({re.escape(registry.host)}/paddlecloud/paddle-alice/runtime:"
                             r"pc-[0-9a-f]{40})@(sha256:[0-9a-f]{64})", reference)
        assert match, built.stdout
        image, digest = match.groups()
        assert "Successfully installed six-1.16.0" in built.stderr  # the build's log, followed
        # What the registry holds: that manifest, the package at the seeds' path, six installed.
        auth = (USER, PASSWORD)
        assert manifest_digest(image, auth=auth, insecure=True) == digest
        _, _, manifest = manifest_get(image, auth=auth, insecure=True)
        files = layer_files(image, manifest, auth)
        assert files["train/package/train.py"] == TRAIN_PY.encode()
        assert any(re.search(r"/(dist|site)-packages/six\.py$", name) for name in files)

        # A package without requirements.txt: the package on the base (build_docker.sh).
        plain = live_cli.cwd / "plain"
        plain.mkdir()
        (plain / "train.py").write_text("print('plain')\n")
        pushed = ok(live_cli("build", "plain", "-base", base, "-image",
                             f"{registry.host}/alice/plain:1", timeout=300)).stdout.strip()
        assert pushed.startswith(f"{registry.host}/alice/plain:1@sha256:")
        _, _, manifest = manifest_get(f"{registry.host}/alice/plain:1", auth=auth, insecure=True)
        assert layer_files(f"{registry.host}/alice/plain:1", manifest, auth)[
            "train/package/train.py"] == b"print('plain')\n"

        # The same package again: found in the registry, nothing built, the same image.
        again = ok(live_cli("build", "trainer", "-base", base, timeout=120))
        assert again.stdout.strip() == reference
        assert "in its registry already: nothing to build" in again.stderr

        # A requirement that cannot be resolved: pip's own words, a one-line reason, exit 1.
        (pkg / "requirements.txt").write_text("no-such-package-paddlecloud==0.0.1\n")
        broken = live_cli("build", "trainer", "-base", base, timeout=600)
        assert broken.returncode == 1 and broken.stdout == "", broken.stdout
        assert "No matching distribution found for no-such-package-paddlecloud" in broken.stderr
        assert re.search(r"paddlectl: build failed: .*no-such-package-paddlecloud",
                         broken.stderr), broken.stderr

        # Credentials the registry refuses are named.
        ok(live_cli("registry", "-name", "bad", "-server", registry.host, "-username", USER,
                    "-password", "wrong"))
        refused = live_cli("build", "trainer", "-base", base, "-registry", "bad", timeout=120)
        assert refused.returncode == 1, refused.stderr
        assert "refused" in refused.stderr and "'bad'" in refused.stderr, refused.stderr
    assert mounts_under(tmp_path) == []


def test_logs_of_a_job_being_built_follow_its_build(live_cli, celery_worker, k8s_api,
                                                    settings, tmp_path):
    import json

    portal = live_cli.portal
    lines = [f"#{i} step {i} of the build" for i in range(6)]
    k8s_api.controller.script_pods("build-*", container="buildkit", lines=lines,
                                   line_interval=0.3, message=json.dumps(
                                       {"containerimage.digest": "sha256:" + "ef" * 32}))
    package_write(portal.home, "print('hi')\n")
    (portal.home / "pkg" / "requirements.txt").write_text("six\n")
    with registry_server(tmp_path) as registry, on_kubernetes(
            portal.datacenter, settings, portal_kubeconfig(k8s_api),
            {"hostPath": {"path": str(portal.home.parents[1])}}):
        Datacenter.objects.filter(name="datacenter1").update(
            build_registry=f"{registry.host}/builds", build_registry_insecure=True)
        ok(live_cli("submit", "-jobname", "built", "-entry", "python3 train.py",
                    PACKAGE))
        followed = ok(live_cli("logs", "built", "-f", timeout=60))
        # While the job builds, its log is the build's, each line after "build | ".
        assert all(line.startswith("build | ") for line in followed.stdout.splitlines())
        built = [line.removeprefix("build | ") for line in followed.stdout.splitlines()]
        assert [line for line in built if line.startswith("#")] == lines
        assert "paddlecloud: pushed " in followed.stdout
        shown = ok(live_cli("logs", "built", "-w", "build"))
        assert shown.stdout.splitlines() == built
        missing = live_cli("logs", "built", "-w", "nope")
        assert missing.returncode != 0 and "build" in missing.stderr, missing.stderr


PROBE = """\
import json, socket, urllib.error, urllib.request
found = {}
for port in PORTS:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        found[port] = "connected"
    except OSError:
        found[port] = "unreachable"
try:
    urllib.request.urlopen(TRAP, timeout=10)
    found["trap"] = "fetched"
except urllib.error.HTTPError as exc:
    found["trap"] = exc.code
except OSError as exc:
    found["trap"] = str(exc)
print(json.dumps(found))
"""


def test_a_local_builds_steps_reach_the_allowed_index_and_nothing_of_the_machine(
        live_cli, celery_worker, tmp_path, settings):
    """Issue 33, item 10: a Dockerfile's RUN steps, built on the portal's machine, reach the
    datacenter's allowed package index (one on loopback, pip installs from it) and nothing
    else there: not PostgreSQL, Redis, the portal, the registry, nor another local server."""
    settings.PADDLECLOUD_BUILDAH_DIR = tmp_path / "buildah"
    settings.PADDLECLOUD_LOCAL_BUILDS = True
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with registry_server(tmp_path, users={USER: PASSWORD}) as registry, package_index() as trap, \
            package_index([make_wheel(wheels, "tinydep")]) as index:
        base = base_image_push(registry.host, (USER, PASSWORD), tmp_path / "base")
        Datacenter.objects.filter(name="datacenter1").update(
            build_registry=f"{registry.host}/paddlecloud", build_registry_insecure=True,
            package_indexes=index.simple)
        ok(live_cli("registry", "-name", "mine", "-server", registry.host, "-username", USER,
                    "-password", PASSWORD))
        ports = [5432, 6379, urlsplit(live_cli.portal.url).port, urlsplit(registry.url).port,
                 urlsplit(trap.url).port]
        pkg = live_cli.cwd / "probing"
        pkg.mkdir()
        (pkg / "probe.py").write_text(f"PORTS = {ports!r}\nTRAP = {trap.url + '/files/x'!r}\n"
                                      + PROBE)
        (pkg / "Dockerfile").write_text(
            f"FROM {base}\nCOPY probe.py /probe.py\nRUN python3 /probe.py > /probe.json\n"
            f"RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --index-url {index.simple} "
            "tinydep\n")
        built = ok(live_cli("build", "probing", "-image", f"{registry.host}/alice/probing:1",
                            timeout=600))
        image = built.stdout.strip().split("@")[0]
        _, _, manifest = manifest_get(image, auth=(USER, PASSWORD), insecure=True)
        files = layer_files(image, manifest, (USER, PASSWORD))
        probe = json.loads(files["probe.json"])
        assert {int(port): said for port, said in probe.items() if port != "trap"} == dict.fromkeys(
            ports, "unreachable")
        assert probe["trap"] == 403  # the proxy's refusal: not an allowed package index
        assert trap.seen == []
        assert "/simple/tinydep/" in index.seen
        assert any(re.search(r"/(dist|site)-packages/tinydep\.py$", name) for name in files)
        assert "Successfully installed tinydep-1.0" in built.stderr
        # The proxy's address was a build argument: the image does not keep it.
        config_env = json.dumps(manifest)  # the manifest names no proxy either
        assert "3128" not in config_env
    assert mounts_under(tmp_path) == []
