"""The operator bench: new nodes left with the TTL the controller-manager wants at their size, the
gated floors' Deployments, the node labels a gated hand-over writes and the order of ``--rounds``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from operator_bench import (
    DEPLOY,
    FLOOR_KEY,
    GATED,
    HAND_GATED,
    HAND_KINDS,
    HAND_LABELLED,
    HAND_OVER,
    HAND_PLAIN,
    LABELLED,
    PLAIN,
    PLAN_LABEL,
    floor_key,
    gated_deployments,
    in_turns,
    label_changes,
    lifting_gates,
    lifts,
    node_ttl,
    pins,
    ratios,
    timed_kinds,
)


@pytest.mark.parametrize(
    ("count", "ttl"),
    [(8, "0"), (100, "0"), (108, "15"), (500, "15"), (501, "30"), (1008, "60"), (2000, "60"), (3008, "300")],
)
def test_the_ttl_a_grown_cluster_has_follows_the_controllers_steps(count: int, ttl: str) -> None:
    assert node_ttl(count) == ttl


def test_the_gated_floor_pins_by_a_label_of_its_own_and_gates_every_pod() -> None:
    bare: dict[str, Any] = {
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n7"}, "containers": []}}},
    }
    (gated,) = gated_deployments([bare])
    spec = gated["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {FLOOR_KEY: "n7"}
    assert spec["schedulingGates"] == [{"name": "gpuplan.ragnaros.io/gang"}]
    assert bare["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n7"}  # a copy


def _bare(name: str, plan: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {PLAN_LABEL: plan}},
        "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": []}}},
    }


def test_the_gated_hand_over_pins_each_plan_by_a_key_of_its_own() -> None:
    a, b = gated_deployments([_bare("a", "scale", "n1"), _bare("b", "urgent", "n1")], per_plan=True)
    assert a["spec"]["template"]["spec"]["nodeSelector"] == {floor_key("scale"): "n1"}
    assert b["spec"]["template"]["spec"]["nodeSelector"] == {floor_key("urgent"): "n1"}
    assert floor_key("scale") != floor_key("urgent")


def test_a_hand_over_sets_the_arriving_plans_labels_and_removes_the_leaving_ones_once_per_node() -> None:
    before = gated_deployments(
        [_bare("s1", "scale", "n1"), _bare("s2", "scale", "n2"), _bare("s3", "scale", "n3")], per_plan=True
    )
    after = gated_deployments(
        # scale leaves n1 for n4 and keeps n2 and n3; urgent takes n1 and the whole n5
        [_bare("s2", "scale", "n2"), _bare("s3", "scale", "n3"), _bare("s4", "scale", "n4"),
         _bare("u1", "urgent", "n1"), _bare("u5", "urgent", "n5")],
        per_plan=True,
    )  # fmt: skip
    scale, urgent = floor_key("scale"), floor_key("urgent")
    assert label_changes(pins(before), pins(after)) == {
        "n1": {scale: None, urgent: "n1"},  # one patch: the leaving plan's label off, the arriving one's on
        "n4": {scale: "n4"},
        "n5": {urgent: "n5"},
    }
    assert label_changes(pins(after), set()) == {
        "n1": {urgent: None},
        "n2": {scale: None},
        "n3": {scale: None},
        "n4": {scale: None},
        "n5": {urgent: None},
    }
    assert label_changes(pins(after), pins(after)) == {}


def test_rounds_take_turns_which_side_goes_first_and_compare_the_deploy_with_each_floor() -> None:
    order = in_turns(2)
    assert order == [PLAIN, GATED, DEPLOY, DEPLOY, GATED, PLAIN]
    took = [80.0, 100.0, 120.0, 90.0, 75.0, 60.0]
    assert ratios(order, took, GATED) == [1.2, 1.2]
    assert ratios(order, took, PLAIN) == [1.5, 1.5]


def test_hand_over_rounds_time_the_operator_first_and_compare_it_with_both_floors() -> None:
    order = in_turns(2, HAND_KINDS)
    assert order == [HAND_OVER, HAND_GATED, HAND_PLAIN, HAND_PLAIN, HAND_GATED, HAND_OVER]
    took = [24.0, 20.0, 16.0, 15.0, 25.0, 30.0]
    assert ratios(order, took, HAND_GATED, HAND_KINDS) == [1.2, 1.2]
    assert ratios(order, took, HAND_PLAIN, HAND_KINDS) == [1.5, 2.0]


def test_rounds_without_the_gang_gate_time_labelled_floors_where_the_gated_ones_stand() -> None:
    assert timed_kinds(hand=False, gang="none") == [PLAIN, LABELLED, DEPLOY]
    assert timed_kinds(hand=True, gang="none") == [HAND_OVER, HAND_LABELLED, HAND_PLAIN]
    assert timed_kinds(hand=False, gang=None) == [PLAIN, GATED, DEPLOY]
    assert timed_kinds(hand=True, gang="plan") == HAND_KINDS
    order = in_turns(2, timed_kinds(hand=False, gang="none"))
    assert order == [PLAIN, LABELLED, DEPLOY, DEPLOY, LABELLED, PLAIN]
    kinds = timed_kinds(hand=False, gang="none")
    took = [80.0, 90.0, 100.0, 90.0, 75.0, 60.0]
    assert ratios(order, took, PLAIN, kinds) == [1.25, 1.5]
    assert ratios(order, took, LABELLED, kinds) == [100.0 / 90.0, 1.2]


def test_labelled_floor_deployments_are_pinned_by_their_plan_s_label_and_carry_no_gate() -> None:
    (plain,) = gated_deployments([_bare("a", "urgent", "n1")], per_plan=True, gate=False)
    spec = plain["spec"]["template"]["spec"]
    assert "schedulingGates" not in spec
    assert spec["nodeSelector"] == {floor_key("urgent"): "n1"}


def test_a_floor_without_the_gate_lifts_nothing_and_says_so() -> None:
    with lifting_gates(None, on=False) as lifted:  # type: ignore[arg-type]  # no API reached
        pass
    assert lifted == [] and lifts(lifted, gate=False) == "no"
    assert lifts([], gate=True) == "?"
    assert lifts([260], gate=True, before=10) == "250"


def test_rounds_tell_each_timed_run_s_ledger_from_its_before_mark_to_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--rounds`` prints what the control plane did in each run, counted from the mark that
    starts its timing (``before the floor``, ``before the hand-over floor``), not from the last run."""
    from collections import Counter

    import ledger
    import operator_bench

    readings = iter(
        ledger.Reading(requests=Counter({"PATCH nodes": n}), seconds={"PATCH nodes": n / 100})
        for n in (5, 105, 200, 230, 1000, 1250)
    )
    monkeypatch.setattr(ledger, "read", lambda kube, metrics=None: next(readings))
    from types import SimpleNamespace

    phase = operator_bench.RunLedger(SimpleNamespace(kube=None))  # type: ignore[arg-type]
    phase("before the floor")
    phase("floor")
    assert "requests: 100, answered in 1.0 s" in phase.last
    assert phase.last.startswith(" floor\n")
    phase("before the hand-over floor")
    phase("hand-over floor")
    assert "requests: 30" in phase.last and "PATCH nodes" in phase.last
    phase("labelled floor")  # no mark before it: it only marks
    phase("deploy")
    assert "requests: 250" in phase.last and phase.last.startswith(" deploy\n")


def test_rounds_tell_each_kind_s_runs_and_the_fastest_over_the_fastest() -> None:
    from operator_bench import fastest

    order = in_turns(2, HAND_KINDS)
    took = [17.0, 18.6, 8.8, 9.9, 12.0, 16.1]  # hand-over, gated, plain, then backwards
    lines = fastest(order, took, HAND_KINDS)
    assert lines[0] == "hand-over runs: 17.0, 16.1 s (fastest 16.1 s)"
    assert lines[1] == "gated hand-over floor runs: 18.6, 12.0 s (fastest 12.0 s)"
    assert lines[2] == "hand-over floor runs: 8.8, 9.9 s (fastest 8.8 s)"
    assert "the fastest hand-over over the fastest gated hand-over floor: 16.1 / 12.0 s = 1.34x" in lines
    assert "the fastest hand-over over the fastest hand-over floor: 16.1 / 8.8 s = 1.83x" in lines
