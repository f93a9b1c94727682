"""reserve.py: other plans' cards and foreign pods, each counted exactly once."""

from __future__ import annotations

from gpuplan_operator import reserve
from gpuplan_operator.body import PlanBody

from planner.base.vocab import plan_label_key as label_key_of
from planner.model.result import Allocation
from planner.read.allocations import read_allocations
from planner.read.parse import snapshot
from tests.operator.builders import node, plan, pod


def bodies(*plans: dict) -> list[PlanBody]:  # type: ignore[type-arg]
    return [PlanBody.from_object(p) for p in plans]


def with_applied(doc: dict, units: dict, pcs: list[str] | None = None) -> dict:  # type: ignore[type-arg]
    doc["status"] = {"applied": {"units": units, "priorityClasses": pcs or []}}
    return doc


def test_applied_units_sum_instances_per_node_in_resource_names() -> None:
    allocations = [
        {"operator": "a", "resource": "P4", "unitsPerInstance": 2, "nodes": {"n1": 2, "n2": 1}},
        {"operator": "b", "resource": "P4", "unitsPerInstance": 1, "nodes": {"n1": 1}},
        {"operator": "c", "resource": "CPU", "unitsPerInstance": 4, "nodes": {"c1": 1}},
    ]
    got = reserve.applied_units(read_allocations(allocations), {"P4": "nvidia.com/gpu", "CPU": "cpu"})
    assert got == {"c1": {"cpu": 4}, "n1": {"nvidia.com/gpu": 5}, "n2": {"nvidia.com/gpu": 2}}


def test_reserved_by_others_skips_the_plan_itself_and_scales_cpu_to_millicores() -> None:
    me = with_applied(plan("me"), {"n1": {"nvidia.com/gpu": 8}})
    a = with_applied(plan("a"), {"n1": {"nvidia.com/gpu": 3}, "c1": {"cpu": 2}})
    b = with_applied(plan("b"), {"n1": {"nvidia.com/gpu": 2}})
    fresh = plan("c")  # never applied: reserves nothing
    got = reserve.reserved_by_others(bodies(me, a, b, fresh), "uid-me")
    assert got == {"n1": {"nvidia.com/gpu": 5}, "c1": {"cpu": 2000}}


def test_pods_of_plans_are_not_counted_twice() -> None:
    key = label_key_of("ns", "a")
    keys = reserve.plan_keys(bodies(plan("a")))
    assert keys == {key}
    pods = {
        "kind": "List",
        "items": [
            pod("foreign", "n1", 2),
            pod("deployed", "n1", 4, labels={"app.kubernetes.io/managed-by": "gpuplan"}),
            pod("ragnaros", "n1", 1, nodeSelector={key: "n1"}),
            pod("unknown-plan", "n1", 1, nodeSelector={"gpuplan.ragnaros.io/gone.x": "n1"}),
        ],
    }
    left = [p["metadata"]["name"] for p in reserve.foreign_pods(pods, keys)["items"]]
    assert left == ["foreign", "unknown-plan"]


def test_snapshot_subtracts_reserved_and_foreign_once() -> None:
    other = with_applied(plan("other"), {"n1": {"nvidia.com/gpu": 3}})
    pods = {
        "kind": "List",
        "items": [pod("x", "n1", 2), pod("o", "n1", 3, nodeSelector={label_key_of("ns", "other"): "n1"})],
    }
    snap = snapshot(
        {"kind": "List", "items": [node("n1")]},
        reserve.foreign_pods(pods, reserve.plan_keys(bodies(other))),
        reserve.reserved_by_others(bodies(other), "uid-me"),
    )
    assert snap.nodes[0].free("nvidia.com/gpu") == 8 - 3 - 2


def test_priority_classes_in_use_by_others() -> None:
    a = with_applied(plan("a"), {}, ["ragnaros-cluster-critical-4"])
    me = with_applied(plan("me"), {}, ["ragnaros-cluster-critical-8"])
    assert reserve.priority_classes_in_use(bodies(a, me), "uid-me") == {"ragnaros-cluster-critical-4"}


def test_a_plan_being_deleted_uses_no_priority_class() -> None:
    """Plans deleted together: each clean-up must not keep a class alive for the others (issue 11)."""
    going = with_applied(plan("going"), {}, ["ragnaros-cluster-critical-1"])
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    staying = with_applied(plan("staying"), {}, ["ragnaros-cluster-critical-4"])
    got = reserve.priority_classes_in_use(bodies(going, staying), "uid-me")
    assert got == {"ragnaros-cluster-critical-4"}


def test_applied_units_hold_the_gpu_pods_cpu_in_whole_cores_rounded_up() -> None:
    allocations = [{"operator": "a", "resource": "P4", "unitsPerInstance": 2, "nodes": {"n1": 2}}]
    got = reserve.applied_units(
        read_allocations(allocations), {"P4": "nvidia.com/gpu"}, {"n1": 7500, "n2": 0}
    )
    assert got == {"n1": {"cpu": 8, "nvidia.com/gpu": 4}}


def test_applied_zones_sum_each_instances_cards_per_zone() -> None:
    a = Allocation("a", "P4", None, 3, 2, (("n1", 3),), zones=(
        ("n1", ((("node-0", 2),), (("node-0", 2),), (("node-0", 1), ("node-1", 1)))),
    ))  # fmt: skip
    got = reserve.applied_zones([a], {"P4": "nvidia.com/gpu"})
    assert got == {"n1": {"node-0": {"nvidia.com/gpu": 5}, "node-1": {"nvidia.com/gpu": 1}}}


def test_zones_reserved_by_others_skip_the_plan_itself() -> None:
    zones = {"n1": {"node-0": {"nvidia.com/gpu": 4}}}
    me = plan("me")
    me["status"] = {"applied": {"units": {}, "zones": zones}}
    other = plan("o")
    other["status"] = {"applied": {"units": {}, "zones": {"n1": {"node-0": {"nvidia.com/gpu": 2}}}}}
    assert reserve.zones_reserved_by_others(bodies(me, other), "uid-me") == {
        "n1": {"node-0": {"nvidia.com/gpu": 2}}
    }
    assert reserve.own_zones(me["status"]) == zones


def test_pods_of_a_plan_that_is_gone_hold_their_cards_until_they_go() -> None:
    live = bodies(plan("a"))
    mine = pod(
        "a-0", "n0", 4, labels={"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": "a"}
    )
    mine["metadata"]["namespace"] = "ns"
    left = pod(
        "b-0", "n0", 4, labels={"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": "b"}
    )
    left["metadata"]["namespace"] = "ns"
    doc = {"items": [mine, left]}
    owners = reserve.plan_owners(live)
    assert [
        p["metadata"]["name"] for p in reserve.foreign_pods(doc, reserve.plan_keys(live), owners)["items"]
    ] == ["b-0"]
    assert reserve.orphans(doc, owners) == frozenset({("ns", "b-0")})


def test_leaving_pods_hold_their_cards_only_while_a_plan_deploys_without_the_gate() -> None:
    gated = bodies(plan("a", deploy=True), plan("b", deploy=True, gang="plan"))
    assert not reserve.leaving_pods_hold(gated)
    assert reserve.owners_of_deployed_pods(gated) is None  # planned onto: the gates wait for them
    ungated = bodies(plan("a", deploy=True), plan("c", deploy=True, gang="none"))
    assert reserve.leaving_pods_hold(ungated)
    assert reserve.owners_of_deployed_pods(ungated) == reserve.plan_owners(ungated)
    # a gang: none plan that deploys nothing creates no pod that could land on taken cards
    assert not reserve.leaving_pods_hold(bodies(plan("a", deploy=True), plan("d", deploy=False, gang="none")))
