"""compare: a plan and per-instance capacities -> 1xn, nx1 and the planner's split side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.compare import (
    CompareError,
    compare,
    load_capacities,
    load_plan,
    parse_capacities,
    parse_plan,
    render_text,
)

pytestmark = pytest.mark.timeout(10)

EXAMPLES = Path(__file__).resolve().parents[2] / "loadtest" / "examples"


def test_the_example_files_compare_like_the_seeds_table() -> None:
    plan = load_plan(EXAMPLES / "plan.json")
    report = compare(plan, load_capacities(EXAMPLES / "capacities.yaml"))
    t = report["totals"]
    # face_feature_extract 4 cards, compute-bound: 4x1 = 8000/s, 1x4 = 2000/s.
    # face_1vn 4 cards, io-bound (fan-out): 1x4 = 2000/s, 4x1 = 500/s with 4x the CPU.
    # body_feature_extract 2 cards: 2x1 = 3000/s, 1x2 = 1500/s.
    assert t["planner"]["qps"] == 13000
    assert t["1xn"]["qps"] == 11500
    assert t["nx1"]["qps"] == 5500
    # vs 1 card x n: more QPS and less memory; vs n cards x 1: more QPS for more CPU and memory.
    assert t["planner"]["memoryMiB"] < t["1xn"]["memoryMiB"]
    assert t["planner"]["cpu"] > t["nx1"]["cpu"]
    assert t["planner"]["qpsPerCore"] > t["1xn"]["qpsPerCore"]
    row = {r["operator"]: r for r in report["rows"]}
    assert row["face_1vn"]["strategies"]["1xn"] == {
        "instances": 4,
        "cardsPerInstance": 1,
        "qps": 500.0,
        "cpu": 8.0,
        "memoryMiB": 32000.0,
        "cpuLimited": False,
    }
    text = render_text(report)
    assert "1 card x n" in text and "n cards x 1" in text and "planner" in text
    assert "face_feature_extract" in text


def _caps(**op: Any) -> dict[str, Any]:
    entry = {"cardsPerInstance": 1, "qpsPerInstance": 100, "cpuPerInstance": 10, "scalesWithCards": False}
    entry.update(op)
    return {"operators": {"svc": entry}}


def _plan(instances: int, units: int, nodes: dict[str, int]) -> dict[str, Any]:
    return {
        "feasible": True,
        "allocations": [
            {
                "operator": "svc",
                "resource": "P4",
                "strategy": "service",
                "instances": instances,
                "unitsPerInstance": units,
                "nodes": nodes,
            }
        ],
    }


def test_instances_on_one_node_share_its_cpu() -> None:
    caps = _caps()
    caps["cluster"] = {"P4": {"nodes": 2, "cpuPerNode": 15}}
    plan = _plan(2, 2, {"n1": 1, "n2": 1})  # 4 cards
    report = compare(parse_plan(plan), parse_capacities(caps))
    by = report["rows"][0]["strategies"]
    # planner: one instance per node, 10 cores each: fits -> 2 x 100/s.
    assert by["planner"]["qps"] == 200 and not by["planner"]["cpuLimited"]
    # 1xn: 4 instances round-robin on 2 nodes -> 20 cores wanted, 15 there -> 3/4 speed.
    assert by["1xn"]["qps"] == pytest.approx(300) and by["1xn"]["cpuLimited"]
    assert by["1xn"]["cpu"] == pytest.approx(30)
    assert "slowed by the node's CPU" in render_text(report)


def test_cards_scale_an_instance_when_measured_so() -> None:
    report = compare(
        parse_plan(_plan(1, 4, {"n1": 1})),
        parse_capacities(_caps(scalesWithCards=True, scalesWithInstances=False)),
    )
    by = report["rows"][0]["strategies"]
    assert by["nx1"]["qps"] == 400 and by["nx1"]["cpu"] == 40
    assert by["1xn"]["qps"] == 100 and by["1xn"]["cpu"] == 40


def test_per_type_entries_win_and_unmeasured_operators_are_left_out() -> None:
    caps = _caps()
    caps["operators"]["svc@P4"] = dict(caps["operators"]["svc"], qpsPerInstance=50)
    plan = _plan(1, 1, {"n1": 1})
    plan["allocations"].append(
        {
            "operator": "other",
            "resource": "P4",
            "strategy": "machine",
            "instances": 1,
            "unitsPerInstance": 2,
            "nodes": {"n1": 1},
        }
    )
    report = compare(parse_plan(plan), parse_capacities(caps))
    assert report["rows"][0]["strategies"]["planner"]["qps"] == 50
    assert report["rows"][1]["measured"] is False
    assert report["totals"]["planner"]["qps"] == 50
    assert any("other@P4" in n for n in report["notes"])
    assert "unmeasured" in render_text(report)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param([], "must be a mapping", id="a list"),
        pytest.param({"operators": {}}, "non-empty", id="no operators"),
        pytest.param({"kind": "x", "operators": {"a": {}}}, "kind must be", id="wrong kind"),
        pytest.param(_caps(qpsPerInstance=0), "operators.svc.qpsPerInstance must be positive", id="zero qps"),
        pytest.param(_caps(qpsPerInstance="fast"), "qpsPerInstance must be a number", id="qps not a number"),
        pytest.param(_caps(cardsPerInstance=1.5), "whole number", id="half a card"),
        pytest.param(_caps(scalesWithCards="yes"), "true or false", id="flag not a bool"),
        pytest.param(_caps(qpsPerInstanse=10), "unknown field 'qpsPerInstanse'", id="a typo"),
        pytest.param({**_caps(), "cluster": {"P4": {"nodes": -1}}}, "cluster.P4.nodes", id="negative nodes"),
    ],
)
def test_invalid_capacities_name_the_field(doc: Any, message: str) -> None:
    with pytest.raises(CompareError, match=message):
        parse_capacities(doc)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            {"feasible": False, "reason": "no room", "allocations": []}, "no room", id="an infeasible plan"
        ),
        pytest.param({"allocations": "x"}, "not a plan", id="not a list"),
        pytest.param(_plan(0, 1, {}), "positive integers", id="zero instances"),
        pytest.param(_plan(2, 1, {"n1": 1}), "holds 1 instances, not 2", id="nodes disagree"),
    ],
)
def test_invalid_plans_are_refused(doc: Any, message: str) -> None:
    with pytest.raises(CompareError, match=message):
        parse_plan(doc)


def test_files_that_are_missing_or_broken(tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="no such file"):
        load_plan(tmp_path / "nope.json")
    bad = tmp_path / "bad.yaml"
    bad.write_text("operators: [unclosed")
    with pytest.raises(CompareError, match="not valid YAML"):
        load_capacities(bad)
    ok = tmp_path / "caps.json"
    ok.write_text(json.dumps(_caps()))
    assert load_capacities(ok).operators["svc"].qps_per_instance == 100
