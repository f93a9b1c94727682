"""The class model: the same verdicts and optima as the per-node model and the exhaustive reference.

The class model never sees node names; these properties are what make it safe to use on 5,000
nodes: on random mid-size instances it agrees with the per-node model (feasibility and optimum),
its placement is valid, and on small ones it agrees with brute force.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.base.codes import SolveStatus
from planner.model.options import TypeProblem
from planner.search.classes import build, maximal_patterns, realize
from planner.search.solver import solve, solve_nodes
from tests.bruteforce import exhaustive
from tests.helpers import check_placement, problem

STRATEGIES = ["machine", "service", "single", "special"]


@st.composite
def instances(draw: st.DrawFn, nodes: tuple[int, int], requests: tuple[int, int]) -> TypeProblem:
    free = draw(
        st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8]), min_size=nodes[0], max_size=nodes[1])
    )
    reqs: list[tuple[str, int, int | None]] = []
    for _ in range(draw(st.integers(*requests))):
        strategy = draw(st.sampled_from(STRATEGIES))
        cards = draw(st.sampled_from([1, 2, 3, 4, 4, 6, 8, 8, 12, 16]))
        machines = None
        if strategy == "special":
            machines = draw(
                st.sampled_from([k for k in range(1, cards + 1) if cards % k == 0 and cards // k <= 8])
            )
        reqs.append(("machine" if strategy == "special" else strategy, cards, machines))
    return problem(free, reqs, draw(st.sampled_from(["v1", "v2"])))


def admissible(prob: TypeProblem) -> bool:
    return all(it.splits for it in prob.items)


@settings(max_examples=150, deadline=None)
@given(instances(nodes=(3, 14), requests=(2, 9)))
def test_class_model_agrees_with_the_per_node_model(prob: TypeProblem) -> None:
    if not admissible(prob):
        return
    by_class = solve(prob, seconds=20)
    by_node = solve_nodes(prob, seconds=20)
    assert by_class.status == by_node.status, (by_class, by_node)
    if by_class.status is SolveStatus.INFEASIBLE:
        return
    assert by_class.status is SolveStatus.OPTIMAL and by_node.status is SolveStatus.OPTIMAL
    assert by_class.score == by_node.score
    assert by_class.choice is not None and by_class.nodes is not None
    assert check_placement(prob, by_class.choice, by_class.nodes) == []


@settings(max_examples=200, deadline=None)
@given(instances(nodes=(1, 4), requests=(1, 4)))
def test_class_model_agrees_with_brute_force(prob: TypeProblem) -> None:
    ref = exhaustive(prob) if admissible(prob) else None
    out = solve(prob, seconds=20)
    if ref is None:
        assert out.status is SolveStatus.INFEASIBLE
        return
    assert out.status is SolveStatus.OPTIMAL and out.score == ref[0]


@settings(max_examples=100, deadline=None)
@given(instances(nodes=(3, 14), requests=(2, 9)))
def test_realize_places_any_solution_of_the_class_model(prob: TypeProblem) -> None:
    """Name the nodes straight from the model's patterns (no greedy first): always valid."""
    if not admissible(prob):
        return
    from planner.search.cpsat import cp_model
    from planner.search.solver import _solver

    cm = build(prob)
    assert cm is not None
    cm.model.maximize(cm.objective)
    solver = _solver(20, 1)
    if solver.solve(cm.model) != cp_model.OPTIMAL:
        return
    choice, counts = cm.read(solver)
    nodes = realize(cm, choice, counts, {})
    assert check_placement(prob, choice, nodes) == []


@pytest.mark.parametrize(
    ("capacity", "sizes", "count"),
    [
        pytest.param(8, [1, 2, 3, 4, 5, 6, 7, 8], 22, id="every size into 8: the partitions of 8"),
        pytest.param(8, [1, 2, 4, 8], 10, id="powers of two into 8"),
        pytest.param(7, [4, 8], 1, id="one 4 leaves 3, too little for another"),
        pytest.param(3, [4], 1, id="nothing fits: the empty pattern"),
    ],
)
def test_maximal_patterns(capacity: int, sizes: Sequence[int], count: int) -> None:
    pats = maximal_patterns(capacity, sizes, 10_000)
    assert pats is not None and len(pats) == count
    for p in pats:
        used = sum(n * g for n, g in zip(p, sizes, strict=True))
        assert used <= capacity and capacity - used < min(sizes)


def test_too_many_patterns_fall_back_to_the_per_node_model() -> None:
    assert maximal_patterns(256, list(range(3, 30)), 5_000) is None
    prob = problem([256, 256], [("machine", c, 1) for c in range(3, 30)])  # 432 of 512
    assert build(prob) is None
    out = solve(prob, seconds=20)
    assert out.status is SolveStatus.OPTIMAL


def test_distinct_nodes_are_counted_per_size() -> None:
    """Two 1-card services of 3 need three nodes with a free card: two big nodes are not enough."""
    prob = problem([8, 8, 1], [("service", 3, None), ("service", 3, None), ("machine", 8, None)])
    out = solve(prob, seconds=20)
    assert out.status is SolveStatus.OPTIMAL and out.choice is not None and out.nodes is not None
    assert check_placement(prob, out.choice, out.nodes) == []
    assert solve_nodes(prob, seconds=20).score == out.score
