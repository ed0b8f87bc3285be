"""``help [CMD]``, ``commands`` and ``flags``: what paddlectl can do, without a config file."""

from __future__ import annotations

import textwrap

from paddlecloud_client.config import EXAMPLE
from paddlecloud_client.errors import EXIT_CODES, UsageError
from paddlectl.args import GLOBAL_FLAGS
from paddlectl.commands import COMMANDS, Command

CONFIG_HELP = """\
Config file:
	~/.paddle/config (%USERPROFILE%\\.paddle\\config on Windows), or the file named by
	$PADDLE_CONFIG, or --config PATH. YAML, one entry per datacenter:

""" + textwrap.indent(EXAMPLE, "\t  ") + """
	name                the datacenter's name, as the administrator gave it
	username, password  your PaddleCloud account
	token               instead of password: an API token from the Tokens page (SSO)
	endpoint            the URL of the PaddleCloud portal
	current-datacenter  the one commands use unless given --datacenter NAME

	Keep it private: chmod 600 ~/.paddle/config. API tokens are cached beside it in
	tokens.json (mode 0600); `paddlectl logout` revokes the cached one.
"""


def _listing(commands: list[Command]) -> str:
    lines = []
    for command in sorted(commands, key=lambda c: c.name):
        later = "" if command.available else " (not available yet)"
        lines.append(f"\t{command.name:<16} {command.summary}{later}\n")
    return "".join(lines)


def usage() -> str:
    exit_codes = "".join(f"\t{code:<4} {meaning}\n" for code, meaning in EXIT_CODES)
    return (
        "Usage: paddlectl <flags> <subcommand> <subcommand args>\n\n"
        "Subcommands:\n"
        + _listing([c for c in COMMANDS.values() if not c.pfs])
        + "\nSubcommands for PFS:\n"
        + _listing([c for c in COMMANDS.values() if c.pfs])
        + "\nExit codes:\n" + exit_codes + "\n"
        + "Config file:\n"
        "\t~/.paddle/config, or $PADDLE_CONFIG, or --config PATH: your datacenters (name,\n"
        "\tusername, password, endpoint) and the current-datacenter; `paddlectl help config`\n"
        "\tshows an example.\n\n"
        "Use \"paddlectl flags\" for a list of top-level flags\n"
        "Use \"paddlectl help <subcommand>\" for the flags of a subcommand\n"
    )


def setup_help(parser) -> None:
    parser.add_argument("subcommand", nargs="?", help="the subcommand to describe")


def run_help(ctx, args) -> None:
    name = args.subcommand
    if name is None:
        ctx.stdout.write(usage())
        return
    command = COMMANDS.get(name)
    if command is None:
        raise UsageError(f"unknown subcommand {name!r}; `paddlectl help` lists them")
    if not command.available:
        ctx.stdout.write(f"paddlectl {name}: {command.summary}\n\n"
                         "Not available in this version yet.\n")
        return
    ctx.stdout.write(command.parser().format_help())
    if name == "config":
        ctx.stdout.write("\n" + CONFIG_HELP)


def setup_commands(parser) -> None:
    pass


def run_commands(ctx, args) -> None:
    ctx.stdout.write("".join(f"{name}\n" for name in sorted(COMMANDS)))


def setup_flags(parser) -> None:
    pass


def run_flags(ctx, args) -> None:
    rows = []
    for names, kwargs in GLOBAL_FLAGS:
        shown = ", ".join(f"-{n}" if len(n) == 1 else f"--{n}" for n in names)
        if "metavar" in kwargs:
            shown += f" {kwargs['metavar']}"
        rows.append((shown, kwargs["help"]))
    rows += [("--version", "print the client version and exit"),
             ("-h, --help", "show the help and exit")]
    ctx.stdout.write(
        "Top-level flags (before or after the subcommand; long ones also with one dash, "
        "e.g. -datacenter NAME):\n"
        + "".join(f"\t{shown:<20} {text}\n" for shown, text in rows))
