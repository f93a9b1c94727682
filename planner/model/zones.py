"""NUMA zones without DRA: per-node GPU domains (read by :mod:`planner.read.topologies`).

Notes
-----
Where no driver publishes GPUs one by one (ResourceSlices), node-feature-discovery's topology
updater may still publish, per node, a ``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha2``,
cluster-scoped, named after the node): its ``zones`` of ``type: Node`` are the node's NUMA nodes,
each with ``resources`` (``name``, ``capacity``, ``allocatable``, ``available``). A zone that has
the plan's GPU resource (``nvidia.com/gpu``) is a **domain** of that many cards, exactly as a
PCIe root is with DRA, so the planner's domain model and its per-domain search apply unchanged.

What is free in a zone is reconciled with what is free on the node, which stays the authority
(allocatable minus the pods' requests and what other plans hold):

- ``available`` counts every pod holding GPUs in the zone, the plan's own too; what the plan
  itself placed there (its ``status.applied.zones``) is given back, and what other plans placed
  there counts as used even before their pods run;
- if the zones then show more free cards than the node, the surplus is taken first from the
  zones where the plan's own cards were given back (its pods may not run yet), then from the
  zone with the most free cards, so a whole zone is never invented; if they show fewer, the
  zones' count wins (the smaller of the two). Either way the plan says so in a note.

Nothing here pins an instance to a zone: without DRA the kubelet's topology manager picks the
NUMA node when the pod starts. The plan makes sure every instance it keeps inside one zone has
room there, records the zone it counted on, and sizes CPU requests so a ``single-numa-node``
kubelet can align CPUs and GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.model.devices import Domain, natural

NRT_KIND = "NodeResourceTopology"
NRT_API_VERSIONS = ("topology.node.k8s.io/v1alpha2", "topology.node.k8s.io/v1alpha1")
NUMA_ZONE = "Node"  # the zone type of a NUMA node
POLICY_ATTRIBUTE = "topologyManagerPolicy"  # a top-level attribute the topology updater publishes
SINGLE_NUMA_NODE = "single-numa-node"

ZoneUnits = Mapping[str, Mapping[str, Mapping[str, int]]]  # node -> zone -> resource name -> units


@dataclass(frozen=True)
class ZoneResource:
    """One resource of a zone (cpu in millicores, anything else in whole units)."""

    capacity: int
    allocatable: int
    available: int


@dataclass(frozen=True)
class Zone:
    """One NUMA node of a node."""

    name: str
    resources: tuple[tuple[str, ZoneResource], ...]

    def resource(self, name: str) -> ZoneResource | None:
        return next((r for n, r in self.resources if n == name), None)


@dataclass(frozen=True)
class NodeTopology:
    """A node's NUMA zones and, when published, its kubelet's topology manager policy."""

    zones: tuple[Zone, ...]
    policy: str | None = None

    @property
    def single_numa(self) -> bool:
        """The kubelet refuses a pod whose resources cannot come from one NUMA node."""
        return self.policy == SINGLE_NUMA_NODE


@dataclass(frozen=True)
class NodeZones:
    """A node's GPU domains from its zones, the node's free cards, and what a reader should know."""

    domains: tuple[Domain, ...]
    free: int
    note: str | None = None


def _units(book: Mapping[str, Mapping[str, int]], zone: str, resource: str) -> int:
    return int((book.get(zone) or {}).get(resource, 0))


def zone_domains(
    node: str,
    topology: NodeTopology,
    resource: str,
    node_free: int,
    own: Mapping[str, Mapping[str, int]] | None = None,
    reserved: Mapping[str, Mapping[str, int]] | None = None,
) -> NodeZones | None:
    """The node's GPU domains, one per NUMA zone holding ``resource``; None without such zones.

    ``node_free``: the node's free cards (allocatable minus pods and other plans); ``own`` and
    ``reserved``: zone -> resource -> cards this plan, and the other plans, placed in each zone.
    Free device names are made up (``node-0/2``): without DRA they name cards, not devices.
    """
    own, reserved = own or {}, reserved or {}
    zones = [(z, r) for z in topology.zones if (r := z.resource(resource)) is not None and r.allocatable > 0]
    if not zones:
        return None
    free: dict[str, int] = {}
    given_back: dict[str, int] = {}
    for z, r in zones:
        used_here = r.allocatable - r.available
        mine = min(_units(own, z.name, resource), used_here)
        used = max(used_here - mine, _units(reserved, z.name, resource))
        free[z.name] = max(0, r.allocatable - used)
        given_back[z.name] = mine
    total = sum(free.values())
    note = None
    if total > node_free:
        surplus = total - node_free
        for name in free:  # first where the plan's own cards were given back (pods not running yet)
            cut = min(surplus, given_back[name], free[name])
            free[name] -= cut
            surplus -= cut
        taken = dict.fromkeys(free, 0)
        while surplus > 0:  # then from the zone with the most free cards (the last one on ties)
            name = max(free, key=lambda n: (free[n], natural(n)))
            free[name] -= 1
            taken[name] += 1
            surplus -= 1
        if any(taken.values()):
            cut_text = ", ".join(f"{n} {c}" for n, c in taken.items() if c)
            note = (
                f"{node}: its NodeResourceTopology shows {total} {resource} free, its pods and "
                f"plans leave {node_free}: counted as used in zone {cut_text}"
            )
    elif total < node_free:
        note = (
            f"{node}: its NodeResourceTopology shows {total} {resource} free, fewer than the "
            f"{node_free} its pods and plans leave: planned with {total}"
        )
    domains = []
    for z, r in zones:
        cpu = z.resource("cpu")
        names = tuple(f"{z.name}/{i}" for i in range(r.allocatable - free[z.name], r.allocatable))
        domains.append(Domain(z.name, r.allocatable, names, cpu.allocatable if cpu else None))
    return NodeZones(tuple(domains), sum(free.values()), note)
