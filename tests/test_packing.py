"""Pure packings: the bounds never refute what fits, the pattern model's plans fit, and a conflict
called minimal is minimal (each checked against the exhaustive reference on small instances)."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from planner import planning
from planner.base.codes import ConflictKind, Method, SolveStatus
from planner.model.options import TypeProblem
from planner.model.spec import PlanSpec, Snapshot
from planner.planning import conflict, plan, solve_type
from planner.read.parse import parse_plan, snapshot
from planner.search import arcflow, bounds, patterns
from planner.search.place import NodeCounts
from tests.bruteforce import pack_exact
from tests.helpers import problem


def _special(free: list[int], sizes: list[int]) -> TypeProblem:
    """One special request of one instance per size: a bin-packing instance."""
    return problem(free, [("machine", g, 1) for g in sizes])


def _fits(free: list[int], sizes: list[int]) -> bool:
    return pack_exact(free, [(1, g, False) for g in sizes])


def _valid(prob: TypeProblem, nodes: list[NodeCounts]) -> bool:
    load: dict[str, int] = {}
    for it, counts in zip(prob.items, nodes, strict=True):
        if sum(counts.values()) != it.splits[0].instances:
            return False
        for n, k in counts.items():
            load[n] = load.get(n, 0) + k * it.splits[0].units
    free = dict(prob.nodes)
    return all(load[n] <= free[n] for n in load)


def _bins_needed(sizes: list[int], capacity: int) -> int:
    return next(b for b in range(len(sizes) + 1) if _fits([capacity] * b, sizes))


@st.composite
def packings(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    capacity = draw(st.integers(4, 12))
    free = draw(
        st.lists(st.sampled_from([capacity, capacity, capacity - 1, capacity // 2]), min_size=1, max_size=4)
    )
    sizes = draw(st.lists(st.integers(1, capacity), min_size=1, max_size=7))
    return free, sizes


@settings(max_examples=120, deadline=None)
@given(st.integers(4, 15).flatmap(lambda c: st.tuples(st.just(c), st.lists(st.integers(1, c), max_size=7))))
def test_l2_never_exceeds_the_bins_needed(case: tuple[int, list[int]]) -> None:
    capacity, sizes = case
    counts: dict[int, int] = {}
    for g in sizes:
        counts[g] = counts.get(g, 0) + 1
    bound = bounds.l2(list(counts), list(counts.values()), capacity)
    assert bound <= _bins_needed(sizes, capacity)


@settings(max_examples=120, deadline=None)
@given(packings())
def test_the_pattern_model_agrees_with_the_exhaustive_reference(case: tuple[list[int], list[int]]) -> None:
    free, sizes = case
    prob = _special(free, sizes)
    fits = _fits(free, sizes)
    if not prob.pure_packing:  # an instance larger than every node: no split at all
        assert not fits
        return
    out = patterns.solve(prob, 5.0)
    if out.how == "refuted":
        assert not fits, "a refutation of a packing that exists"
        lp = out.lp
        assert (lp is not None and lp.refuted) or "arc-flow" in out.reason
    if out.nodes is not None:
        assert fits and _valid(prob, out.nodes)
    proof = bounds.refute_l2(prob)
    assert proof is None or not fits


@settings(max_examples=60, deadline=None)
@given(packings())
def test_a_conflict_called_minimal_is_minimal(case: tuple[list[int], list[int]]) -> None:
    free, sizes = case
    prob = _special(free, sizes)
    if _fits(free, sizes) or not all(it.splits for it in prob.items):
        return
    found = conflict(prob, seconds=5.0)
    named = [int(op.removeprefix("op")) for op in found.operators]
    assert not _fits(free, [sizes[i] for i in named]), "the named requests fit together"
    if found.minimal:
        for i in named:
            assert _fits(free, [sizes[j] for j in named if j != i]), f"dropping op{i} does not help"
    else:
        assert "not shown minimal" in found.detail


@pytest.mark.parametrize(
    ("free", "sizes", "method", "status"),
    [
        pytest.param([10, 10, 10], [6, 5, 4, 4, 3, 3, 3, 2], Method.PATTERNS, SolveStatus.OPTIMAL, id="6,5,4,4,3,3,3,2 on three 10s: every greedy pass misses, the patterns pack it"),
        pytest.param([10, 10], [6, 6, 6], Method.BOUND, SolveStatus.INFEASIBLE, id="three 6s on two 10s: L2 refutes at once"),
        pytest.param([10, 10, 10], [4] * 7, Method.BOUND, SolveStatus.INFEASIBLE, id="seven 4s on three 10s: L2 says 3, the LP bound refutes"),
    ],
)  # fmt: skip
def test_a_pure_packing_is_decided_by_its_own_model(
    free: list[int], sizes: list[int], method: Method, status: SolveStatus
) -> None:
    prob = _special(free, sizes)
    out, how = solve_type(prob, 5.0)
    assert (how, out.status) == (method, status)
    assert (out.nodes is not None) == (status is SolveStatus.OPTIMAL)
    if out.nodes is not None:
        assert _valid(prob, out.nodes)


def test_a_refuted_packing_names_the_requests_the_bound_needs() -> None:
    # the two 1s cannot matter: the 6s alone need three nodes
    prob = _special([10, 10], [6, 6, 6, 1, 1])
    found = conflict(prob, seconds=5.0)
    assert found.kind is ConflictKind.PACKING
    assert found.operators == ("op0", "op1", "op2") and found.minimal
    assert "L2" in found.detail


def test_the_lp_certificate_is_checked_in_integers() -> None:
    # seven 4s (28 units) on three 10-nodes: each node holds two, so the LP needs 3.5 nodes; its
    # weights refute three nodes exactly
    prob = _special([10, 10, 10], [4] * 7)
    bins = bounds.bins_of(prob, bounds.one_split(prob))
    lp = bounds.lp_bound(bins, 5.0)
    assert lp.refuted and lp.needed == 4
    refuted, _ = bounds.certificate(bins, lp.weights)
    assert refuted
    assert not bounds.certificate(bins, [0] * len(bins.sizes))[0]


def _paths(gr: arcflow.Graph, sizes: list[int]) -> set[tuple[int, ...]]:
    """Every source-to-sink path of the graph, as instances per size."""
    out: set[tuple[int, ...]] = set()
    leaving: dict[int, list[tuple[int, int, int]]] = {}
    for a in gr.arcs:
        leaving.setdefault(a[0], []).append(a)

    def walk(node: int, counts: list[int]) -> None:
        if node == gr.sink:
            out.add(tuple(counts))
            return
        for _, head, j in leaving.get(node, ()):
            if j >= 0:
                counts[j] += 1
            walk(head, counts)
            if j >= 0:
                counts[j] -= 1

    walk(gr.source, [0] * len(sizes))
    return out


def _multisets(sizes: list[int], capacity: int, waste: int) -> set[tuple[int, ...]]:
    """Every multiset of the sizes that fits ``capacity`` and wastes at most ``waste``."""
    out: set[tuple[int, ...]] = set()

    def grow(j: int, room: int, counts: list[int]) -> None:
        if j == len(sizes):
            if room <= waste:
                out.add(tuple(counts))
            return
        for n in range(room // sizes[j] + 1):
            counts[j] = n
            grow(j + 1, room - n * sizes[j], counts)
        counts[j] = 0

    grow(0, capacity, [0] * len(sizes))
    return out


@settings(max_examples=80, deadline=None)
@given(
    st.integers(5, 30).flatmap(
        lambda c: st.tuples(
            st.just(c), st.lists(st.integers(1, c), min_size=1, max_size=5, unique=True), st.integers(0, c)
        )
    )
)
def test_the_compressed_graph_holds_exactly_the_patterns_that_fit(case: tuple[int, list[int], int]) -> None:
    # compression merges positions; no path may then exceed the capacity, and no pattern that
    # fits (within the waste allowed) may be lost, so the flow model stays exact both ways
    capacity, sizes, slack = case
    sizes = sorted(sizes, reverse=True)
    gr = arcflow.graph(sizes, capacity, slack)
    assert gr is not None
    paths = _paths(gr, sizes)
    fits = _multisets(sizes, capacity, slack)
    for counts in paths - {tuple([0] * len(sizes))}:
        assert sum(n * g for n, g in zip(counts, sizes, strict=True)) <= capacity, counts
    assert fits - {tuple([0] * len(sizes))} <= paths


@settings(max_examples=80, deadline=None)
@given(packings())
def test_the_arc_flow_model_agrees_with_the_exhaustive_reference(case: tuple[list[int], list[int]]) -> None:
    free, sizes = case
    prob = _special(free, sizes)
    if not prob.pure_packing:
        return
    fits = _fits(free, sizes)
    bins = bounds.bins_of(prob, bounds.one_split(prob))
    flow = arcflow.solve(bins, 5.0)
    assert flow.columns is not None or flow.refuted, "a small instance is decided"
    assert flow.refuted == (not fits)
    if flow.columns is not None:
        assert arcflow.packs(bins, flow.columns)
        assert _valid(prob, patterns.place(prob, bins, flow.columns))


def test_the_triplets_fill_every_node_so_only_full_patterns_remain() -> None:
    # 2 nodes of 10 and sizes summing to 20: no unit may be wasted, so only patterns that fill a
    # node exactly are arcs to the end; 6+4 and 5+5 remain, 6+3 (waste 1) does not
    sizes = [6, 5, 4, 3]
    gr = arcflow.graph(sizes, 10, 0)
    assert gr is not None
    assert _paths(gr, sizes) == {(1, 0, 1, 0), (0, 2, 0, 0), (0, 0, 1, 2)}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 9), st.integers(1, 3), st.integers(0, 20)), min_size=1, max_size=4),
    st.integers(1, 20),
    st.integers(0, 20),
)
@example([(5, 1, 7), (4, 1, 0)], 10, 9)  # only the worthless 4 lifts the 5 over the floor
def test_the_knapsack_with_a_floor_is_the_best_pattern_of_at_least_that_weight(
    parts: list[tuple[int, int, int]], capacity: int, floor: int
) -> None:
    # a node that may waste little takes only patterns of at least ``floor`` units; the priced
    # value must be the best of exactly those (0 when there is none), or the certificate is wrong
    import itertools

    sizes, copies, values = (list(x) for x in zip(*parts, strict=True))
    floor = min(floor, capacity)
    best = 0
    for a in itertools.product(*(range(u + 1) for u in copies)):
        weight = sum(n * g for n, g in zip(a, sizes, strict=True))
        if floor <= weight <= capacity:
            best = max(best, sum(n * v for n, v in zip(a, values, strict=True)))
    value, counts, exact = bounds.knapsack(values, sizes, copies, capacity, floor=floor)
    assert exact and value == best
    if value:
        weight = sum(n * g for n, g in zip(counts, sizes, strict=True))
        assert floor <= weight <= capacity
        assert sum(n * v for n, v in zip(counts, values, strict=True)) == value


def _bin_plan(free: int, nodes: int, sizes: list[int]) -> tuple[PlanSpec, Snapshot]:
    """The bench's form of a packing: one node per bin, one special request of one instance per size."""
    label = {"gpuplan.ragnaros.io/gpu-type": "BIN"}
    node_doc = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"bin-{b}", "labels": label},
                "status": {"allocatable": {"nvidia.com/gpu": str(free)}},
            }
            for b in range(nodes)
        ],
    }
    doc = {
        "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
        "kind": "GpuAllocationPlan",
        "metadata": {"name": "bins", "namespace": "default"},
        "spec": {
            "resources": [{"name": "BIN", "nodeSelector": label}],
            "operators": [
                {"name": f"op{i}", "keyStrategy": "machine", "services": {"key": f"op-{i}"}}
                for i in range(len(sizes))
            ],
            "requests": {
                f"op{i}": {"resourceNum": {"BIN": g}, "machineNum": {"BIN": 1}} for i, g in enumerate(sizes)
            },
        },
    }
    return parse_plan(doc), snapshot(node_doc)


# 9, 8, 7, 6, 5, 4 on three 10s: the five largest overflow the 30 cards; without the 5 the rest
# still cannot fit (no two of 9, 8, 7, 6 share a node), and dropping any of those four lets the rest
# fit: the whole filter takes five feasibility checks, each of a different shape
FILTER_FREE, FILTER_NODES, FILTER_SIZES = 10, 3, [9, 8, 7, 6, 5, 4]


def test_the_conflict_filter_keeps_to_its_budget_and_an_unfinished_one_is_not_minimal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prob = _special([FILTER_FREE] * FILTER_NODES, FILTER_SIZES)
    unbounded = conflict(prob, seconds=30.0)
    assert unbounded.minimal and unbounded.operators == ("op0", "op1", "op2", "op3")
    real = planning._feasible

    def slow(problem: TypeProblem, subset: list[int], seconds: float) -> bool | None:
        time.sleep(min(seconds, 0.3))  # a check that needs 0.3 s (or all it is given)
        return real(problem, subset, seconds)

    monkeypatch.setattr(planning, "_feasible", slow)
    start = time.monotonic()
    found = conflict(prob, seconds=0.5)
    took = time.monotonic() - start
    assert took < 1.0, f"the filter ran {took:.2f} s on a 0.5 s budget (all five checks take 1.5 s)"
    assert not found.minimal and "not shown minimal" in found.detail
    assert not _fits([FILTER_FREE] * FILTER_NODES, [FILTER_SIZES[int(op[2:])] for op in found.operators])


def test_a_refuted_plan_leaves_the_conflict_search_a_small_budget_however_long_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every check of the filter uses all the time it is given and decides nothing: the plan's
    # command then lasts as long as the conflict budget, not a share of a 60 s limit
    def undecided(problem: TypeProblem, subset: list[int], seconds: float) -> bool | None:
        time.sleep(seconds)
        return None

    monkeypatch.setattr(planning, "_feasible", undecided)
    spec, snap = _bin_plan(FILTER_FREE, FILTER_NODES, FILTER_SIZES)
    start = time.monotonic()
    result = plan(spec, snap, seconds=60.0)
    took = time.monotonic() - start
    assert not result.feasible and len(result.conflicts) == 1
    assert planning.CONFLICT_SECONDS <= 2.0
    assert took < planning.CONFLICT_SECONDS + 1.0, f"a refuted plan took {took:.2f} s"
    c = result.conflicts[0]
    assert c.kind is ConflictKind.OVERBOOKED and not c.minimal and "not shown minimal" in c.detail


@settings(max_examples=150, deadline=None)
@given(
    st.integers(10_001, 60_000).flatmap(
        lambda c: st.tuples(
            st.just(c),
            st.lists(
                st.tuples(st.integers(c // 5 + 1, c), st.integers(1, 4), st.integers(0, 60)),
                min_size=1,
                max_size=7,
            ),
        )
    )
)
# the best pair of halves shares the 12,000 (worth 50) twice: the search must branch on it
@example((40_000, [(12_000, 1, 50), (13_000, 1, 10), (14_000, 1, 10), (27_000, 1, 30)]))
def test_the_knapsack_of_at_most_four_instances_by_halves_is_exact(
    case: tuple[int, list[tuple[int, int, int]]],
) -> None:
    # large nodes that hold at most four instances are priced by two halves of at most two; the
    # value must be the best pattern's (the certificate and the LP's convergence rest on it)
    import itertools

    capacity, parts = case
    sizes, copies, values = (list(x) for x in zip(*parts, strict=True))
    best = 0
    for a in itertools.product(*(range(u + 1) for u in copies)):
        if sum(n * g for n, g in zip(a, sizes, strict=True)) <= capacity:
            best = max(best, sum(n * v for n, v in zip(a, values, strict=True)))
    found = bounds._halves(sizes, copies, capacity).best(values)
    assert found is not None and found[0] == best
    value, counts, exact = bounds.knapsack(values, sizes, copies, capacity)
    assert exact and value == best
    assert all(0 <= n <= u for n, u in zip(counts, copies, strict=True))
    assert sum(n * g for n, g in zip(counts, sizes, strict=True)) <= capacity
    assert sum(n * v for n, v in zip(counts, values, strict=True)) == value


@pytest.mark.parametrize("proven", [False, True], ids=["exact model undecided", "exact model refutes"])
def test_a_dive_backs_up_only_from_a_residual_shown_not_to_pack(
    monkeypatch: pytest.MonkeyPatch, proven: bool
) -> None:
    # a small residual goes to the exact model for a moment; when that moment is too short (a
    # loaded machine), the dive must go on from the residual's LP, not treat it as a dead end
    prob = _special([10, 10, 10], [6, 5, 4, 4, 3, 3, 3, 2])
    bins = bounds.bins_of(prob, bounds.one_split(prob))
    lp = bounds.lp_bound(bins, 5.0)
    node = patterns._Node(
        [], list(bins.demand), [n for _, n in bins.classes], list(lp.columns), list(lp.primal), set()
    )

    def exact(b: bounds.Bins, n: patterns._Node, seconds: float) -> None:
        n.proven_empty = proven
        return None

    monkeypatch.setattr(patterns, "_rounding", lambda b, lp: None)
    monkeypatch.setattr(patterns, "_exact", exact)
    assert patterns._resolve(bins, node, time.monotonic() + 5.0) is None
    assert (node.primal == []) is proven
