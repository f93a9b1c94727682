"""GPUs known one by one: ResourceSlices and ResourceClaims read into devices grouped in domains.

Notes
-----
With Dynamic Resource Allocation (``resource.k8s.io/v1``) a driver publishes, per node, a
ResourceSlice listing its devices with attributes. GPUs that belong together (a NUMA node, a PCIe
root, an NVLink group) share an attribute value: the device's **domain**. By default that is the
standard ``resource.kubernetes.io/pcieRoot``; a plan's ``topologyAttribute`` (the CLI's
``--domain-attribute``) names another. Devices without the attribute form one domain per node.
Devices that ResourceClaims already hold are not free.

A node with devices has as many free cards as free devices; the planner then also chooses which
devices each instance gets. Without ResourceSlices nothing here applies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import InvalidInput

STANDARD_DOMAIN = "resource.kubernetes.io/pcieRoot"
NO_DOMAIN = ""  # devices without the domain attribute: one domain per node


@dataclass(frozen=True)
class Device:
    name: str
    driver: str
    pool: str
    free: bool = True
    attributes: tuple[tuple[str, str, str], ...] = ()  # (qualified name, kind, value as text)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    def typed(self, name: str) -> tuple[str, str] | None:
        """(kind, value text) of an attribute: kind is string, int, bool or version."""
        qualified = _qualify(name, self.driver)
        return next(((kind, v) for k, kind, v in self.attributes if k == qualified), None)

    def attribute(self, name: str) -> str | None:
        found = self.typed(name)
        return None if found is None else found[1]

    def domain(self, attribute: str) -> str:
        return self.attribute(attribute) or NO_DOMAIN


def natural(name: str) -> tuple[object, ...]:
    """gpu-2 before gpu-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(where, f"expected a mapping, got {type(value).__name__}")
    return value


def _items(doc: Any, what: str, kind: str) -> list[Mapping[str, Any]]:
    doc = _mapping(doc, what)
    if doc.get("kind") == kind:
        return [doc]
    if doc.get("kind") not in ("List", f"{kind}List"):
        raise InvalidInput(f"{what}.kind", f"expected List or {kind}List, got {doc.get('kind')!r}")
    items = doc.get("items") or []
    if not isinstance(items, list):
        raise InvalidInput(f"{what}.items", "must be a list")
    return [_mapping(i, f"{what}.items[{n}]") for n, i in enumerate(items)]


def _qualify(key: str, driver: str) -> str:
    """Attribute names without a domain belong to the driver's (as the API defines)."""
    return key if "/" in key else f"{driver}/{key}"


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
    for i, item in enumerate(_items(doc, "slices", "ResourceSlice")):
        where = f"slices.items[{i}].spec"
        spec = _mapping(item.get("spec") or {}, where)
        node = spec.get("nodeName")
        if not node:  # slices for many nodes (nodeSelector, allNodes) are not per-node GPUs
            continue
        driver = spec.get("driver")
        if not isinstance(driver, str) or not driver:
            raise InvalidInput(f"{where}.driver", "is required")
        pool = str(_mapping(spec.get("pool") or {}, f"{where}.pool").get("name") or node)
        for j, dev in enumerate(spec.get("devices") or []):
            dev = _mapping(dev, f"{where}.devices[{j}]")
            name = dev.get("name")
            if not isinstance(name, str) or not name:
                raise InvalidInput(f"{where}.devices[{j}].name", "is required")
            attrs = {
                _qualify(str(k), driver): v
                for k, v in _mapping(dev.get("attributes") or {}, f"{where}.devices[{j}].attributes").items()
            }
            texts = tuple(sorted((k, *t) for k, v in attrs.items() if (t := _typed(v)) is not None))
            free = (driver, pool, name) not in taken and (str(node), name) not in booked
            out.setdefault(str(node), []).append(Device(name, driver, pool, free, texts))
    return {node: tuple(sorted(devs, key=lambda d: natural(d.name))) for node, devs in out.items()}


def parse_claims(doc: Any) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of every device a ResourceClaim holds (``kubectl get resourceclaims -A``)."""
    held: set[tuple[str, str, str]] = set()
    for i, item in enumerate(_items(doc, "claims", "ResourceClaim")):
        status = _mapping(item.get("status") or {}, f"claims.items[{i}].status")
        allocation = status.get("allocation") or {}
        for r in ((allocation.get("devices") or {}).get("results")) or []:
            if isinstance(r, Mapping) and r.get("device"):
                held.add((str(r.get("driver")), str(r.get("pool")), str(r["device"])))
    return held


@dataclass(frozen=True)
class Domain:
    """GPUs of one node that belong together (devices of a PCIe root, or a NUMA zone's cards)."""

    name: str
    total: int
    free: tuple[str, ...]  # names of the free devices, in order
    cpu: int | None = None  # millicores of the NUMA node, when known (a zone's allocatable cpu)


def domains_of(devices: Iterable[Device], attribute: str = STANDARD_DOMAIN) -> tuple[Domain, ...]:
    """A node's devices grouped by the value of ``attribute`` (devices without it: one domain)."""
    by: dict[str, list[Device]] = {}
    for d in devices:
        by.setdefault(d.domain(attribute), []).append(d)
    return tuple(
        Domain(name, len(devs), tuple(d.name for d in sorted(devs, key=lambda d: natural(d.name)) if d.free))
        for name, devs in sorted(by.items())
    )
