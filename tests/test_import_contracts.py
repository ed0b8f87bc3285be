"""The import contracts (``[tool.importlinter]`` in pyproject.toml) hold, and each can fail.

``./dev test`` runs ``lint-imports`` before the tests; here the suite fails too when a change
breaks a layer. A contract that cannot fail holds nothing, so each is shown one import it
forbids, planted in a copy of the project.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (contract, module, the import planted at its end, the import the linter names)
BAD_IMPORTS = [
    ("core", "paddlecloud_core/quantity.py", "import django",
     "paddlecloud_core.quantity -> django"),
    ("client", "paddlectl/jobs.py", "from jobs.backends import sandbox",
     "paddlectl.jobs -> jobs.backends.sandbox"),
    ("client", "paddlecloud_sdk/job.py", "from paddlecloud import celery",
     "paddlecloud_sdk.job -> paddlecloud.celery"),
    ("kubernetes", "jobs/engine.py", "from kubernetes import client",
     "jobs.engine -> kubernetes"),
    ("tasks", "registries/services.py", "from .tasks import pull_secret_sync",
     "registries.services -> registries.tasks"),
    ("manifests", "jobs/backends/kubernetes/manifests.py", "from .client import kube_for",
     "jobs.backends.kubernetes.manifests -> jobs.backends.kubernetes.client"),
    ("manifests", "jobs/backends/kubernetes/observe.py", "from .client import kube_for",
     "jobs.backends.kubernetes.observe -> jobs.backends.kubernetes.client"),
    ("backends-records", "jobs/backends/kubernetes/backend.py",
     "from jobs.models import Replica", "jobs.backends.kubernetes.backend -> jobs.models"),
    ("backends-records", "jobs/backends/local.py", "from accounts.models import Datacenter",
     "jobs.backends.local -> accounts.models"),
    ("jobs-layers", "jobs/transitions.py", "from .admission import quota_admit",
     "jobs.transitions -> jobs.admission"),
    ("jobs-layers", "jobs/views.py", "from .tasks import job_stop",
     "jobs.views -> jobs.tasks"),
    ("registries-layers", "registries/models.py", "from .services import registry_get",
     "registries.models -> registries.services"),
    ("pfs-layers", "pfs/paths.py", "from .services import usage_report",
     "pfs.paths -> pfs.services"),
    ("apps", "jobs/models.py", "import dashboard.views",
     "jobs.models -> dashboard.views"),
    ("accounts-base", "accounts/models.py", "from jobs.states import JobState",
     "accounts.models -> jobs.states"),
]


def lint_imports(where: Path, *contracts: str) -> subprocess.CompletedProcess:
    """``lint-imports`` as ``./dev test`` runs it, in ``where`` (it reads the code there)."""
    selected = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run([LINT_IMPORTS, "--no-cache", "--no-logo", *selected], cwd=where,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONFIG['contracts'])} kept, 0 broken." in result.stdout


def test_every_contract_is_shown_a_bad_import_below():
    assert {contract for contract, *_ in BAD_IMPORTS} == {c["id"] for c in CONFIG["contracts"]}


@pytest.mark.parametrize(("contract", "module", "planted", "named"), BAD_IMPORTS,
                         ids=[f"{c}:{m}" for c, m, *_ in BAD_IMPORTS])
def test_a_contract_fails_on_an_import_it_forbids(tmp_path, contract, module, planted, named):
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    assert lint_imports(tmp_path, contract).returncode == 0  # the copy keeps it, as is
    with (tmp_path / module).open("a") as source:
        source.write(f"\n{planted}\n")
    result = lint_imports(tmp_path, contract)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 0 kept, 1 broken." in result.stdout
    assert named in result.stdout
