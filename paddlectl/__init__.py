"""paddlectl: the PaddleCloud command line client."""

from paddlecloud import __version__

__all__ = ["__version__"]
