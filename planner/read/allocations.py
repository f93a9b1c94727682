"""The one reader of allocation objects: ``gpuplan plan -o json``, ``--previous`` and a plan's
``status.allocations`` all come back through :func:`read_allocations`, which checks every field and
names the one that is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.base.errors import InvalidInput
from planner.base.strategies import Strategy
from planner.model.result import Allocation


def _field(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise InvalidInput(f"{where}.{key}", "is required")
    return doc[key]


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(where, f"must be one of the positive integers (1, 2, ...), got {value!r}")
    return value


def read_allocation(doc: Any, where: str) -> Allocation:
    """One allocation object of the JSON output (or of a plan's status), checked field by field."""
    if not isinstance(doc, Mapping):
        raise InvalidInput(where, f"expected an object, got {type(doc).__name__}")
    names = {}
    for key in ("operator", "resource"):
        value = _field(doc, key, where)
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{where}.{key}", f"expected a name, got {value!r}")
        names[key] = value
    strategy = doc.get("strategy")
    if strategy is not None and strategy not in {s.value for s in Strategy}:
        raise InvalidInput(f"{where}.strategy", f"unknown strategy {strategy!r}")
    units = _positive(_field(doc, "unitsPerInstance", where), f"{where}.unitsPerInstance")
    nodes = _field(doc, "nodes", where)
    if not isinstance(nodes, Mapping):
        raise InvalidInput(f"{where}.nodes", "expected an object of node name -> instances")
    counts = tuple(sorted((str(n), _positive(c, f"{where}.nodes.{n}")) for n, c in nodes.items()))
    placed = sum(c for _, c in counts)
    instances = _positive(doc.get("instances", placed), f"{where}.instances")
    if placed != instances:
        raise InvalidInput(f"{where}.nodes", f"holds {placed} instances, not {instances}")
    return Allocation(
        names["operator"],
        names["resource"],
        None if strategy is None else Strategy(strategy),
        instances,
        units,
        counts,
        devices=_devices(doc.get("devices", {}), dict(counts), units, f"{where}.devices"),
        straddling=_count(doc.get("straddling", 0), f"{where}.straddling"),
    )


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(where, f"expected a count, got {value!r}")
    return value


def _devices(
    value: Any, counts: Mapping[str, int], units: int, where: str
) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """``devices``: node -> the device names of each instance there (DRA plans only)."""
    if not isinstance(value, Mapping):
        raise InvalidInput(where, "expected an object of node name -> device lists")
    out = []
    for node, lists in sorted(value.items()):
        here = f"{where}.{node}"
        if node not in counts:
            raise InvalidInput(here, "a node the allocation has no instances on")
        if not isinstance(lists, list) or len(lists) != counts[node]:
            raise InvalidInput(here, f"expected {counts[node]} device lists, one per instance")
        for k, devs in enumerate(lists):
            if (
                not isinstance(devs, list)
                or len(devs) != units
                or not all(isinstance(d, str) and d for d in devs)
            ):
                raise InvalidInput(f"{here}[{k}]", f"expected {units} device names")
        out.append((str(node), tuple(tuple(devs) for devs in lists)))
    return tuple(out)


def read_allocations(value: Any, where: str = "allocations") -> tuple[Allocation, ...]:
    """The ``allocations`` list of ``gpuplan plan -o json`` or a plan's status."""
    if not isinstance(value, list):
        raise InvalidInput(where, f"expected a list, got {type(value).__name__}")
    return tuple(read_allocation(doc, f"{where}[{i}]") for i, doc in enumerate(value))
