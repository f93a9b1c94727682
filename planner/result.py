"""The planner's answer as values with reasons, and its one JSON shape (contract section 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from planner.model import Strategy
from planner.options import TypeProblem


@dataclass(frozen=True)
class Allocation:
    """One request's chosen split and where its instances land."""

    operator: str
    resource: str
    strategy: Strategy
    instances: int
    units: int
    nodes: tuple[tuple[str, int], ...]  # node name -> instances there, in name order
    term: Fraction

    def to_json(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "resource": self.resource,
            "strategy": self.strategy.value,
            "instances": self.instances,
            "unitsPerInstance": self.units,
            "nodes": dict(self.nodes),
        }


@dataclass(frozen=True)
class Conflict:
    """Requests of one type that cannot be placed together (dropping any one of them helps)."""

    resource: str
    operators: tuple[str, ...]
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "requests": list(self.operators), "detail": self.detail}


@dataclass(frozen=True)
class TypeStats:
    resource: str
    nodes: int
    requests: int
    method: str  # fast-path | cp-sat | none
    status: str
    seconds: float
    branches: int
    upper_bound: Fraction

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "nodes": self.nodes,
            "requests": self.requests,
            "method": self.method,
            "status": self.status,
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

    @property
    def cards_requested(self) -> int:
        return sum(it.request.cards for p in self.problems for it in p.items)

    @property
    def cards_placed(self) -> int:
        return sum(a.instances * a.units for a in self.allocations)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "feasible": self.feasible,
            "optimal": self.optimal,
            "score": number(self.score),
            "allocations": [a.to_json() for a in self.allocations],
        }
        if self.bound is not None and self.bound != self.score:
            out["bound"] = number(self.bound)
        if self.reason:
            out["reason"] = self.reason
        if self.conflicts:
            out["conflicts"] = [c.to_json() for c in self.conflicts]
        out["search"] = [s.to_json() for s in self.stats]
        return out
