"""Plans whose types select overlapping but different nodes: ``optimal`` only where it is true.

Such plans are planned one after another; the answer is called optimal only when it reaches
every bound. Checked here against the single-plan planner (exact, and checked itself against an
exhaustive reference): where a plan is called optimal, every plan is admitted with every request
at its max, and each plan scores what it would score alone on the empty cluster at its max,
which no answer for several plans can beat. And no node is ever given more cards than it has.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from planner.model.spec import PlanSpec, Request
from planner.planning import plan
from planner.read.parse import parse_plan, snapshot
from planner.share.together import plan_together
from tests.helpers import node_list, plan_doc

TYPE = "gpuplan.ragnaros.io/gpu-type"
ALL = {"name": "GPU", "nodeSelector": {}}  # every node: the P4 nodes and the T4 ones
P4 = {"name": "P4", "nodeSelector": {TYPE: "P4"}}
OPERATORS = ["face_1vn", "body_1vn", "face_feature_extract", "vehicle_1vn"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[tuple[str, str, int]], list[PlanSpec]]:
    nodes = [("p4-0", "P4", draw(st.integers(0, 8))), ("t4-0", "T4", draw(st.integers(0, 8)))]
    nodes += [(f"p4-{i}", "P4", draw(st.integers(0, 8))) for i in range(1, draw(st.integers(1, 3)))]
    specs = []
    for p in range(draw(st.integers(2, 3))):
        wide = p == 0 or draw(st.booleans())  # the first plan's type covers every node
        res = "GPU" if wide else "P4"
        requests: dict[str, Any] = {}
        for op in draw(st.lists(st.sampled_from(OPERATORS), min_size=1, max_size=2, unique=True)):
            high = draw(st.integers(1, 8))
            low = draw(st.integers(0, high))
            requests[op] = {res: high if draw(st.booleans()) else {"min": low, "max": high}}
        doc = plan_doc(requests, resources=[ALL if wide else P4], priority=draw(st.sampled_from([0, 5])))
        doc["metadata"]["name"] = f"p{p}"
        specs.append(parse_plan(doc))
    if all(s.resources[0].name == "GPU" for s in specs):  # make them overlap
        specs[-1] = replace(
            specs[-1],
            resources=parse_plan(plan_doc({}, resources=[P4])).resources,
            requests=tuple(replace(r, resource="P4") for r in specs[-1].requests),
        )
    return nodes, specs


def at_max(spec: PlanSpec) -> PlanSpec:
    return replace(
        spec, requests=tuple(Request(r.operator, r.resource, r.cards, r.machines) for r in spec.requests)
    )


@settings(max_examples=120, deadline=None)
@given(cases())
def test_overlapping_types_are_optimal_only_at_their_bounds(case: Any) -> None:
    nodes, specs = case
    snap = snapshot(node_list(nodes))
    out = plan_together(specs, snap, seconds=20)
    load: dict[str, int] = {}
    for s in out:
        for a in s.result.allocations if s.admitted else ():
            for node, k in a.nodes:
                load[node] = load.get(node, 0) + k * a.units
    free = {name: f for name, _, f in nodes}
    assert all(used <= free[node] for node, used in load.items()), (load, free)
    event("optimal" if any(s.result.optimal for s in out) else "not optimal")
    if not any(s.result.optimal for s in out):
        return
    for s in out:
        assert s.admitted
        got = {(a.operator, a.resource): a.instances * a.units for a in s.result.allocations}
        assert all(got.get((r.operator, r.resource), 0) == r.cards for r in s.spec.requests)
        alone = plan(at_max(s.spec), snap)
        assert alone.optimal and s.result.score == alone.score
