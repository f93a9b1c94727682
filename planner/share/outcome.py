"""What planning several plans together answers for each plan, with typed reasons.

Notes
-----
Each plan gets its usual :class:`~planner.model.result.PlanResult` (allocations, score,
``optimal``) and, beside it, whether it was admitted and why not, and for every elastic request
the cards it got, its range and why it is below its max. A reason names the plans that hold the
cards (``namespace/name``) or says there is no room, so a user can tell "someone more important
has them" from "the cluster is too small".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planner.model.result import Allocation, PlanResult
from planner.model.spec import PlanSpec


class Admission(StrEnum):
    """Whether a plan runs, and if not, why (the operator uses these as condition reasons)."""

    ADMITTED = "Admitted"
    PREEMPTED = "Preempted"  # its mins fit the cluster, but plans before it hold those cards
    NO_ROOM = "NoRoom"  # its mins do not fit even on the cluster's free cards alone
    TIMED_OUT = "TimedOut"  # not decided within the time budget


class BelowMax(StrEnum):
    """Why an elastic request got fewer cards than its max."""

    HELD = "HeldByPlans"  # the cards it could use are planned for other plans (named)
    NO_ROOM = "NoRoom"  # no more cards of its kind fit, whoever else runs


def plan_name(spec: PlanSpec) -> str:
    return f"{spec.namespace}/{spec.name}"


@dataclass(frozen=True)
class Grant:
    """One elastic request: the cards it got within ``[minimum, maximum]`` and, below max, why."""

    operator: str
    resource: str
    cards: int
    minimum: int
    maximum: int
    why: BelowMax | None = None
    holders: tuple[str, ...] = ()  # with HELD: the plans (namespace/name) planned on those cards

    @property
    def text(self) -> str:
        got = f"{self.operator} {self.resource}: {self.cards} of {self.minimum}-{self.maximum} cards"
        if self.why is BelowMax.HELD:
            return f"{got} (the rest are planned for {', '.join(self.holders)})"
        if self.why is BelowMax.NO_ROOM:
            return f"{got} (no room for more)"
        return got

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "operator": self.operator,
            "resource": self.resource,
            "cards": self.cards,
            "min": self.minimum,
            "max": self.maximum,
        }
        if self.why is not None:
            out["reason"] = self.why.value
        if self.holders:
            out["heldBy"] = list(self.holders)
        return out


@dataclass(frozen=True)
class Shared:
    """One plan's answer when planned with others."""

    spec: PlanSpec
    admitted: bool
    reason: Admission
    result: PlanResult
    holders: tuple[str, ...] = ()  # PREEMPTED: the plans before it that hold the cards it needs
    grants: tuple[Grant, ...] = ()  # its elastic requests, in request order
    # not admitted: what it keeps of what it ran, on cards no admitted plan is planned on
    kept: tuple[Allocation, ...] = ()

    @property
    def name(self) -> str:
        return plan_name(self.spec)

    @property
    def cards_max(self) -> int:
        """GPU cards the plan asks for at most (what ``placed/max`` divides by)."""
        gpu = {r.name for r in self.spec.resources if r.kind.value == "GPU"}
        return sum(r.cards for r in self.spec.requests if r.resource in gpu)

    def to_json(self, named: bool = False) -> dict[str, Any]:
        """The single-plan object plus ``admitted`` (and, with ``named``, the plan's namespace and
        name first); elastic requests, reasons and kept instances where they apply."""
        head: dict[str, Any] = {"namespace": self.spec.namespace, "name": self.spec.name} if named else {}
        out = head | self.result.to_json()
        out["admitted"] = self.admitted
        if not self.admitted:
            out["admission"] = self.reason.value
        if self.holders:
            out["heldBy"] = list(self.holders)
        if self.grants:
            out["elastic"] = [g.to_json() for g in self.grants]
        if self.kept:
            out["kept"] = [a.to_json() for a in self.kept]
        return out
