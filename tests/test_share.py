"""Several plans together: the case of one, what a plan not admitted keeps, and the fallbacks."""

from __future__ import annotations

from typing import Any

from planner.model.result import Placement
from planner.planning import plan
from planner.read.parse import parse_plan, snapshot
from planner.share.outcome import Admission, BelowMax
from planner.share.together import plan_together
from tests.helpers import node_list, plan_doc

P4 = {"name": "P4", "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": "P4"}}


def named(name: str, requests: dict[str, Any], **spec: Any) -> Any:
    doc = plan_doc(requests, **spec)
    doc["metadata"]["name"] = name
    return parse_plan(doc)


def timeless(doc: dict[str, Any]) -> dict[str, Any]:
    return doc | {"search": [{k: v for k, v in s.items() if k != "seconds"} for s in doc["search"]]}


def test_one_plan_with_fixed_counts_answers_as_planning_alone() -> None:
    snap = snapshot(node_list([("p4-000", "P4", 8), ("p4-001", "P4", 6), ("t4-000", "T4", 8)]))
    for requests in (
        {"face_1vn": {"P4": 8}, "face_feature_extract": {"P4": 4}, "body_1vn": {"T4": 4}},
        {"face_1vn": {"P4": 16}},  # no room
        {"face_image_flow": {"resourceNum": {"P4": 4}, "machineNum": {"P4": 2}}},
    ):
        spec = named("one", requests)
        (got,) = plan_together([spec], snap)
        alone = plan(spec, snap)
        assert timeless(got.result.to_json()) == timeless(alone.to_json())
        assert got.admitted == alone.feasible
        assert got.reason is (Admission.ADMITTED if alone.feasible else Admission.NO_ROOM)


def test_a_plan_not_admitted_keeps_what_it_runs_where_no_admitted_plan_needs_it() -> None:
    snap = snapshot(node_list([("p4-000", "P4", 8), ("p4-001", "P4", 8)]))
    # it ran face_1vn on p4-000 and now also asks body_1vn: 12 cards; the urgent plan takes 8
    old = named("old", {"face_1vn": {"P4": 4}, "body_1vn": {"P4": 8}})
    urgent = named("urgent", {"vehicle_1vn": {"P4": 8}}, priority=10)
    held = {("face_1vn", "P4"): Placement(4, {"p4-000": 1})}
    refused, admitted = plan_together([old, urgent], snap, [held, None])
    assert admitted.admitted and not refused.admitted
    assert refused.reason is Admission.PREEMPTED and refused.holders == ("default/urgent",)
    # the urgent plan takes the node the old one does not run on; the old one keeps its instance
    assert [dict(a.nodes) for a in admitted.result.allocations] == [{"p4-001": 1}]
    assert [(a.operator, dict(a.nodes)) for a in refused.kept] == [("face_1vn", {"p4-000": 1})]


def test_an_elastic_plan_alone_takes_what_fits_and_says_there_is_no_room_for_more() -> None:
    snap = snapshot(node_list([("p4-000", "P4", 8), ("p4-001", "P4", 8)]))
    (got,) = plan_together([named("e", {"face_1vn": {"P4": {"min": 2, "max": 40}}})], snap)
    assert got.admitted and got.result.optimal
    (grant,) = got.grants
    assert (grant.cards, grant.why, grant.holders) == (16, BelowMax.NO_ROOM, ())


def test_a_range_from_zero_runs_nothing_when_the_cards_are_taken() -> None:
    snap = snapshot(node_list([("p4-000", "P4", 8)]))
    first = named("first", {"face_1vn": {"P4": 8}})
    spare = named("spare", {"body_1vn": {"P4": {"min": 0, "max": 8}}})
    a, b = plan_together([first, spare], snap)
    assert a.admitted and b.admitted and b.result.allocations == ()
    (grant,) = b.grants
    assert (grant.cards, grant.why, grant.holders) == (0, BelowMax.HELD, ("default/first",))


def test_types_that_overlap_without_being_equal_are_planned_one_after_another() -> None:
    snap = snapshot(node_list([("p4-000", "P4", 8), ("p4-001", "P4", 8), ("t4-000", "T4", 8)]))
    anything = {"name": "GPU", "nodeSelector": {}}  # every node: the P4 nodes and more
    wide = named("wide", {"face_1vn": {"GPU": 8}}, resources=[anything])
    narrow = named("narrow", {"body_1vn": {"P4": {"min": 4, "max": 16}}}, resources=[P4], priority=5)
    w, n = plan_together([wide, narrow], snap)
    assert w.admitted and n.admitted
    # no joint model for entangled types, but every objective is at its bound: all admitted, all
    # at their max, each plan's score that of its best splits on the whole cluster
    assert w.result.optimal and n.result.optimal
    used: dict[str, int] = {}
    for s in (w, n):
        for a in s.result.allocations:
            for node, k in a.nodes:
                used[node] = used.get(node, 0) + k * a.units
    assert used == {"p4-000": 8, "p4-001": 8, "t4-000": 8}
    assert n.grants[0].cards == 16  # the higher priority first: all the P4 cards


def test_overlapping_types_below_their_bound_are_not_reported_optimal() -> None:
    anything = {"name": "GPU", "nodeSelector": {}}
    snap = snapshot(node_list([("p4-000", "P4", 8), ("t4-000", "T4", 8)]))
    narrow = named("narrow", {"body_1vn": {"P4": {"min": 4, "max": 8}}}, resources=[P4], priority=5)
    # not admitted: the narrow plan, first, holds the P4 cards the wide one would need
    wide = named("wide", {"face_1vn": {"GPU": 12}}, resources=[anything])
    w, n = plan_together([wide, narrow], snap)
    assert n.admitted and not w.admitted and not n.result.optimal
    # the wide plan first: 12 of the 16 cards, the narrow one cannot reach its max of 8
    wide = named("wide", {"face_1vn": {"GPU": 12}}, resources=[anything], priority=9)
    w, n = plan_together([wide, narrow], snap)
    assert w.admitted and (not n.admitted or n.grants[0].cards < 8)
    assert not w.result.optimal and not n.result.optimal


def test_an_operator_asking_for_two_types_gets_each_on_its_own_nodes() -> None:
    snap = snapshot(node_list([("p4-000", "P4", 8), ("p4-001", "P4", 8), ("t4-000", "T4", 8)]))
    both = named("both", {"face_feature_extract": {"P4": {"min": 1, "max": 2}, "T4": 2}})
    other = named("other", {"face_1vn": {"P4": 4}})
    mine, _ = plan_together([both, other], snap)
    where = {a.resource: {n for n, _ in a.nodes} for a in mine.result.allocations}
    assert where["P4"] <= {"p4-000", "p4-001"} and where["T4"] == {"t4-000"}
    assert mine.result.cards_placed == 4


def _devices_of(result: Any) -> list[tuple[str, str]]:
    return [
        (node, d) for a in result.allocations for node, lists in a.devices for devs in lists for d in devs
    ]


def test_plans_planned_together_never_get_the_same_device() -> None:
    from tests.test_topology import gpu_nodes, slices

    domains = {"n0": [4, 4], "n1": [4, 4]}
    snap = snapshot(gpu_nodes(list(domains)), slices_doc=slices(domains))
    p4 = [{"name": "P4"}]
    specs = [
        named("a", {"face_1vn": {"P4": 8}, "face_feature_extract": {"P4": 2}}, resources=p4),
        named("b", {"face_1vn": {"P4": 4}, "body_1vn": {"P4": 2}}, resources=p4),
    ]
    answers = plan_together(specs, snap)
    assert all(a.admitted and a.result.feasible for a in answers)
    given = [d for a in answers for d in _devices_of(a.result)]
    assert len(given) == 16  # every card of both plans has a device of its own
    assert len(set(given)) == len(given), "two plans were given the same device"


def test_growing_one_by_one_takes_the_better_fit_the_fast_path_finds_when_guided() -> None:
    """Found by the fixed-point property: the unguided fast path met the nodes in an order that
    failed, the waterfill then gave face_feature_extract 1x2, and planning again from that answer
    (the fast path guided by it) found 2x1 on two nodes: the answer changed with nothing changed."""
    from unittest.mock import patch

    from planner.model.result import previous_placements
    from planner.share import growth

    def rng(lo: int, hi: int) -> dict[str, Any]:
        return {"P4": {"min": lo, "max": hi}}

    specs = [
        named("p0", {"face_1vn": rng(0, 1)}),
        named("p1", {"face_1vn": rng(0, 2), "face_feature_extract": rng(0, 2)}),
        named("p2", {"face_1vn": rng(1, 2)}),
    ]
    snap = snapshot(node_list([("n0", "P4", 4), ("n1", "P4", 4)]))
    with patch.object(growth, "MODEL_SPLITS", 0):
        first = plan_together(specs, snap)
        again = plan_together(specs, snap, [previous_placements(a.result.allocations) for a in first])
    for a, b in zip(first, again, strict=True):
        assert a.result.allocations == b.result.allocations, a.name
    ffe = next(x for x in first[1].result.allocations if x.operator == "face_feature_extract")
    assert (ffe.instances, ffe.units) == (2, 1)


def test_a_newcomer_takes_free_devices_rather_than_moving_a_plan_off_its_devices() -> None:
    """What a plan ran on is held back last: a plan of 4 on its own domain keeps it when a plan of
    2 arrives and two devices nobody runs on are free, whichever of them is planned first."""
    from tests.test_topology import claims, gpu_nodes, operator, slices

    snap = snapshot(gpu_nodes(["n0"]), slices_doc=slices({"n0": [4, 4]}), claims_doc=claims({"n0": [0, 1]}))
    p4 = [{"name": "P4", "deviceClassName": "gpu.example.com"}]

    def one(cards: int) -> dict[str, Any]:
        return {"resourceNum": {"P4": cards}, "machineNum": {"P4": 1}}

    alpha = named("alpha", {"alpha": one(4)}, resources=p4, operators=[operator("alpha", "machine")])
    beta = named("beta", {"beta": one(2)}, resources=p4, operators=[operator("beta", "machine")])
    ran = ("gpu-4", "gpu-5", "gpu-6", "gpu-7")
    held = {("alpha", "P4"): Placement(4, {"n0": 1}, {"n0": [ran]})}
    for order in ([alpha, beta], [beta, alpha]):
        answers = plan_together(order, snap, [held if s is alpha else None for s in order])
        got = {s.name: _devices_of(a.result) for s, a in zip(order, answers, strict=True)}
        assert got["alpha"] == [("n0", d) for d in ran]
        assert got["beta"] == [("n0", "gpu-2"), ("n0", "gpu-3")]


def test_a_newcomer_needing_whole_nodes_takes_the_ones_held_least_and_moves_only_what_it_must() -> None:
    """Three 2-card instances on three of five nodes; a higher-priority plan needs three whole
    nodes. Two are free, so one instance must move, and only one: the newcomer takes the free
    nodes and one of the three, never the first three nodes by name with everything moved."""
    snap = snapshot(node_list([(f"p4-{i:03d}", "P4", 8) for i in range(5)]))

    def single(names: list[str]) -> list[dict[str, Any]]:
        return [{"name": n, "keyStrategy": "single", "services": {"key": n}} for n in names]

    whole = {"resourceNum": {"P4": 8}, "machineNum": {"P4": 1}}
    two = {"resourceNum": {"P4": 2}, "machineNum": {"P4": 1}}
    old = named("old", {n: two for n in "abc"}, operators=single(list("abc")))
    urgent = named(
        "urgent", {u: whole for u in ("u0", "u1", "u2")}, operators=single(["u0", "u1", "u2"]), priority=10
    )
    held = {(n, "P4"): Placement(2, {f"p4-00{i}": 1}) for i, n in enumerate("abc")}
    o, u = plan_together([old, urgent], snap, [held, None])
    assert o.admitted and u.admitted
    taken = {node for a in u.result.allocations for node, _ in a.nodes}
    assert {"p4-003", "p4-004"} <= taken
    stayed = sum(
        1 for a in o.result.allocations for node, _ in a.nodes if held[(a.operator, "P4")].nodes.get(node)
    )
    assert stayed == 2


def test_a_min_no_split_takes_is_met_by_a_larger_count_beside_another_plan() -> None:
    """face_feature_extract (one instance per node) cannot take 3 cards on two nodes of 2, but
    4 (2 x 2) is "at least its min": the plan is admitted beside one whose min is 0, which
    then has no card left to grow on (the case Hypothesis found: the plan was refused)."""
    from unittest.mock import patch

    from planner.model.result import previous_placements
    from planner.share import growth

    snap = snapshot(node_list([("n0", "P4", 2), ("n1", "P4", 2)]))
    first = named("p0", {"face_1vn": {"P4": {"min": 0, "max": 1}}})
    second = named("p1", {"face_feature_extract": {"P4": {"min": 3, "max": 4}}})
    for one_by_one in (False, True):
        with patch.object(growth, "MODEL_SPLITS", 0 if one_by_one else growth.MODEL_SPLITS):
            a, b = plan_together([first, second], snap)
            assert a.admitted and b.admitted, (one_by_one, b.reason)
            assert [(g.cards, g.why) for g in a.grants] == [(0, BelowMax.HELD)]
            assert [(g.cards, g.why) for g in b.grants] == [(4, None)]
            # planned again with what it gave, nothing changes
            again = plan_together(
                [first, second], snap, [previous_placements(s.result.allocations) for s in (a, b)]
            )
            assert [s.admitted for s in again] == [True, True]
            assert [s.result.allocations for s in again] == [a.result.allocations, b.result.allocations]


def test_a_min_that_splits_but_does_not_place_is_met_by_a_larger_count_that_does() -> None:
    """On nodes of 2, 2 and 0 cards, 3 cards one instance per node split (3 x 1) but need three
    nodes with a free card; 4 (2 x 2) place: admission's exact check tries every count, not only
    the fewest."""
    snap = snapshot(node_list([("n0", "P4", 2), ("n1", "P4", 2), ("n2", "P4", 0)]))
    first = named("p0", {"face_1vn": {"P4": {"min": 0, "max": 4}}})
    second = named("p1", {"face_feature_extract": {"P4": {"min": 3, "max": 4}}})
    a, b = plan_together([first, second], snap)
    assert a.admitted and b.admitted, b.reason
    assert [(g.cards, g.why) for g in b.grants] == [(4, None)]
    assert [(x.instances, x.units) for x in b.result.allocations] == [(2, 2)]


def test_a_plans_view_of_a_type_gives_its_own_cards_back_and_works_its_nodes_out_when_read() -> None:
    from dataclasses import replace

    from planner.base.strategies import Strategy, Topology
    from planner.model.options import TypeProblem
    from planner.model.spec import Request, ResourceKind, ResourceType
    from planner.share.answers import Residual
    from planner.share.pools import Entry, Pool

    gpu = ResourceType("P4", ResourceKind.GPU, "nvidia.com/gpu", (("gpuplan.ragnaros.io/gpu-type", "P4"),))
    problem = TypeProblem(gpu, (("a", 8), ("b", 6), ("c", 3)), ())

    def entry(plan: int, label: str) -> Entry:
        return Entry(plan, Request("op", "P4", 8), label, Strategy.SINGLE, "v1", Topology.NONE, 0, 0, None)

    pool = Pool(gpu, problem.nodes, [entry(0, "x"), entry(1, "y"), entry(0, "z")])
    # every plan's cards: a 8, b 2 (and CPU, another resource)
    residual = Residual({"a": {"nvidia.com/gpu": 8}, "b": {"nvidia.com/gpu": 2, "cpu": 4000}})
    for placed, nodes in (
        ({"x": (1, {"a": 3})}, (("a", 3), ("b", 4), ("c", 3))),
        ({"x": (2, {"a": 2, "b": 1}), "z": (4, {"a": 1})}, (("a", 8), ("b", 6), ("c", 3))),  # a full again
        ({"y": (4, {"a": 2})}, (("a", 0), ("b", 4), ("c", 3))),  # another plan's
        ({}, (("a", 0), ("b", 4), ("c", 3))),
    ):
        left = residual.of(problem, pool, placed, 0)
        assert left.size == 3 and "nodes" not in vars(left)  # not worked out to read the largest
        assert left.largest == max(f for _, f in nodes)
        assert left.nodes == nodes
        other = residual.of(problem, pool, placed, 0).with_items(problem.items)
        assert other.nodes == nodes and other.largest == left.largest and other == left
        copied = replace(left, items=())  # a copy made the usual way has its nodes worked out
        assert copied.nodes == nodes and copied.size == 3 and copied.with_items(()) == copied
