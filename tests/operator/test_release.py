"""release.py: what one gang round keeps for the next (the nodes' index, the pods placed on it,
the plans' placements) is taken again only while it is still true."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from gpuplan_operator import release
from gpuplan_operator.body import PlanBody
from gpuplan_operator.gang import GangCode
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.release import GateKeeper

from tests.operator.fake_kube import FakeKube
from tests.operator.test_gang import KEY, NOW, gated, node, pod


def keeper(pods: list[dict[str, Any]]) -> tuple[GateKeeper, list[dict[str, Any]]]:
    """A gate keeper whose API server holds ``pods`` (a release patches them), and the pods as
    the server stored them (with their uids and versions)."""
    kube = FakeKube()
    stored = [kube.put("api/v1/namespaces/ns/pods", p) for p in pods]
    return GateKeeper(kube, Metrics(), clock=lambda: NOW), stored


def test_a_pod_follows_its_node_label_to_another_node_though_the_pod_did_not_change() -> None:
    """The pods placed by one round are kept only with the same node objects: here the pod's
    label moves from a full node to an empty one between two rounds, the pod itself unchanged."""
    full, empty = node("n1", cards=0), node("n2")
    gates, (waiting,) = keeper([gated("a", 4, planned="n1")])
    (first,) = gates.decide_and_release([full, empty], [waiting], [])
    assert first.code is GangCode.WAITING and not first.releases
    moved_off, moved_on = copy.deepcopy(full), copy.deepcopy(empty)
    moved_off["metadata"]["labels"][KEY] = "elsewhere"
    moved_on["metadata"]["labels"][KEY] = "n1"
    (second,) = gates.decide_and_release([moved_off, moved_on], [waiting], [])
    assert second.code is GangCode.RELEASED
    assert [r.pod.planned for r in second.releases] == ["n2"]


def test_the_same_nodes_are_indexed_once_and_pods_placed_once_per_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[int] = []
    placed: list[str] = []
    from gpuplan_operator import gang

    real_index, real_placed = gang.NodeIndex, gang.placed

    def index(nodes: Any) -> Any:
        built.append(1)
        return real_index(nodes)

    def place(read: Any, selector: Any, nodes: Any) -> Any:
        placed.append(read.name)
        return real_placed(read, selector, nodes)

    monkeypatch.setattr(release, "NodeIndex", index)
    monkeypatch.setattr(release, "placed", place)
    nodes = [node("n1", cards=0), node("n2", cards=0)]
    gates, pods = keeper([gated("a", 4, planned="n1"), gated("b", 4, planned="n2")])
    for _ in range(3):
        gates.decide_and_release(nodes, pods, [])
    assert (len(built), sorted(placed)) == (1, ["a", "b"])
    newer = copy.deepcopy(pods[0])
    newer["metadata"]["resourceVersion"] = "9999"  # a new version of a: placed again, b is not
    gates.decide_and_release(nodes, [newer, pods[1]], [])
    assert (len(built), sorted(placed)) == (1, ["a", "a", "b"])
    gates.decide_and_release([*nodes[:1], copy.deepcopy(nodes[1])], [newer, pods[1]], [])  # a node replaced
    assert (len(built), sorted(placed)) == (2, ["a", "a", "a", "b", "b"])


def plan_with_units(units: dict[str, Any]) -> PlanBody:
    return PlanBody.from_object({
        "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
        "kind": "GpuAllocationPlan",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {},
        "status": {"applied": {"units": units}},
    })  # fmt: skip


def test_a_plans_placement_is_read_again_when_its_status_is_another_object() -> None:
    known: dict[str, Any] = {}
    units = {"n1": {"nvidia.com/gpu": 4}}
    first = release._placements([plan_with_units(units)], known)
    assert first["ns/p"] == {"n1": {"nvidia.com/gpu": 4}}
    again = release._placements([plan_with_units(units)], known)
    assert again["ns/p"] is first["ns/p"]  # the same object: read once
    changed = release._placements([plan_with_units({"n1": {"nvidia.com/gpu": 2}})], known)
    assert changed["ns/p"] == {"n1": {"nvidia.com/gpu": 2}}
    assert release._placements([], known) == {} and known == {}  # a plan gone is forgotten


def test_a_pod_object_seen_by_the_last_round_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplan_operator import gang

    read: list[str] = []
    real = gang.read_own

    def counting(pod: Any) -> Any:
        read.append(pod["metadata"]["name"])
        return real(pod)

    monkeypatch.setattr(release, "read_own", counting)
    nodes = [node("n1", cards=0)]
    gates, pods = keeper([gated("a", 4, planned="n1"), gated("b", 4, planned="n1")])
    gates.decide_and_release(nodes, pods, [])
    gates.decide_and_release(nodes, pods, [])
    assert sorted(read) == ["a", "b"]
    replaced = copy.deepcopy(pods[1])  # the cache's next version of b: another object
    gates.decide_and_release(nodes, [pods[0], replaced], [])
    assert sorted(read) == ["a", "b", "b"]
    gates.decide_and_release(nodes, [replaced], [])  # a gone: forgotten
    gates.decide_and_release(nodes, [pods[0], replaced], [])
    assert sorted(read) == ["a", "a", "b", "b"]


def test_a_released_pod_on_its_way_is_waited_for_only_with_a_readable_release_time() -> None:
    """A pod whose gate the operator lifted, not bound yet: the next round comes when its time
    is up. One whose release time cannot be read has no time to be up: nothing to wait for (the
    decision never counted it overdue either)."""
    on_its_way = pod("a", 4, planned="n1", released_ago=30.0)
    gates, (stored,) = keeper([on_its_way])
    (decision,) = gates.decide_and_release([node("n1")], [stored], [])
    assert decision.code is GangCode.IDLE and not decision.releases
    assert gates.due_in == pytest.approx(180.0 - 30.0 + 0.5)
    garbled = copy.deepcopy(on_its_way)
    garbled["metadata"]["annotations"]["gpuplan.ragnaros.io/released"] = "yesterday"
    gates, (stored,) = keeper([garbled])
    assert gates.decide_and_release([node("n1")], [stored], []) == []
    assert gates.due_in is None
