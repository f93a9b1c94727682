"""status.py: outcome -> status, and the patch that writes only what changed."""

from __future__ import annotations

from typing import Any

import pytest
from gpuplan_operator import status as st

from planner.planning import plan
from planner.read.parse import parse_spec, snapshot
from tests.operator.builders import NOW, node

LATER = "2026-01-01T01:00:00Z"
READY = st.Readiness(True, st.Reason.ALL_SCHEDULED, "4/4 pods scheduled on their planned nodes")


def result(cards: int = 4, nodes: int = 4) -> Any:
    spec = parse_spec({"requests": {"face_feature_extract": {"P4": cards}}}, "p", "ns")
    snap = snapshot({"kind": "List", "items": [node(f"p4-{i}") for i in range(nodes)]})
    return plan(spec, snap, seconds=5)


def applied(old: dict[str, Any] | None = None, now: str = NOW) -> dict[str, Any]:
    units = {"units": {"p4-0": {"nvidia.com/gpu": 1}}, "priorityClasses": ["ragnaros-cluster-critical-1"]}
    return st.applied_status(old or {}, 1, result(), units, READY, now)


def test_applied_status_has_the_contract_fields() -> None:
    s = applied()
    assert s["phase"] == "Applied"
    assert s["observedGeneration"] == 1
    assert s["score"] == 4.0 and s["optimal"] is True
    assert s["cards"] == "4/4" and s["cardsPlaced"] == 4 and s["cardsRequested"] == 4
    assert s["allocations"][0]["nodes"] == {"p4-0": 1, "p4-1": 1, "p4-2": 1, "p4-3": 1}
    assert [c["type"] for c in s["conditions"]] == ["Planned", "Applied", "Ready"]
    assert all(c["status"] == "True" for c in s["conditions"])
    assert s["message"] == "4/4 cards placed on 4 nodes, score 4 (optimal)"


def test_unchanged_status_needs_no_patch_and_keeps_transition_times() -> None:
    first = applied(now=NOW)
    again = applied(old=first, now=LATER)
    assert st.status_patch(first, again) is None
    assert {c["lastTransitionTime"] for c in again["conditions"]} == {NOW}


def test_a_flipped_condition_gets_a_new_transition_time() -> None:
    first = applied(now=NOW)
    pending = st.with_readiness(first, st.Readiness(False, st.Reason.PENDING, "0/4"), 1, LATER)
    ready = {c["type"]: c for c in pending["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["lastTransitionTime"] == LATER
    patch = st.status_patch(first, pending)
    assert patch is not None and set(patch) == {"conditions"}


def test_infeasible_keeps_the_previous_placement_and_says_so() -> None:
    first = applied()
    s = st.infeasible_status(first, 2, "P4: face (40) cannot fit", LATER, [{"resource": "P4"}])
    assert s["phase"] == "Infeasible" and s["observedGeneration"] == 2
    assert s["allocations"] == first["allocations"] and s["applied"] == first["applied"]
    assert "previous placement stays applied" in s["message"]
    conds = {c["type"]: c for c in s["conditions"]}
    assert conds["Planned"]["status"] == "False" and conds["Planned"]["reason"] == "Infeasible"
    assert conds["Applied"] == {c["type"]: c for c in first["conditions"]}["Applied"]
    assert s["conflicts"] == [{"resource": "P4"}]


def test_invalid_on_a_new_plan_writes_a_clear_message_and_no_placement() -> None:
    s = st.invalid_status({}, 1, "requests.nope: unknown operator 'nope'", NOW)
    assert s["phase"] == "Invalid"
    assert s["message"] == "invalid spec: requests.nope: unknown operator 'nope'"
    assert "allocations" not in s and "applied" not in s
    assert {c["type"]: c["status"] for c in s["conditions"]} == {"Planned": "False", "Applied": "False"}


def test_dry_run_reports_the_plan_but_not_applied() -> None:
    s = st.dry_run_status({}, 1, result(), NOW)
    assert s["phase"] == "Planning" and s["allocations"]
    assert "applied" not in s
    conds = {c["type"]: c for c in s["conditions"]}
    assert conds["Applied"]["status"] == "False" and conds["Applied"]["reason"] == "DryRun"


def test_error_keeps_the_plan_found_and_fails_applied() -> None:
    s = st.error_status({}, 1, "500 Injected", NOW, planned="4/4 cards")
    conds = {c["type"]: c for c in s["conditions"]}
    assert s["phase"] == "Error" and s["message"] == "apply failed: 500 Injected"
    assert conds["Planned"]["status"] == "True" and conds["Applied"]["reason"] == "ApplyFailed"


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        pytest.param({"phase": "Applied"}, {"phase": "Applied"}, None, id="same status patches nothing"),
        pytest.param(
            {"applied": {"units": {"a": {"g": 1}, "b": {"g": 1}}}},
            {"applied": {"units": {"a": {"g": 1}}}},
            {"applied": {"units": {"b": None}}},
            id="a node the plan left is removed by null, not kept by the merge",
        ),
        pytest.param({"conflicts": [1], "phase": "Infeasible"}, {"phase": "Applied"},
                     {"phase": "Applied", "conflicts": None}, id="keys we stopped setting are nulled"),
        pytest.param({"phase": "Applied", "kopf": {"x": 1}}, {"phase": "Applied"}, None,
                     id="keys we do not own are never touched"),
    ],
)  # fmt: skip
def test_status_patch(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any] | None) -> None:
    assert st.status_patch(old, new) == patch
