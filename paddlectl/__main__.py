"""paddlectl — so far only ``version`` and ``help``; the job and file commands come next.

Exit status: 0 on success, 1 for a usage error.
"""

from __future__ import annotations

import sys

from paddlectl import __version__

USAGE = """\
Usage: paddlectl <flags> <subcommand> <subcommand args>

Subcommands:
	help             Print this help.
	version          Print the client version.

The job commands of the seeds (submit, get, logs, kill, delete, registry, file) are not in
this release yet. Until they are, use the portal's API directly: see /api/docs/ on your
PaddleCloud endpoint.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("help", "-h", "--help", "-help"):
        sys.stdout.write(USAGE)
        return 0
    if args[0] in ("version", "--version", "-version"):
        print(f"paddlectl {__version__}")
        return 0
    sys.stderr.write(f"paddlectl: unknown subcommand {args[0]!r}\n\n{USAGE}")
    return 1


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
