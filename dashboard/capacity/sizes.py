"""Sizes in ZOS's own units: the byte units, sizes read and shown, `Resources`, the model's errors.

ZOS and the Grid Proxy count memory and disk in bytes with 1024-based units (a 1 TB SSD is
931.5 GiB) and CPU (`cru`) in cores; every figure of the capacity model is an integer number
of bytes or cores, shown in GiB only at the edge (docs/domain.md "Units").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB


class CapacityError(ValueError):
    """A value the capacity model cannot work with; the message says which and why."""


class SizeError(CapacityError):
    pass


# --- sizes ----------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_DECIMAL_UNITS = {"kb", "mb", "gb", "tb", "k", "m", "g", "t"}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, *, what: str = "size", allow_zero: bool = True) -> int:
    """Bytes from '4GiB', '931.5GiB', '512MiB', '1TiB' or a plain byte count.

    Decimal units (GB, MB) are refused: ZOS counts in 1024-based units and '31 GB' on a
    node's page already means GiB, so guessing would silently be off by 7%.
    """
    if isinstance(text, bool):
        raise SizeError(f"{what}: {text!r} is not a size")
    if isinstance(text, int):
        value = text
    else:
        value = int(_bytes_written(str(text), what=what))  # whole bytes, rounded down
    if value < 0:
        raise SizeError(f"{what}: {value} is negative; sizes are zero or more")
    if value == 0 and not allow_zero:
        raise SizeError(f"{what}: must be more than zero")
    if value > 1024 * TiB:
        raise SizeError(f"{what}: {format_size(value)} is absurd for one node (over 1 PiB)")
    return value


def _bytes_written(raw: str, *, what: str) -> Decimal:
    """The bytes a written size says, exactly ('931.5GiB'); SizeError for anything but a 1024-based size."""
    match = _SIZE_RE.match(raw)
    if not match:
        if raw.strip().startswith("-"):
            raise SizeError(f"{what}: {raw!r} is negative; sizes are zero or more")
        raise SizeError(f"{what}: {raw!r} is not a size; write e.g. 4GiB, 931.5GiB, 512MiB or a byte count")
    number, unit = match.group(1), match.group(2).lower()
    if unit in _DECIMAL_UNITS:
        raise SizeError(
            f"{what}: {raw!r} uses a decimal unit; ZOS counts 1024-based units, write {number}GiB or {number}MiB"
        )
    if unit not in _UNITS:
        raise SizeError(f"{what}: unknown unit {match.group(2)!r} in {raw!r}; use B, KiB, MiB, GiB or TiB")
    try:
        return Decimal(number) * _UNITS[unit]
    except InvalidOperation:
        raise SizeError(f"{what}: {raw!r} is not a number") from None


def format_size(n: int) -> str:
    """'931.5 GiB', '500 MiB', '7 B': the largest unit that keeps the number >= 1."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            # Whole-number arithmetic: a float overflows on the 400-digit sizes a door may be sent.
            quotient, rest = divmod(n * 100, size)
            hundredths = quotient + (2 * rest >= size)
            whole, cents = divmod(hundredths, 100)
            if whole >= 10**30:
                return f"{sign}over 10^30 {unit}"
            text = f"{whole}.{cents:02d}".rstrip("0").rstrip(".")
            return f"{sign}{text} {unit}"
    return f"{sign}{n} B"


def gib(n: int) -> float:
    return n / GiB


# --- resources ------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """Capacity in ZOS's own terms: cru in cores, mru/sru/hru in bytes."""

    cru: int = 0
    mru: int = 0
    sru: int = 0
    hru: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cru + other.cru, self.mru + other.mru, self.sru + other.sru, self.hru + other.hru)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cru - other.cru, self.mru - other.mru, self.sru - other.sru, self.hru - other.hru)

    def times(self, k: int) -> Resources:
        return Resources(self.cru * k, self.mru * k, self.sru * k, self.hru * k)

    def as_dict(self) -> dict[str, int]:
        # Spelt out: dataclasses.asdict walks and copies each field, and a page of onboarded nodes asks 100 times.
        return {"cru": self.cru, "mru": self.mru, "sru": self.sru, "hru": self.hru}

    @classmethod
    def total_of(cls, items: Iterable[Resources]) -> Resources:
        result = cls()
        for item in items:
            result = result + item
        return result
