"""The client as a laptop installs it: ``pip install paddlecloud`` into a clean virtualenv gives
``paddlectl`` and the SDK (and ``paddlecloud_client``, which both use), without Django, Celery
or the Kubernetes client, and they work against a portal.

The virtualenv is made without the network: the project's wheel is built here from a copy of
the checkout, its dependencies come from the wheels ``./dev`` downloads beside ``.venv``
(``.venv/client-wheels``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sdk.conftest import write_config

ROOT = Path(__file__).resolve().parent.parent
WHEELHOUSE = Path(sys.prefix) / "client-wheels"
SERVER_ONLY = ("django", "rest_framework", "celery", "kombu", "channels", "kubernetes",
               "kubernetes_validate", "uvicorn", "psycopg", "boto3", "storages")
CLIENT = ("paddlectl", "paddlecloud_sdk", "paddlecloud_client", "paddlecloud_core")
LEFT_OUT = ("var", "node_modules", "build", "dist", "__pycache__", "*.egg-info")


def run(*argv, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def _source_copy(target: Path) -> Path:
    """The checkout's files (what git tracks, as they are now), without the build's leftovers
    in the checkout itself."""
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                 cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """A clean virtualenv with ``pip install paddlecloud`` (no extras) done, offline."""
    assert WHEELHOUSE.is_dir(), (f"{WHEELHOUSE} is missing: ./dev test downloads the client's "
                                 "dependencies there")
    base = tmp_path_factory.mktemp("client")
    source = _source_copy(base / "source")
    wheels = base / "wheels"
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                "-w", str(wheels), str(source))
    assert built.returncode == 0, built.stderr
    venv = base / "venv"
    made = run(sys.executable, "-m", "venv", str(venv))
    assert made.returncode == 0, made.stderr
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    installed = run(str(venv / "bin" / "pip"), "install", "-q", "--no-index",
                    "--find-links", str(wheels), "--find-links", str(WHEELHOUSE),
                    "paddlecloud", env=env)
    assert installed.returncode == 0, installed.stderr
    return venv


def in_client(venv: Path, *argv, env: dict | None = None, cwd: Path | None = None):
    """Run a program of the client's virtualenv as a user would: away from the checkout, with
    nothing of the test run on PYTHONPATH."""
    clean = {key: value for key, value in os.environ.items()
             if key not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")}
    clean.update(env or {})
    return run(str(venv / "bin" / argv[0]), *argv[1:], env=clean, cwd=cwd or venv)


def test_the_client_installs_without_the_server(client):
    probe = in_client(client, "python", "-c", textwrap.dedent(f"""
        import importlib.util, json
        print(json.dumps({{name: importlib.util.find_spec(name) is not None
                          for name in {list(SERVER_ONLY + CLIENT)!r}}}))
    """))
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert [name for name in SERVER_ONLY if found[name]] == []
    assert [name for name in CLIENT if not found[name]] == []

    version = in_client(client, "paddlectl", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "paddlectl 0.1.0"

    # The portal's own command says what is missing, instead of a traceback.
    portal = in_client(client, "paddlecloud", "migrate")
    assert portal.returncode == 1
    assert "pip install 'paddlecloud[server]'" in portal.stderr
    assert "Traceback" not in portal.stderr


@pytest.mark.django_db(transaction=True)
def test_the_client_submits_and_follows_a_job(client, live_portal, celery_worker, tmp_path):
    """paddlectl and the SDK from the clean virtualenv, against a real portal."""
    config = write_config(tmp_path / "home" / ".paddle" / "config", live_portal.url)
    env = {"PADDLE_CONFIG": str(config), "HOME": str(tmp_path / "home"),
           "NO_PROXY": "127.0.0.1,localhost"}
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "train.py").write_text('print("trained on", __import__("os").environ["JOB_NAME"])\n')

    submitted = in_client(client, "paddlectl", "submit", "-jobname", "from-laptop",
                          "-entry", "python train.py", str(package), env=env, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    followed = in_client(client, "paddlectl", "logs", "from-laptop", "-f", env=env)
    assert followed.returncode == 0, followed.stderr
    assert "trained on from-laptop" in followed.stdout

    # A mistake is caught by the core's rules before anything is sent or uploaded.
    refused = in_client(client, "python", "-c", textwrap.dedent(f"""
        from paddlecloud_sdk import PaddleJob
        from paddlecloud_sdk.errors import JobSpecError
        try:
            PaddleJob(job_name="Bad_Name", entry_point="python train.py",
                      trainer_package={str(package)!r}, memory="lots")
        except JobSpecError as exc:
            print(sorted(exc.fields))
    """), env=env)
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout.strip() == "['job_name', 'memory']"

    sdk = in_client(client, "python", "-c", textwrap.dedent(f"""
        from paddlecloud_sdk import PaddleJob
        job = PaddleJob(job_name="sdk-laptop", entry_point="python train.py",
                        trainer_package={str(package)!r}).submit()
        print(job.wait(timeout=120))
    """), env=env)
    assert sdk.returncode == 0, sdk.stderr
    assert sdk.stdout.strip().splitlines()[-1] == "succeeded"
