"""Branch and bound over the arc-flow LP: it packs exactly when the exhaustive reference does, and
closes an instance whose LP bound rounds one node short."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.search import arcflow, bounds, branch, fixing
from tests.bruteforce import pack_exact
from tests.helpers import problem
from tests.test_fixing import NOT_ROUND_UP


def _bins(free: list[int], sizes: list[int]) -> bounds.Bins:
    prob = problem(free, [("machine", g, 1) for g in sizes])
    return bounds.bins_of(prob, bounds.one_split(prob))


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[int], list[int], bool]:
    capacity = draw(st.integers(5, 24))
    # nodes of one or two sizes (one graph per class)
    other = max(1, capacity - draw(st.integers(0, 6)))
    free = [capacity, *draw(st.lists(st.sampled_from([capacity, other]), max_size=4))]
    sizes = draw(st.lists(st.integers(1, capacity), min_size=1, max_size=8))
    return free, sizes, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(instances())
def test_the_branch_and_bound_packs_exactly_what_fits(case: tuple[list[int], list[int], bool]) -> None:
    free, sizes, reduced = case
    bins = _bins(free, sizes)
    assert len(bins.units) == len(sizes)  # every instance fits the largest node alone
    fits = pack_exact(free, [(1, g, False) for g in sizes])
    built = arcflow.graphs(bins)
    if built is None:  # more units than the nodes have
        assert not fits
        return
    if reduced:  # the graph as the packing model hands it over: reduced by the LP's duals
        lp = bounds.lp_bound(bins, 5.0, settle=True)
        red = fixing.reduce(bins, built, lp.weights, fixing.caps(bins, lp.weights))
        if red.refuted:
            assert not fits
            return
        built = list(red.graphs)
    tree = branch.solve(bins, built, time.monotonic() + 10.0)
    assert tree.columns is not None or tree.refuted, "a small instance is decided"
    assert tree.refuted == (not fits)
    if tree.columns is not None:
        assert arcflow.packs(bins, tree.columns)


def test_an_lp_bound_one_node_short_is_refuted_by_branching() -> None:
    capacity, sizes = NOT_ROUND_UP
    bins = _bins([capacity] * 5, sizes)
    lp = bounds.lp_bound(bins, 5.0, settle=True)
    assert not lp.refuted and lp.value <= 5 + 1e-6  # the bound alone cannot refute
    built = arcflow.graphs(bins)
    assert built is not None
    tree = branch.solve(bins, built, time.monotonic() + 10.0)
    assert tree.refuted and tree.columns is None
    on_six = _bins([capacity] * 6, sizes)
    six = arcflow.graphs(on_six)
    assert six is not None
    packed = branch.solve(on_six, six, time.monotonic() + 10.0)
    assert packed.columns is not None and arcflow.packs(on_six, packed.columns)


def test_the_check_is_weak_duality_in_integers() -> None:
    # one row x = 2 with the arc bounded to 0..1: the multiplier 1 shows no x fits (L = 2 - 1 > 0
    # nodes... here cost 0, so L = 2·S − S·1 = S); a multiplier rounded the other way proves nothing
    matrix = branch._Matrix(*_arrays([0], [0], [1], [0], [False]))
    low, rho = branch._certificate([1.0], [2], matrix, [0], [1])
    assert low == branch.SCALE and rho == [-branch.SCALE]
    low, _ = branch._certificate([-1.0], [2], matrix, [0], [1])
    assert low == -2 * branch.SCALE
    # a row x ≤ 2: its multiplier may not be positive (it would claim too much), so it is read as 0
    at_most = branch._Matrix(*_arrays([0], [0], [1], [0], [True]))
    low, rho = branch._certificate([1.0], [2], at_most, [0], [1])
    assert low == 0 and rho == [0]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-5, 5), st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=3),
    st.integers(0, 12),
)
def test_tightening_keeps_every_point_within_the_gap(arcs: list[tuple[int, int, int]], gap: int) -> None:
    import itertools

    rho = [p for p, _, _ in arcs]
    lo = [a for _, a, _ in arcs]
    up = [a + w for _, a, w in arcs]
    new_lo, new_up, _ = branch.tighten(rho, gap, lo, up)
    best = [a if p >= 0 else b for p, a, b in zip(rho, lo, up, strict=True)]
    for x in itertools.product(*(range(a, b + 1) for a, b in zip(lo, up, strict=True))):
        inside = all(a <= v <= b for v, a, b in zip(x, new_lo, new_up, strict=True))
        within = sum(p * (v - b) for p, v, b in zip(rho, x, best, strict=True)) <= gap
        if within:
            assert inside, f"{x} is within the gap but cut off"


def _arrays(*lists: list[int] | list[bool]) -> list[object]:
    import numpy as np

    return [np.asarray(x, dtype=np.bool_ if isinstance(x[0], bool) else np.int64) for x in lists]
