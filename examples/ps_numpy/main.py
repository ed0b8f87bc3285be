"""Parameter-server training of a linear model with numpy only: one entry for both roles.

PaddleCloud starts every replica as ``sh -c "python main.py"``; ``TRAINING_ROLE`` says which
one it is (``PSERVER`` or ``TRAINER``). See README.md.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    role = os.environ.get("TRAINING_ROLE", "TRAINER").upper()
    if role == "PSERVER":
        import pserver

        return pserver.serve()
    if role == "TRAINER":
        import trainer

        return trainer.run()
    raise SystemExit(f"TRAINING_ROLE must be PSERVER or TRAINER, not {role!r}")


if __name__ == "__main__":
    sys.exit(main())
