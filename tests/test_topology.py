"""Topology inside the node: devices from ResourceSlices, domains, required/preferred, the objective."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from planner.base.codes import SolveStatus
from planner.base.strategies import Topology
from planner.model.options import TypeProblem, build_problems
from planner.model.result import PlanResult, previous_placements
from planner.model.spec import PlanSpec
from planner.node.arrange import Domains
from planner.node.topology import TopologyModel
from planner.output.render import render_desired
from planner.planning import plan, solve_type
from planner.read.parse import parse_plan, snapshot
from planner.read.slices import parse_claims, parse_slices
from planner.search.cpsat import cp_model
from planner.search.outcome import Outcome
from tests.helpers import node_list, plan_doc

DRIVER = "gpu.gpuplan.test"
ROOT = "resource.kubernetes.io/pcieRoot"


def slices(nodes: dict[str, list[int]]) -> dict[str, Any]:
    """Per node, the sizes of its domains: {"n0": [4, 4]} is 8 GPUs, gpu-0..3 in pci0, 4..7 in pci1."""
    items = []
    for node, sizes in nodes.items():
        devices, index = [], 0
        for d, size in enumerate(sizes):
            for _ in range(size):
                devices.append(
                    {
                        "name": f"gpu-{index}",
                        "attributes": {
                            ROOT: {"string": f"pci{d}"},
                            "resource.kubernetes.io/numaNode": {"int": d},
                            "index": {"int": index},
                        },
                    }
                )
                index += 1
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{DRIVER}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def claims(held: dict[str, list[int]]) -> dict[str, Any]:
    """Claims already holding gpu-<i> on each node."""
    results = [
        {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
        for node, idx in held.items()
        for i in idx
    ]
    return {
        "kind": "List",
        "items": [{"kind": "ResourceClaim", "status": {"allocation": {"devices": {"results": results}}}}],
    }


def gpu_nodes(names: list[str]) -> dict[str, Any]:
    return node_list([(n, "P4", 0) for n in names])  # no nvidia.com/gpu: DRA publishes the GPUs


def operator(name: str, strategy: str, topology: str = "preferred") -> dict[str, Any]:
    return {
        "name": name,
        "keyStrategy": strategy,
        "topology": topology,
        "services": {"key": name.replace("_", "-")},
    }


def planned(
    requests: dict[str, Any],
    operators: list[dict[str, Any]],
    domains: dict[str, list[int]],
    held: dict[str, list[int]] | None = None,
) -> tuple[PlanSpec, PlanResult]:
    spec = parse_plan(plan_doc(requests, operators=operators, resources=[{"name": "P4"}]))
    snap = snapshot(gpu_nodes(list(domains)), slices_doc=slices(domains), claims_doc=claims(held or {}))
    return spec, plan(spec, snap)


def domain_of(device: str, domains: list[int]) -> int:
    index, start = int(device.split("-")[1]), 0
    for d, size in enumerate(domains):
        if index < start + size:
            return d
        start += size
    raise AssertionError(device)


def test_slices_and_claims_read_into_free_devices() -> None:
    devices = parse_slices(slices({"n0": [4, 4]}), parse_claims(claims({"n0": [1, 5]})))
    assert [d.name for d in devices["n0"] if not d.free] == ["gpu-1", "gpu-5"]
    assert {d.domain(ROOT) for d in devices["n0"]} == {"pci0", "pci1"}
    assert devices["n0"][0].attribute("index") == "0", "unqualified names belong to the driver"


def test_an_instance_goes_where_a_whole_domain_has_room_instead_of_straddling() -> None:
    # n0: 3 + 3 free (one GPU held in each domain); n1: 4 + 4 free. A 1x4 instance fits one
    # domain only on n1.
    domains = {"n0": [4, 4], "n1": [4, 4]}
    _, result = planned({"face_1vn": {"P4": 4}}, [operator("face_1vn", "machine")], domains, {"n0": [0, 4]})
    (a,) = result.allocations
    assert result.optimal and a.straddling == 0 and dict(a.nodes) == {"n1": 1}
    ((node, (devs,)),) = a.devices
    assert node == "n1" and len({domain_of(d, domains[node]) for d in devs}) == 1


def test_preferred_straddles_when_the_score_needs_it_and_required_never_does() -> None:
    # one node, 3 + 3 free in two 4-GPU domains: 1x4 scores 4 but must straddle; 2x2 scores 2
    domains, held = {"n0": [4, 4]}, {"n0": [0, 4]}
    _, preferred = planned({"face_1vn": {"P4": 4}}, [operator("face_1vn", "machine")], domains, held)
    (a,) = preferred.allocations
    assert (a.instances, a.units, a.straddling) == (1, 4, 1) and preferred.score == 4
    _, required = planned(
        {"face_1vn": {"P4": 4}}, [operator("face_1vn", "machine", "required")], domains, held
    )
    (b,) = required.allocations
    assert (b.instances, b.units, b.straddling) == (2, 2, 0) and required.score == 2 and required.optimal
    for devs in dict(b.devices)["n0"]:
        assert len({domain_of(d, domains["n0"]) for d in devs}) == 1


def test_required_larger_than_any_domain_may_straddle() -> None:
    _, result = planned(
        {"face_1vn": {"resourceNum": {"P4": 8}, "machineNum": {"P4": 1}}},
        [operator("face_1vn", "machine", "required")],
        {"n0": [4, 4]},
    )
    (a,) = result.allocations
    assert result.feasible and a.straddling == 1


def test_free_cards_are_left_in_whole_domains() -> None:
    # two 1-card instances of a single operator: both in one domain of n0 leaves three domains
    # whole; spreading them would leave two
    domains = {"n0": [4, 4], "n1": [4, 4]}
    _, result = planned({"security_pass": {"P4": 2}}, [operator("security_pass", "single")], domains)
    (a,) = result.allocations
    used = {(n, domain_of(d, domains[n])) for n, lists in a.devices for devs in lists for d in devs}
    assert len(used) == 1 and result.optimal


def test_no_device_is_given_twice_and_held_ones_never() -> None:
    domains, held = {"n0": [4, 4], "n1": [2, 2]}, {"n0": [3]}
    requests = {
        "face_1vn": {"P4": 4},
        "body_1vn": {"P4": 2},
        "security_pass": {"P4": 3},
        "face_feature_extract": {"P4": 2},
    }
    ops = [
        operator("face_1vn", "machine"),
        operator("body_1vn", "machine"),
        operator("security_pass", "single"),
        operator("face_feature_extract", "service"),
    ]
    _, result = planned(requests, ops, domains, held)
    assert result.feasible
    given = [(n, d) for a in result.allocations for n, lists in a.devices for devs in lists for d in devs]
    assert len(given) == len(set(given)) == sum(a.units_total for a in result.allocations)
    assert ("n0", "gpu-3") not in given


def test_json_lists_each_instances_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    domains = {"n0": [4, 4], "n1": [4, 4]}
    doc = plan_doc({"face_feature_extract": {"P4": 2}}, resources=[{"name": "P4"}])
    for name, content in (("plan", doc), ("nodes", gpu_nodes(list(domains))), ("slices", slices(domains))):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(content))
    args = [
        "plan",
        str(tmp_path / "plan.yaml"),
        "--nodes",
        str(tmp_path / "nodes.yaml"),
        "--slices",
        str(tmp_path / "slices.yaml"),
    ]
    assert main([*args, "-o", "json"]) == 0
    (a,) = json.loads(capsys.readouterr().out)["allocations"]
    assert sorted(a["devices"]) == sorted(a["nodes"])
    assert all(
        len(lists) == a["nodes"][n] and all(len(i) == a["unitsPerInstance"] for i in lists)
        for n, lists in a["devices"].items()
    )
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "      devices n0: gpu-" in text or "      devices n1: gpu-" in text


def test_a_domain_attribute_of_choice(tmp_path: Path) -> None:
    doc = slices({"n0": [4, 4]})
    spec = parse_plan(
        plan_doc(
            {"face_1vn": {"P4": 4}},
            resources=[{"name": "P4"}],
            topologyAttribute="resource.kubernetes.io/numaNode",
        )
    )
    (prob,) = build_problems(spec, snapshot(gpu_nodes(["n0"]), slices_doc=doc))
    assert [d.name for d in prob.domains["n0"]] == ["0", "1"]


@st.composite
def device_problems(draw: st.DrawFn, topologies: tuple[str, ...] = ("preferred", "none")):  # type: ignore[no-untyped-def]
    nodes = {
        f"n{i}": draw(st.sampled_from([[4, 4], [2, 2, 2, 2], [8], [4, 2]]))
        for i in range(draw(st.integers(1, 3)))
    }
    held = {
        n: draw(st.lists(st.integers(0, sum(sizes) - 1), max_size=3, unique=True))
        for n, sizes in nodes.items()
    }
    requests, ops = {}, []
    for i in range(draw(st.integers(1, 3))):
        strategy = draw(st.sampled_from(["machine", "service", "single"]))
        name = f"op{i}"
        requests[name] = {"P4": draw(st.sampled_from([1, 2, 3, 4, 6, 8]))}
        ops.append(operator(name, strategy, draw(st.sampled_from(topologies))))
    return requests, ops, nodes, held


@settings(max_examples=40, deadline=None)
@given(device_problems())
def test_devices_never_lower_the_score_without_required(case) -> None:  # type: ignore[no-untyped-def]
    requests, ops, nodes, held = case
    spec = parse_plan(plan_doc(requests, operators=ops, resources=[{"name": "P4"}]))
    with_devices = snapshot(gpu_nodes(list(nodes)), slices_doc=slices(nodes), claims_doc=claims(held))
    (prob,) = build_problems(spec, with_devices)
    out, _ = solve_type(prob, 20)
    free = {n: sum(sizes) - len(held[n]) for n, sizes in nodes.items()}
    plain = node_list([(n, "P4", f) for n, f in free.items()])
    (ref,) = build_problems(spec, snapshot(plain))
    ref_out, _ = solve_type(ref, 20)
    assert out.status == ref_out.status
    if out.status is SolveStatus.OPTIMAL:
        assert out.score == ref_out.score and out.devices is not None


def test_a_bare_domain_attribute_is_the_drivers_in_the_claim_and_every_read_is_guarded() -> None:
    """The API wants matchAttribute qualified, and CEL errors (not mismatches) on a missing key."""
    doc = slices({"n0": [4, 4]})
    for item in doc["items"]:
        for dev in item["spec"]["devices"]:
            dev["attributes"]["group"] = {"string": f"g{dev['attributes']['index']['int'] // 4}"}
    spec = parse_plan(
        plan_doc(
            {"face_1vn": {"P4": 4}},
            resources=[{"name": "P4", "deviceClassName": DRIVER}],
            topologyAttribute="group",
            deploy=True,
        )
    )
    result = plan(spec, snapshot(gpu_nodes(["n0"]), slices_doc=doc))
    [template] = render_desired(spec, result).claim_templates
    claim = template["spec"]["spec"]["devices"]
    assert claim["constraints"] == [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/group"}]
    cel = claim["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
    assert cel.startswith(f'device.driver == "{DRIVER}" && "index" in device.attributes["{DRIVER}"] && ')


def levels(prob: TypeProblem, out: Outcome) -> tuple[int, int]:
    """Levels 2 and 3 of a plan, read from its devices: instances straddling, cards left whole."""
    doms = Domains(prob)
    assert out.straddling is not None and out.devices is not None
    straddled = sum(
        n for it, n in zip(prob.items, out.straddling, strict=True) if it.topology is not Topology.NONE
    )
    held = {
        (node, dev)
        for lists in out.devices
        for node, insts in lists.items()
        for inst in insts
        for dev in inst
    }
    kept = sum(
        free
        for (node, d), free in doms.whole.items()
        if not any((node, dev) in held for dev in doms.domains[node][d].free)
    )
    return straddled, kept


def model_levels(prob: TypeProblem, score: Fraction) -> tuple[int, int]:
    """The same levels solved by the full model (every split, no starting layout, no bound used)."""
    tm = TopologyModel(prob, Domains(prob))
    tm.model.add(tm.score >= int(score * tm.scale))
    found = []
    for objective, minimize in ((tm.straddles, True), (tm.whole, False)):
        if not objective:
            found.append(0)
            continue
        total = cp_model.LinearExpr.sum(objective)
        if minimize:
            tm.model.minimize(total)
        else:
            tm.model.maximize(total)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = 30
        assert solver.solve(tm.model) == cp_model.OPTIMAL
        value = round(solver.objective_value)
        tm.model.clear_objective()  # type: ignore[no-untyped-call]
        tm.model.add(total <= value if minimize else total >= value)
        found.append(value)
    return found[0], found[1]


@settings(max_examples=60, deadline=None)
@given(device_problems(("preferred", "none", "required")))
def test_a_plan_proven_by_the_bounds_is_as_good_as_the_full_models(case) -> None:  # type: ignore[no-untyped-def]
    """The layout made without a solver is called optimal only when its bounds prove it: the full
    model, solved from scratch, finds nothing better at either level."""
    requests, ops, nodes, held = case
    spec = parse_plan(plan_doc(requests, operators=ops, resources=[{"name": "P4"}]))
    (prob,) = build_problems(
        spec, snapshot(gpu_nodes(list(nodes)), slices_doc=slices(nodes), claims_doc=claims(held))
    )
    out, _ = solve_type(prob, 20)
    if out.status is SolveStatus.OPTIMAL:
        assert out.score is not None
        assert levels(prob, out) == model_levels(prob, out.score)


def test_a_hundred_nodes_are_proven_by_the_bounds_without_a_search() -> None:
    """Eight GPUs in two domains per node, some held, 60% of the free cards asked for: the layout
    made for the domains reaches both bounds, so no model is built (no branches)."""
    domains = {f"n{i:03d}": [4, 4] for i in range(100)}
    held = {n: [j for j in range(8) if (i * 7 + j * 3) % 11 == 0] for i, n in enumerate(domains)}
    sizes = [1, 2, 4, 8, 16]
    requests = {f"op{i}": {"P4": sizes[i % 5]} for i in range(40)}
    strategies = ["machine", "service", "single"]
    ops = [operator(f"op{i}", strategies[i % 3]) for i in range(40)]
    spec = parse_plan(plan_doc(requests, operators=ops, resources=[{"name": "P4"}]))
    (prob,) = build_problems(
        spec, snapshot(gpu_nodes(list(domains)), slices_doc=slices(domains), claims_doc=claims(held))
    )
    out, _ = solve_type(prob, 20)
    assert out.status is SolveStatus.OPTIMAL and out.branches == 0
    assert levels(prob, out) == model_levels(prob, out.score or Fraction(0))


def _entries(result: PlanResult) -> set[tuple[str, str, int, tuple[str, ...]]]:
    """Every instance as (operator, node, position on the node, devices): what names its pod."""
    return {
        (a.operator, node, k, devs)
        for a in result.allocations
        for node, lists in a.devices
        for k, devs in enumerate(lists)
    }


def test_a_re_plan_keeps_every_instance_on_its_devices_and_a_cordon_moves_only_its_own() -> None:
    """The devices name an instance's claim and pod: a re-plan of the same cluster changes none,
    and cordoning a node changes only the instances that were on it."""
    domains = {f"n{i:02d}": [4, 4] for i in range(30)}
    held = {n: [j for j in range(8) if (i * 5 + j * 3) % 7 == 0] for i, n in enumerate(domains)}
    sizes, strategies = [1, 2, 4, 8, 3], ["machine", "service", "single"]
    requests = {f"op{i}": {"P4": sizes[i % 5]} for i in range(24)}
    ops = [operator(f"op{i}", strategies[i % 3]) for i in range(24)]
    spec = parse_plan(plan_doc(requests, operators=ops, resources=[{"name": "P4"}]))
    nodes = gpu_nodes(list(domains))
    snap = snapshot(nodes, slices_doc=slices(domains), claims_doc=claims(held))
    first = plan(spec, snap)
    assert first.optimal
    again = plan(spec, snap, previous=previous_placements(first.allocations))
    assert again.optimal and again.moved == 0
    assert _entries(again) == _entries(first)

    count: dict[str, int] = {}
    for a in first.allocations:
        for node, n in a.nodes:
            count[node] = count.get(node, 0) + n
    victim = max(count, key=lambda n: (count[n], n))
    for item in nodes["items"]:
        if item["metadata"]["name"] == victim:
            item["spec"]["unschedulable"] = True
    cordoned = snapshot(nodes, slices_doc=slices(domains), claims_doc=claims(held))
    after = plan(spec, cordoned, previous=previous_placements(first.allocations))
    assert after.optimal and after.moved == count[victim]
    changed = _entries(first) - _entries(after)
    assert {node for _, node, _, _ in changed} == {victim}
