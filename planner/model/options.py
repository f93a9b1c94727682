"""Each request's admissible splits, and the per-type problems the search solves.

Notes
-----
Which splits a request admits and what each is worth come from the tables in
:mod:`planner.base.strategies`; this module only applies them to a spec and a snapshot.

Resource types are independent (a request's units of one type never touch another type's nodes)
and the score is a sum of per-request terms, so the whole problem splits into one
:class:`TypeProblem` per resource type.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

from planner.base.once import once
from planner.base.strategies import SCORINGS, STRATEGIES, Strategy, StrategyRule, Topology
from planner.model.devices import STANDARD_DOMAIN, Device, Domain, domains_of
from planner.model.spec import Node, OperatorSpec, PlanSpec, Request, ResourceKind, ResourceType, Snapshot
from planner.model.zones import zone_domains


@dataclass(frozen=True)
class Split:
    """``instances`` instances of ``units`` cards each, worth ``score``."""

    instances: int
    units: int
    score: Fraction

    @property
    def text(self) -> str:
        return f"{self.instances}×{self.units}"


@dataclass(frozen=True)
class Item:
    """One request on one resource type, with its admissible splits, best first."""

    index: int
    request: Request
    strategy: Strategy
    splits: tuple[Split, ...]
    rejected: tuple[tuple[int, int, str], ...]  # (instances, units, why not admissible)
    topology: Topology = Topology.PREFERRED

    @property
    def rule(self) -> StrategyRule:
        return STRATEGIES[self.strategy]

    @property
    def distinct(self) -> bool:
        """Instances need one node each (pod anti-affinity)."""
        return self.rule.distinct

    @property
    def label(self) -> str:
        return self.request.operator


@dataclass(frozen=True)
class Host:
    """What CPU sizing needs to know of a node: its CPUs, its cards, its kubelet's policy."""

    cpu: int  # allocatable millicores
    cards: int  # allocatable cards of the type (devices, with DRA)
    cpu_free: int  # millicores no pod or plan holds
    single_numa: bool = False  # topologyManagerPolicy single-numa-node (from its NodeResourceTopology)


@dataclass(frozen=True)
class TypeProblem:
    """Everything the search needs for one resource type."""

    resource: ResourceType
    nodes: tuple[tuple[str, int], ...]  # usable nodes of the type: (name, free units)
    items: tuple[Item, ...]
    any_node: bool = False  # no node carries the type's labels: every schedulable node is used
    # nodes whose GPUs are known one by one (ResourceSlices): their domains, for topology, and
    # each device (driver, attributes), for the claims that pin an instance to its devices
    domains: Mapping[str, tuple[Domain, ...]] = field(default_factory=dict, compare=False)
    devices: Mapping[str, Mapping[str, Device]] = field(default_factory=dict, compare=False)
    domain_attribute: str = STANDARD_DOMAIN
    # nodes whose domains are NUMA zones of a NodeResourceTopology (no devices: cards are counted,
    # not named), and what a reader should know about how their zones were counted
    zoned: frozenset[str] = frozenset()
    zone_notes: tuple[str, ...] = ()
    cpu_note: str | None = None  # a CPU type: the CPU the plan's GPU pods take on its nodes
    # the usable nodes themselves, for :attr:`hosts` (read only by CPU sizing and its warnings)
    usable: tuple[Node, ...] = field(default=(), compare=False, repr=False)

    @property
    def pure_packing(self) -> bool:
        """Every request has one split, and none needs several distinct nodes: a bin packing
        (:mod:`planner.search.patterns` packs or refutes it)."""
        return bool(self.items) and all(
            len(it.splits) == 1 and (not it.distinct or it.splits[0].instances == 1) for it in self.items
        )

    @property
    def topology_aware(self) -> bool:
        return bool(self.domains)

    @property
    def note(self) -> str | None:
        """What a reader of the plan should know about where this type's nodes come from."""
        if not self.any_node:
            return None
        return (
            f"no node is labelled {self.resource.selector_text}: using the free "
            f"{self.resource.resource_name} of every schedulable node"
        )

    @once
    def hosts(self) -> dict[str, Host]:
        """Per usable node, for sizing CPU requests: allocatable cpu (millicores) and cards, free
        cpu (millicores), and whether its kubelet refuses pods not aligned on one NUMA node.
        Worked out on first use: most plans ask for no CPU and never need it."""
        name = self.resource.resource_name
        return {
            n.name: Host(
                cpu=n.allocatable_units("cpu"),
                cards=sum(d.total for d in self.domains[n.name])
                if n.name in self.domains
                else n.allocatable_units(name),
                cpu_free=n.free_units("cpu"),
                single_numa=n.topology is not None and n.topology.single_numa,
            )
            for n in self.usable
        }

    @once
    def largest(self) -> int:
        """The most free units of one node (worked out once: a problem's nodes do not change)."""
        return max((free for _, free in self.nodes), default=0)

    @property
    def upper_bound(self) -> Fraction:
        return total(it.splits[0].score for it in self.items if it.splits)


def total(scores: Iterable[Fraction]) -> Fraction:
    """The exact sum of ``scores``: numerators summed per denominator, then the few sums added.

    Scores have few denominators (the split tables' terms), and adding Fractions one at a time
    reduces each sum by its gcd: 8,000 scores (50 plans' answers) took 6 ms so, 1 ms this way.
    """
    by: dict[int, int] = {}
    for s in scores:
        by[s.denominator] = by.get(s.denominator, 0) + s.numerator
    return sum((Fraction(n, d) for d, n in by.items()), Fraction(0))


def effective_strategy(spec: PlanSpec, request: Request) -> Strategy:
    """CPU is never split; a machine count fixes the split; else the operator's key strategy."""
    if spec.resource(request.resource).kind is ResourceKind.CPU:
        return Strategy.WHOLE
    if request.machines:
        return Strategy.SPECIAL
    return spec.operator(request.operator).key_strategy


@lru_cache(maxsize=4096)
def _splits(
    strategy: Strategy, p: int, machines: int | None, n: int, largest: int, scoring: str
) -> tuple[tuple[Split, ...], tuple[tuple[int, int, str], ...]]:
    """Admissible splits, best first, and the rejected ones; requests of one shape share them."""
    rule, score = STRATEGIES[strategy], SCORINGS[scoring].score
    splits, rejected = [], []
    for k, why in rule.admissible(p, n, largest, machines):
        if why is None:
            splits.append(Split(k, p // k, score(strategy, p, k, n)))
        else:
            rejected.append((k, p // k if k else 0, why))
    # best score first; among equals, the split the strategy prefers (spread or concentrate)
    splits.sort(key=lambda s: (-s.score, s.instances if rule.concentrates else -s.instances))
    return tuple(splits), tuple(rejected)


def splits_of(
    strategy: Strategy, cards: int, machines: int | None, n: int, largest: int, scoring: str
) -> tuple[tuple[Split, ...], tuple[tuple[int, int, str], ...]]:
    """A request's admissible splits for ``cards``, best first, and the rejected ones (cached)."""
    return _splits(strategy, cards, machines, n, largest, scoring)


def build_item(
    index: int,
    request: Request,
    strategy: Strategy,
    n: int,
    largest: int,
    scoring: str,
    topology: Topology = Topology.PREFERRED,
) -> Item:
    splits, rejected = _splits(strategy, request.cards, request.machines, n, largest, scoring)
    return Item(index, request, strategy, splits, rejected, topology)


def _gpu_domains(
    node: Node, resource: ResourceType, spec: PlanSpec, zones: bool
) -> tuple[tuple[Domain, ...], int, bool, str | None] | None:
    """A GPU node's domains, free cards, whether they are NUMA zones, and a note; None: no detail.

    Devices published one by one (ResourceSlices) come first; else, when ``zones`` (some request
    cares), the node's NodeResourceTopology zones that hold the type's resource; else the node is
    one domain (nothing returned).
    """
    if node.devices:
        domains = domains_of(node.devices, spec.topology_attribute)
        return domains, sum(len(d.free) for d in domains), False, None
    if node.topology is None or not zones:
        return None
    found = zone_domains(
        node.name,
        node.topology,
        resource.resource_name,
        node.free(resource.resource_name),
        node.own_zones,
        node.reserved_zones,
    )
    return None if found is None else (found.domains, found.free, True, found.note)


def _cares_about_zones(op: OperatorSpec) -> bool:
    """NUMA zones are advisory without DRA (the kubelet picks the NUMA node), and planning on them
    models every node: a type uses its nodes' zones only when one of its operators keeps its GPUs
    in one (``topology`` other than ``none``) or sizes its CPU by them (``numaShare``)."""
    return op.topology is not Topology.NONE or (op.cpu_request is not None and op.cpu_request.numa_share)


@dataclass(frozen=True)
class TypeNodes:
    """A type's usable nodes as a problem sees them: free units, domains, devices, zones."""

    nodes: tuple[tuple[str, int], ...]
    any_node: bool
    domains: Mapping[str, tuple[Domain, ...]]
    devices: Mapping[str, Mapping[str, Device]]
    zoned: frozenset[str]
    notes: tuple[str, ...]
    usable: tuple[Node, ...]
    largest: int  # the most free units of one node (every plan's problem of the type asks it)


NodesMemo = dict[tuple[object, ...], TypeNodes]


def _type_nodes(spec: PlanSpec, snap: Snapshot, resource: ResourceType, zones: bool) -> TypeNodes:
    any_node = resource.any_node_when_unlabelled and not snap.labelled(resource)
    usable = snap.usable(None if any_node else resource, spec.tolerations)
    gpus = resource.kind is ResourceKind.GPU
    domains: dict[str, tuple[Domain, ...]] = {}
    free: dict[str, int] = {}
    zoned: set[str] = set()
    notes: list[str] = []
    rn = resource.resource_name
    # free units by node shape: nodes read alike share their allocatable tuple (parse_nodes) and,
    # with nothing used on them, have the same free units. At 65,000 nodes in 6 shapes, the 4
    # types' nodes took 59 ms asked one by one, 43 ms so (median of 15, load 3.3)
    shapes: dict[int, int] = {}
    for n in usable:
        detail = gpus and (n.devices or n.topology is not None)  # else _gpu_domains has none
        found = _gpu_domains(n, resource, spec, zones) if detail else None
        if found is None:
            if n.used:
                free[n.name] = n.free(rn)
            elif (f := shapes.get(id(n.allocatable))) is not None:
                free[n.name] = f
            else:
                free[n.name] = shapes[id(n.allocatable)] = n.free(rn)
            continue
        domains[n.name], free[n.name], numa, note = found
        if numa:
            zoned.add(n.name)
        if note:
            notes.append(note)
    nodes = tuple((n.name, free[n.name]) for n in usable)
    devices = {n.name: {d.name: d for d in n.devices} for n in usable if n.name in domains and n.devices}
    largest = max(free.values(), default=0)
    return TypeNodes(
        nodes, any_node, domains, devices, frozenset(zoned), tuple(notes), tuple(usable), largest
    )


def build_problems(
    spec: PlanSpec, snap: Snapshot, only: Collection[str] | None = None, memo: NodesMemo | None = None
) -> list[TypeProblem]:
    """One problem per resource type that has requests, in the spec's resource order (``only``:
    just the types of these names). ``memo``: a type's nodes worked out once for every plan that
    sees the same nodes alike (planning several plans on one snapshot)."""
    out = []
    for resource in spec.resources:
        if only is not None and resource.name not in only:
            continue
        requests = [r for r in spec.requests if r.resource == resource.name]
        if not requests:
            continue
        gpus = resource.kind is ResourceKind.GPU
        zones = gpus and any(_cares_about_zones(spec.operator(r.operator)) for r in requests)
        key = (resource, spec.tolerations, zones, spec.topology_attribute)
        found = memo.get(key) if memo is not None else None
        if found is None:
            found = _type_nodes(spec, snap, resource, zones)
            if memo is not None:
                memo[key] = found
        largest = found.largest
        items = tuple(
            build_item(
                i, r, effective_strategy(spec, r), len(found.nodes), largest, spec.scoring,
                spec.operator(r.operator).topology if gpus else Topology.NONE,
            )
            for i, r in enumerate(requests)
        )  # fmt: skip
        out.append(
            TypeProblem(
                resource, found.nodes, items, found.any_node, found.domains, found.devices,
                spec.topology_attribute, zoned=found.zoned, zone_notes=found.notes, usable=found.usable,
            )
        )  # fmt: skip
    return out
