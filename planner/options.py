"""Admissible splits per strategy, the scorings, and the per-type problems the search solves.

Notes
-----
Contract section 2 is a table: one row per strategy (which ``k`` are admissible) and one column
per scoring (what a split is worth). Both are kept here as small functions in dicts, so a new
strategy or scoring is one function and one table row. Score terms are exact fractions: the
search compares them and a float would make ``2/3 + 1/3`` lose to ``1``.

GPU types are independent (a request's cards of one type never touch another type's nodes) and
the score is a sum of per-request terms, so the whole problem splits into one
:class:`TypeProblem` per resource type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from planner.model import PlanSpec, Request, ResourceType, Snapshot, Strategy


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

    @property
    def distinct(self) -> bool:
        """Service instances need one node each (the pod anti-affinity of seed 000)."""
        return self.strategy is Strategy.SERVICE

    @property
    def label(self) -> str:
        return self.request.operator


@dataclass(frozen=True)
class TypeProblem:
    """Everything the search needs for one resource type."""

    resource: ResourceType
    nodes: tuple[tuple[str, int], ...]  # usable nodes of the type: (name, free units)
    items: tuple[Item, ...]

    @property
    def largest(self) -> int:
        return max((free for _, free in self.nodes), default=0)

    @property
    def upper_bound(self) -> Fraction:
        return sum((it.splits[0].score for it in self.items if it.splits), Fraction(0))


def divisors(p: int) -> list[int]:
    return [k for k in range(1, p + 1) if p % k == 0]


# --- strategies: which k are admissible ------------------------------------------------------

Admissible = Callable[[int, int, int, int | None], list[tuple[int, str | None]]]


def _fits(p: int, k: int, largest: int) -> str | None:
    g = p // k
    return None if g <= largest else f"no node has {g} free (largest has {largest})"


def _machine(p: int, n: int, largest: int, m: int | None) -> list[tuple[int, str | None]]:
    return [(k, _fits(p, k, largest)) for k in divisors(p)]


def _service(p: int, n: int, largest: int, m: int | None) -> list[tuple[int, str | None]]:
    return [
        (k, f"needs {k} distinct nodes, only {n} usable" if k > n else _fits(p, k, largest))
        for k in divisors(p)
    ]


def _single(p: int, n: int, largest: int, m: int | None) -> list[tuple[int, str | None]]:
    return [(p, _fits(p, p, largest))]


def _special(p: int, n: int, largest: int, m: int | None) -> list[tuple[int, str | None]]:
    assert m is not None and p % m == 0  # parse.py refuses the rest
    return [(m, _fits(p, m, largest))]


ADMISSIBLE: dict[Strategy, Admissible] = {
    Strategy.MACHINE: _machine,
    Strategy.SERVICE: _service,
    Strategy.SINGLE: _single,
    Strategy.SPECIAL: _special,
}

# --- scorings: what a split is worth ---------------------------------------------------------

Scoring = Callable[[Strategy, int, int, int], Fraction]


def score_v1(strategy: Strategy, p: int, k: int, n: int) -> Fraction:
    """Seed 000: machine p/k (fewer instances better), service p·k/n (more better)."""
    if strategy is Strategy.MACHINE:
        return Fraction(p, k)
    if strategy is Strategy.SERVICE:
        return Fraction(p * k, n)
    return Fraction(0)


def score_v2(strategy: Strategy, p: int, k: int, n: int) -> Fraction:
    """Seed 001's second formula: serviceGood − serviceBad − machineScore.

    As in the seed, an instance counts as one machine (``cn = k``). A service request within the
    ``n`` configured machines adds ``k``; past them it loses ``k − n`` (the seed subtracted 8, a
    bug its own note points out). Machine requests lose one point per machine they spread over.
    """
    if strategy is Strategy.SERVICE:
        return Fraction(k) if k <= n else -Fraction(k - n)
    if strategy is Strategy.MACHINE:
        return -Fraction(k)
    return Fraction(0)


SCORINGS: dict[str, Scoring] = {"v1": score_v1, "v2": score_v2}


def effective_strategy(spec: PlanSpec, request: Request) -> Strategy:
    if request.machines:
        return Strategy.SPECIAL
    return spec.operator(request.operator).key_strategy


def build_item(index: int, request: Request, strategy: Strategy, n: int, largest: int, scoring: str) -> Item:
    p = request.cards
    score = SCORINGS[scoring]
    splits, rejected = [], []
    for k, why in ADMISSIBLE[strategy](p, n, largest, request.machines):
        if why is None:
            splits.append(Split(k, p // k, score(strategy, p, k, n)))
        else:
            rejected.append((k, p // k, why))
    distinct = strategy is Strategy.SERVICE
    # best score first; among equals, the split the strategy prefers (spread or concentrate)
    splits.sort(key=lambda s: (-s.score, -s.instances if distinct else s.instances))
    return Item(index, request, strategy, tuple(splits), tuple(rejected))


def build_problems(spec: PlanSpec, snap: Snapshot) -> list[TypeProblem]:
    """One problem per resource type that has requests, in the spec's resource order."""
    out = []
    for resource in spec.resources:
        requests = [r for r in spec.requests if r.resource == resource.name]
        if not requests:
            continue
        nodes = tuple(
            (node.name, node.free(resource.resource_name)) for node in snap.usable(resource, spec.tolerations)
        )
        largest = max((f for _, f in nodes), default=0)
        items = tuple(
            build_item(i, r, effective_strategy(spec, r), len(nodes), largest, spec.scoring)
            for i, r in enumerate(requests)
        )
        out.append(TypeProblem(resource, nodes, items))
    return out
