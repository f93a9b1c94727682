"""The planner's answer as values with reasons, and its one JSON shape.

Notes
-----
``gpuplan plan -o json`` prints :meth:`PlanResult.to_json`; a plan's ``status.allocations`` holds
the same allocation objects. Whoever reads them back (``--previous``, the operator reading its own
status, the load tester's ``compare``) goes through
:func:`planner.read.allocations.read_allocations`, which checks every field and names the one
that is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from planner.base.codes import ConflictKind, Method, SolveStatus
from planner.base.strategies import Strategy
from planner.model.options import TypeProblem
from planner.model.spec import ResourceKind

InstanceZones = tuple[tuple[str, int], ...]  # (zone, cards) of one instance, by zone


def zones_text(zones: InstanceZones) -> str:
    """``node-0``, or ``node-0+node-1`` for an instance whose cards straddle zones."""
    return "+".join(z for z, _ in zones)


@dataclass(frozen=True)
class Allocation:
    """One request's chosen split and where its instances land."""

    operator: str
    resource: str
    strategy: Strategy | None  # None when read back from JSON that did not say
    instances: int
    units: int
    nodes: tuple[tuple[str, int], ...]  # node name -> instances there, in name order
    term: Fraction | None = None  # its score term; None when read back from JSON
    # GPUs known one by one: per node, the device names of each instance there
    devices: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = ()
    straddling: int = 0  # instances whose devices (or counted cards) span several domains
    # GPUs counted per NUMA zone (NodeResourceTopology, no DRA): per node, for each instance
    # there, the cards it counts in each zone (one zone, or several for one that straddles)
    zones: tuple[tuple[str, tuple[InstanceZones, ...]], ...] = ()

    @property
    def units_total(self) -> int:
        return self.instances * self.units

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator, "resource": self.resource}
        if self.strategy is not None:
            out["strategy"] = self.strategy.value
        out |= {"instances": self.instances, "unitsPerInstance": self.units, "nodes": dict(self.nodes)}
        if self.devices:
            out["devices"] = {node: [list(i) for i in lists] for node, lists in self.devices}
        if self.zones:
            out["zones"] = {node: [zones_text(z) for z in lists] for node, lists in self.zones}
        if self.devices or self.zones:
            out["straddling"] = self.straddling
        return out


GPU = ResourceKind.GPU


class Placement(NamedTuple):
    """Where a request's instances were: cards each, instances per node, and (GPUs chosen one by
    one) each instance's devices per node."""

    units: int
    nodes: dict[str, int]
    devices: dict[str, list[tuple[str, ...]]] = {}  # noqa: RUF012 (read only)


Previous = dict[tuple[str, str], Placement]  # (operator, resource) -> placement


def previous_placements(allocations: tuple[Allocation, ...]) -> Previous:
    """Where each request's instances were, by (operator, resource)."""
    return {
        (a.operator, a.resource): Placement(
            a.units, dict(a.nodes), {node: list(lists) for node, lists in a.devices}
        )
        for a in allocations
    }


@dataclass(frozen=True)
class Conflict:
    """Requests of one type that cannot be placed together (dropping any one of them helps)."""

    resource: str
    kind: ConflictKind
    operators: tuple[str, ...]
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "kind": self.kind.value,
            "requests": list(self.operators),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class TypeStats:
    resource: str
    nodes: int
    requests: int
    method: Method
    status: SolveStatus
    seconds: float
    branches: int
    upper_bound: Fraction

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "nodes": self.nodes,
            "requests": self.requests,
            "method": self.method.value,
            "status": self.status.value,
            "seconds": round(self.seconds, 4),
            "branches": self.branches,
        }


def number(value: Fraction | None) -> float | None:
    return None if value is None else round(float(value), 6)


@dataclass(frozen=True)
class PlanResult:
    """A plan (``feasible``) or the reason there is none.

    ``optimal`` is true only when every type's search proved its part; ``bound`` is then equal to
    ``score``, otherwise it is the best score any plan could still reach.
    """

    feasible: bool
    optimal: bool
    score: Fraction | None
    bound: Fraction | None
    allocations: tuple[Allocation, ...]
    reason: str | None = None
    conflicts: tuple[Conflict, ...] = ()
    stats: tuple[TypeStats, ...] = ()
    problems: tuple[TypeProblem, ...] = field(default=(), compare=False, repr=False)
    partial: tuple[Allocation, ...] = ()  # no plan: the allocations of the types that do have one
    moved: int | None = None  # with a previous plan: instances not where it had them
    # what the kubelet may refuse or leave Pending, and how NUMA zones were counted, in words
    warnings: tuple[str, ...] = ()
    pod_cpu: tuple[tuple[str, int], ...] = ()  # node -> millicores the plan's GPU pods request

    @property
    def cards_requested(self) -> int:
        """GPU cards the requests ask for (CPU cores are not cards)."""
        return sum(it.request.cards for p in self.problems if p.resource.kind is GPU for it in p.items)

    @property
    def cards_placed(self) -> int:
        gpu = {p.resource.name for p in self.problems if p.resource.kind is GPU}
        return sum(a.units_total for a in self.allocations if a.resource in gpu)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "feasible": self.feasible,
            "optimal": self.optimal,
            "score": number(self.score),
            "allocations": [a.to_json() for a in self.allocations],
        }
        if self.bound is not None and self.bound != self.score:
            out["bound"] = number(self.bound)
        if self.moved is not None:
            out["moved"] = self.moved
        if self.reason:
            out["reason"] = self.reason
        if self.conflicts:
            out["conflicts"] = [c.to_json() for c in self.conflicts]
        if self.partial:
            out["partialAllocations"] = [a.to_json() for a in self.partial]
        if self.warnings:
            out["warnings"] = list(self.warnings)
        out["search"] = [s.to_json() for s in self.stats]
        return out
