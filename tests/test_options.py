"""The strategy table and the scorings of contract section 2, row by row."""

from __future__ import annotations

from fractions import Fraction

import pytest

from planner.base.strategies import Strategy, score_v2
from planner.model.options import build_item
from planner.model.spec import Request


def splits(
    strategy: str, cards: int, nodes: int, largest: int, machines: int | None = None, scoring: str = "v1"
) -> tuple[list[tuple[int, int, Fraction]], tuple[tuple[int, int, str], ...]]:
    item = build_item(0, Request("op", "P4", cards, machines), Strategy(strategy), nodes, largest, scoring)
    return [(s.instances, s.units, s.score) for s in item.splits], item.rejected


@pytest.mark.parametrize(
    ("strategy", "cards", "nodes", "largest", "machines", "expected"),
    [
        pytest.param(
            "machine", 8, 4, 8, None,
            [(1, 8, 8), (2, 4, 4), (4, 2, 2), (8, 1, 1)],
            id="machine: every divisor, fewest instances best (p/k)",
        ),
        pytest.param(
            "machine", 8, 4, 6, None,
            [(2, 4, 4), (4, 2, 2), (8, 1, 1)],
            id="machine: no instance larger than the largest node",
        ),
        pytest.param(
            "service", 8, 4, 8, None,
            [(4, 2, 8), (2, 4, 4), (1, 8, 2)],
            id="service: at most one instance per node, most instances best (p·k/n)",
        ),
        pytest.param(
            "service", 6, 4, 8, None,
            [(3, 2, Fraction(9, 2)), (2, 3, 3), (1, 6, Fraction(3, 2))],
            id="service: exact fractional terms",
        ),
        pytest.param("single", 3, 4, 8, None, [(3, 1, 0)], id="single: one card per instance"),
        pytest.param("special", 8, 4, 8, 2, [(2, 4, 0)], id="special: machineNum fixes the count"),
    ],
)  # fmt: skip
def test_admissible_splits(strategy, cards, nodes, largest, machines, expected) -> None:  # type: ignore[no-untyped-def]
    got, _ = splits(strategy, cards, nodes, largest, machines)
    assert got == [(k, g, Fraction(s)) for k, g, s in expected]


def test_rejected_splits_say_why() -> None:
    _, rejected = splits("service", 8, 4, 6)
    reasons = {(k, g): why for k, g, why in rejected}
    assert reasons[(8, 1)] == "needs 8 distinct nodes, only 4 usable"
    assert reasons[(1, 8)] == "no node has 8 free (largest has 6)"


@pytest.mark.parametrize(
    ("strategy", "k", "n", "expected"),
    [
        pytest.param(Strategy.SERVICE, 3, 4, 3, id="v2 service within the machine count: +k"),
        pytest.param(Strategy.SERVICE, 6, 4, -2, id="v2 service past it loses k-n, not k-8"),
        pytest.param(Strategy.MACHINE, 2, 4, -2, id="v2 machine loses one per machine"),
        pytest.param(Strategy.SINGLE, 3, 4, 0, id="v2 single is neutral"),
    ],
)
def test_score_v2(strategy: Strategy, k: int, n: int, expected: int) -> None:
    assert score_v2(strategy, 12, k, n) == expected


def test_v2_prefers_spread_service_and_concentrated_machine() -> None:
    svc, _ = splits("service", 8, 4, 8, scoring="v2")
    mac, _ = splits("machine", 8, 4, 8, scoring="v2")
    assert svc[0][:2] == (4, 2)
    assert mac[0][:2] == (1, 8)


def test_divisors_pair_up_to_the_square_root() -> None:
    """Found by the fault suite's fuzz: enumerating up to p hung on a request of 1e30 cards."""
    from planner.base.strategies import divisors

    for p in range(0, 3000):
        assert divisors(p) == [k for k in range(1, p + 1) if p % k == 0], p
    assert divisors(1_000_000)[-3:] == [250_000, 500_000, 1_000_000]


def test_scores_summed_by_denominator_are_the_sum_of_the_scores() -> None:
    from planner.model.options import total

    scores = [Fraction(k % 7, 1 + k % 5) - Fraction(k % 3, 16250) for k in range(200)]
    assert total(scores) == sum(scores, Fraction(0))
    assert total([]) == Fraction(0) and isinstance(total([]), Fraction)
    assert total([Fraction(1, 3), Fraction(2, 3)]) == 1
