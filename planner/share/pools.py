"""The plans' requests gathered by the nodes they compete for.

Notes
-----
Plans share a resource type's nodes when their types name the same Kubernetes resource
(``nvidia.com/gpu``) on the same usable nodes: such requests form one *pool*, and pools are
independent (no card of one pool is a card of another). Each pool is one
:class:`~planner.model.options.TypeProblem` whose items are the requests of every plan in it, so
the node-class model, the greedy placement and the bounds of :mod:`planner.search` serve several
plans as they serve one.

A request with a range becomes an item whose splits are those of every count it may take, most
cards first, then best score: choosing a split is choosing a count. A range that allows 0 adds a
split of no instances. Splits keep their score (the split table's term with ``p`` the chosen count), so the
search's score is the plans' total score; growth weighs counts in stages of its own
(:mod:`planner.share.growth`).

Two plans whose types select overlapping but different node sets (one plan's ``P4`` nodes are
some of another's ``gpu`` nodes) are *entangled*: no pool models them exactly, and the entry then
plans one plan after another (never reported optimal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property

from planner.base.strategies import Strategy, Topology
from planner.model.options import Item, NodesMemo, Split, TypeProblem, build_problems, splits_of
from planner.model.result import Previous as PlanPrevious
from planner.model.spec import PlanSpec, Request, ResourceKind, ResourceType, Snapshot
from planner.search.place import NodeCounts, Previous


@dataclass(frozen=True)
class Entry:
    """One request of one plan, as a pool sees it."""

    plan: int  # index of its plan in the input
    request: Request  # as the plan asks it (``cards`` is its max)
    label: str  # unique among all plans' requests: ``<plan>:<operator>:<type>``
    strategy: Strategy
    scoring: str
    topology: Topology
    level: int  # 0 for the highest priority among the plans, 1 for the next, ...
    held: int  # cards it holds now (its plan holds an applied placement), else 0
    previous: tuple[int, Mapping[str, int]] | None  # (units, node -> instances) it had


@dataclass
class Pool:
    """Nodes several plans' types share, and the requests that compete for them."""

    resource: ResourceType  # the first plan's type (the others name the same resource)
    nodes: tuple[tuple[str, int], ...]  # (name, free units): no plan's instances counted
    entries: list[Entry] = field(default_factory=list)
    _items: dict[tuple[str, tuple[int, ...]], Item] = field(default_factory=dict, repr=False)
    _by_plan: dict[int, list[Entry]] = field(default_factory=dict, repr=False)
    _shapes: dict[tuple[object, ...], tuple[tuple[Split, ...], tuple[tuple[int, int, str], ...]]] = field(
        default_factory=dict, repr=False
    )

    def of(self, plan: int) -> list[Entry]:
        """``plan``'s entries, in pool order: an index built on first use (after the pool is
        gathered), so that reading one plan's answer does not walk every plan's requests."""
        if sum(map(len, self._by_plan.values())) != len(self.entries):
            self._by_plan = {}
            for e in self.entries:
                self._by_plan.setdefault(e.plan, []).append(e)
        return self._by_plan.get(plan, [])

    @cached_property
    def free(self) -> int:
        return sum(f for _, f in self.nodes)

    @cached_property
    def largest(self) -> int:
        return max((f for _, f in self.nodes), default=0)

    def counts(self, entry: Entry, low: int | None = None, high: int | None = None) -> list[int]:
        """The counts ``entry`` may take in ``[low, high]`` (default its range), most first. Counts
        above the pool's free cards can never fit and are left out, except the lowest."""
        lo = entry.request.least if low is None else low
        hi = entry.request.cards if high is None else high
        return [c for c in range(hi, lo - 1, -1) if c == lo or c <= self.free]

    def item(self, index: int, entry: Entry, counts: Sequence[int]) -> Item:
        """The item choosing among ``counts``: their splits, most cards first, then best score."""
        key = (entry.label, tuple(counts))
        made = self._items.get(key)
        if made is None:  # made at its first index: a pool's problem numbers 2,000 items a pool
            # at 65,000 nodes, each renumbered by dataclasses.replace when made at 0 (15 ms)
            made = self._items[key] = self._item(index, entry, counts)
        return made if made.index == index else replace(made, index=index)

    def _item(self, index: int, entry: Entry, counts: Sequence[int]) -> Item:
        machines, strategy, scoring = entry.request.machines, entry.strategy, entry.scoring
        shape = (strategy, machines, scoring, tuple(counts))
        made = self._shapes.get(shape)
        if made is None:  # requests of one shape (thousands, in a large pool) share their splits
            made = self._shapes[shape] = self._splits(strategy, machines, scoring, counts)
        splits, rejected = made
        request = Request(
            entry.label, entry.request.resource, max(counts, default=0), entry.request.machines,
            min(counts, default=0),
        )  # fmt: skip
        return Item(index, request, entry.strategy, splits, rejected, entry.topology)

    def _splits(
        self, strategy: Strategy, machines: int | None, scoring: str, counts: Sequence[int]
    ) -> tuple[tuple[Split, ...], tuple[tuple[int, int, str], ...]]:
        n, largest = len(self.nodes), self.largest
        splits: list[Split] = []
        rejected: list[tuple[int, int, str]] = []
        for c in counts:
            if c == 0:
                continue
            good, bad = splits_of(strategy, c, machines, n, largest, scoring)
            splits.extend(good)
            rejected.extend(bad)
        if 0 in counts:  # runs nothing: no instance, of a size the others use already
            splits.append(Split(0, min((s.units for s in splits), default=1), Fraction(0)))
        splits.sort(key=lambda s: -s.instances * s.units)  # stable: best score first per count
        return tuple(splits), tuple(rejected)

    def problem(self, chosen: Sequence[tuple[Entry, Sequence[int]]]) -> TypeProblem:
        """The pool's problem for these entries, each with the counts it may take."""
        items = tuple(self.item(i, e, counts) for i, (e, counts) in enumerate(chosen))
        return TypeProblem(self.resource, self.nodes, items)

    def previous(self, entries: Sequence[Entry]) -> Previous:
        return {e.label: e.previous for e in entries if e.previous is not None}


def fewest(item: Item) -> int:
    """The index of the best split of the fewest cards ``item`` may take (splits run most cards
    first): its min, or, when the strategy has no split for the min (3 cards one instance per node
    on two nodes), the least count above it that has one. The item must have splits."""
    splits = item.splits
    s = len(splits) - 1
    least = splits[s].instances * splits[s].units
    while s and splits[s - 1].instances * splits[s - 1].units == least:
        s -= 1
    return s


def label(plan: int, request: Request) -> str:
    """Unique among every plan's requests: an operator may ask for cards of several types."""
    return f"{plan}:{request.operator}:{request.resource}"


def held_cards(prev: PlanPrevious | None, request: Request) -> tuple[int, tuple[int, dict[str, int]] | None]:
    """Cards a request holds in its plan's previous placement, and that placement."""
    if prev is None:
        return 0, None
    placed = prev.get((request.operator, request.resource))
    if placed is None:
        return 0, None
    return placed.units * sum(placed.nodes.values()), (placed.units, dict(placed.nodes))


@dataclass
class Pools:
    """Every pool of a set of plans, and per plan the problems it was built from."""

    pools: list[Pool]
    of_plan: list[list[int]]  # plan -> the pools it has requests in
    problems: list[list[TypeProblem]]  # plan -> its own problems (each request at its max)
    entangled: bool  # some types overlap without being equal: no exact joint model
    special: list[bool]  # plan -> needs the single-plan planner to place it (devices, zones, CPU)
    where: dict[tuple[int, str], int]  # (plan, type name) -> its pool

    def pool_of(self, plan: int, resource: str) -> Pool:
        """The pool holding ``plan``'s requests of the type named ``resource``."""
        return self.pools[self.where[plan, resource]]


def build_pools(
    specs: Sequence[PlanSpec], snap: Snapshot, previous: Sequence[PlanPrevious | None], levels: Sequence[int]
) -> Pools:
    """Pools of every plan's requests; elastic requests with their whole range."""
    by_key: dict[tuple[str, frozenset[str]], Pool] = {}
    of_plan: list[list[int]] = []
    problems: list[list[TypeProblem]] = []
    special: list[bool] = []
    order: list[tuple[str, frozenset[str]]] = []
    memo: NodesMemo = {}
    where: dict[tuple[int, str], int] = {}
    # by the node tuple's identity: plans that share a memo entry share the tuple, and hashing
    # a tuple of every node once per plan costs more than the rest of the gathering
    names: dict[int, tuple[tuple[tuple[str, int], ...], frozenset[str]]] = {}
    for p, spec in enumerate(specs):
        mine = build_problems(spec, snap, memo=memo)
        problems.append(mine)
        special.append(
            any(pr.topology_aware or pr.zoned or pr.resource.kind is ResourceKind.CPU for pr in mine)
            or any(spec.operator(r.operator).cpu_request is not None for r in spec.requests)
        )
        touched: list[int] = []
        for pr in mine:
            if id(pr.nodes) not in names:  # the tuple is kept alive beside its names
                names[id(pr.nodes)] = (pr.nodes, frozenset(n for n, _ in pr.nodes))
            key = (pr.resource.resource_name, names[id(pr.nodes)][1])
            if key not in by_key:
                by_key[key] = Pool(pr.resource, pr.nodes)
                order.append(key)
            pool = by_key[key]
            for it in pr.items:
                held, before = held_cards(previous[p], it.request)
                pool.entries.append(
                    Entry(
                        p, it.request, label(p, it.request), it.strategy, spec.scoring,
                        it.topology, levels[p], held, before,
                    )
                )  # fmt: skip
            idx = order.index(key)
            where[p, pr.resource.name] = idx
            if idx not in touched:
                touched.append(idx)
        of_plan.append(touched)
    entangled = False
    keys = list(order)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if a[0] == b[0] and a[1] != b[1] and a[1] & b[1]:
                entangled = True
    return Pools([by_key[k] for k in order], of_plan, problems, entangled, special, where)


def reservations(
    pools: Sequence[Pool], placed: Mapping[str, tuple[int, NodeCounts]], only: int | None = None
) -> dict[str, dict[str, int]]:
    """node -> resource name -> units the placed entries hold (CPU in millicores); ``only``: just
    that plan's entries."""
    out: dict[str, dict[str, int]] = {}
    for pool in pools:
        rn = pool.resource.resource_name
        per = 1000 if pool.resource.kind is ResourceKind.CPU else 1
        held: dict[str, int] = {}  # summed flat first: one resource per pool
        for e in pool.entries if only is None else pool.of(only):
            got = placed.get(e.label)
            if got is None:
                continue
            each = got[0] * per
            for node, k in got[1].items():
                if k:
                    held[node] = held.get(node, 0) + k * each
        for node, k in held.items():
            slot = out.setdefault(node, {})
            slot[rn] = slot.get(rn, 0) + k
    return out


def held_in(pool: Pool, placed: Mapping[str, tuple[int, NodeCounts]], plan: int) -> dict[str, int]:
    """node -> units (whole: cards, or CPU cores) ``plan``'s placed entries hold in ``pool``."""
    held: dict[str, int] = {}
    for e in pool.of(plan):
        got = placed.get(e.label)
        if got is not None:
            units = got[0]
            for node, k in got[1].items():
                if k:
                    held[node] = held.get(node, 0) + k * units
    return held


def without(
    everyone: Mapping[str, Mapping[str, int]], mine: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """``everyone``'s units less ``mine`` (what the other plans hold)."""
    out = {node: dict(units) for node, units in everyone.items()}
    for node, units in mine.items():
        for rn, k in units.items():
            out[node][rn] -= k
    return out
