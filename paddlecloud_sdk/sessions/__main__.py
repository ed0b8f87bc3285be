"""``python -m paddlecloud_sdk.sessions KIND [ARGS…]``: run a session's server (``KINDS``)."""

from __future__ import annotations

import importlib
import sys

from . import KINDS, LaunchError


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in KINDS:
        print(f"usage: python -m paddlecloud_sdk.sessions {{{','.join(KINDS)}}} [ARGS...]",
              file=sys.stderr)
        return 2
    try:
        return importlib.import_module(f"{__package__}.{argv[0]}").main(argv[1:])
    except LaunchError as exc:
        print(f"session: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
