"""Kubernetes quantities (``"8"``, ``"500m"``, ``"2Ki"``) as whole numbers the planner counts in.

Notes
-----
CPU is counted in millicores (a node's ``cpu: "31500m"`` is 31500), everything else in whole
units (cards). Nodes, pods and NodeResourceTopology zones all speak quantities, so they share this
one reader; it names the field of a value it cannot read, and never lets ``"inf"`` or ``"nan"``
(which :class:`~decimal.Decimal` accepts) through as a number.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from planner.base.errors import InvalidInput

_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip

MILLI = 1000  # millicores per CPU


def parse_quantity(value: Any, resource: str, field: str) -> int:
    """A Kubernetes quantity as an int: millicores for ``cpu``, whole units otherwise."""
    if isinstance(value, bool):
        raise InvalidInput(field, f"not a quantity: {value!r}")
    text = str(value).strip()
    if text.isdigit():  # the common case ("8", "32"): no Decimal needed
        return int(text) * MILLI if resource == "cpu" else int(text)
    try:
        if text.endswith("m"):
            number = Decimal(text[:-1]) / MILLI
        else:
            for suffix in sorted(_SUFFIX, key=len, reverse=True):
                if text.endswith(suffix):
                    number = Decimal(text[: -len(suffix)]) * _SUFFIX[suffix]
                    break
            else:
                number = Decimal(text)
    except InvalidOperation:
        raise InvalidInput(field, f"not a quantity: {value!r}") from None
    if not number.is_finite():
        raise InvalidInput(field, f"not a quantity: {value!r}")
    if number < 0:
        raise InvalidInput(field, f"must not be negative, got {value!r}")
    return int(number * MILLI) if resource == "cpu" else int(number)


def cpus_text(millicores: int) -> str:
    """Millicores as a CPU quantity: ``8`` for whole CPUs, ``500m`` otherwise."""
    return str(millicores // MILLI) if millicores % MILLI == 0 else f"{millicores}m"
