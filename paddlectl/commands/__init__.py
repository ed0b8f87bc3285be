"""The command registry: every subcommand's name, one-line summary and module.

A command ``NAME`` lives in ``module`` as two functions::

    def setup_NAME(parser: CliParser) -> None      # add its arguments
    def run_NAME(ctx: Context, args) -> int | None  # do it; None means 0

(``-`` in a name becomes ``_``). Flags and arguments may come in any order (the parser is
argparse's intermixed one, so no sub-parsers: take the action as a positional with
``choices``, as ``config`` does). Commands parse arguments and call ``paddlecloud_client`` (its
API client, ``transfer``, ``jobs``); they never do HTTP themselves. A command whose ``module``
is None is listed but not available yet: to add ``submit``, write
``paddlectl/commands/jobs.py`` with ``setup_submit`` and ``run_submit`` and name the module
below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from paddlectl.args import CliParser, add_global_flags


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    module: str | None = None  # None: not available in this version
    pfs: bool = False  # listed under "Subcommands for PFS"

    @property
    def available(self) -> bool:
        return self.module is not None

    def _function(self, prefix: str) -> Callable:
        module = importlib.import_module(f"paddlectl.commands.{self.module}")
        return getattr(module, f"{prefix}_{self.name.replace('-', '_')}")

    def parser(self) -> CliParser:
        parser = CliParser(f"paddlectl {self.name}", description=self.summary)
        add_global_flags(parser, hidden=True)
        self._function("setup")(parser)
        return parser

    @property
    def run(self) -> Callable:
        return self._function("run")


COMMANDS: dict[str, Command] = {command.name: command for command in (
    Command("build", "build a runtime image from a trainer package and push it", "build"),
    Command("commands", "list all command names", "help"),
    Command("compare", "compare jobs: their metrics' final and best values, what differs",
            "compare"),
    Command("completion", "print the shell completion script (bash, zsh, fish)", "completion"),
    Command("config", "view the config file or switch the current datacenter", "config"),
    Command("delete", "delete a job or a registry", "jobs"),
    Command("exec", "run a command in a running job's worker (-it -- bash: a shell)", "shell"),
    Command("file", "upload files into your PFS home (the seeds' rules)", "files"),
    Command("flags", "list the top-level flags", "help"),
    Command("get", "print jobs, sweeps, workers, tasks, registries and quota", "jobs"),
    Command("help", "describe subcommands and their syntax", "help"),
    Command("kill", "stop a job or a sweep; -rm also removes a job from the history", "jobs"),
    Command("local", "run a training on this machine", "local"),
    Command("login", "log in to the current datacenter (a fresh API token)", "auth"),
    Command("logout", "log out of the current datacenter (revoke the API token)", "auth"),
    Command("logs", "print the logs of a job", "jobs"),
    Command("metrics", "print the metrics a job reported", "jobs"),
    Command("notebook", "start, list, stop or keep your notebooks (JupyterLab, as a job)",
            "notebooks"),
    Command("notify", "subscribe to job and budget events by e-mail, webhook or the dashboard",
            "notify"),
    Command("port-forward", "carry a local port to a port of a running job, through the "
            "portal", "ports"),
    Command("registry", "add registry credentials for private images", "registry"),
    Command("submit", "submit a job to PaddlePaddle Cloud", "jobs"),
    Command("sweep", "start a sweep: trials of a job over a search space", "sweeps"),
    Command("templates", "list the job templates to submit from (submit --template)",
            "templates"),
    Command("version", "print the client and server versions", "version"),
    Command("cp", "upload or download files", "files", pfs=True),
    Command("ls", "list files on PaddlePaddle Cloud", "files", pfs=True),
    Command("mkdir", "make directories on PaddlePaddle Cloud", "files", pfs=True),
    Command("rm", "remove files on PaddlePaddle Cloud", "files", pfs=True),
)}
