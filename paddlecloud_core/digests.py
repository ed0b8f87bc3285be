"""The digests an upload is checked with end to end, as the server (``pfs``) and the client
(``paddlecloud_client.transfer``) both name them: the algorithms, the header each digest goes
in, and how many hex digits it has.

SHA-256 is always there. XXH3-128 (the ``xxhash`` wheel) is ~12 times faster (~0.05 s/GiB
against ~0.6 s/GiB on one core): it guards the bytes against a transfer gone wrong, not
against an attacker, which is all the check is for (the client sends both the bytes and
their digest). It is offered, and asked for, only where ``xxhash`` is installed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

SHA256 = "sha256"
XXH3_128 = "xxh3-128"

ALGORITHMS: dict[str, Callable] = {SHA256: hashlib.sha256}  # those this process can compute
try:
    import xxhash
except ImportError:  # pragma: no cover - the server extra and the client install it
    pass
else:
    ALGORITHMS[XXH3_128] = xxhash.xxh3_128

PREFERRED = XXH3_128 if XXH3_128 in ALGORITHMS else SHA256  # the fastest here
HEX_DIGITS = {SHA256: 64, XXH3_128: 32}
# The header that carries a digest with a request's bytes, per algorithm.
HEADERS = {SHA256: "X-Checksum-Sha256", XXH3_128: "X-Checksum-Xxh3-128"}


def new(algorithm: str):
    """A fresh hash object of ``algorithm`` (``update``, ``hexdigest``)."""
    return ALGORITHMS[algorithm]()
