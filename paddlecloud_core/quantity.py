"""Resource quantities as users write them: cpu ``1``, ``0.5``, ``500m``; memory ``512Mi``, ``2G``;
lengths of time ``90s``, ``30m``, ``2h``, ``1d``.

CPU is stored in millicores, memory and storage in bytes, as Kubernetes counts them.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
            "E": 10**18}
# 512Mi, 2G, 100GiB (the B of an IEC unit is harmless); 1GB or 1Gb is refused as ambiguous.
_POWERS = {"K": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([KMGTPE]i)B?|([kKMGTPE])(b|B)?)?\s*$")
_CPU_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m?)\s*$")
_SECONDS_RE = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


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
    if match.group(4):
        number, unit = match.group(1), match.group(3)
        power = _POWERS[unit.upper()]
        raise QuantityError(
            f"{value!r} is ambiguous: write {number}{unit} (units of 10^{power} bytes) or "
            f"{number}{unit.upper()}i (units of 2^{power // 3 * 10} bytes)"
        )
    suffix = match.group(2) or match.group(3) or ""
    multiplier = _BINARY.get(suffix) or _DECIMAL[suffix]
    try:
        amount = Decimal(match.group(1)) * multiplier
    except InvalidOperation:  # pragma: no cover - the regex admits only plain decimals
        raise QuantityError(f"{value!r} is not a number") from None
    if amount != amount.to_integral_value():
        raise QuantityError(f"{value!r} is not a whole number of bytes")
    return int(amount)


def parse_seconds(value: str | int) -> int:
    """A length of time: ``90`` or ``90s`` (seconds), ``30m``, ``2h``, ``1d`` as seconds."""
    match = _SECONDS_RE.match(str(value))
    if not match:
        raise QuantityError(f"{value!r} is not a length of time: use a whole number with s, m, "
                            "h or d (90s, 30m, 2h, 1d)")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def format_cpu(millicores: int) -> str:
    """``4000`` -> ``4``, ``500`` -> ``500m``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_bytes(amount: int) -> str:
    """Exactly, as short as a unit makes it (a binary one on a tie): ``8589934592`` -> ``8Gi``,
    ``2000000000`` -> ``2G``, ``1000`` -> ``1k``, ``1536`` -> ``1536``."""
    written = [str(amount)]
    if amount:
        units = [*sorted(_BINARY.items(), key=lambda kv: -kv[1]),
                 *((suffix.replace("K", "k"), size) for suffix, size in
                   sorted(_DECIMAL.items(), key=lambda kv: -kv[1]) if suffix not in ("", "k"))]
        written = [f"{amount // size}{suffix}" for suffix, size in units
                   if amount % size == 0] + written
    return min(written, key=len)


def format_bytes_about(amount: int) -> str:
    """For people, to about three digits in binary units, exact when a unit divides:
    ``20034464`` -> ``19.1Mi``, ``15647`` -> ``15.3Ki``, ``8589934592`` -> ``8Gi``,
    ``512`` -> ``512B``, ``0`` -> ``0``."""
    for suffix, size in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if amount >= size:
            if amount % size == 0:
                return f"{amount // size}{suffix}"
            number = amount / size
            shown = f"{number:.0f}" if number >= 100 else f"{number:.1f}"
            if shown == "1024" and suffix != "Ei":  # 1023.6Mi is about 1.0Gi
                return "1.0" + next(s for s, n in _BINARY.items() if n == size * 1024)
            return f"{shown}{suffix}"
    return f"{amount}B" if amount else "0"
