"""The environment cache on Kubernetes (issue 19): jobs run by the real Celery worker on the
fake API server's process kubelet (every pod a process tree with the PFS mounted), their init
step installing requirements.txt with the pods' own pip into the owner's home, once per digest.

The pods have no network off the machine (the fake cluster's DNS forwards nothing), as many
clusters' pods have none: the requirements are a tiny pure-Python wheel in the package
(``--no-index --find-links``), which is the same install path as an index."""

from __future__ import annotations

import json
import shutil

import pytest

from jobs.backends.kubernetes.envs import env_prune
from jobs.models import Job
from tests.factories import HOME, submit_job
from tests.jobs.kubernetes.test_scripts import tiny_wheel
from tests.jobs.test_examples_on_kubernetes import logs_of, wait_for

FINAL = ("succeeded", "failed", "killed")
ENTRY = "python3 -c 'import tinydep; print(\"tinydep\", tinydep.VALUE, tinydep.__file__)'"


def package(pfs_home, name: str, requirement: str = "tinydep") -> str:
    pkg = pfs_home / name
    (pkg / "wheels").mkdir(parents=True)
    tiny_wheel(pkg / "wheels")
    (pkg / "requirements.txt").write_text(
        f"--no-index\n--find-links wheels   # beside the code\n{requirement}\n")
    return f"{HOME}/{name}"


def submit(alice, datacenter, pkg: str, name: str, **fields) -> Job:
    return submit_job(alice, datacenter, name, package=pkg, entry=ENTRY, **fields)


def requirements_log(job) -> str:
    from jobs.files import output_dir

    path = output_dir(job) / "requirements.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.django_db(transaction=True)
def test_one_build_for_two_pods_then_a_second_job_finds_it(
        kube_pods_datacenter, celery_worker, alice, datacenter, pfs_home):
    first = submit(alice, datacenter, package(pfs_home, "pkg1"), "one", trainers=2)
    first = wait_for(first, FINAL)
    assert first.state == "succeeded", (first.state_reason, logs_of(first), requirements_log(first))
    digest = first.environment
    assert len(digest) == 64
    env = pfs_home / ".paddlecloud" / "envs" / digest
    site = env / "site-packages"
    assert (site / "tinydep" / "__init__.py").is_file()
    assert json.loads((env / "built.json").read_text())["size"] > 0
    assert (env / "used").is_file()
    assert not list(env.parent.glob(f"{digest}.tmp-*"))
    log = requirements_log(first)
    assert log.count("installs requirements.txt") == 1, log  # one build for both pods
    logs = logs_of(first)
    assert len(logs) == 2, logs
    seen = f"{HOME}/.paddlecloud/envs/{digest}/site-packages"
    for text in logs.values():  # both trainers imported it from the environment
        assert f"tinydep 42 {seen}/tinydep/__init__.py" in text, text

    # Another job, its requirements written otherwise (same digest): found, nothing built.
    pkg2 = package(pfs_home, "pkg2")
    shutil.rmtree(pfs_home / "pkg2" / "wheels")  # the same wheel, byte for byte
    shutil.copytree(pfs_home / "pkg1" / "wheels", pfs_home / "pkg2" / "wheels")
    (pfs_home / "pkg2" / "requirements.txt").write_text(
        "# the same\n--no-index\n--find-links   wheels\n\ntinydep\n")
    second = wait_for(submit(alice, datacenter, pkg2, "two"), FINAL)
    assert second.state == "succeeded", (second.state_reason, logs_of(second))
    assert second.environment == digest
    log = requirements_log(second)
    assert f"environment {digest[:12]} found" in log and "installs" not in log, log
    assert [p.name for p in env.parent.iterdir() if not p.name.endswith(".lock")] == [digest]

    # Pruned past the bound only once no live job uses it.
    assert env_prune(second, limit=0) == [digest]
    assert not env.exists()


@pytest.mark.django_db(transaction=True)
def test_a_bad_requirement_fails_the_pod_with_pips_message_and_caches_nothing(
        kube_pods_datacenter, celery_worker, alice, datacenter, pfs_home):
    pkg = package(pfs_home, "pkg", requirement="no-such-package-paddlecloud==1.0")
    job = wait_for(submit(alice, datacenter, pkg, "bad"), FINAL)
    assert job.state == "failed"
    reasons = " | ".join([job.state_reason, *job.replicas.values_list("reason", flat=True)])
    assert "preparing the workspace failed" in reasons, reasons
    assert "No matching distribution found for no-such-package-paddlecloud==1.0" in reasons
    log = requirements_log(job)
    assert "No matching distribution found" in log, log
    envs = pfs_home / ".paddlecloud" / "envs"
    assert not (envs / job.environment).exists()
    assert not list(envs.glob("*.tmp-*"))
