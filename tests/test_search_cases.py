"""The search on named cases: the seed's examples, its greedy's two errors, conflicts, re-plans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from planner.base.codes import Method
from planner.model.options import TypeProblem
from planner.planning import conflict, solve_type
from planner.search.outcome import Outcome
from tests.bruteforce import seed_greedy_check
from tests.helpers import check_placement, problem


def solved(
    free: list[int], requests: Sequence[tuple[str, int, int | None]], scoring: str = "v1", **kw: Any
) -> tuple[TypeProblem, Outcome, Method]:
    prob = problem(free, requests, scoring)
    out, method = solve_type(prob, 20.0, **kw)
    if out.choice is not None and out.nodes is not None:
        assert check_placement(prob, out.choice, out.nodes) == []
    return prob, out, method


@pytest.mark.parametrize(
    ("free", "requests", "score", "splits"),
    [
        pytest.param(
            [8, 8],
            [("machine", 5, 1), ("machine", 4, 1), ("machine", 4, 1), ("machine", 3, 1)],
            0, ["1×5", "1×4", "1×4", "1×3"],
            id="5-4-4-3 on two 8-card nodes fits",
        ),
        pytest.param(
            [6, 6], [("machine", 6, 2), ("machine", 6, 3)], 0, ["2×3", "3×2"],
            id="3,3,2,2,2 on two 6-card nodes fits",
        ),
        pytest.param(
            [8, 8, 8, 8], [("machine", 8, None), ("machine", 8, None), ("service", 4, None)],
            18, ["1×8", "1×8", "2×2"],
            id="two full 1vN nodes leave two nodes for the spread service",
        ),
        pytest.param(
            [2, 0], [("service", 2, None)], 1, ["1×2"],
            id="service instances never share a node",
        ),
        pytest.param(
            [8, 8, 8], [("machine", 16, None)], 8, ["2×8"],
            id="machine concentrates into the largest instances that fit",
        ),
        pytest.param(
            [4, 4, 4, 4], [("service", 4, None), ("single", 4, None)], 4, ["4×1", "4×1"],
            id="service spreads over every node",
        ),
        pytest.param(
            [8, 8], [("machine", 8, None), ("machine", 8, None), ("machine", 8, None)],
            None, None,
            id="24 cards do not fit in 16",
        ),
    ],
)  # fmt: skip
def test_cases(free, requests, score, splits) -> None:  # type: ignore[no-untyped-def]
    prob, out, _ = solved(free, requests)
    if score is None:
        assert out.status == "infeasible"
        return
    assert out.status == "optimal"
    assert out.score == score
    assert out.choice is not None
    assert [it.splits[c].text for it, c in zip(prob.items, out.choice, strict=True)] == splits


def test_seed_greedy_rejects_a_plan_that_fits() -> None:
    assert not seed_greedy_check([6, 6], [3, 3, 2, 2, 2])
    _, out, _ = solved([6, 6], [("machine", 6, 2), ("machine", 6, 3)])
    assert out.status == "optimal"


def test_seed_greedy_accepts_a_plan_that_breaks_spreading() -> None:
    # two 1-card service instances both land on the one node with cards: the seed says yes
    assert seed_greedy_check([2, 0], [1, 1])
    prob, out, _ = solved([2, 0], [("service", 2, None)])
    assert out.choice is not None
    assert prob.items[0].splits[out.choice[0]].text == "1×2"


def test_fast_path_proves_optimality_without_a_solver() -> None:
    _, out, method = solved([8, 8, 8, 8, 8], [("service", 4, None), ("machine", 8, None)])
    assert method == "fast-path"
    assert out.status == "optimal"


def test_conflict_is_irreducible_and_leaves_out_bystanders() -> None:
    # 19 cards fit in 20 by count, but three 6-card instances need three nodes with 6 free
    prob = problem(
        [8, 8, 4],
        [("machine", 6, 1), ("single", 1, None), ("machine", 6, 1), ("machine", 6, 1)],
    )
    out, _ = solve_type(prob, 20.0)
    assert out.status == "infeasible"
    c = conflict(prob)
    assert c.operators == ("op0", "op2", "op3")
    assert "cannot be split and placed" in c.detail


def test_overbooked_type_names_the_fewest_requests_that_overflow() -> None:
    prob = problem(
        [8, 8, 2], [("single", 2, None), ("machine", 8, None), ("machine", 8, None), ("machine", 8, None)]
    )
    c = conflict(prob)
    assert c.operators == ("op1", "op2", "op3")
    assert "need 24 P4 cards, only 18 are free" in c.detail


def test_request_with_no_admissible_split_is_its_own_conflict() -> None:
    prob = problem([4, 4], [("machine", 8, 1), ("single", 1, None)])
    c = conflict(prob)
    assert c.operators == ("op0",)
    assert "no node has 8 free" in c.detail


def test_previous_placement_is_kept_when_still_optimal() -> None:
    prev = {"op0": (2, {"n3": 1, "n2": 1}), "op1": (8, {"n1": 1})}
    _prob, out, _ = solved([8, 8, 8, 8], [("service", 4, None), ("machine", 8, None)], previous=prev)
    # the best split of op0 is 4×1 now (a different size), but op1 stays where it was
    assert out.nodes is not None
    assert out.nodes[1] == {"n1": 1}


def test_previous_placement_minimises_moves_among_equal_scores() -> None:
    prev = {"op0": (1, {"n2": 2, "n3": 2})}
    _, out, _ = solved([8, 8, 8, 8], [("single", 4, None)], previous=prev)
    assert out.nodes is not None
    assert out.nodes[0] == {"n2": 2, "n3": 2}


def test_machine_instances_concentrate_on_few_nodes() -> None:
    # 9 cards with 8-card nodes: 3×3 is best; two instances share a node, so two nodes, not three
    _prob, out, _ = solved([8, 8, 8, 8], [("machine", 9, None)])
    assert out.nodes is not None
    assert sorted(out.nodes[0].values()) == [1, 2]


def test_time_budget_returns_best_found_with_bound() -> None:
    free = [8] * 12
    reqs = [("machine", c, None) for c in (12, 10, 6, 9, 7, 11, 5)] + [
        ("service", c, None) for c in (6, 8, 4, 3)
    ]
    prob = problem(free, reqs)
    out, _ = solve_type(prob, 0.05, polish_seconds=0)
    assert out.status in ("optimal", "feasible", "unknown")
    if out.status == "feasible":
        assert out.bound is not None and out.score is not None and out.bound >= out.score
