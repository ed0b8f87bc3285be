"""The installed ``paddlectl`` console script and ``python -m paddlectl`` are the same CLI.
Its behaviour is tested in tests/paddlectl/."""

from __future__ import annotations

import subprocess
import sys

import paddlecloud
from tests.paddlectl.conftest import paddlectl_path


def test_the_console_script_and_the_module_print_the_package_version():
    for command in ([paddlectl_path()], [sys.executable, "-m", "paddlectl"]):
        result = subprocess.run([*command, "--version"], capture_output=True, text=True,
                                timeout=60)
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == f"paddlectl {paddlecloud.__version__}\n"
