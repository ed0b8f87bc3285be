"""What a command works with: its options, the config, the client and the output streams.

The config is read and the client built only when a command first asks for them, so
``help`` and friends work without a config file.
"""

from __future__ import annotations

import argparse
import sys
from functools import cached_property
from typing import Any, TextIO

from paddlecloud_client.api import ApiClient, datacenter_client
from paddlecloud_client.config import Config, Datacenter, config_load, config_path
from paddlecloud_client.progress import Progress
from paddlectl import output


class Context:
    def __init__(self, options: argparse.Namespace, stdout: TextIO | None = None,
                 stderr: TextIO | None = None):
        self.options = options
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr

    @property
    def quiet(self) -> bool:
        return bool(getattr(self.options, "quiet", False))

    @cached_property
    def config(self) -> Config:
        return config_load(config_path(getattr(self.options, "config", None)), warn=self.warn)

    @cached_property
    def datacenter(self) -> Datacenter:
        return self.config.datacenter(getattr(self.options, "datacenter", None))

    @cached_property
    def client(self) -> ApiClient:
        return datacenter_client(self.config, self.datacenter)

    @property
    def home(self) -> str:
        """The user's PFS home in the current datacenter."""
        return self.datacenter.home

    def warn(self, message: str) -> None:
        self.stderr.write(f"paddlectl: warning: {message}\n")

    def info(self, message: str) -> None:
        """A message for people (not for scripts): stdout, unless -q."""
        if not self.quiet:
            self.stdout.write(message + "\n")

    def progress(self, label: str, total: int | None = None) -> Progress:
        shown = not self.quiet and self.stderr.isatty()
        return Progress(self.stderr, label, total, enabled=shown)

    def output_format(self, default: str = "table") -> str:
        return getattr(self.options, "output", None) or default

    def emit(self, data: Any, rows: list[dict] | None = None,
             columns: list[output.Column] | None = None, default: str = "table") -> None:
        output.emit(self.stdout, self.output_format(default), data, rows, columns)
