"""diff.py: does the actual object already hold what we would apply?"""

from __future__ import annotations

from typing import Any

import pytest
from gpuplan_operator.body import PlanBody
from gpuplan_operator.diff import covers, foreign_owner, node_label_changes, with_owner

from tests.operator.builders import node, plan

DESIRED_POD = {
    "containers": [{"name": "flamewaker", "image": "img", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
    "nodeSelector": {"type": "P4", "gpuplan.ragnaros.io/ns.p": "n1"},
    "priorityClassName": "ragnaros-cluster-critical-2",
}
SERVER_POD = {
    "containers": [
        {
            "name": "flamewaker",
            "image": "img",
            "imagePullPolicy": "Always",
            "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}},
        }
    ],
    "nodeSelector": {"type": "P4", "gpuplan.ragnaros.io/ns.p": "n1"},
    "priorityClassName": "ragnaros-cluster-critical-2",
    "restartPolicy": "Always",
    "schedulerName": "default-scheduler",
}


def changed(**over: Any) -> dict[str, Any]:
    return SERVER_POD | over


@pytest.mark.parametrize(
    ("actual", "same"),
    [
        pytest.param(SERVER_POD, True, id="server defaults and string quantities still match"),
        pytest.param(changed(nodeSelector={"type": "P4", "gpuplan.ragnaros.io/ns.p": "n2"}), False,
                     id="another node is a change"),
        pytest.param(changed(nodeSelector={"type": "P4", "gpuplan.ragnaros.io/ns.p": "n1", "x": "y"}), False,
                     id="an extra node selector key is a change"),
        pytest.param(changed(priorityClassName="ragnaros-cluster-critical-4"), False, id="another priority"),
        pytest.param(changed(containers=[]), False, id="a missing container is a change"),
    ],
)  # fmt: skip
def test_covers_pod_specs(actual: dict[str, Any], same: bool) -> None:
    assert covers(actual, DESIRED_POD) is same


def test_a_field_we_stopped_setting_must_be_gone() -> None:
    desired = {k: v for k, v in DESIRED_POD.items() if k != "priorityClassName"}
    assert not covers(SERVER_POD, desired)
    assert covers({k: v for k, v in SERVER_POD.items() if k != "priorityClassName"}, desired)


def test_a_gang_gate_we_stopped_setting_must_be_gone() -> None:
    """``gang: none`` after ``plan``: the Deployment's template still gated is a change."""
    gated = changed(schedulingGates=[{"name": "gpuplan.ragnaros.io/gang"}])
    assert covers(gated, DESIRED_POD | {"schedulingGates": [{"name": "gpuplan.ragnaros.io/gang"}]})
    assert not covers(gated, DESIRED_POD)
    assert covers(SERVER_POD, DESIRED_POD)


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    return PlanBody.from_object(obj).owner_reference()


def test_owner_references_are_merged_by_uid() -> None:
    owner = owner_reference(plan())
    ours = with_owner({"metadata": {"name": "cm"}, "data": {"a": "b"}}, owner)
    theirs = {"uid": "other", "kind": "X", "name": "x"}
    actual = {"metadata": {"name": "cm", "ownerReferences": [theirs, owner]}, "data": {"a": "b"}}
    assert covers(actual, ours)
    assert not covers({"metadata": {"name": "cm", "ownerReferences": [theirs]}, "data": {"a": "b"}}, ours)


def test_foreign_owner_is_named_and_ours_is_not() -> None:
    mine = with_owner({"metadata": {"name": "d"}}, owner_reference(plan()))
    other = with_owner({"metadata": {"name": "d"}}, owner_reference(plan("q")))
    assert foreign_owner(mine, "uid-p") is None
    assert foreign_owner(other, "uid-p") == "GpuAllocationPlan/q"
    assert foreign_owner(None, "uid-p") is None


def test_node_label_changes_touch_only_the_plan_key() -> None:
    key = "gpuplan.ragnaros.io/ns.p"
    a, b, c = node("a"), node("b"), node("c")
    b["metadata"]["labels"][key] = "b"
    c["metadata"]["labels"][key] = "stale"
    c["metadata"]["labels"]["gpuplan.ragnaros.io/ns.q"] = "c"
    changes = node_label_changes([a, b, c], {"a": {key: "a"}, "b": {key: "b"}}, key)
    assert changes.set == {"a": "a"}
    assert changes.remove == ["c"]


def test_no_label_changes_when_nodes_already_match() -> None:
    key = "gpuplan.ragnaros.io/ns.p"
    a = node("a")
    a["metadata"]["labels"][key] = "a"
    assert not node_label_changes([a], {"a": {key: "a"}}, key)


def test_zero_values_the_server_omits_still_match() -> None:
    desired = {"kind": "PriorityClass", "value": 800001000, "globalDefault": False}
    assert covers(
        {"kind": "PriorityClass", "value": 800001000, "preemptionPolicy": "PreemptLowerPriority"}, desired
    )
    assert not covers({"kind": "PriorityClass", "value": 800001000, "globalDefault": True}, desired)
