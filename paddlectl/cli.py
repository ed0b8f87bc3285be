"""``paddlectl``: parse the top-level flags, run one command, turn errors into exit codes."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import TextIO

from paddlecloud_client.errors import INTERRUPTED, USAGE, PaddlectlError, UsageError
from paddlectl import __version__
from paddlectl.args import CliParser, add_global_flags, flag, unknown_flag
from paddlectl.commands import COMMANDS
from paddlectl.completion import COMPLETE, complete
from paddlectl.context import Context


def top_parser() -> CliParser:
    parser = CliParser("paddlectl", help_flag=False)
    add_global_flags(parser)
    flag(parser, "version", action="store_true", help="print the client version and exit")
    flag(parser, "h", "help", action="store_true", help="show the help and exit")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _command_args(argv: list[str]) -> tuple[argparse.Namespace, str, list[str]]:
    """The top-level options, the command's name and the command's own arguments."""
    options = top_parser().parse_args(argv)
    if options.help or not options.argv:
        return options, "help", options.argv[:1]  # `paddlectl -h ls` is `paddlectl help ls`
    name, *rest = options.argv
    if name.startswith("-"):
        raise UsageError(f"{unknown_flag(top_parser(), name)} (see `paddlectl flags`)")
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"unknown subcommand {name!r}{hint} (`paddlectl help` lists them)")
    return options, name, rest


def _run(argv: list[str], stdout: TextIO, stderr: TextIO) -> int:
    if argv[:1] == [COMPLETE]:  # the shells' completion scripts ask (paddlectl/completion.py)
        return complete(argv[1:], stdout)
    options, name, rest = _command_args(argv)
    if options.version:
        stdout.write(f"paddlectl {__version__}\n")
        return 0
    command = COMMANDS[name]
    if not command.available:
        raise UsageError(f"`{name}` is not available in this version yet")
    args = command.parser().parse_intermixed_args(rest, namespace=options)
    return command.run(Context(args, stdout, stderr), args) or 0


def main(argv: list[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    try:
        return _run(sys.argv[1:] if argv is None else argv, stdout, stderr)
    except PaddlectlError as exc:
        stderr.write(f"paddlectl: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return INTERRUPTED
    except SystemExit as exc:  # argparse after -h
        return exc.code if isinstance(exc.code, int) else 0
    except BrokenPipeError:  # e.g. `paddlectl ls -R ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return USAGE
    except OSError as exc:  # local files: permission denied, no space left, ...
        where = f"{exc.filename}: " if exc.filename else ""
        stderr.write(f"paddlectl: {where}{exc.strerror or exc}\n")
        return USAGE
