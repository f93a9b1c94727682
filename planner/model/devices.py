"""GPUs known one by one: devices grouped in domains (read by :mod:`planner.read.slices`).

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
from collections.abc import Iterable
from dataclasses import dataclass

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
        qualified = qualify(name, self.driver)
        return next(((kind, v) for k, kind, v in self.attributes if k == qualified), None)

    def attribute(self, name: str) -> str | None:
        found = self.typed(name)
        return None if found is None else found[1]

    def domain(self, attribute: str) -> str:
        return self.attribute(attribute) or NO_DOMAIN


def natural(name: str) -> tuple[object, ...]:
    """gpu-2 before gpu-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def qualify(key: str, driver: str) -> str:
    """Attribute names without a domain belong to the driver's (as the API defines)."""
    return key if "/" in key else f"{driver}/{key}"


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
