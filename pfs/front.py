"""What the PFS byte streams know of nginx in front of the portal (paddlecloud.front runs it):
the scope key under which the front says what it serves, and the headers only it sets."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

# The ASGI scope's key under which a front (paddlecloud.front) says what it serves: a
# ``FrontFiles``. Without it, every byte goes through the portal (pfs.transfer).
FRONT_SCOPE = "paddlecloud.front"


@dataclass(frozen=True)
class FrontFiles:
    """nginx in front serves the files below ``root`` at the internal ``location``, and takes
    the bodies of resumable uploads' chunks into files of ``body_dir`` (on the file system of
    ``root``: moved into place by a rename), having asked the portal whether to (a request
    with ``CHECK_HEADER`` and no body) before it reads a byte."""

    location: str
    root: Path
    body_dir: Path | None = None

    def redirect(self, path: Path) -> str | None:
        """The X-Accel-Redirect that has nginx send the file ``path``; None if not below
        ``root`` (that file goes through the portal)."""
        try:
            inside = path.relative_to(self.root)
        except ValueError:
            return None
        return self.location + urllib.parse.quote(inside.as_posix())


# Set by the front's nginx alone (it clears them on anything else it passes on): a chunk's
# check before its body is read, and the file that body was then taken into, with its length.
CHECK_HEADER = "x-paddlecloud-check"
BODY_FILE_HEADER = "x-paddlecloud-body-file"
BODY_LENGTH_HEADER = "x-paddlecloud-body-length"

