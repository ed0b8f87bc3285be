#!/usr/bin/env python
"""Django's command-line utility for administrative tasks (same as the ``paddlecloud`` command)."""

from paddlecloud.cli import main

if __name__ == "__main__":
    main()
