"""The plan's picture: the view model (rows, cells, groups) and the page drawn from it.

The browser checks what is on screen (tests/view); these check the model the page is drawn from
against the planner's own result, without a browser.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from planner.model.result import PlanResult
from planner.model.spec import Snapshot
from planner.output.page import render_page
from planner.output.view import FOREIGN, FREE, View, build_view, shown_result, shown_status
from planner.planning import plan
from planner.read.allocations import read_allocations
from planner.read.parse import parse_plan, snapshot
from tests.helpers import node_list, plan_doc
from tests.test_topology import claims, gpu_nodes, operator, slices

EXAMPLES = Path(__file__).parent.parent / "examples"


@cache
def sample() -> tuple[Any, Snapshot, PlanResult]:
    """The sample plan, planned once for the module (values are frozen: sharing them is safe)."""
    spec = parse_plan(yaml.safe_load((EXAMPLES / "image-fence.yaml").read_text()))
    snap = snapshot(
        yaml.safe_load((EXAMPLES / "nodes.yaml").read_text()),
        yaml.safe_load((EXAMPLES / "pods.yaml").read_text()),
    )
    return spec, snap, plan(spec, snap)


def instance_ids(page: str) -> list[str]:
    """Every instance id the page draws: in its node rows, and in its groups' member lists."""
    members = re.findall(r'<script type="application/json" class="nodes">(.*?)</script>', page)
    listed = [i for m in members for _, ids, _ in json.loads(m) for i in ids]
    return re.findall(r'data-i="([^"]+)"', page) + listed


def drawn(view: View) -> dict[str, tuple[str, int, tuple[str, ...]]]:
    """Instance id -> (node, cards, devices) as the rows draw it; fails on an instance drawn twice."""
    out: dict[str, tuple[str, int, tuple[str, ...]]] = {}
    for group in view.groups:
        for row in group.rows:
            for part in row.parts:
                if part.kind != "instance":
                    continue
                node, cards, devices = out.get(part.instance, (row.node, 0, ()))
                assert node == row.node, f"{part.instance} drawn on {node} and {row.node}"
                out[part.instance] = (
                    node,
                    cards + part.cards,
                    devices + ((part.device,) if part.device else ()),
                )
    return out


def expected(result: PlanResult) -> Counter[tuple[str, str, str, int]]:
    """(operator, resource, node, cards) -> instances, from the planner's allocations."""
    return Counter(
        {(a.operator, a.resource, node, a.units): n for a in result.allocations for node, n in a.nodes}
    )


def test_every_instance_is_drawn_once_on_its_planned_node_with_its_cards() -> None:
    spec, snap, result = sample()
    view = build_view([shown_result(spec, result)], snap)
    seen: Counter[tuple[str, str, str, int]] = Counter()
    for ident, (node, cards, _) in drawn(view).items():
        operator_, resource = ident.split(":", 1)[1].split("#")[0].split("/")
        seen[operator_, resource, node, cards] += 1
    assert seen == expected(result)


def test_free_and_foreign_cards_per_node_match_the_snapshot_less_the_plan() -> None:
    spec, snap, result = sample()
    view = build_view([shown_result(spec, result)], snap)
    planned: Counter[str] = Counter()
    for a in result.allocations:
        for name, n in a.nodes:
            planned[name] += n * a.units
    rows = {r.node: r for g in view.groups for r in g.rows}
    for node in snap.nodes:
        if not node.allocatable_units("nvidia.com/gpu"):
            assert node.name not in rows  # no cards, nothing planned: not drawn
            continue
        row = rows[node.name]
        assert row.free == node.free("nvidia.com/gpu") - planned[node.name], node.name
        assert row.foreign == node.allocatable_units("nvidia.com/gpu") - node.free("nvidia.com/gpu")
        assert sum(p.cards for p in row.parts if p.kind == FREE) == row.free
        assert sum(p.cards for p in row.parts if p.kind == FOREIGN) == row.foreign
        assert sum(p.cards for p in row.parts) == row.cards
    assert sum(t.free for t in view.totals) == sum(r.free for r in rows.values())


def test_identical_nodes_form_one_group_and_different_ones_do_not() -> None:
    doc = plan_doc({"svc": {"P4": 6}}, operators=[operator("svc", "service")], resources=[{"name": "P4"}])
    spec = parse_plan(doc)
    nodes = [(f"n{i}", "P4", 8) for i in range(6)] + [("small", "P4", 4)]
    snap = snapshot(node_list(nodes))
    result = plan(spec, snap)
    view = build_view([shown_result(spec, result)], snap)
    (a,) = result.allocations
    assert (a.instances, a.units) == (6, 1)
    on = dict(a.nodes)
    kinds = Counter((cards, on.get(name, 0)) for name, _, cards in nodes)  # what a reader would see
    assert sorted(g.count for g in view.groups) == sorted(kinds.values())
    assert max(g.count for g in view.groups) >= 5
    assert view.nodes == 7


def test_devices_sit_in_their_domains_and_a_straddling_instance_is_marked() -> None:
    # one node, two PCIe roots of 4 with one GPU of each held: a 4-GPU instance must straddle
    spec = parse_plan(
        plan_doc({"big": {"P4": 4}}, operators=[operator("big", "machine")], resources=[{"name": "P4"}])
    )
    snap = snapshot(gpu_nodes(["n0"]), slices_doc=slices({"n0": [4, 4]}), claims_doc=claims({"n0": [0, 4]}))
    result = plan(spec, snap)
    view = build_view([shown_result(spec, result)], snap)
    assert view.devices
    (row,) = [r for g in view.groups for r in g.rows]
    assert [p.domain for p in row.parts] == ["pci0"] * 4 + ["pci1"] * 4
    assert [p.kind for p in row.parts if p.device in ("gpu-0", "gpu-4")] == [FOREIGN, FOREIGN]
    (instance,) = drawn(view).values()
    ((_, lists),) = result.allocations[0].devices
    assert instance == ("n0", 4, lists[0])
    assert all(p.straddles for p in row.parts if p.kind == "instance")
    assert result.allocations[0].straddling == 1


def test_a_plan_read_back_from_its_status_draws_the_same_cells() -> None:
    spec, snap, result = sample()
    status = result.to_json() | {"phase": "Applied"}
    shown = shown_status("ragnaros", "image-fence", status, read_allocations(status["allocations"]), spec)
    from_status = build_view([shown], snap)
    planned = build_view([shown_result(spec, result)], snap)
    assert [r.pattern() for g in from_status.groups for r in g.rows] == [
        r.pattern() for g in planned.groups for r in g.rows
    ]
    assert shown.phase == "Applied" and shown.score == "19" and shown.proof == "optimal (proven)"


def test_several_plans_share_a_page_each_in_its_own_colours() -> None:
    spec, snap, result = sample()
    other = parse_plan(
        {
            **yaml.safe_load((EXAMPLES / "image-fence.yaml").read_text()),
            "metadata": {"name": "b", "namespace": "x"},
        }
    )
    view = build_view([shown_result(spec, result), shown_result(other, result)], snap)
    assert (
        len({e.colour for e in view.legend})
        == len(view.legend)
        == 2 * len({a.operator for a in result.allocations})
    )
    assert {e.plan for e in view.legend} == {"ragnaros/image-fence", "x/b"}


def test_the_page_is_self_contained_and_escapes_names() -> None:
    spec, snap, result = sample()
    view = build_view([shown_result(spec, result)], snap, title="<script>alert(1)</script>")
    page = render_page(view)
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page
    for outside in ("http://", "https://", "<link", " src=", "@import", "url("):
        assert outside not in page, outside
    assert len(instance_ids(page)) == sum(a.instances for a in result.allocations)


def test_cli_writes_the_page_and_status_html_needs_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", str(EXAMPLES / "image-fence.yaml"), "--nodes", str(EXAMPLES / "nodes.yaml")]
    assert main([*args, "--pods", str(EXAMPLES / "pods.yaml"), "-o", "html", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!DOCTYPE html>") and "face_1vn" in out and "none scores more" in out
    assert main(["status", "--html"]) == 2
    assert "--html" in capsys.readouterr().err


def test_an_instance_without_recorded_devices_on_a_dra_node_is_still_drawn_once() -> None:
    spec = parse_plan(
        plan_doc({"big": {"P4": 4}}, operators=[operator("big", "machine")], resources=[{"name": "P4"}])
    )
    snap = snapshot(gpu_nodes(["n0"]), slices_doc=slices({"n0": [4, 4]}))
    status = {
        "allocations": [
            {"operator": "big", "resource": "P4", "instances": 1, "unitsPerInstance": 4, "nodes": {"n0": 1}}
        ]
    }
    shown = shown_status("default", "test", status, read_allocations(status["allocations"]), spec)
    view = build_view([shown], snap)
    assert list(drawn(view).values()) == [("n0", 4, ())]


def test_priority_admission_and_elastic_cards_show_when_a_status_has_them() -> None:
    spec, snap, result = sample()
    status = result.to_json() | {
        "admitted": False,
        "elastic": [
            {
                "operator": "face_1vn",
                "resource": "P4",
                "cards": 8,
                "max": 16,
                "reason": "x/prod holds the cards",
            }
        ],
    }
    shown = shown_status(
        "ragnaros", "image-fence", status, read_allocations(status["allocations"]), spec, {"priority": 5}
    )
    page = render_page(build_view([shown], snap))
    assert "priority 5" in page and "not admitted" in page
    assert "8 of 16 cards: x/prod holds the cards" in page
    assert "not explained here" in page  # a status carries no explanation: the page does not invent one
