"""Resource quantities ("500m", "2", "1Gi") parsed exactly and printed canonically, because
quota and limit-range messages print sums the way the server's resource.Quantity does."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_DECIMAL_BY_EXPONENT = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T",
                        15: "P", 18: "E"}
_PATTERN = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|"
                      r"[eE][+-]?[0-9]+)?$")


class QuantityError(ValueError):
    pass


@dataclass(frozen=True)
class Quantity:
    value: Fraction
    binary: bool = False  # written with Ki/Mi/Gi…: printed that way while it stays exact

    @classmethod
    def parse(cls, text) -> Quantity:
        if isinstance(text, int | float):
            return cls(Fraction(str(text)))
        match = _PATTERN.match(str(text).strip())
        if not match:
            raise QuantityError(f"quantities must match the regular expression "
                                f"'{_PATTERN.pattern}'")
        number, suffix = Fraction(match.group(1)), match.group(2) or ""
        if suffix in _BINARY:
            return cls(number * _BINARY[suffix], binary=True)
        if suffix[:1] in ("e", "E"):
            return cls(number * Fraction(10) ** int(suffix[1:]))
        return cls(number * _DECIMAL[suffix])

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.binary)

    def __str__(self) -> str:
        if self.binary and self.value.denominator == 1:
            return _format_binary(int(self.value))
        return _format_decimal(self.value)


ZERO = Quantity(Fraction(0))


def _format_binary(value: int) -> str:
    if abs(value) < 1024:
        return str(value)
    for suffix, factor in reversed(_BINARY.items()):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def _format_decimal(value: Fraction) -> str:
    """The largest power-of-1000 suffix that keeps an integer mantissa: 1500 -> "1500",
    2000 -> "2k", 0.5 -> "500m"."""
    if value == 0:
        return "0"
    for exponent in sorted(_DECIMAL_BY_EXPONENT, reverse=True):
        scaled = value / Fraction(10) ** exponent
        if scaled.denominator == 1:
            return f"{scaled.numerator}{_DECIMAL_BY_EXPONENT[exponent]}"
    return f"{round(value * 10**9)}n"
