"""The planning rules as two tables: what each strategy admits, and what each scoring pays.

Notes
-----
A request of ``p`` units is split into ``k`` instances of ``g = p / k`` units. Which ``k`` are
admissible, whether the instances must sit on distinct nodes, and which of two equally scoring
placements is better (concentrated or spread) is what a *strategy* decides; what a split is worth
is what a *scoring* decides. Each is one small function and one row below, and every other layer
(options, greedy placement, the solver's models, the parser's messages, the CRD's enums, the
docs) reads the row instead of deciding again. A new strategy or scoring is one function and one
row.

Score terms are exact fractions: the search compares sums of them, and a float would make
``2/3 + 1/3`` lose to ``1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType


class Strategy(StrEnum):
    """How a request's units are split."""

    MACHINE = "machine"  # IO-bound: few, large instances
    SERVICE = "service"  # compute-bound: many instances on distinct nodes
    SINGLE = "single"  # one card per instance
    SPECIAL = "special"  # the user fixed the instance count (machineNum)
    WHOLE = "whole"  # CPU: one instance with every core asked for


class Topology(StrEnum):
    """Whether an instance keeps its GPUs inside one domain (a NUMA node, a PCIe root, ...)."""

    REQUIRED = "required"  # an instance that fits in one of its node's domains must sit in one
    PREFERRED = "preferred"  # kept in one domain wherever the score allows (the default)
    NONE = "none"  # any GPUs of the node


class Placement(StrEnum):
    """Among placements of equal score, which one a strategy prefers."""

    CONCENTRATE = "concentrate"  # fewest nodes
    SPREAD = "spread"  # most nodes


Verdict = tuple[int, str | None]  # (instances k, why it is not admissible, or None)
Admissible = Callable[[int, int, int, int | None], list[Verdict]]  # (p, usable nodes, largest, m)


def divisors(p: int) -> list[int]:
    """Every k dividing p, ascending; pairs up to the square root (p may be a million)."""
    small = [k for k in range(1, math.isqrt(p) + 1) if p % k == 0]
    return small + [p // k for k in reversed(small) if k * k != p]


def fits(p: int, k: int, largest: int) -> str | None:
    g = p // k
    return None if g <= largest else f"no node has {g} free (largest has {largest})"


def _machine(p: int, n: int, largest: int, m: int | None) -> list[Verdict]:
    return [(k, fits(p, k, largest)) for k in divisors(p)]


def _service(p: int, n: int, largest: int, m: int | None) -> list[Verdict]:
    return [
        (k, f"needs {k} distinct nodes, only {n} usable" if k > n else fits(p, k, largest))
        for k in divisors(p)
    ]


def _single(p: int, n: int, largest: int, m: int | None) -> list[Verdict]:
    return [(p, fits(p, p, largest))]


def _special(p: int, n: int, largest: int, m: int | None) -> list[Verdict]:
    if m is None or p % m:  # the parser refuses these; a row must not crash on them either
        return [(m or 0, f"machineNum {m} does not divide {p}")]
    return [(m, fits(p, m, largest))]


def _whole(p: int, n: int, largest: int, m: int | None) -> list[Verdict]:
    return [(1, fits(p, 1, largest))]


@dataclass(frozen=True)
class StrategyRule:
    """One row of the strategy table."""

    strategy: Strategy
    admissible: Admissible
    distinct: bool  # instances of one request on distinct nodes (pod anti-affinity)
    placement: Placement  # preferred among placements of equal score
    key_strategy: bool  # a user may name it as an operator's keyStrategy
    summary: str  # one line for help texts and the docs

    @property
    def concentrates(self) -> bool:
        return self.placement is Placement.CONCENTRATE

    @property
    def spreads(self) -> bool:
        """Spreads by preference (distinct requests are spread by rule already)."""
        return self.placement is Placement.SPREAD and not self.distinct


STRATEGIES: Mapping[Strategy, StrategyRule] = MappingProxyType(
    {
        r.strategy: r
        for r in (
            StrategyRule(
                Strategy.MACHINE, _machine, False, Placement.CONCENTRATE, True,
                "IO-bound: any divisor k of the cards whose instance fits a node; fewer, larger "
                "instances score higher, and they are packed onto as few nodes as possible",
            ),
            StrategyRule(
                Strategy.SERVICE, _service, True, Placement.SPREAD, True,
                "compute-bound: any divisor k with at most one instance per node; more instances "
                "score higher",
            ),
            StrategyRule(
                Strategy.SINGLE, _single, False, Placement.SPREAD, True,
                "one card per instance, spread over as many nodes as possible",
            ),
            StrategyRule(
                Strategy.SPECIAL, _special, False, Placement.SPREAD, False,
                "machineNum m given: exactly m instances, spread over as many nodes as possible",
            ),
            StrategyRule(
                Strategy.WHOLE, _whole, False, Placement.CONCENTRATE, False,
                "CPU: one instance with all the cores asked for, on one node",
            ),
        )
    }
)  # fmt: skip

KEY_STRATEGIES: tuple[Strategy, ...] = tuple(s for s, r in STRATEGIES.items() if r.key_strategy)


# --- scorings: what a split is worth ---------------------------------------------------------

ScoreFn = Callable[[Strategy, int, int, int], Fraction]  # (strategy, p, k, usable nodes n)


def score_v1(strategy: Strategy, p: int, k: int, n: int) -> Fraction:
    """machine p/k (fewer instances better), service p·k/n (more better), the rest 0."""
    if strategy is Strategy.MACHINE:
        return Fraction(p, k)
    if strategy is Strategy.SERVICE:
        return Fraction(p * k, n)
    return Fraction(0)


def score_v2(strategy: Strategy, p: int, k: int, n: int) -> Fraction:
    """serviceGood − serviceBad − machineScore.

    An instance counts as one machine (``cn = k``). A service request within the ``n`` usable
    machines adds ``k``; past them it loses ``k − n`` (the formula this comes from subtracted a
    fixed 8, a bug its own authors noted). Machine requests lose one point per machine they
    spread over; the other strategies score 0.
    """
    if strategy is Strategy.SERVICE:
        return Fraction(k) if k <= n else -Fraction(k - n)
    if strategy is Strategy.MACHINE:
        return -Fraction(k)
    return Fraction(0)


@dataclass(frozen=True)
class ScoringRule:
    name: str
    score: ScoreFn
    summary: str


SCORINGS: Mapping[str, ScoringRule] = MappingProxyType(
    {
        r.name: r
        for r in (
            ScoringRule("v1", score_v1, "machine p/k + service p·k/n (the default)"),
            ScoringRule("v2", score_v2, "service instances within n, minus machines used"),
        )
    }
)
DEFAULT_SCORING = "v1"


def one_of(names: Iterable[object]) -> str:
    """``a, b or c`` for messages that list a table's names."""
    items = [str(n) for n in names]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
