"""``python -m paddlectl`` and the ``paddlectl`` console script."""

from __future__ import annotations

import sys

from paddlectl.cli import main


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
