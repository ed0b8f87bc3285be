"""Resource quantities as users write them: cpu ``1``, ``0.5``, ``500m``; memory ``512Mi``, ``2G``.

CPU is stored in millicores, memory and storage in bytes, as Kubernetes counts them.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
            "E": 10**18}
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]i|[kKMGTPE])?[bB]?\s*$")
_CPU_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m?)\s*$")


class QuantityError(ValueError):
    """A quantity that does not parse; the message says what is expected."""


def parse_cpu(value: str | int | float) -> int:
    """CPU cores (``2``, ``0.5``) or millicores (``500m``) as millicores."""
    match = _CPU_RE.match(str(value))
    if not match:
        raise QuantityError(
            f"{value!r} is not a CPU amount: use cores (1, 0.5) or millicores (500m)"
        )
    number, milli = Decimal(match.group(1)), match.group(2)
    millicores = number if milli else number * 1000
    if millicores != millicores.to_integral_value():
        raise QuantityError(f"{value!r} is finer than one millicore")
    return int(millicores)


def parse_bytes(value: str | int) -> int:
    """Memory or storage: ``1024``, ``512Mi``, ``2G``, ``1.5Gi`` as bytes."""
    match = _BYTES_RE.match(str(value))
    if not match:
        raise QuantityError(
            f"{value!r} is not an amount of bytes: use a number with Ki/Mi/Gi/Ti or K/M/G/T "
            "(512Mi, 2G)"
        )
    suffix = match.group(2) or ""
    multiplier = _BINARY.get(suffix) or _DECIMAL[suffix]
    try:
        amount = Decimal(match.group(1)) * multiplier
    except InvalidOperation:  # pragma: no cover - the regex admits only plain decimals
        raise QuantityError(f"{value!r} is not a number") from None
    if amount != amount.to_integral_value():
        raise QuantityError(f"{value!r} is not a whole number of bytes")
    return int(amount)


def format_cpu(millicores: int) -> str:
    """``4000`` -> ``4``, ``500`` -> ``500m``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_bytes(amount: int) -> str:
    """The largest binary unit that divides exactly: ``8589934592`` -> ``8Gi``."""
    for suffix, size in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if amount and amount % size == 0:
            return f"{amount // size}{suffix}"
    return str(amount)
