"""paddlectl: the PaddleCloud command line client."""

from importlib.metadata import PackageNotFoundError, version

# From the installed package's metadata: importing ``paddlecloud`` would load Django's Celery
# app, a tenth of a second on every command.
try:
    __version__ = version("paddlecloud")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
