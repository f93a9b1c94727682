"""The plan as a picture: every node a row of card cells, identical nodes grouped (pure, no I/O).

Notes
-----
What a person reads at a glance is which service sits on which cards of which node, and what is
left. So each node becomes a row of cells, one per card: cells of one instance side by side in
the colour of its plan and service, cards held by pods no shown plan owns (or devices claims
hold) apart, free cards last. Where the GPUs are known one by one (DRA), a cell is a device,
cells sit in their domains, and an instance whose devices span several domains is marked.

A cluster of 5,000 nodes has far fewer *kinds* of node: nodes of one type whose cells look the
same (same services, same instance sizes, same free and foreign cards) form a :class:`Group`
that the page draws once, with a count, and lists its nodes only when the reader opens it.

Several plans share one page (the operator shows the whole cluster): :func:`build_view` takes a
list of :class:`Shown` plans, each either planned here (:func:`shown_result`) or read back from a
plan's status (:func:`shown_status`). Fields that only some plans have (priority, admission,
elastic requests' cards below their max) are shown when present.

The page itself is drawn by :mod:`planner.output.page`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import Any

from planner.model.devices import STANDARD_DOMAIN, natural
from planner.model.result import Allocation, PlanResult, zones_text
from planner.model.spec import Node, PlanSpec, ResourceKind, ResourceType, Snapshot

TYPE_LABEL = "gpuplan.ragnaros.io/gpu-type"
DEFAULT_CARDS = "nvidia.com/gpu"


def _num(x: Fraction | float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, Fraction) and x.denominator == 1:
        return str(x.numerator)
    return f"{float(x):.4g}"


@dataclass(frozen=True)
class RequestRow:
    """One request of a plan: its split, where it runs, its score term and why not better."""

    operator: str
    resource: str
    strategy: str
    split: str  # "4×2" (instances × cards each)
    cards: int
    nodes: int  # nodes its instances run on
    term: str
    notes: tuple[str, ...] = ()  # why not a better split, from the explanation
    explained: bool = False  # notes were asked for (a plan made here), so none means none
    elastic: str | None = None  # "6 of 8 cards: <why below max>" when the request is a range


@dataclass(frozen=True)
class Shown:
    """One plan as the page shows it."""

    namespace: str
    name: str
    allocations: tuple[Allocation, ...]
    resources: tuple[ResourceType, ...] = ()
    topology_attribute: str = STANDARD_DOMAIN
    phase: str | None = None  # a plan read from the cluster: its status phase
    feasible: bool | None = None
    optimal: bool | None = None
    score: str = "-"
    proof: str = ""  # how the score is known: proven optimal, or the bound a better plan could reach
    message: str | None = None
    requests: tuple[RequestRow, ...] = ()
    types: tuple[str, ...] = ()  # per resource type: nodes, free cards, method, bound
    warnings: tuple[str, ...] = ()
    priority: int | None = None
    admitted: bool | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _rows(
    allocations: Iterable[Allocation], notes: Mapping[tuple[str, str], Sequence[str]], explained: bool
) -> list[RequestRow]:
    return [
        RequestRow(
            operator=a.operator,
            resource=a.resource,
            strategy=a.strategy.value if a.strategy is not None else "-",
            split=f"{a.instances}×{a.units}",
            cards=a.units_total,
            nodes=len(a.nodes),
            term=_num(a.term),
            notes=tuple(notes.get((a.operator, a.resource), ())),
            explained=explained,
        )
        for a in allocations
    ]


def shown_result(
    spec: PlanSpec, result: PlanResult, notes: Mapping[tuple[str, str], Sequence[str]] | None = None
) -> Shown:
    """A plan planned here (``gpuplan plan``), with the explanation's "why not" per request."""
    allocations = result.allocations if result.feasible else result.partial
    if result.feasible and result.optimal:
        proof = "optimal: no deployable plan scores higher (proven)"
    elif result.feasible:
        proof = f"best found in time; no plan scores more than {_num(result.bound)}"
    else:
        proof = f"no deployable plan: {result.reason or 'see the conflicts'}"
    types = []
    for p in result.problems:
        unit = "cards" if p.resource.kind is ResourceKind.GPU else "cores"
        st = next((s for s in result.stats if s.resource == p.resource.name), None)
        how = (
            f"; decided by {st.method} ({st.status}) in {st.seconds:.2f}s, {st.branches} branches"
            if st
            else ""
        )
        types.append(
            f"{p.resource.name}: {len(p.nodes)} usable nodes, {sum(f for _, f in p.nodes)} {unit} free, "
            f"score at most {_num(p.upper_bound)}{how}"
        )
    return Shown(
        namespace=spec.namespace,
        name=spec.name,
        allocations=allocations,
        resources=spec.resources,
        topology_attribute=spec.topology_attribute,
        feasible=result.feasible,
        optimal=result.optimal,
        score=_num(result.score),
        proof=proof,
        message=result.reason,
        requests=tuple(_rows(allocations, notes or {}, notes is not None)),
        types=tuple(types),
        warnings=result.warnings + tuple(f"conflict {c.resource}: {c.detail}" for c in result.conflicts),
    )


def shown_status(
    namespace: str,
    name: str,
    status: Mapping[str, Any],
    allocations: tuple[Allocation, ...],
    spec: PlanSpec | None = None,
    raw_spec: Mapping[str, Any] | None = None,
    warnings: Sequence[str] = (),
) -> Shown:
    """A plan read back from the cluster: its ``status`` (score, phase, message) and the
    ``allocations`` read from it (``planner.read_allocations``, by the caller: reading outside
    documents is not this layer's job).

    ``spec`` (the plan's parsed spec, None when it does not parse) tells which nodes carry which
    type; ``raw_spec`` gives the fields only some plans have (``priority``).
    """
    score = status.get("score")
    optimal = status.get("optimal")
    proof = ""
    if score is not None and isinstance(optimal, bool):
        proof = "optimal (proven)" if optimal else "best found in time"
    priority = (raw_spec or {}).get("priority")
    admitted = status.get("admitted")
    elastic = {
        (str(e.get("operator")), str(e.get("resource"))): e
        for e in status.get("elastic") or []
        if isinstance(e, Mapping)
    }
    rows = []
    for row in _rows(allocations, {}, False):
        e = elastic.get((row.operator, row.resource))
        if e is not None:
            text = f"{e.get('cards', row.cards)} of {e.get('max', '?')} cards"
            row = replace(row, elastic=text + (f": {e['reason']}" if e.get("reason") else ""))
        rows.append(row)
    return Shown(
        namespace=namespace,
        name=name,
        allocations=allocations,
        resources=spec.resources if spec else (),
        topology_attribute=spec.topology_attribute if spec else STANDARD_DOMAIN,
        phase=str(status.get("phase")) if status.get("phase") else None,
        optimal=optimal if isinstance(optimal, bool) else None,
        score="-" if score is None else _num(float(score)),
        proof=proof,
        message=status.get("message"),
        requests=tuple(rows),
        warnings=tuple(warnings),
        priority=priority if isinstance(priority, int) else None,
        admitted=admitted if isinstance(admitted, bool) else None,
    )


# --- the picture -------------------------------------------------------------------------------

FREE, FOREIGN = "free", "foreign"


@dataclass(frozen=True)
class Part:
    """A run of cells in a row: one instance's cards, or free or foreign cards.

    With devices known one by one, a part is one device (``devices`` names it) and an instance
    may be several parts; ``domain`` then names the domain its cell sits in.
    """

    kind: str  # "instance" | FREE | FOREIGN
    cards: int
    colour: int = -1  # index into View.legend, for instances
    instance: str = ""  # "plan-index:operator/resource#n": one id per instance on the page
    title: str = ""
    straddles: bool = False
    device: str = ""
    domain: str | None = None

    def pattern(self) -> tuple[object, ...]:
        """What the reader sees of this part (no names): identical rows group on it."""
        return (self.kind, self.cards, self.colour, self.straddles, self.domain)


@dataclass(frozen=True)
class Row:
    node: str
    type: str
    parts: tuple[Part, ...]
    cards: int
    free: int
    foreign: int
    cordoned: bool = False
    over: int = 0  # planned cards beyond what the node has (a stale status, or a node that shrank)

    def pattern(self) -> tuple[object, ...]:
        return (self.type, self.cordoned, self.over, tuple(p.pattern() for p in self.parts))


@dataclass(frozen=True)
class Group:
    """Nodes of one type whose rows look the same; ``rows[0]`` is drawn for all of them."""

    type: str
    rows: tuple[Row, ...]

    @property
    def count(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class LegendEntry:
    """One colour: a plan's service (operator), with its splits per type ("P4 2×2")."""

    colour: int
    plan: str
    operator: str
    splits: tuple[str, ...]


@dataclass(frozen=True)
class TypeTotals:
    type: str
    nodes: int
    cards: int
    planned: int
    foreign: int
    free: int


@dataclass(frozen=True)
class View:
    title: str
    plans: tuple[Shown, ...]
    legend: tuple[LegendEntry, ...]
    groups: tuple[Group, ...]
    totals: tuple[TypeTotals, ...]
    devices: bool  # some node's GPUs are known one by one (cells are devices)
    warnings: tuple[str, ...] = field(default=())

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    @cached_property
    def _colours(self) -> dict[tuple[str, str], int]:
        return {(e.plan, e.operator): e.colour for e in self.legend}

    def instance_info(self) -> dict[str, tuple[str, str, str, int, int]]:
        """Per request drawn ("plan-index:operator/resource", the prefix of its instance ids): plan,
        operator, resource, instances and cards each; the page's script writes tooltips from it."""
        out = {}
        for index, plan in enumerate(self.plans):
            for a in plan.allocations:
                out[f"{index}:{a.operator}/{a.resource}"] = (
                    plan.key,
                    a.operator,
                    a.resource,
                    a.instances,
                    a.units,
                )
        return out

    def colour_of(self, plan: str, operator: str) -> int | None:
        """The legend colour of a plan's service (None: not drawn, such as CPU cores only)."""
        return self._colours.get((plan, operator))


@dataclass
class _Placed:
    """Instances of every shown plan on one node."""

    # colour, id, cards, title, straddles NUMA zones
    counted: list[tuple[int, str, int, str, bool]] = field(default_factory=list)
    devices: dict[str, tuple[int, str, str, bool]] = field(
        default_factory=dict
    )  # dev -> colour, id, title, straddles


def _gpu_types(plans: Sequence[Shown]) -> list[ResourceType]:
    seen: dict[str, ResourceType] = {}
    for p in plans:
        for r in p.resources:
            if r.kind is ResourceKind.GPU:
                seen.setdefault(r.name, r)
    return list(seen.values())


def _node_type(node: Node, types: Sequence[ResourceType]) -> tuple[str, tuple[str, ...]]:
    """The node's type (for grouping) and the resource names its cards are counted in."""
    chosen = [t for t in types if t.selects(node.label_map)]
    if chosen:
        return chosen[0].name, tuple(sorted({t.resource_name for t in chosen}))
    return node.label_map.get(TYPE_LABEL, "-"), (DEFAULT_CARDS,)


def _place(
    plans: Sequence[Shown], domain_of: Mapping[tuple[str, str], str]
) -> tuple[dict[str, _Placed], list[LegendEntry]]:
    placed: dict[str, _Placed] = {}
    legend: list[LegendEntry] = []
    for p_index, plan in enumerate(plans):
        gpu = {r.name for r in plan.resources if r.kind is ResourceKind.GPU}
        drawn = [
            a for a in plan.allocations if not plan.resources or a.resource in gpu
        ]  # cores are not cards
        colours: dict[str, int] = {}
        for a in drawn:
            colours.setdefault(a.operator, len(legend) + len(colours))
        for operator, colour in colours.items():
            splits = tuple(f"{a.resource} {a.instances}×{a.units}" for a in drawn if a.operator == operator)
            legend.append(LegendEntry(colour, plan.key, operator, splits))
        for a in drawn:
            colour = colours[a.operator]
            devices = dict(a.devices)
            zones = dict(a.zones)
            n = 0
            for node, count in a.nodes:
                here = placed.setdefault(node, _Placed())
                lists = devices.get(node, ())
                zone_lists = zones.get(node, ())
                for j in range(count):
                    ident = f"{p_index}:{a.operator}/{a.resource}#{n}"
                    title = (
                        f"{plan.key} {a.operator} {a.resource} instance {n + 1}/{a.instances}, "
                        f"{a.units} card(s)"
                    )
                    n += 1
                    if j < len(lists):
                        devs = lists[j]
                        spans = {domain_of.get((node, d), "") for d in devs}
                        straddles = len(spans) > 1
                        title += f" on {', '.join(devs)}" + (" (straddles domains)" if straddles else "")
                        for d in devs:
                            here.devices[d] = (colour, ident, title, straddles)
                        continue
                    straddles = False
                    if j < len(zone_lists):
                        straddles = len(zone_lists[j]) > 1
                        title += f" in NUMA zone {zones_text(zone_lists[j])}" + (
                            " (straddles zones)" if straddles else ""
                        )
                    here.counted.append((colour, ident, a.units, title, straddles))
    return placed, legend


def _counted_row(node: Node, type_: str, names: tuple[str, ...], here: _Placed | None) -> Row:
    total = sum(node.allocatable_units(n) for n in names)
    used = sum(node.allocatable_units(n) - node.free_units(n) for n in names)
    parts: list[Part] = []
    planned = 0
    for colour, ident, cards, title, straddles in here.counted if here else ():
        parts.append(Part("instance", cards, colour, ident, title, straddles=straddles))
        planned += cards
    foreign = max(0, min(used, total - planned))
    free = max(0, total - planned - foreign)
    if foreign:
        parts.append(Part(FOREIGN, foreign, title=f"{foreign} card(s) held by pods no shown plan owns"))
    if free:
        parts.append(Part(FREE, free, title=f"{free} free card(s)"))
    return Row(
        node.name, type_, tuple(parts), total, free, foreign, node.unschedulable, max(0, planned - total)
    )


def _device_row(node: Node, type_: str, attribute: str, here: _Placed | None) -> Row:
    parts: list[Part] = []
    free = foreign = planned = 0
    for d in sorted(node.devices, key=lambda d: (d.domain(attribute), natural(d.name))):
        domain = d.domain(attribute) or "one domain"
        owner = here.devices.get(d.name) if here else None
        if owner is not None:
            colour, ident, title, straddles = owner
            parts.append(Part("instance", 1, colour, ident, title, straddles, d.name, domain))
            planned += 1
        elif d.free:
            parts.append(Part(FREE, 1, title=f"{d.name}: free", device=d.name, domain=domain))
            free += 1
        else:
            parts.append(Part(FOREIGN, 1, title=f"{d.name}: held by a claim", device=d.name, domain=domain))
            foreign += 1
    for colour, ident, cards, title, straddles in here.counted if here else ():
        # an instance whose devices were not recorded (a status written before the node's GPUs
        # were published one by one): drawn after the domains, so it is not lost
        parts.append(Part("instance", cards, colour, ident, title + " (devices not recorded)", straddles))
        planned += cards
    over = max(0, planned - len(node.devices))
    return Row(node.name, type_, tuple(parts), len(node.devices), free, foreign, node.unschedulable, over)


def build_view(plans: Sequence[Shown], snap: Snapshot, title: str | None = None) -> View:
    """Rows of every node that has cards or holds an instance, grouped, and the legend."""
    types = _gpu_types(plans)
    attribute = next((p.topology_attribute for p in plans), STANDARD_DOMAIN)
    domain_of = {(n.name, d.name): d.domain(attribute) for n in snap.nodes for d in n.devices}
    placed, legend = _place(plans, domain_of)
    rows: list[Row] = []
    for node in sorted(snap.nodes, key=lambda n: natural(n.name)):
        type_, names = _node_type(node, types)
        here = placed.get(node.name)
        if node.devices:
            row = _device_row(node, type_, attribute, here)
        else:
            row = _counted_row(node, type_, names, here)
        if row.cards or row.parts:
            rows.append(row)
    by_pattern: dict[tuple[object, ...], list[Row]] = {}
    for row in rows:
        by_pattern.setdefault(row.pattern(), []).append(row)
    groups = sorted(
        (Group(rs[0].type, tuple(rs)) for rs in by_pattern.values()),
        key=lambda g: (g.type, -g.count, natural(g.rows[0].node)),
    )
    totals: dict[str, list[int]] = {}
    for row in rows:
        t = totals.setdefault(row.type, [0, 0, 0, 0, 0])
        t[0] += 1
        t[1] += row.cards
        t[2] += sum(p.cards for p in row.parts if p.kind == "instance")
        t[3] += row.foreign
        t[4] += row.free
    known = set(placed)
    missing = sorted(known - {n.name for n in snap.nodes})
    warnings = (f"planned on nodes the cluster does not have: {', '.join(missing[:10])}",) if missing else ()
    return View(
        title=title or ", ".join(p.key for p in plans) or "gpuplan",
        plans=tuple(plans),
        legend=tuple(legend),
        groups=tuple(groups),
        totals=tuple(TypeTotals(k, *v) for k, v in sorted(totals.items())),
        devices=any(n.devices for n in snap.nodes),
        warnings=warnings,
    )
