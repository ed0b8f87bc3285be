"""Argument parsing shared by every command.

Flags work with one dash as in the seeds (``-jobname x``, ``-recursive``) and with two
(``--jobname x``); single-letter flags have one dash (``-r``). Mistakes are ``UsageError``s
(exit 1), never argparse's exit 2.
"""

from __future__ import annotations

import argparse
import difflib
import re

from paddlecloud_client.errors import UsageError
from paddlectl.output import FORMATS


def flag(parser, *names: str, **kwargs) -> argparse.Action:
    """Add an option as ``-x`` for one-letter names, ``--name`` and ``-name`` for others."""
    strings = []
    for name in names:
        strings += [f"-{name}"] if len(name) == 1 else [f"--{name}", f"-{name}"]
    return parser.add_argument(*strings, **kwargs)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option once: ``-r, --recursive`` (``-recursive`` works too)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if action.option_strings:
            shown = [s for s in action.option_strings if s.startswith("--") or len(s) == 2]
            action = argparse.Action(shown, action.dest, nargs=action.nargs,
                                     metavar=action.metavar, choices=action.choices)
        return super()._format_action_invocation(action)


class CliParser(argparse.ArgumentParser):
    def __init__(self, prog: str, *, help_flag: bool = True, **kwargs):
        super().__init__(prog=prog, add_help=False, allow_abbrev=False,
                         formatter_class=HelpFormatter, **kwargs)
        if help_flag:
            flag(self, "h", "help", action="help", help="show this help and exit")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        self._refuse(extras)
        return parsed

    def parse_intermixed_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_intermixed_args(args, namespace)
        self._refuse(extras)
        return parsed

    def _refuse(self, extras: list[str]) -> None:
        """Arguments left over: an unknown flag is named alone (the arguments after it are
        only left over because of it), with the flag it is closest to."""
        flags = [e for e in extras if e.startswith("-") and e != "-" and not NUMBER.fullmatch(e)]
        if flags:
            self.error(unknown_flag(self, flags[0]))
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")

    def error(self, message: str):
        name = self.prog.removeprefix("paddlectl").strip()
        where = f"{name}: " if name else ""
        see = f"paddlectl help {name.split()[0]}" if name else "paddlectl flags"
        raise UsageError(f"{where}{message} (see `{see}`)")


NUMBER = re.compile(r"-\d+(\.\d*)?")  # a negative number: a value, not a flag


def unknown_flag(parser: argparse.ArgumentParser, given: str) -> str:
    """``unknown flag -paralelism; did you mean -parallelism?``: the closest of the parser's
    flags written with as many dashes as ``given``."""
    given = given.partition("=")[0]
    dashes = given.startswith("--")
    known = [s for action in parser._actions for s in action.option_strings
             if s.startswith("--") == dashes]
    close = difflib.get_close_matches(given, known, n=1)
    return f"unknown flag {given}" + (f"; did you mean {close[0]}?" if close else "")


# The top-level flags: (names, argparse keywords). Commands accept them too, before or after
# their own arguments.
GLOBAL_FLAGS = (
    (("datacenter",), {"metavar": "NAME", "help": "the datacenter to use (default: "
                                                  "current-datacenter in the config file)"}),
    (("config",), {"metavar": "PATH", "help": "the config file (default: $PADDLE_CONFIG, "
                                              "else ~/.paddle/config)"}),
    (("o", "output"), {"choices": FORMATS, "metavar": "FORMAT",
                       "help": f"output format of commands that print resources: "
                               f"{', '.join(FORMATS)}"}),
    (("q", "quiet"), {"action": "store_true",
                      "help": "no progress bars and no informational messages"}),
)


def add_global_flags(parser: argparse.ArgumentParser, *, hidden: bool = False) -> None:
    """The global flags; ``hidden`` ones keep values parsed earlier and stay out of help."""
    for names, kwargs in GLOBAL_FLAGS:
        if hidden:
            kwargs = {**kwargs, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
        flag(parser, *names, **kwargs)
