"""Reduced-cost fixing: the arcs it drops are on no packing (checked against the exhaustive
reference), and on an instance whose LP bound rounds one node short it is what refutes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.base.codes import Method, SolveStatus
from planner.planning import solve_type
from planner.search import arcflow, bounds, fixing
from tests.bruteforce import pack_exact
from tests.helpers import problem

# C = 32, sizes 18 ×2, 10 ×5, 8 ×6, 7 ×3 (155 units; found by a random search for a gap): the LP
# bound is exactly 5.0 nodes, yet 5 nodes cannot hold them (the exhaustive search checks it); 6 can
NOT_ROUND_UP = (32, [18] * 2 + [10] * 5 + [8] * 6 + [7] * 3)


def _bins(capacity: int, sizes: list[int], nodes: int) -> bounds.Bins:
    prob = problem([capacity] * nodes, [("machine", g, 1) for g in sizes])
    return bounds.bins_of(prob, bounds.one_split(prob))


@st.composite
def instances(draw: st.DrawFn) -> tuple[int, list[int], int, list[int] | None]:
    capacity = draw(st.integers(5, 24))
    sizes = draw(st.lists(st.integers(1, capacity), min_size=1, max_size=8))
    nodes = draw(st.integers(1, 5))
    weights = draw(st.one_of(st.none(), st.lists(st.integers(0, 40), min_size=8, max_size=8)))
    return capacity, sizes, nodes, weights


@settings(max_examples=120, deadline=None)
@given(instances())
def test_the_reduced_graph_still_packs_whatever_fits(
    case: tuple[int, list[int], int, list[int] | None],
) -> None:
    # any weights give a valid reduction (None: the LP's own duals, the ones used in earnest):
    # the arc-flow model over what is left must pack exactly when the exhaustive search does
    capacity, sizes, nodes, weights = case
    bins = _bins(capacity, sizes, nodes)
    built = arcflow.graphs(bins)
    fits = pack_exact([capacity] * nodes, [(1, g, False) for g in sizes])
    if built is None:  # more units than the nodes have
        assert not fits
        return
    if weights is None:
        weights = bounds.lp_bound(bins, 5.0, settle=True).weights
    w = weights[: len(bins.sizes)]
    red = fixing.reduce(bins, built, w, fixing.caps(bins, w))
    assert red.after <= red.before
    if red.refuted:
        assert not fits
        return
    flow = arcflow.solve(bins, 5.0, list(red.graphs))
    assert flow.columns is not None or flow.refuted, "a small instance is decided"
    assert flow.refuted == (not fits)
    if flow.columns is not None:
        assert arcflow.packs(bins, flow.columns)


def test_an_lp_bound_one_node_short_is_closed_by_fixing() -> None:
    capacity, sizes = NOT_ROUND_UP
    assert not pack_exact([capacity] * 5, [(1, g, False) for g in sizes])
    bins = _bins(capacity, sizes, 5)
    lp = bounds.lp_bound(bins, 5.0, settle=True)
    assert lp.converged and not lp.refuted and lp.value <= 5 + 1e-6  # the bound alone cannot refute
    built = arcflow.graphs(bins)
    assert built is not None
    red = fixing.reduce(bins, built, lp.weights, fixing.caps(bins, lp.weights))
    assert red.after < red.before  # the duals drop arcs
    assert arcflow.solve(bins, 5.0, list(red.graphs)).refuted


@pytest.mark.parametrize(
    ("nodes", "status"),
    [
        pytest.param(
            5, SolveStatus.INFEASIBLE, id="an LP bound of exactly 5 nodes, no packing on 5: refuted"
        ),
        pytest.param(6, SolveStatus.OPTIMAL, id="the same instance on 6 nodes: packed"),
    ],
)
def test_a_type_whose_lp_rounds_short_is_decided(nodes: int, status: SolveStatus) -> None:
    capacity, sizes = NOT_ROUND_UP
    prob = problem([capacity] * nodes, [("machine", g, 1) for g in sizes])
    assert prob.pure_packing
    out, method = solve_type(prob, 10.0)
    assert out.status is status
    # decided by the packing model or a bound, not by the exact search it falls back on
    assert method in (Method.BOUND, Method.PATTERNS, Method.FAST_PATH)
