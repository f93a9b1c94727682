"""cycle/sweep.py (pure): plan label keys no plan holds, and when they have waited long enough."""

from __future__ import annotations

from typing import Any

from gpuplan_operator.cycle.sweep import Sweep, orphans

from planner import plan_label_namespace
from tests.operator.builders import node


def labelled(name: str, **labels: str) -> dict[str, Any]:
    n = node(name)
    n["metadata"]["labels"].update(labels)
    return n


GONE = "gpuplan.ragnaros.io/ns.gone"
HELD = "gpuplan.ragnaros.io/ns.here"
OTHER_NS = "gpuplan.ragnaros.io/other.gone"


def test_a_key_is_a_plans_when_it_names_a_namespace_and_a_plan() -> None:
    assert plan_label_namespace(GONE) == "ns"
    assert plan_label_namespace("gpuplan.ragnaros.io/ns.name.with.dots") == "ns"
    assert plan_label_namespace("gpuplan.ragnaros.io/gpu-type") is None  # a setting, not a plan's
    assert plan_label_namespace("example.com/ns.gone") is None


def test_orphans_are_served_plan_keys_no_known_plan_holds() -> None:
    nodes = [
        labelled("a", **{GONE: "a", HELD: "a", OTHER_NS: "a", "team": "x"}),
        labelled("b", **{GONE: "b"}),
        labelled("c", **{HELD: "c"}),
    ]
    found = orphans(nodes, {HELD}, lambda ns: ns == "ns")
    assert found == {GONE: ["a", "b"]}  # not the held key, not another namespace's, no setting
    assert orphans(nodes, {HELD}, lambda ns: True) == {GONE: ["a", "b"], OTHER_NS: ["a"]}
    assert orphans(nodes, {HELD, GONE, OTHER_NS}, lambda ns: True) == {}


def test_a_key_is_due_once_it_was_an_orphan_for_the_grace_every_time_it_was_looked_at() -> None:
    sweep = Sweep(grace=10)
    assert sweep.due({GONE}, now=100) == ([], 10)
    assert sweep.due({GONE, OTHER_NS}, now=104) == ([], 6)
    assert sweep.due({GONE, OTHER_NS}, now=110) == ([GONE], 4)  # returned once, then forgotten
    assert sweep.due({OTHER_NS}, now=111) == ([], 3)
    assert sweep.due(set(), now=112) == ([], None)  # its plan came back: forgotten
    assert sweep.due({OTHER_NS}, now=113) == ([], 10)  # an orphan again: its grace starts again
