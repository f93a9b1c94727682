"""Rendering: golden values.yaml pairs, link strategies, labels, PriorityClasses, Deployments.

Golden files live in tests/data/<case>/ (plan.yaml, nodes.yaml, optional pods.yaml -> values.yaml).
The test only compares; ``make golden`` rewrites them (review the diff before committing it).
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.base.errors import InvalidInput
from planner.base.vocab import plan_label_key
from planner.model.result import previous_placements
from planner.model.spec import LinkStrategy
from planner.output.render import (
    render_desired,
    render_flamewakers,
    render_key,
    render_manifests,
    values_yaml,
)
from planner.planning import plan
from planner.read.parse import parse_plan, snapshot
from tests.helpers import node_list, plan_doc

DATA = Path(__file__).parent / "data"
GOLDEN_CASES = ("image-fence", "links")


def load(case: str) -> tuple[Any, Any]:
    d = DATA / case
    spec = parse_plan(yaml.safe_load((d / "plan.yaml").read_text()))
    pods = yaml.safe_load((d / "pods.yaml").read_text()) if (d / "pods.yaml").exists() else None
    snap = snapshot(yaml.safe_load((d / "nodes.yaml").read_text()), pods)
    return spec, plan(spec, snap)


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_values_yaml_matches_golden(case: str) -> None:
    spec, result = load(case)
    assert result.feasible
    assert values_yaml(spec, result) == (DATA / case / "values.yaml").read_text()


@pytest.mark.parametrize(
    ("text", "cards", "expected"),
    [
        pytest.param("share-0-0", 8, (1, False), id="share-0-0: one link sharing every card"),
        pytest.param("share-2-3", 8, (3, False), id="share-2-3: one per 2 cards, at most 3"),
        pytest.param("share-2-3", 1, (1, False), id="share-2-3: at least one on a 1-card partition"),
        pytest.param("detach-2-3", 8, (3, True), id="detach-2-3: three links take a card each"),
        pytest.param("detach-2-3", 1, (1, False), id="detach-2-3 below 2 cards falls back to sharing"),
        pytest.param("detach-1-4", 2, (1, True), id="detach never takes the key service's last card"),
    ],
)
def test_link_strategy_counts(text: str, cards: int, expected: tuple[int, bool]) -> None:
    mode, a, b = text.split("-")
    assert LinkStrategy(mode, int(a), int(b)).links_for(cards) == expected


def test_links_render_per_strategy_and_shared_service_once() -> None:
    spec, result = load("links")
    fws = render_flamewakers(spec, result)
    groups = [[o["group"] for o in f.entry["operators"]] for f in fws]
    assert ["shared-all", "shared-all-anno"] in groups
    assert ["shared-per-two", *["shared-per-two-link"] * 3] in groups
    detached = [f for f in fws if f.entry["operators"][0]["group"] == "detached-key"]
    links = [f for f in fws if f.entry["operators"][0]["group"] == "detached-link"]
    assert detached[0].units == 5 and links[0].units == 1 and links[0].instances == 3
    # face_image_flow renders the shared retrieval service; face_video, later, does not again
    retrieval = [g for g in groups if "face-surveillance-retrieval" in g]
    assert len(retrieval) == 1
    # cards per node add up to the plan's allocation on that node
    per_node: dict[str, int] = {}
    for f in fws:
        per_node[f.node] = per_node.get(f.node, 0) + f.instances * f.units
    planned: dict[str, int] = {}
    for a in result.allocations:
        for n, c in a.nodes:
            planned[n] = planned.get(n, 0) + c * a.units
    assert per_node == planned


def test_template_and_patches_apply_to_each_entry() -> None:
    spec, result = load("links")
    for f in render_flamewakers(spec, result):
        if f.entry["operators"][0]["group"].startswith("detached"):
            assert f.entry["commandSuffix"] == ["--enableLocalCache=false"]
            assert f.entry["podAttributes"]["hostNetwork"] is True


def test_patch_that_does_not_apply_names_the_operator() -> None:
    spec, result = load("links")
    doc = yaml.safe_load((DATA / "links" / "plan.yaml").read_text())
    doc["spec"]["operators"][2]["patches"] = [{"op": "replace", "path": "/nope/deeper", "value": 1}]
    spec = parse_plan(doc)
    with pytest.raises(InvalidInput, match=r"operators\[2\]\.patches: does not apply"):
        render_flamewakers(spec, result)


def test_every_instance_is_pinned_to_its_node_by_the_plan_label() -> None:
    spec, result = load("image-fence")
    desired = render_desired(spec, result)
    key = plan_label_key(spec.namespace, spec.name)
    assert key == "gpuplan.ragnaros.io/ragnaros.image-fence"
    for f in render_flamewakers(spec, result):
        selector = f.entry["podAttributes"]["nodeSelector"]
        assert desired.node_labels[f.node][key] == selector[key]
        assert f.entry["podAttributes"]["priorityClassName"] == f"ragnaros-cluster-critical-{f.units}"
        assert f.entry["containerAttributes"]["resources"]["limits"]["nvidia.com/gpu"] == f.units


def test_priority_classes_rank_larger_instances_higher() -> None:
    spec, result = load("image-fence")
    pcs = render_desired(spec, result).priority_classes
    values = [(int(p["metadata"]["name"].rsplit("-", 1)[1]), p["value"]) for p in pcs]
    assert values == sorted(values, reverse=True)
    assert dict(values)[8] == 800008000  # seed 001's value


def test_the_priority_base_moves_every_class_and_keeps_their_order() -> None:
    spec, result = load("image-fence")
    default = {p["metadata"]["name"]: p["value"] for p in render_desired(spec, result).priority_classes}
    lowered = {
        p["metadata"]["name"]: p["value"] for p in render_desired(spec, result, 1_000_000).priority_classes
    }
    assert lowered.keys() == default.keys()
    for name, value in lowered.items():
        assert value == default[name] - 800_000_000 + 1_000_000
    deployments = [o for o in render_manifests(spec, result, 1_000_000) if o["kind"] == "PriorityClass"]
    assert {o["metadata"]["name"]: o["value"] for o in deployments} == lowered


def test_manifests_hold_deployments_with_gpu_requests_when_deploy_is_true() -> None:
    spec, result = load("image-fence")
    objs = render_manifests(spec, result)
    kinds = [o["kind"] for o in objs]
    assert kinds.count("ConfigMap") == 1
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert len(deployments) == len(render_flamewakers(spec, result))
    pods = sum(d["spec"]["replicas"] for d in deployments)
    assert pods == sum(f.instances for f in render_flamewakers(spec, result))
    for d in deployments:
        pod = d["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] >= 1
        assert pod["priorityClassName"].startswith("ragnaros-cluster-critical-")


GATE = [{"name": "gpuplan.ragnaros.io/gang"}]


@pytest.mark.parametrize(
    ("gang", "gates"),
    [
        pytest.param(None, GATE, id="gang omitted: every pod starts gated (plan is the default)"),
        pytest.param("plan", GATE, id="gang plan: every pod starts gated"),
        pytest.param("none", None, id="gang none: no pod carries a gate"),
    ],
)
def test_gang_gates_every_pod_spec_the_plan_renders(gang: str | None, gates: Any) -> None:
    doc = plan_doc({"face_feature_extract": {"P4": 4}}, deploy=True, **({"gang": gang} if gang else {}))
    spec = parse_plan(doc)
    result = plan(spec, snapshot(node_list([("a", "P4", 8), ("b", "P4", 8)])))
    desired = render_desired(spec, result)
    entries = yaml.safe_load(desired.configmaps[0]["data"]["values.yaml"])["flamewakers"]
    assert entries and desired.deployments
    assert [e["podAttributes"].get("schedulingGates") for e in entries] == [gates] * len(entries)
    templates = [d["spec"]["template"]["spec"] for d in desired.deployments]
    assert [t.get("schedulingGates") for t in templates] == [gates] * len(templates)


def test_gang_that_is_neither_plan_nor_none_names_the_field() -> None:
    with pytest.raises(InvalidInput, match="gang: must be plan or none, got 'all'"):
        parse_plan(plan_doc({"face_feature_extract": {"P4": 4}}, gang="all"))


def test_a_plan_too_large_for_one_configmap_is_cut_into_parts() -> None:
    """2,000 flamewaker entries are ~900 KB of YAML: the parts each fit, and together hold all."""
    requests = {f"op{i:04d}": {"P4": 8} for i in range(250)}
    operators = [{"name": op, "keyStrategy": "service", "services": {"key": f"svc-{op}"}} for op in requests]
    nodes = node_list([(f"n{i:04d}", "P4", 8) for i in range(250)])
    spec = parse_plan(plan_doc(requests, operators=operators, resources=[{"name": "P4"}]))
    result = plan(spec, snapshot(nodes))
    assert result.feasible
    parts = render_desired(spec, result).configmaps
    assert len(parts) > 1
    assert [p["metadata"]["name"] for p in parts] == ["test-flamewakers"] + [
        f"test-flamewakers-{i}" for i in range(2, len(parts) + 1)
    ]
    entries = []
    for i, part in enumerate(parts, start=1):
        text = part["data"]["values.yaml"]
        assert len(text.encode()) <= 900 * 1024
        assert part["metadata"]["annotations"]["gpuplan.ragnaros.io/part"] == f"{i}/{len(parts)}"
        entries += yaml.safe_load(text)["flamewakers"]
    assert [e["name"] for e in entries] == [f.entry["name"] for f in render_flamewakers(spec, result)]
    single = render_desired(*load("image-fence")).configmaps
    assert len(single) == 1 and "annotations" not in single[0]["metadata"]


def test_results_with_one_render_key_render_the_same_objects_and_a_move_changes_the_key() -> None:
    """A node more (the score changes, the placement stays) keeps the key and the rendering;
    a node fewer under an instance changes both. Every golden case's key is taken too."""
    spec = parse_plan(plan_doc({"face_feature_extract": {"P4": 8}, "face_1vn": {"P4": 4}}))
    six = node_list([(f"p4-{i}", "P4", 8) for i in range(6)])
    before = plan(spec, snapshot(six, None))
    seven = node_list([(f"p4-{i}", "P4", 8) for i in range(7)])
    more = plan(spec, snapshot(seven, None), previous=previous_placements(before.allocations))
    assert more.score != before.score and more.allocations != before.allocations  # the terms differ
    assert [a.nodes for a in more.allocations] == [a.nodes for a in before.allocations]
    assert render_key(spec, more) == render_key(spec, before) is not None
    assert render_desired(spec, more) == render_desired(spec, before)

    used = sorted({n for a in before.allocations for n, _ in a.nodes})
    fewer = node_list([(f"p4-{i}", "P4", 8) for i in range(6) if f"p4-{i}" != used[0]])
    moved = plan(spec, snapshot(fewer, None), previous=previous_placements(before.allocations))
    assert render_key(spec, moved) != render_key(spec, before)
    assert render_desired(spec, moved) != render_desired(spec, before)
    for case in GOLDEN_CASES:
        assert render_key(*load(case)) is not None


def _cordoned(spec: Any, nodes: Any, before: Any, off: str, **snap: Any) -> Any:
    """``spec`` re-planned from ``before`` with node ``off`` gone (a cordon)."""
    left = dict(nodes, items=[n for n in nodes["items"] if n["metadata"]["name"] != off])
    return plan(spec, snapshot(left, None, **snap), previous=previous_placements(before.allocations))


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_a_render_like_the_last_one_equals_a_fresh_one_and_keeps_the_unmoved_entries(case: str) -> None:
    """After each possible cordon, a render given the last one (same spec) is the fresh render,
    and every Deployment it did not move is the very object rendered before (nothing rendered
    again); a moved one is new."""
    doc = yaml.safe_load((DATA / case / "plan.yaml").read_text())
    spec = parse_plan(doc | {"spec": doc["spec"] | {"deploy": True}})
    nodes = yaml.safe_load((DATA / case / "nodes.yaml").read_text())
    before = plan(spec, snapshot(nodes, None))
    first = render_desired(spec, before)
    assert first.deployments and len(first.kept) == len(first.deployments)
    used = sorted({n for a in before.allocations for n, _ in a.nodes})
    moves = 0
    for off in used:
        after = _cordoned(spec, nodes, before, off)
        if not after.feasible:
            continue
        fresh, like = render_desired(spec, after), render_desired(spec, after, like=first)
        assert like == fresh
        old = {d["metadata"]["name"]: d for d in first.deployments}
        for dep in like.deployments:
            same = old.get(dep["metadata"]["name"])
            assert (dep is same) == (same is not None and same == dep), dep["metadata"]["name"]
        moves += sum(dep is not old.get(dep["metadata"]["name"]) for dep in like.deployments)
    assert moves  # some cordon moved an instance


def test_entries_with_devices_are_never_taken_from_the_last_render() -> None:
    """A DRA entry's claim template reads its devices' attributes, which a result does not
    carry: rendered afresh every time, equal all the same."""
    from tests.test_topology import gpu_nodes, operator, slices

    doc = plan_doc({"face_1vn": {"P4": 4}}, operators=[operator("face_1vn", "machine")],
                   resources=[{"name": "P4"}], deploy=True)  # fmt: skip
    spec = parse_plan(doc)
    snap = snapshot(gpu_nodes(["n0", "n1"]), slices_doc=slices({"n0": [4, 4], "n1": [4, 4]}))
    result = plan(spec, snap)
    first = render_desired(spec, result)
    again = render_desired(spec, result, like=first)
    assert first.claim_templates and not first.kept
    assert again == first
    assert all(a is not b for a, b in zip(again.deployments, first.deployments, strict=True))


def _results(case: str) -> tuple[Any, list[Any]]:
    """A golden case's spec planned on many clusters (its nodes and up to as many copies, 4 to 8
    cards each: other nodes, other splits, other links): the feasible results."""
    doc = yaml.safe_load((DATA / case / "plan.yaml").read_text())
    spec = parse_plan(doc | {"spec": doc["spec"] | {"deploy": True}})
    nodes = yaml.safe_load((DATA / case / "nodes.yaml").read_text())
    results = []
    for copies, cards in itertools.product((0, 3, len(nodes["items"])), ("4", "5", "6", "7", "8")):
        items = [copy.deepcopy(n) for n in nodes["items"] + nodes["items"][:copies]]
        for i, node in enumerate(items):
            node["metadata"]["name"] += f"-{i}"
            node["status"]["allocatable"]["nvidia.com/gpu"] = cards
        result = plan(spec, snapshot(dict(nodes, items=items), None))
        if result.feasible:
            results.append(result)
    return spec, results


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_a_render_like_any_other_of_the_same_spec_equals_a_fresh_one(case: str) -> None:
    """Each result rendered given every other's render is its fresh render, whatever they share;
    and across all of them, entries of one key are rendered alike (the key holds all they are
    rendered from besides the spec)."""
    spec, results = _results(case)
    assert len(results) > 10
    renders = [render_desired(spec, r) for r in results]
    for result, fresh in zip(results, renders, strict=True):
        for other in renders:
            assert render_desired(spec, result, like=other) == fresh
    by_key: dict[Any, str] = {}
    for kept in (k for r in renders for k in r.kept.values()):
        text = json.dumps([kept.flamewaker.entry, kept.deployment], sort_keys=True)
        assert by_key.setdefault(kept.key, text) == text, kept.key
