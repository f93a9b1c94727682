"""``gpuplan plan`` end to end in-process: outputs, exit codes, and one-line errors naming the field."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from tests.helpers import node_list, plan_doc

NODES = [("p4-000", "P4", 8), ("p4-001", "P4", 8), ("t4-000", "T4", 8)]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: Any, nodes: Any = None, *args: str):  # type: ignore[no-untyped-def]
    pf, nf = tmp_path / "plan.yaml", tmp_path / "nodes.yaml"
    pf.write_text(plan if isinstance(plan, str) else yaml.safe_dump(plan))
    nf.write_text(nodes if isinstance(nodes, str) else yaml.safe_dump(nodes or node_list(NODES)))
    code = main(["plan", str(pf), "--nodes", str(nf), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_contract_shape(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(tmp_path, capsys, plan_doc({"face_feature_extract": {"P4": 2}}), None, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["feasible"] is True and doc["optimal"] is True
    assert doc["score"] == 2.0
    assert doc["allocations"] == [
        {
            "operator": "face_feature_extract",
            "resource": "P4",
            "strategy": "service",
            "instances": 2,
            "unitsPerInstance": 1,
            "nodes": {"p4-000": 1, "p4-001": 1},
        }
    ]


def test_infeasible_exits_3_and_still_prints_json(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(tmp_path, capsys, plan_doc({"face_1vn": {"P4": 24}}), None, "-o", "json")
    assert code == 3
    doc = json.loads(out)
    assert doc["feasible"] is False
    assert "only 16 are free" in doc["reason"]
    assert doc["conflicts"][0]["requests"] == ["face_1vn"]


def test_text_explains_the_choice_and_the_rejected_splits(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    reqs = {"face_1vn": {"P4": 8}, "face_feature_extract": {"P4": 2}}
    code, out, _ = run(tmp_path, capsys, plan_doc(reqs))
    assert code == 0
    assert "optimal (proven)" in out
    assert "face_feature_extract" in out and "1×2" in out
    # spreading face_feature_extract is possible, but only by splitting face_1vn: a worse total
    assert "not 2×1 (term 2): fits, but the best plan with it scores 6 < 9 (it forces face_1vn 2×4)" in out


@pytest.mark.parametrize(
    ("plan", "nodes", "message"),
    [
        pytest.param(
            plan_doc({"face_image_flow": {"resourceNum": {"P4": 8}, "machineNum": {"P4": 3}}}),
            None,
            "requests.face_image_flow: machineNum 3 does not divide 8 cards",
            id="machineNum must divide the cards",
        ),
        pytest.param(plan_doc({"face_1vn": {"V100": 2}}), None, "requests.face_1vn.V100: unknown resource type", id="unknown resource type"),
        pytest.param(plan_doc({"face_1vn": {"P4": -2}}), None, "requests.face_1vn.P4: must not be negative", id="negative cards"),
        pytest.param(plan_doc({"face_1vn": {"P4": 1.5}}), None, "requests.face_1vn.P4: expected a whole number", id="fractional cards"),
        pytest.param(plan_doc({}, resources=[{"name": "P4", "kind": []}]), None, "resources[0].kind: must be GPU or CPU, got []", id="a list for a resource kind"),
        pytest.param(plan_doc({}, scoring=["v1"]), None, "scoring: must be one of v1, v2, got ['v1']", id="a list for a word (found by the fuzz: a TypeError)"),
        pytest.param(
            plan_doc({}, operators=[{"name": "x", "keyStrategy": {"a": 1}, "services": {"key": "x"}}]),
            None, "operators[0].keyStrategy: must be machine, service or single", id="a mapping for a strategy",
        ),
        pytest.param(plan_doc({"face_1vn": {"P4": 1e30}}), None, "requests.face_1vn.P4: at most 100000 cards", id="absurdly many cards (found by the fault suite's fuzz: it hung)"),
        pytest.param(plan_doc({"no_such_op": {"P4": 2}}), None, "requests.no_such_op: unknown operator", id="unknown operator"),
        pytest.param(
            plan_doc({"face_1vn": {"P4": 2, "\n": None}}), None, "requests.face_1vn.\\n: unknown resource type '\\n'",
            id="a line break in a key (found by the fault suite's fuzz: the message took two lines)",
        ),
        pytest.param(plan_doc({}, scoring="v3"), None, "scoring: must be one of v1, v2", id="unknown scoring"),
        pytest.param("kind: [unclosed", None, "plan: ", id="malformed YAML"),
        pytest.param(plan_doc({"face_1vn": {"P4": 2}}), {"kind": "List", "items": []}, "nodes: the node list is empty", id="empty node list"),
        pytest.param(
            plan_doc({}, operators=[{"name": "x", "keyStrategy": "fastest", "services": {"key": "x"}}]),
            None, "operators[0].keyStrategy: must be machine, service or single", id="unknown strategy",
        ),
        pytest.param(
            plan_doc({}, operators=[{"name": "x", "keyStrategy": "machine", "linkStrategy": "share-2", "services": {"key": "x"}}]),
            None, "operators[0].linkStrategy: must look like share-A-B", id="bad link strategy",
        ),
        pytest.param(
            plan_doc({}, operators=[{"name": "x", "keyStrategy": "machine", "services": {"key": "x"}},
                                    {"name": "x", "keyStrategy": "single", "services": {"key": "x"}}]),
            None, "operators[1].name: operator 'x' is listed twice", id="an operator listed twice",
        ),
        pytest.param({"kind": "Deployment"}, None, "kind: expected GpuAllocationPlan", id="not a plan"),
        pytest.param({k: v for k, v in plan_doc({}).items() if k != "spec"}, None, "spec: is required", id="no spec (the API server requires it)"),
        pytest.param(plan_doc({}) | {"spec": {"resources": [{"name": "P4"}]}}, None, "requests: is required", id="no requests (the API server requires them)"),
    ],
)  # fmt: skip
def test_invalid_input_exits_2_with_one_line(tmp_path, capsys, plan, nodes, message) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(tmp_path, capsys, plan, nodes, "-o", "json")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


def test_missing_file_is_invalid_input(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["plan", str(tmp_path / "nope.yaml"), "--nodes", str(tmp_path / "nodes.yaml")])
    _, err = capsys.readouterr()
    assert code == 2 and "no such file" in err


def test_seed_json_config_is_accepted(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    seed = {
        "ragnaros_operator_config": {
            "face_feature_extract": {"CPU": 0, "P4": 1, "T4": 0},
            "vehicle_feature_extract": {"P4": 1},
            "face_image_flow": {
                "resource_num": {"CPU": 0, "P4": 2, "T4": 0},
                "machine_num": {"P4": 2, "T4": 0},
            },
            "body_1vn": {"CPU": 0, "P4": 0, "T4": 4},
        }
    }
    code, out, _ = run(tmp_path, capsys, json.dumps(seed), None, "-o", "json")
    assert code == 0, out
    allocs = {(a["operator"], a["resource"]): a for a in json.loads(out)["allocations"]}
    assert allocs["face_image_flow", "P4"]["strategy"] == "special"
    assert allocs["face_image_flow", "P4"]["instances"] == 2
    assert allocs["body_1vn", "T4"]["unitsPerInstance"] == 4


def test_pods_cordons_and_taints_reduce_what_is_usable(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    nodes = node_list(
        [("p4-000", "P4", 8), ("p4-001", "P4", 8), ("p4-002", "P4", 8), ("p4-003", "P4", 8)],
        **{
            "p4-002": {"unschedulable": True},
            "p4-003": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]},
        },
    )
    pods = {
        "kind": "PodList",
        "items": [
            {
                "metadata": {"name": "other"},
                "spec": {
                    "nodeName": "p4-001",
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": "6"}}}],
                },
                "status": {"phase": "Running"},
            },
            {
                "metadata": {"name": "done"},
                "spec": {
                    "nodeName": "p4-000",
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
                "status": {"phase": "Succeeded"},
            },
        ],
    }
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump(pods))
    code, out, _ = run(
        tmp_path, capsys, plan_doc({"face_1vn": {"P4": 8}, "security_pass": {"P4": 2}}), nodes,
        "-o", "json", "--pods", str(tmp_path / "pods.yaml"),
    )  # fmt: skip
    assert code == 0
    allocs = {a["operator"]: a for a in json.loads(out)["allocations"]}
    assert allocs["face_1vn"]["nodes"] == {"p4-000": 1}
    assert allocs["security_pass"]["nodes"] == {"p4-001": 2}


def test_toleration_in_the_plan_makes_a_tainted_node_usable(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    nodes = node_list(
        [("p4-000", "P4", 8)], **{"p4-000": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}
    )
    doc = plan_doc({"face_1vn": {"P4": 8}}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert run(tmp_path, capsys, doc, nodes, "-o", "json")[0] == 0
    assert run(tmp_path, capsys, plan_doc({"face_1vn": {"P4": 8}}), nodes, "-o", "json")[0] == 3


def test_previous_plan_keeps_instances_in_place(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    doc = plan_doc({"security_pass": {"P4": 2}})
    nodes = node_list([(f"p4-00{i}", "P4", 8) for i in range(4)])
    prev = {
        "allocations": [
            {
                "operator": "security_pass",
                "resource": "P4",
                "unitsPerInstance": 1,
                "nodes": {"p4-003": 1, "p4-002": 1},
            }
        ]
    }
    (tmp_path / "prev.json").write_text(json.dumps(prev))
    code, out, _ = run(tmp_path, capsys, doc, nodes, "-o", "json", "--previous", str(tmp_path / "prev.json"))
    assert code == 0
    assert json.loads(out)["allocations"][0]["nodes"] == {"p4-002": 1, "p4-003": 1}


def test_a_broken_previous_plan_names_its_field(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    doc = plan_doc({"security_pass": {"P4": 2}})
    nodes = node_list([("p4-000", "P4", 8)])
    bad = {
        "allocations": [{"operator": "security_pass", "resource": "P4", "unitsPerInstance": "1", "nodes": {}}]
    }
    (tmp_path / "prev.json").write_text(json.dumps(bad))
    code, out, err = run(tmp_path, capsys, doc, nodes, "--previous", str(tmp_path / "prev.json"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "allocations[0].unitsPerInstance" in err and "Traceback" not in err


def test_version_and_help_need_no_planner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("gpuplan ")
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "plan" in out and "status" in out and "completion" in out and "loadtest" in out


def test_completion_scripts_name_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("bash", "zsh"):
        assert main(["completion", shell]) == 0
        script = capsys.readouterr().out
        assert "gpuplan" in script and "--nodes" in script and "--kubeconfig" in script


def test_nodes_from_standard_input_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan_doc({"face_feature_extract": {"P4": 2}})))
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(node_list(NODES))))
    assert main(["plan", str(tmp_path / "plan.yaml"), "--nodes", "-", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["feasible"]


def test_standard_input_serves_one_option_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-", "--nodes", "-"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "standard input can be read for one option only" in err


def test_an_operator_takes_every_key_strategy_and_topology_and_nothing_else() -> None:
    """The values an operator's keyStrategy and topology may take (looked up in sets made once)."""
    from planner import InvalidInput
    from planner.base.strategies import KEY_STRATEGIES, Topology
    from planner.read.parse import parse_plan

    def operator(**fields: Any) -> Any:
        return parse_plan(
            plan_doc({}, operators=[{"name": "x", "services": {"key": "x"}, **fields}])
        ).operator("x")

    for strategy in KEY_STRATEGIES:
        assert operator(keyStrategy=strategy.value).key_strategy is strategy
    for topology in Topology:
        assert operator(keyStrategy="machine", topology=topology.value).topology is topology
    for field, value in [
        ("keyStrategy", "fastest"),
        ("keyStrategy", "Machine"),
        ("topology", "strict"),
        ("topology", None),
        ("topology", [1]),  # not a string at all: refused, not a TypeError
        ("keyStrategy", {"a": 1}),
    ]:
        with pytest.raises(InvalidInput, match=rf"operators\[0\]\.{field}: must be "):
            operator(**{"keyStrategy": "machine", field: value})


def test_a_plan_on_small_files_loads_none_of_the_large_readers_and_writes_the_same_json() -> None:
    """Started once for every plan: msgspec, rapidyaml and the large-list readers are for
    large clusters, and the cluster client for a live one. The answer's text is the one msgspec
    writes for large clusters."""
    import subprocess
    import sys

    from gpuplan import cli

    probe = (
        "import sys, io, contextlib; from gpuplan.cli import main; out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out): code = main(sys.argv[1:])\n"
        "loaded = sorted(m for m in ('msgspec', 'ryml', 'gpuplan.lists', 'gpuplan.live', 'kubernetes')"
        " if m in sys.modules)\n"
        "print(__import__('json').dumps({'code': code, 'loaded': loaded, 'out': out.getvalue()}))\n"
    )
    args = [
        "plan",
        str(EXAMPLES / "image-fence.yaml"),
        "--nodes",
        str(EXAMPLES / "nodes.yaml"),
        "-o",
        "json",
        "-q",
    ]
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["code"] == 0 and seen["loaded"] == []
    doc = json.loads(seen["out"])
    assert seen["out"].rstrip("\n") == cli._json_text(doc, large=True)  # msgspec's text, byte for byte
