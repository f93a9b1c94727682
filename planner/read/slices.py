"""ResourceSlices and ResourceClaims (``kubectl get resourceslices|resourceclaims -o yaml``) read
into each node's devices; see :mod:`planner.model.devices` for what a device and a domain are."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planner.base.errors import InvalidInput
from planner.model.devices import Device, natural, qualify
from planner.read.fields import items, mapping


def _typed(attr: Any) -> tuple[str, str] | None:
    if not isinstance(attr, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in attr:
            value = attr[kind]
            return kind, (str(value).lower() if isinstance(value, bool) else str(value))
    return None


def parse_slices(
    doc: Any, held: Iterable[tuple[str, str, str]] = (), reserved: Iterable[tuple[str, str]] = ()
) -> dict[str, tuple[Device, ...]]:
    """Node name -> its devices (``kubectl get resourceslices -o yaml``). Not free: ``held``
    (driver, pool, device) that claims hold, and ``reserved`` (node, device) other plans placed."""
    taken, booked = set(held), set(reserved)
    out: dict[str, list[Device]] = {}
    for i, item in enumerate(items(doc, "slices", "ResourceSlice")):
        where = f"slices.items[{i}].spec"
        spec = mapping(item.get("spec") or {}, where)
        node = spec.get("nodeName")
        if not node:  # slices for many nodes (nodeSelector, allNodes) are not per-node GPUs
            continue
        driver = spec.get("driver")
        if not isinstance(driver, str) or not driver:
            raise InvalidInput(f"{where}.driver", "is required")
        pool = str(mapping(spec.get("pool") or {}, f"{where}.pool").get("name") or node)
        for j, dev in enumerate(spec.get("devices") or []):
            dev = mapping(dev, f"{where}.devices[{j}]")
            name = dev.get("name")
            if not isinstance(name, str) or not name:
                raise InvalidInput(f"{where}.devices[{j}].name", "is required")
            attrs = {
                qualify(str(k), driver): v
                for k, v in mapping(dev.get("attributes") or {}, f"{where}.devices[{j}].attributes").items()
            }
            texts = tuple(sorted((k, *t) for k, v in attrs.items() if (t := _typed(v)) is not None))
            free = (driver, pool, name) not in taken and (str(node), name) not in booked
            out.setdefault(str(node), []).append(Device(name, driver, pool, free, texts))
    return {node: tuple(sorted(devs, key=lambda d: natural(d.name))) for node, devs in out.items()}


def parse_claims(doc: Any) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of every device a ResourceClaim holds (``kubectl get resourceclaims -A``)."""
    held: set[tuple[str, str, str]] = set()
    for i, item in enumerate(items(doc, "claims", "ResourceClaim")):
        status = mapping(item.get("status") or {}, f"claims.items[{i}].status")
        allocation = status.get("allocation") or {}
        for r in ((allocation.get("devices") or {}).get("results")) or []:
            if isinstance(r, Mapping) and r.get("device"):
                held.add((str(r.get("driver")), str(r.get("pool")), str(r["device"])))
    return held
