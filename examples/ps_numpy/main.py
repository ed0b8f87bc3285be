"""Parameter-server training of a linear model with numpy only: one entry for both roles.

PaddleCloud starts every replica as ``sh -c "python main.py"``; ``TRAINING_ROLE`` says which
one it is (``PSERVER`` or ``TRAINER``). See README.md.
"""

from __future__ import annotations

import sys

from paddlecloud_sdk import env


def main() -> int:
    try:
        role = env.role()  # TRAINING_ROLE: TRAINER (the default) or PSERVER
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if role == "PSERVER":
        import pserver

        return pserver.serve()
    import trainer

    return trainer.run()


if __name__ == "__main__":
    sys.exit(main())
