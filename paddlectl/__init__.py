"""paddlectl: the PaddleCloud command line client."""

# From the core (standard library only): importing ``paddlecloud`` would load Django's Celery
# app, and asking the installed package's metadata scans site-packages: each a share of the
# time every command takes to start.
from paddlecloud_core import __version__

__all__ = ["__version__"]
