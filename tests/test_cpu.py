"""CPU requests: one instance with all its cores, on the CPU nodes (or any node when none is labelled).

The product's own example configuration (``examples/ragnaros-operator-config.json``, exactly as the
product ships it: CPU/P4/T4 keys, a machine_num of 0, operators with no cards at all) must plan on
the project's sample nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from planner.base.strategies import Strategy
from planner.output.render import render_flamewakers
from planner.planning import plan
from planner.read.parse import parse_plan, snapshot
from tests.helpers import node_list

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIG = EXAMPLES / "ragnaros-operator-config.json"
NO_CPU_NODES = node_list([("p4-000", "P4", 8), ("p4-001", "P4", 8), ("t4-000", "T4", 8)])


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def config(**cpu: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CONFIG.read_text())
    for op, cores in cpu.items():
        doc["ragnaros_operator_config"][op]["CPU"] = cores
    return doc


def test_the_products_example_plans_on_the_sample_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, str(CONFIG), "--nodes", str(EXAMPLES / "nodes.yaml"), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["feasible"] and doc["optimal"]
    cpu = {a["operator"]: a for a in doc["allocations"] if a["resource"] == "CPU"}
    assert set(cpu) == {"face_1vn", "body_1vn"}
    for a in cpu.values():
        assert a["strategy"] == "whole" and (a["instances"], a["unitsPerInstance"]) == (1, 1)
        assert set(a["nodes"]) <= {"cpu-000", "cpu-001"}
    p4 = {a["operator"] for a in doc["allocations"] if a["resource"] == "P4"}
    assert p4 == {"face_feature_extract", "vehicle_feature_extract", "face_image_flow", "face_video"}


def test_the_products_example_explains_both_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, str(CONFIG), "--nodes", str(EXAMPLES / "nodes.yaml"))
    assert code == 0
    assert "CPU: 2 usable nodes, 128 cores free" in out and "P4: 4 usable nodes, 32 cards free" in out
    assert "cards placed 4/4" in out  # cores are not cards


def test_cpu_is_one_instance_with_every_core_whatever_the_operators_strategy() -> None:
    doc = {"ragnaros_operator_config": {"face_1vn": {"CPU": 12}, "face_feature_extract": {"CPU": 6}}}
    spec = parse_plan(doc)
    nodes = node_list([("cpu-0", "CPU", 0), ("cpu-1", "CPU", 0)])
    for item in nodes["items"]:
        item["status"]["allocatable"]["cpu"] = "16"
    result = plan(spec, snapshot(nodes))
    assert result.feasible and result.optimal
    assert {(a.operator, a.strategy, a.instances, a.units) for a in result.allocations} == {
        ("face_1vn", Strategy.WHOLE, 1, 12),
        ("face_feature_extract", Strategy.WHOLE, 1, 6),
    }


def test_without_cpu_nodes_every_schedulable_node_lends_its_cores(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes = NO_CPU_NODES
    nodes["items"][2]["spec"]["unschedulable"] = True
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump(nodes))
    code, out, _ = cli(capsys, str(CONFIG), "--nodes", str(tmp_path / "nodes.yaml"))
    assert code == 0, out
    assert "CPU: 2 usable nodes, 64 cores free" in out  # the cordoned node lends nothing
    assert (
        "no node is labelled gpuplan.ragnaros.io/gpu-type=CPU: using the free cpu of every schedulable node"
        in out
    )
    spec = parse_plan(config())
    result = plan(spec, snapshot(nodes))
    cpu = [f for f in render_flamewakers(spec, result) if f.resource.name == "CPU"]
    assert cpu, "the CPU requests are rendered"
    for fw in cpu:
        selector = fw.entry["podAttributes"]["nodeSelector"]
        assert selector == {"gpuplan.ragnaros.io/default.ragnaros": fw.node}, "no CPU label to select on"
        assert fw.entry["containerAttributes"]["resources"]["limits"] == {"cpu": 1}
        assert "priorityClassName" not in fw.entry["podAttributes"]


def test_a_cpu_request_that_cannot_fit_names_itself_and_keeps_the_gpu_plan_visible(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "plan.json").write_text(json.dumps(config(face_1vn=100)))
    nodes = str(EXAMPLES / "nodes.yaml")
    code, out, _ = cli(capsys, str(tmp_path / "plan.json"), "--nodes", nodes)
    assert code == 3
    assert "CPU: these requests cannot be placed together: face_1vn" in out
    assert "no node has 100 free (largest has 64)" in out
    assert "P4: 4 usable nodes" in out and "face_video" in out, "the GPU part's plan is still shown"
    code, out, _ = cli(capsys, str(tmp_path / "plan.json"), "--nodes", nodes, "-o", "json")
    doc = json.loads(out)
    assert code == 3 and not doc["feasible"] and doc["allocations"] == []
    assert doc["conflicts"] == [
        {
            "resource": "CPU",
            "kind": "NoSplit",
            "requests": ["face_1vn"],
            "detail": doc["conflicts"][0]["detail"],
            "minimal": True,
        }
    ]
    assert {a["resource"] for a in doc["partialAllocations"]} == {"P4"}, "the types that have a plan"
