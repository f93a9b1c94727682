"""``gpuplan plan a.yaml b.yaml ...``: several plans planned together, end to end in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from tests.helpers import node_list, plan_doc

NODES = [(f"p4-{i:03d}", "P4", 8) for i in range(3)]  # 24 P4 cards


def named(name: str, requests: dict[str, Any], namespace: str = "default", **spec: Any) -> dict[str, Any]:
    doc = plan_doc(requests, **spec)
    doc["metadata"] = {"name": name, "namespace": namespace}
    return doc


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plans: list[Any], *args: str
) -> tuple[int, str, str]:
    files = []
    for i, p in enumerate(plans):
        f = tmp_path / f"plan{i}.yaml"
        f.write_text(p if isinstance(p, str) else yaml.safe_dump(p))
        files.append(str(f))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(node_list(NODES)))
    code = main(["plan", *files, "--nodes", str(nodes), *args])
    out, err = capsys.readouterr()
    return code, out, err


FENCE = named(
    "fence", {"face_feature_extract": {"P4": {"min": 2, "max": 8}}, "face_1vn": {"P4": 4}}, "ragnaros"
)
STAGING = named("fence-staging", {"face_feature_extract": {"P4": 8}, "face_1vn": {"P4": 8}}, "staging")
URGENT = named("urgent", {"face_1vn": {"P4": 6}}, "prod", priority=100)


def test_several_files_print_one_object_per_plan_in_file_order(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(tmp_path, capsys, [FENCE, STAGING, URGENT], "-o", "json")
    plans = json.loads(out)["plans"]
    assert [(p["namespace"], p["name"]) for p in plans] == [
        ("ragnaros", "fence"),
        ("staging", "fence-staging"),
        ("prod", "urgent"),
    ]
    fence, staging, urgent = plans
    assert urgent["admitted"] and fence["admitted"] and not staging["admitted"]
    assert code == 3  # a plan was not admitted: no deployable plan for it
    # urgent (priority 100) goes first, fence's mins next; staging's 16 no longer fit
    assert staging["feasible"] is False and staging["admission"] == "Preempted"
    assert staging["heldBy"] == ["prod/urgent", "ragnaros/fence"]
    assert staging["allocations"] == []
    # fence grows into what staging does not take: 24 - 6 = 18 cards, 4 of them face_1vn
    (grant,) = fence["elastic"]
    assert grant == {"operator": "face_feature_extract", "resource": "P4", "cards": 8, "min": 2, "max": 8}
    assert all(p["optimal"] for p in plans)


def test_without_the_urgent_plan_the_elastic_one_names_who_holds_the_rest(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(tmp_path, capsys, [FENCE, STAGING], "-o", "json")
    assert code == 0
    fence, staging = json.loads(out)["plans"]
    assert fence["admitted"] and staging["admitted"]
    (grant,) = fence["elastic"]
    assert (grant["cards"], grant["reason"], grant["heldBy"]) == (4, "HeldByPlans", ["staging/fence-staging"])


def test_one_file_is_the_single_plan_object_plus_admitted(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(tmp_path, capsys, [named("one", {"face_1vn": {"P4": 8}})], "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["admitted"] is True and "plans" not in doc and "name" not in doc
    assert doc["allocations"][0]["nodes"] == {"p4-000": 1}


def test_one_elastic_file_takes_its_max_when_it_fits(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(
        tmp_path, capsys, [named("e", {"face_1vn": {"P4": {"min": 1, "max": 30}}})], "-o", "json"
    )
    doc = json.loads(out)
    assert code == 0 and doc["admitted"] is True
    assert sum(a["instances"] * a["unitsPerInstance"] for a in doc["allocations"]) == 24
    assert doc["elastic"][0]["reason"] == "NoRoom"


def test_text_says_who_was_admitted_and_what_each_elastic_request_got(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(tmp_path, capsys, [FENCE, STAGING])
    assert code == 0
    assert "ragnaros/fence (priority 0): admitted, 8/12 cards" in out
    assert (
        "elastic: face_feature_extract P4: 4 of 2-8 cards (the rest are planned for staging/fence-staging)"
        in out
    )
    code, out, _ = run(tmp_path, capsys, [FENCE, STAGING, URGENT])
    assert "staging/fence-staging (priority 0): not admitted (Preempted)" in out


def test_previous_keeps_a_holder_ahead_and_planning_again_changes_nothing(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    _, first, _ = run(tmp_path, capsys, [FENCE, STAGING, URGENT], "-o", "json")
    prev = tmp_path / "prev.json"
    prev.write_text(first)
    _, again, _ = run(tmp_path, capsys, [FENCE, STAGING, URGENT], "-o", "json", "--previous", str(prev))
    before, after = json.loads(first)["plans"], json.loads(again)["plans"]
    assert [p["allocations"] for p in after] == [p["allocations"] for p in before]
    assert [p.get("moved", 0) for p in after if p["admitted"]] == [0, 0]


def test_manifests_rank_the_higher_priority_plan_s_classes_first(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    _, out, _ = run(tmp_path, capsys, [FENCE, URGENT], "-o", "manifests")
    docs = list(yaml.safe_load_all(out))
    classes = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"}
    assert min(v for n, v in classes.items() if "-p100-" in n) > max(
        v for n, v in classes.items() if "-p100-" not in n
    )
    assert "ragnaros-cluster-critical-4" in classes  # priority 0 keeps its names
    assert len([d for d in docs if d["kind"] == "Node"]) == len(
        {d["metadata"]["name"] for d in docs if d["kind"] == "Node"}
    )


@pytest.mark.parametrize(
    ("plans", "message"),
    [
        ([FENCE, named("bad", {"face_1vn": {"P4": {"min": 3, "max": 2}}})], "plan1.yaml: requests.face_1vn.P4.min: must not exceed max"),
        ([FENCE, FENCE], "plan1.yaml: metadata.name: plan ragnaros/fence is also given by"),
        ([named("x", {"face_1vn": {"P4": 1}}, priority=2000)], "priority: must be from 0 to 1000"),
    ],
)  # fmt: skip
def test_bad_input_names_the_file_and_field(tmp_path, capsys, plans, message) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(tmp_path, capsys, plans, "-o", "json")
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_live_plans_the_file_with_the_cluster_s_plans(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpuplan import live

    def body(doc: dict[str, Any], status: dict[str, Any]) -> Any:
        meta = doc["metadata"]
        return type(
            "Body",
            (),
            {"namespace": meta["namespace"], "name": meta["name"], "spec": doc["spec"], "status": status},
        )()

    held = {"phase": "Applied", "allocations": [
        {"operator": "face_1vn", "resource": "P4", "instances": 1, "unitsPerInstance": 8, "nodes": {"p4-002": 1}}
    ]}  # fmt: skip
    holder = named("holder", {"face_1vn": {"P4": 8}}, "prod", priority=5)
    cluster = live.LiveCluster(
        nodes=node_list(NODES),
        pods={"apiVersion": "v1", "kind": "List", "items": []},
        plans=(live._plan_of(body(holder, held)), live._plan_of(body(STAGING, {}))),
        server="https://test",
    )
    monkeypatch.setattr(live, "read_cluster", lambda kubeconfig, context: cluster)
    mine = named("mine", {"body_1vn": {"P4": 8}}, "dev")
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump(mine))
    code = main(["plan", str(f), "-o", "json", "-q"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    # the holder keeps its node; staging (older, in the cluster) comes before the file's plan
    # and takes the other 16 cards: the file's plan is preempted, naming both
    assert code == 3 and doc["admitted"] is False and doc["admission"] == "Preempted", err
    assert doc["heldBy"] == ["prod/holder", "staging/fence-staging"]
    code = main(["plan", str(f), "-q"])
    out, _ = capsys.readouterr()
    assert "The cluster's other plans, planned together with these:" in out
    assert "prod/holder (priority 5): admitted, 8/8 cards" in out
