"""NodeResourceTopology objects (``kubectl get noderesourcetopologies -o yaml``) read into each
node's NUMA zones; see :mod:`planner.model.zones` for how zones become domains."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.base.errors import InvalidInput
from planner.base.quantity import parse_quantity
from planner.model.devices import natural
from planner.model.zones import (
    NRT_API_VERSIONS,
    NRT_KIND,
    NUMA_ZONE,
    POLICY_ATTRIBUTE,
    SINGLE_NUMA_NODE,
    NodeTopology,
    Zone,
    ZoneResource,
)
from planner.read.fields import items, list_of, mapping, required_name


def _resource(doc: Any, where: str) -> tuple[str, ZoneResource]:
    doc = mapping(doc, where)
    name = required_name(doc.get("name"), f"{where}.name")
    amounts = {}
    for key in ("capacity", "allocatable", "available"):
        if doc.get(key) is None:
            raise InvalidInput(f"{where}.{key}", "is required (a quantity)")
        amounts[key] = parse_quantity(doc[key], name, f"{where}.{key}")
    if amounts["available"] > amounts["allocatable"]:
        raise InvalidInput(
            f"{where}.available",
            f"{doc['available']!r} is more than allocatable {doc['allocatable']!r}",
        )
    return name, ZoneResource(**amounts)


def _policy(item: Mapping[str, Any], where: str) -> str | None:
    for i, attr in enumerate(list_of(item.get("attributes") or [], f"{where}.attributes")):
        attr = mapping(attr, f"{where}.attributes[{i}]")
        if attr.get("name") == POLICY_ATTRIBUTE:
            return str(attr.get("value") or "") or None
    # v1alpha1's topologyPolicies (deprecated in v1alpha2): SingleNUMANodeContainerLevel, ...
    old = [str(p) for p in list_of(item.get("topologyPolicies") or [], f"{where}.topologyPolicies")]
    return SINGLE_NUMA_NODE if any(p.startswith("SingleNUMANode") for p in old) else None


def parse_topologies(doc: Any) -> dict[str, NodeTopology]:
    """Node name -> its NUMA zones (``kubectl get noderesourcetopologies -o yaml``).

    Zones of other types (sockets, cores, ...) are left out: a NUMA node is what the kubelet's
    topology manager aligns on. Every field the zones need is checked and named when wrong.
    """
    out: dict[str, NodeTopology] = {}
    for i, item in enumerate(items(doc, "topology", NRT_KIND)):
        where = f"topology.items[{i}]"
        version = item.get("apiVersion")
        if version is not None and version not in NRT_API_VERSIONS:
            raise InvalidInput(f"{where}.apiVersion", f"expected {NRT_API_VERSIONS[0]}, got {version!r}")
        meta = mapping(item.get("metadata") or {}, f"{where}.metadata")
        node = required_name(meta.get("name"), f"{where}.metadata.name")
        if node in out:
            raise InvalidInput(
                f"{where}.metadata.name", f"node {node!r} has two NodeResourceTopology objects"
            )
        if "zones" not in item:
            raise InvalidInput(f"{where}.zones", "is required (a list of zones)")
        zones: list[Zone] = []
        for j, z in enumerate(list_of(item["zones"] or [], f"{where}.zones")):
            zw = f"{where}.zones[{j}]"
            z = mapping(z, zw)
            name = required_name(z.get("name"), f"{zw}.name")
            kind = required_name(z.get("type"), f"{zw}.type")
            resources = tuple(
                _resource(r, f"{zw}.resources[{k}]")
                for k, r in enumerate(list_of(z.get("resources") or [], f"{zw}.resources"))
            )
            if len({n for n, _ in resources}) < len(resources):
                raise InvalidInput(f"{zw}.resources", "lists a resource twice")
            if kind != NUMA_ZONE:
                continue
            if any(zone.name == name for zone in zones):
                raise InvalidInput(f"{zw}.name", f"zone {name!r} is listed twice")
            zones.append(Zone(name, resources))
        policy = _policy(item, where)
        out[node] = NodeTopology(tuple(sorted(zones, key=lambda z: natural(z.name))), policy)
    return out
