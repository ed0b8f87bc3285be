"""jobs.backends.buildah with real parts: buildah builds a trainer package's image on a base
image pulled from a real registry with a user and a password (Distribution 2.8,
``tests/registry_server.py``), ``pip`` in the build installs from PyPI, the image is pushed
there, and what the registry then holds is read back through its HTTP API.

The base image is the Debian bookworm root filesystem of ``tests.images`` with Python and pip,
pushed once for the module. Every test leaves no buildah process, no working container, no
temporary credentials and no mount behind."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from jobs.backends.base import BackendError
from jobs.backends.buildah import buildah_build
from jobs.backends.environments import PYPI
from jobs.builds.recipe import runtime_dockerfile
from registries.oci import blob_get, docker_config_json, manifest_digest, manifest_get
from tests.images import BASE_REPOSITORY, SYSTEM_PATH, base_image_push, buildah, mounts_under
from tests.processes import processes_naming
from tests.registry_server import layer_files, registry_server

USER, PASSWORD = "builder", "Pa55-w0rd-of-the-builder"
TRAIN_PY = 'import six\nprint("training with six", six.__version__)\n'

pytestmark = pytest.mark.timeout(900)


def no_build_left(storage: Path) -> None:
    """Nothing of a build outlives it (the base image may stay: it is the cache)."""
    assert processes_naming(str(storage)) == []
    assert json.loads(buildah(storage, "containers", "--all", "--json").stdout or "[]") in (
        None, [])
    images = buildah(storage, "images", "--format", "{{.Name}}").stdout.split()
    assert [name for name in images if "paddlecloud-build" in name] == []
    # the authfile and the Dockerfile too (no tmp/ at all if no build got that far)
    assert list((storage / "tmp").glob("*")) == []


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with registry_server(tmp_path_factory.mktemp("registry"), users={USER: PASSWORD}) as server:
        yield server
    assert not Path(f"/proc/{server.pid}").exists()


@pytest.fixture(scope="module")
def base(registry, tmp_path_factory) -> str:
    return base_image_push(registry.host, (USER, PASSWORD), tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """buildah's storage on the portal's machine, shared by the module's builds (the base
    image pulled once stays there)."""
    storage = tmp_path_factory.mktemp("buildah-storage")
    yield storage
    left = mounts_under(storage)
    for point in sorted(left, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    shutil.rmtree(storage, ignore_errors=True)
    assert left == []


@pytest.fixture
def after(storage):
    """Checks, after the test, that nothing of its builds is left."""
    yield
    assert mounts_under(storage) == []
    no_build_left(storage)


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "build.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    yield fd, path
    os.close(fd)


def package(tmp_path: Path, requirements: str) -> Path:
    pkg = tmp_path / "package"
    pkg.mkdir()
    (pkg / "train.py").write_text(TRAIN_PY)
    (pkg / "requirements.txt").write_text(requirements)
    return pkg


def test_a_package_is_built_on_the_base_and_pushed(registry, base, storage, after, log,
                                                   tmp_path):
    pkg = package(tmp_path, "six==1.16.0\n")
    image = f"{registry.host}/alice/trainer:1"
    fd, log_path = log

    digest = buildah_build(pkg, runtime_dockerfile(base), image, insecure=True, indexes=PYPI,
                           auth=(USER, PASSWORD), storage=storage, log=fd, timeout=600)

    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    assert manifest_digest(image, auth=(USER, PASSWORD), insecure=True) == digest
    tags = requests.get(f"{registry.url}/v2/alice/trainer/tags/list", auth=(USER, PASSWORD),
                        timeout=10)
    assert tags.status_code == 200 and tags.json() == {"name": "alice/trainer", "tags": ["1"]}

    got, _media_type, manifest = manifest_get(image, auth=(USER, PASSWORD), insecure=True)
    assert got == digest
    config = json.loads(blob_get(image, manifest["config"]["digest"], auth=(USER, PASSWORD),
                                 insecure=True))
    assert config["config"]["WorkingDir"] == "/train/package"
    assert f"PATH={SYSTEM_PATH}" in config["config"]["Env"]  # the base's, kept
    files = layer_files(image, manifest, (USER, PASSWORD))
    assert files["train/package/train.py"] == TRAIN_PY.encode()
    assert files["train/requirements.txt"] == b"six==1.16.0\n"
    six = [name for name in files
           if re.search(r"(^|/)(dist|site)-packages/six\.py$", name)]
    assert six, "six.py is in no layer"
    assert b"__version__ = \"1.16.0\"" in files[six[0]]

    said = log_path.read_text()
    assert "Successfully installed six-1.16.0" in said
    assert f"pushed {image}@{digest}" in said
    assert PASSWORD not in said
    # the base stays in the storage: the next build on it does not download it again
    assert f"{registry.host}/{BASE_REPOSITORY}" in buildah(
        storage, "images", "--format", "{{.Name}}").stdout


def test_refused_credentials_are_told_naming_the_registry(registry, base, storage, after,
                                                          log, tmp_path):
    pkg = package(tmp_path, "six==1.16.0\n")
    image = f"{registry.host}/alice/trainer:refused"
    fd, log_path = log
    with pytest.raises(BackendError) as raised:
        buildah_build(pkg, runtime_dockerfile(base), image, insecure=True, indexes=PYPI,
                      auth=(USER, "not-the-password"), storage=storage, log=fd, timeout=600)
    message = str(raised.value)
    assert f"the registry {registry.host} refused the credentials of {USER!r}" in message
    assert "not-the-password" not in message and "\n" not in message
    assert "not-the-password" not in log_path.read_text()
    assert manifest_digest(image, auth=(USER, PASSWORD), insecure=True) is None


def test_a_base_in_a_registry_that_wants_credentials_it_was_not_given(
        registry, base, storage, after, log, tmp_path):
    """The credentials are for the registry pushed to; the base is in another one."""
    pkg = package(tmp_path, "six==1.16.0\n")
    fd, log_path = log
    with registry_server(tmp_path / "open") as open_registry:
        image = f"{open_registry.host}/alice/trainer:1"
        with pytest.raises(BackendError) as raised:
            buildah_build(pkg, runtime_dockerfile(base), image, insecure=True, indexes=PYPI,
                          auth=None, storage=storage, log=fd, timeout=600)
        assert manifest_digest(image, insecure=True) is None
    message = str(raised.value)
    assert message.startswith(f"the registry {registry.host} refused access without "
                              f"credentials (pulling {base})")
    assert "\n" not in message
    assert "unauthorized" in log_path.read_text()


def test_a_requirement_pip_cannot_find_fails_the_build_with_pips_words(
        registry, base, storage, after, log, tmp_path):
    pkg = package(tmp_path, "no-such-package-paddlecloud==0.0.1\n")
    image = f"{registry.host}/alice/trainer:broken"
    fd, log_path = log
    with pytest.raises(BackendError) as raised:
        buildah_build(pkg, runtime_dockerfile(base), image, insecure=True, indexes=PYPI,
                      auth=(USER, PASSWORD), storage=storage, log=fd, timeout=600)
    said = log_path.read_text()
    assert ("ERROR: No matching distribution found for no-such-package-paddlecloud==0.0.1"
            in said)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"building {image} failed at STEP 3/5: RUN ")
    assert "exit status 1" in message
    assert "No matching distribution found for no-such-package-paddlecloud==0.0.1" in message
    assert manifest_digest(image, auth=(USER, PASSWORD), insecure=True) is None


def test_a_build_past_its_timeout_is_stopped(registry, base, storage, after, log, tmp_path):
    pkg = package(tmp_path, "six==1.16.0\n")
    fd, log_path = log
    # The base pulled into the storage first (whatever ran before in the module): the timed
    # build's FROM is then only vfs's copy of it, so its time goes to the step that sleeps.
    warm_log = os.open(tmp_path / "warm.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        buildah_build(pkg, f"FROM {base}\nRUN true\n", f"{registry.host}/alice/trainer:warm",
                      insecure=True, auth=(USER, PASSWORD), storage=storage, log=warm_log,
                      timeout=600)
    finally:
        os.close(warm_log)
    image = f"{registry.host}/alice/trainer:slow"
    with pytest.raises(BackendError) as raised:
        buildah_build(pkg, f"FROM {base}\nRUN echo started && sleep 613\n", image,
                      insecure=True, auth=(USER, PASSWORD), storage=storage, log=fd,
                      timeout=30)
    said = log_path.read_text()
    steps = re.findall(r"^(STEP \d/\d: .*)$", said, re.MULTILINE)
    # It names the step it was stopped at: the sleep's, unless a loaded machine was still
    # copying the base at 30 s (then that step, and the sleep never began).
    assert str(raised.value).startswith(
        f"building {image} took longer than the 30 s allowed and was stopped (at: {steps[-1]})")
    if steps[-1] != "STEP 2/2: RUN echo started && sleep 613":
        assert steps == [f"STEP 1/2: FROM {base}"] and "started" not in said
    else:
        assert "started" in said
    assert processes_naming("sleep 613") == []
    assert manifest_digest(image, auth=(USER, PASSWORD), insecure=True) is None


def test_a_registry_without_tls_is_refused_unless_insecure(registry, base, storage, after,
                                                           log, tmp_path):
    pkg = package(tmp_path, "six==1.16.0\n")
    with pytest.raises(BackendError, match=f"the registry {registry.host} cannot be reached "
                                           "over HTTPS"):
        buildah_build(pkg, runtime_dockerfile(base), f"{registry.host}/alice/trainer:1",
                      insecure=False, auth=(USER, PASSWORD), storage=storage, log=log[0])


def test_without_buildah_the_error_says_how_to_install_it(monkeypatch, tmp_path, log):
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine where buildah is not installed
    with pytest.raises(BackendError, match=r"buildah is not installed .*apt-get install "
                                           "buildah"):
        buildah_build(package(tmp_path, ""), "FROM scratch\n", "127.0.0.1:5000/a/b:1",
                      insecure=True, auth=None, storage=tmp_path / "storage", log=log[0])


def test_one_build_at_a_time_in_a_storage(registry, base, storage, after, log, tmp_path):
    fd, log_path = log
    held = os.open(storage / "build.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # a build runs
        with pytest.raises(BackendError, match="did not start: another build used the "
                                               "builder for the 3 s allowed"):
            buildah_build(package(tmp_path, "six==1.16.0\n"), runtime_dockerfile(base),
                          f"{registry.host}/alice/trainer:waited", insecure=True,
                          auth=(USER, PASSWORD), storage=storage, log=fd, timeout=3)
    finally:
        os.close(held)
    assert "waiting for the build before this one to end" in log_path.read_text()


def test_what_a_dead_build_left_is_removed_by_the_next(registry, base, storage, after, log,
                                                       tmp_path):
    authfile = tmp_path / "auth.json"
    authfile.write_text(docker_config_json(registry.host, USER, PASSWORD))
    left = buildah(storage, "from", "--pull=never", base).stdout.strip()  # its portal died
    assert left in buildah(storage, "containers", "--format", "{{.ContainerName}}").stdout
    with pytest.raises(BackendError, match="manifest unknown"):
        buildah_build(package(tmp_path, "six==1.16.0\n"), runtime_dockerfile(f"{base[:-1]}404"),
                      f"{registry.host}/alice/trainer:next", insecure=True,
                      auth=(USER, PASSWORD), storage=storage, log=log[0])
    # `after` checks that no working container is left


def test_the_build_steps_run_contained_not_as_the_portals_root(registry, base, storage, after,
                                                               log, tmp_path):
    """A Dockerfile's RUN is the user's code: it runs in a container whose root is an
    unprivileged range of host ids, and sees its own processes only."""
    pkg = tmp_path / "package"
    pkg.mkdir()
    image = f"{registry.host}/alice/contained:1"
    digest = buildah_build(pkg, f"FROM {base}\nRUN cat /proc/self/uid_map > /uid_map && "
                                "ls /proc | grep -c '^[0-9]' > /pids\n", image,
                           insecure=True, auth=(USER, PASSWORD), storage=storage, log=log[0],
                           timeout=300)
    _, _, manifest = manifest_get(image, auth=(USER, PASSWORD), insecure=True)
    assert manifest_digest(image, auth=(USER, PASSWORD), insecure=True) == digest
    files = layer_files(image, manifest, (USER, PASSWORD))
    assert files["uid_map"].split() == [b"0", b"1000000000", b"65536"]
    assert int(files["pids"]) < 5  # its own PID namespace, not the machine's processes
