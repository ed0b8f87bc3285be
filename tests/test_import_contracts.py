"""The import contracts (``[tool.importlinter]`` in pyproject.toml) hold, and each can fail.

``./dev test`` runs ``lint-imports`` before the tests; here the suite fails too when a change
breaks a layer. A contract that cannot fail holds nothing, so each is shown one import it
forbids, planted in a copy of the project.
"""

from __future__ import annotations

import ast
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
    ("client", "paddlecloud_client/transfer.py", "import django",
     "paddlecloud_client.transfer -> django"),
    ("client", "paddlectl/output.py", "from pfs import storage",
     "paddlectl.output -> pfs.storage"),
    ("client", "paddlecloud_sdk/job.py", "from kernel import celery",
     "paddlecloud_sdk.job -> kernel.celery"),
    ("client-layers", "paddlecloud_sdk/job.py", "from paddlectl import output",
     "paddlecloud_sdk.job -> paddlectl.output"),
    ("client-layers", "paddlectl/context.py", "from paddlecloud_sdk import job",
     "paddlectl.context -> paddlecloud_sdk.job"),
    ("client-layers", "paddlecloud_client/api.py", "from paddlecloud_sdk import errors",
     "paddlecloud_client.api -> paddlecloud_sdk.errors"),
    ("cli", "dashboard/paddle_config.py", "from paddlectl.output import format_time",
     "dashboard.paddle_config -> paddlectl.output"),
    ("cli", "accounts/management/commands/runexample.py", "from paddlectl import cli",
     "accounts.management.commands.runexample -> paddlectl.cli"),
    ("kubernetes", "jobs/engine.py", "from kubernetes import client",
     "jobs.engine -> kubernetes"),
    ("tasks", "registries/services.py", "from .tasks import pull_secret_sync",
     "registries.services -> registries.tasks"),
    ("kernel", "kernel/errors.py", "from accounts.models import Datacenter",
     "kernel.errors -> accounts.models"),
    ("kernel", "kernel/queue.py", "from paddlecloud import celery_app",
     "kernel.queue -> paddlecloud"),
    ("wiring", "accounts/services.py", "from paddlecloud.settings import DEBUG",
     "accounts.services -> paddlecloud.settings"),
    ("wiring", "pfs/views.py", "from paddlecloud.worker import EmbeddedWorker",
     "pfs.views -> paddlecloud.worker"),
    ("manifests", "jobs/backends/kubernetes/manifests.py", "from .client import kube_for",
     "jobs.backends.kubernetes.manifests -> jobs.backends.kubernetes.client"),
    ("jobs-layers", "jobs/transitions.py", "from .engine import job_fail",
     "jobs.transitions -> jobs.engine"),
    ("manifests", "jobs/backends/kubernetes/observe.py", "from .client import kube_for",
     "jobs.backends.kubernetes.observe -> jobs.backends.kubernetes.client"),
    ("backends-records", "jobs/backends/kubernetes/backend.py",
     "from jobs.models import Replica", "jobs.backends.kubernetes.backend -> jobs.models"),
    ("backends-records", "jobs/backends/local/backend.py",
     "from accounts.models import Datacenter",
     "jobs.backends.local.backend -> accounts.models"),
    ("jobs-layers", "jobs/views.py", "from .tasks import job_stop",
     "jobs.views -> jobs.tasks"),
    ("jobs-layers", "jobs/master/app.py", "from ..views import MasterNextView",
     "jobs.master.app -> jobs.views"),
    ("jobs-layers", "jobs/master/dataset.py", "from .dispatch import tasks_left",
     "jobs.master.dataset -> jobs.master.dispatch"),
    ("jobs-layers", "jobs/builds/recipe.py", "from .runs import job_build",
     "jobs.builds.recipe -> jobs.builds.runs"),
    ("scheduling-in-jobs", "jobs/transitions.py", "from scheduling.admission import quota_admit",
     "jobs.transitions -> scheduling.admission"),
    ("scheduling-in-jobs", "scheduling/pool.py", "from jobs.services import job_get",
     "scheduling.pool -> jobs.services"),
    ("scheduling-layers", "scheduling/pool.py", "from .admission import quota_admit",
     "scheduling.pool -> scheduling.admission"),
    ("scheduling-layers", "scheduling/admission.py", "from .forecasts import job_predictions",
     "scheduling.admission -> scheduling.forecasts"),
    ("jobs-layers", "jobs/backends/local/sandbox.py", "from .relay import relay_start",
     "jobs.backends.local.sandbox -> jobs.backends.local.relay"),
    ("backends", "jobs/backends/local/relay.py", "from ..kubernetes.names import object_base",
     "jobs.backends.local.relay -> jobs.backends.kubernetes.names"),
    ("registries-layers", "registries/models.py", "from .services import registry_get",
     "registries.models -> registries.services"),
    ("pfs-layers", "pfs/paths.py", "from .services import usage_report",
     "pfs.paths -> pfs.services"),
    ("apps", "jobs/models.py", "import dashboard.views",
     "jobs.models -> dashboard.views"),
    ("accounts-base", "accounts/models.py", "from jobs.states import JobState",
     "accounts.models -> jobs.states"),
    ("notifications-layers", "notifications/outbox.py", "from .services import subscription_get",
     "notifications.outbox -> notifications.services"),
    ("notifications-on-top", "jobs/transitions.py", "from notifications.outbox import test_record",
     "jobs.transitions -> notifications.outbox"),
    ("experiments-layers", "experiments/models.py", "from .services import sweep_get",
     "experiments.models -> experiments.services"),
    ("experiments-on-top", "jobs/services.py", "from experiments.models import Sweep",
     "jobs.services -> experiments.models"),
    ("interactive-layers", "interactive/models.py", "from .views import PortOpenView",
     "interactive.models -> interactive.views"),
    ("interactive-on-top", "jobs/services.py", "from interactive.models import ProxyRoute",
     "jobs.services -> interactive.models"),
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


def paddlectl_imports(folder: Path) -> list[str]:
    """What the scripts in ``folder`` import of ``paddlectl``, anywhere in them."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [f"{path.name}: {name}" for name in names
                      if name.split(".")[0] == "paddlectl"]
    return found


def test_no_benchmark_imports_paddlectl(tmp_path):
    """bench/ is no package the linter reads: the ``cli`` contract, by hand. Its scripts use
    ``paddlecloud_client`` (and run ``paddlectl`` as a command), as the SDK does."""
    assert paddlectl_imports(ROOT / "bench") == []
    shutil.copytree(ROOT / "bench", tmp_path / "bench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "bench" / "pfs.py").open("a") as source:
        source.write("\nfrom paddlectl import transfer\n")
    assert paddlectl_imports(tmp_path / "bench") == ["pfs.py: paddlectl.transfer"]
