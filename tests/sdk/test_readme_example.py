"""The SDK example of the docs' "Python SDK" page (docs/users/sdk.md), as printed, after
`./dev up` (whose fit-a-line job exists): run from a clone's directory with the demo user's
config, against a live portal and worker."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paddlecloud_sdk import PaddleJob
from tests.factories import HOME, package_write

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def readme_sdk_example() -> str:
    section = (ROOT / "docs" / "users" / "sdk.md").read_text()
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_sdk_example_runs_as_printed_beside_dev_ups_job(
        live_portal, sdk_config, celery_worker, tmp_path):
    home = live_portal.home
    package_write(home, "print('done')\n", "quick")
    dev_up = PaddleJob(job_name="fit-a-line", entry_point="python train.py",
                       trainer_package=f"{HOME}/quick").submit()
    assert dev_up.wait(timeout=120) == "succeeded"

    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "examples" / "fit_a_line", clone / "examples" / "fit_a_line",
                    ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-c", readme_sdk_example()], cwd=clone,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "succeeded"
    assert lines[1] == str([("trainer-0", "succeeded"), ("trainer-1", "succeeded")])
    assert "trainer 0 finished 10 passes" in result.stdout
    assert (home / "jobs" / "fit-a-line-sdk" / "output" / "model").is_dir()
