"""``config view`` and ``config use-datacenter NAME``."""

from __future__ import annotations

from paddlecloud_client.config import config_use_datacenter
from paddlecloud_client.errors import UsageError
from paddlectl.output import Column

COLUMNS = [Column("current", "current"), Column("name", "name"),
           Column("username", "username"), Column("endpoint", "endpoint")]


def setup_config(parser) -> None:
    parser.usage = "paddlectl config view | use-datacenter NAME"
    parser.description += (
        "\n\n  view                 print the config, passwords masked (-o yaml, json, table)"
        "\n  use-datacenter NAME  make NAME the current datacenter")
    parser.add_argument("action", choices=("view", "use-datacenter"), metavar="ACTION",
                        help="view or use-datacenter")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the datacenter to use")


def run_config(ctx, args) -> None:
    if (args.action == "use-datacenter") != (args.name is not None):
        raise UsageError("usage: paddlectl config view | use-datacenter NAME")
    config = ctx.config
    if args.action == "use-datacenter":
        config_use_datacenter(config, args.name)
        ctx.info(f"Current datacenter: {args.name} (in {config.path})")
        return
    masked = config.masked()
    rows = [{**entry, "current": "*" if entry.get("name") == config.current else ""}
            for entry in masked["datacenters"]]
    ctx.emit(masked, rows, COLUMNS, default="yaml")
