"""The end-to-end digests an upload can be checked with, as the server checks them: the
algorithms, headers and lengths are ``paddlecloud_core.digests``' (the client names them the
same way). A client names the algorithm when it starts an upload; this server offers those of
``ALGORITHMS`` (``xxh3-128`` only where ``xxhash`` is installed).
"""

from __future__ import annotations

import re

from paddlecloud_core.digests import ALGORITHMS, HEADERS, HEX_DIGITS, SHA256

__all__ = ["ALGORITHMS", "HEADERS", "HEX_DIGITS", "SHA256", "from_headers", "rule", "valid"]


def valid(algorithm: str, digest) -> bool:
    """Whether ``digest`` is written as ``algorithm``'s digests are: lower or upper hex of the
    right length."""
    return isinstance(digest, str) and bool(
        re.fullmatch(f"[0-9a-f]{{{HEX_DIGITS[algorithm]}}}", digest.lower()))


def rule(algorithm: str) -> str:
    """What a valid digest of ``algorithm`` is, for an error message."""
    return f"the {algorithm} of the whole upload, as {HEX_DIGITS[algorithm]} hexadecimal digits"


def from_headers(header) -> tuple[str, str | None]:
    """The algorithm and digest a request's headers send (``header(name)`` reads one): the
    first of the known headers present; SHA-256 and None when there is none."""
    for algorithm, name in HEADERS.items():
        if algorithm in ALGORITHMS and (value := header(name.lower())) is not None:
            return algorithm, value
    return SHA256, None
