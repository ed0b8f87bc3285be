"""Run one of examples/ as the demo user with paddlectl, as a user would, to the end.

    paddlecloud runexample fit_a_line [--endpoint http://127.0.0.1:8000]

The demo user's paddlectl config is written to ``var/paddle-config`` (mode 0600); without
``--endpoint``, the portal is the one that config already names (where ``./dev up`` serves,
on whatever ``PORT``), else http://127.0.0.1:8000. The example
directory is submitted as a local package — ``paddlectl submit`` uploads it to the demo user's
PFS home — with the flags its ``job.json`` gives, then ``paddlectl logs -f`` follows trainer 0
until the job ends. Each paddlectl command is printed before it runs. An ended job of the same
name is deleted first, so the command can be run again; it exits 0 only if the job succeeded.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from paddlecloud_client.config import config_dump, config_load, private_write
from paddlecloud_client.errors import ConfigError
from paddlecloud_core.layout import output_path, pfs_home

from .demo import DATACENTER, USERNAME

EXAMPLES = settings.BASE_DIR / "examples"
# job.json's fields, as paddlectl submit's flags
FLAGS = {"name": "-jobname", "entry": "-entry", "trainers": "-parallelism",
         "pservers": "-pservers", "passes": "-passes", "cpu": "-cpu", "memory": "-memory"}
FINAL = ("succeeded", "failed", "killed")
DEFAULT_ENDPOINT = "http://127.0.0.1:8000"


class Command(BaseCommand):
    help = "Submit one of examples/ as the demo user with paddlectl and follow it to the end."

    def add_arguments(self, parser):
        names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "job.json").exists())
        parser.add_argument("example", choices=names)
        parser.add_argument("--endpoint", help="the portal's URL (default: the one "
                            f"var/paddle-config names, else {DEFAULT_ENDPOINT})")
        parser.add_argument("--timeout", type=float, default=600)

    def handle(self, *args, example, endpoint, timeout, **options):
        password_file = settings.VAR_DIR / "demo-password"
        if not password_file.exists():
            raise CommandError("no demo user yet: run `paddlecloud demo` first")
        self.config = settings.VAR_DIR / "paddle-config"
        self._write_config(endpoint or self._endpoint_written(),
                           password_file.read_text().strip())
        spec = json.loads((EXAMPLES / example / "job.json").read_text())
        name = spec["name"]

        # Run again: the earlier run's job (ended) goes first; "not found" is fine.
        self.paddlectl("kill", name, "-rm", check=False, quiet=True)
        submit = [part for field, flag in FLAGS.items() if field in spec
                  for part in (flag, str(spec[field]))]
        self.paddlectl("submit", *submit, str(EXAMPLES / example))
        self.paddlectl("logs", name, "-w", "trainer-0", "-f")
        deadline = time.monotonic() + timeout
        while (state := self._state(name)) not in FINAL:
            if time.monotonic() > deadline:
                raise CommandError(f"job {name} is still {state} after {timeout:.0f}s")
            time.sleep(0.5)
        self.paddlectl("get", "workers", name)
        self.paddlectl("ls", output_path(pfs_home(DATACENTER, USERNAME), name))
        self.stdout.write(f"Job {name} {state}. paddlectl as the demo user (from any "
                          f"directory): {self.config_hint()} get jobs")
        if state != "succeeded":
            raise CommandError(f"job {name} {state}")

    def config_hint(self) -> str:
        """The demo user's paddlectl, as a command that works as printed from any directory
        (absolute paths): the virtualenv's paddlectl need not be on PATH."""
        paddlectl = Path(sys.executable).with_name("paddlectl")
        if not paddlectl.exists():
            paddlectl = Path(shutil.which("paddlectl") or "paddlectl")
        return (f"PADDLE_CONFIG={shlex.quote(str(Path(self.config).absolute()))} "
                f"{shlex.quote(str(paddlectl.absolute()))}")

    def _endpoint_written(self) -> str:
        """The portal the demo user's config names already, else the default."""
        try:
            return config_load(self.config).datacenter(DATACENTER).endpoint
        except (OSError, ConfigError):
            return DEFAULT_ENDPOINT

    def _write_config(self, endpoint: str, password: str) -> None:
        private_write(self.config, config_dump([{
            "name": DATACENTER, "username": USERNAME, "password": password,
            "endpoint": endpoint}], DATACENTER))

    def _state(self, name: str) -> str:
        result = self.paddlectl("get", "jobs", name, "-o", "json", capture=True)
        return json.loads(result.stdout)["state"]  # one job named: the object itself

    def paddlectl(self, *args: str, check: bool = True, quiet: bool = False,
                  capture: bool = False) -> subprocess.CompletedProcess:
        if not (quiet or capture):
            self.stdout.write(f"$ paddlectl {shlex.join(args)}")
            self.stdout.flush()
        env = {**os.environ, "PADDLE_CONFIG": str(self.config)}
        result = subprocess.run(  # noqa: S603 - our own CLI, arguments as a list
            [sys.executable, "-m", "paddlectl", *args], env=env, text=True,
            stdout=subprocess.PIPE if capture or quiet else None,
            stderr=subprocess.PIPE if quiet else None)
        if check and result.returncode != 0:
            raise CommandError(f"paddlectl {args[0]} failed (exit {result.returncode})")
        return result
