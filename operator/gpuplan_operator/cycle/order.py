"""Pure: the admission order of a cluster's plans, and what a plan is planned from.

Notes
-----
Plans are taken in order: higher ``spec.priority`` first; at equal priority a plan that holds an
applied placement before one that does not (it keeps its cards: a newcomer never takes them),
then the older first, then by namespace and name so the order is total.

A plan is planned again only when what it is planned from changed: its spec (generation), what
planning reads of the cluster (the caches' counters of changes that matter, and which nodes are
down past their grace), or what the other plans hold (:func:`held_by_others`). With none of those
changed, planning again would answer the same, so the cycle neither plans nor writes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuplan_operator.body import PlanBody

PRIORITY_MAX = 1000


def priority(plan: PlanBody) -> int:
    """``spec.priority`` (0 to 1000, default 0); the schema refuses anything else, and a value
    that got past it (an old API server) counts as 0 rather than stopping the cycle."""
    value = plan.spec.get("priority", 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PRIORITY_MAX:
        return 0
    return value


def holds_placement(plan: PlanBody) -> bool:
    return bool((plan.status.get("applied") or {}).get("units"))


def created(plan: PlanBody) -> str:
    return str((plan.raw.get("metadata") or {}).get("creationTimestamp") or "")


def admission_order(plans: Iterable[PlanBody]) -> list[PlanBody]:
    """Live plans in the order they are admitted (plans being deleted are left out)."""
    live = [p for p in plans if not p.deleting]
    return sorted(live, key=lambda p: (-priority(p), not holds_placement(p), created(p), p.namespace, p.name))


def held_by_others(plans: Iterable[PlanBody], uid: str) -> str:
    """A digest of what every other plan holds (applied units, devices, zones). A plan being
    deleted counts until it is gone: its cards are free only once its clean-up is done."""
    held = sorted(
        (p.uid, json.dumps(p.status.get("applied") or {}, sort_keys=True)) for p in plans if p.uid != uid
    )
    return hashlib.sha1(json.dumps(held).encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class Inputs:
    """Everything a plan's planning depends on; equal inputs plan the same."""

    generation: int
    cluster: tuple[Any, ...]  # the caches' change counters and the nodes down past their grace
    others: str  # :func:`held_by_others`

    def why_changed(self, before: Inputs | None) -> str | None:
        """Which input changed since ``before`` (None when nothing did)."""
        if before is None:
            return "new"
        if self.generation != before.generation:
            return "spec"
        if self.cluster != before.cluster:
            return "cluster"
        if self.others != before.others:
            return "plans"
        return None
