"""NUMA zones without DRA: NodeResourceTopology read, reconciled with the nodes, and planned on."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from planner.base.errors import InvalidInput
from planner.model.options import build_problems
from planner.model.result import PlanResult
from planner.model.spec import PlanSpec
from planner.model.zones import NodeTopology, Zone, ZoneResource, zone_domains
from planner.planning import plan
from planner.read.parse import parse_plan, snapshot
from planner.read.topologies import parse_topologies
from tests.helpers import node_list, plan_doc
from tests.test_topology import operator, slices

GPU = "nvidia.com/gpu"


def nrt(
    node: str,
    zones: list[tuple[int, int]],
    cpu: int | None = 16,
    policy: str | None = None,
    version: str = "topology.node.k8s.io/v1alpha2",
) -> dict[str, Any]:
    """A NodeResourceTopology: per zone (GPUs, of which available); ``cpu`` CPUs allocatable each."""
    out: dict[str, Any] = {
        "apiVersion": version,
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "zones": [
            {
                "name": f"node-{i}",
                "type": "Node",
                "resources": [
                    {"name": GPU, "capacity": str(gpus), "allocatable": str(gpus), "available": str(free)},
                    *(
                        [{"name": "cpu", "capacity": str(cpu + 1), "allocatable": str(cpu), "available": "2"}]
                        if cpu is not None
                        else []
                    ),
                ],
            }
            for i, (gpus, free) in enumerate(zones)
        ],
    }
    if policy:
        out["attributes"] = [
            {"name": "topologyManagerScope", "value": "container"},
            {"name": "topologyManagerPolicy", "value": policy},
        ]
    return out


def nrt_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def gpu_pods(used: dict[str, int]) -> dict[str, Any]:
    return {
        "kind": "List",
        "items": [
            {
                "kind": "Pod",
                "metadata": {"name": f"holder-{n}"},
                "spec": {"nodeName": n, "containers": [{"resources": {"limits": {GPU: str(c)}}}]},
                "status": {"phase": "Running"},
            }
            for n, c in used.items()
        ],
    }


def planned(
    requests: dict[str, Any],
    operators: list[dict[str, Any]],
    zones: dict[str, list[tuple[int, int]]],
    policy: str | None = None,
) -> tuple[PlanSpec, PlanResult]:
    """Nodes of 8 GPUs whose zones say what is free; pods hold the rest (so both views agree)."""
    spec = parse_plan(plan_doc(requests, operators=operators, resources=[{"name": "P4"}]))
    used = {n: sum(g - f for g, f in zs) for n, zs in zones.items()}
    nodes = node_list([(n, "P4", sum(g for g, _ in zs)) for n, zs in zones.items()])
    topology = nrt_list(*(nrt(n, zs, policy=policy) for n, zs in zones.items()))
    return spec, plan(spec, snapshot(nodes, gpu_pods(used), topology_doc=topology))


# --- reading ---------------------------------------------------------------------------------


def test_zones_of_type_node_become_the_nodes_numa_zones() -> None:
    doc = nrt("n0", [(4, 3), (4, 4)], policy="single-numa-node")
    doc["zones"].append({"name": "socket-0", "type": "Socket", "resources": []})  # not a NUMA node
    topo = parse_topologies(nrt_list(doc))["n0"]
    assert [z.name for z in topo.zones] == ["node-0", "node-1"] and topo.single_numa
    assert topo.zones[0].resource(GPU) == ZoneResource(4, 4, 3)
    assert topo.zones[0].resource("cpu") == ZoneResource(17_000, 16_000, 2_000), "cpu in millicores"


def test_a_single_object_and_the_older_version_are_read_too() -> None:
    doc = nrt("n0", [(2, 2)], version="topology.node.k8s.io/v1alpha1")
    doc["topologyPolicies"] = ["SingleNUMANodeContainerLevel"]
    topo = parse_topologies(doc)["n0"]
    assert topo.single_numa and topo.zones[0].resource(GPU) == ZoneResource(2, 2, 2)


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    doc = nrt_list(nrt("n0", [(4, 4), (4, 4)]))
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


BAD = [
    pytest.param(
        {"kind": "NodeList", "items": []}, "topology.kind", "expected List or NodeResourceTopologyList",
        id="a list of something else is refused",
    ),
    pytest.param(
        _broken(["items", 0, "apiVersion"], "topology.node.k8s.io/v9"), "topology.items[0].apiVersion",
        "expected topology.node.k8s.io/v1alpha2", id="an unknown version is refused",
    ),
    pytest.param(
        _broken(["items", 0, "metadata", "name"], ""), "topology.items[0].metadata.name", "is required",
        id="an object without a node name is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones"], KeyError), "topology.items[0].zones", "is required",
        id="an object without zones is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones"], {"name": "node-0"}), "topology.items[0].zones", "expected a list",
        id="zones that are not a list are refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 1, "name"], None), "topology.items[0].zones[1].name", "is required",
        id="a zone without a name is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "type"], 7), "topology.items[0].zones[0].type", "is required",
        id="a zone whose type is not a string is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 1, "name"], "node-0"), "topology.items[0].zones[1].name",
        "listed twice", id="two zones of one name are refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "resources", 0, "available"], KeyError),
        "topology.items[0].zones[0].resources[0].available", "is required",
        id="a resource without available is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "resources", 0, "allocatable"], "lots"),
        "topology.items[0].zones[0].resources[0].allocatable", "not a quantity",
        id="a quantity that is no quantity is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "resources", 0, "capacity"], "inf"),
        "topology.items[0].zones[0].resources[0].capacity", "not a quantity",
        id="an infinite quantity is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "resources", 1, "available"], "-1"),
        "topology.items[0].zones[0].resources[1].available", "must not be negative",
        id="a negative quantity is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "resources", 0, "available"], "5"),
        "topology.items[0].zones[0].resources[0].available", "more than allocatable",
        id="more available than allocatable is refused",
    ),
    pytest.param(
        _broken(["items", 0, "zones", 0, "resources", 1, "name"], GPU),
        "topology.items[0].zones[0].resources", "lists a resource twice",
        id="a resource listed twice in a zone is refused",
    ),
    pytest.param(
        nrt_list(nrt("n0", [(4, 4)]), nrt("n0", [(4, 4)])), "topology.items[1].metadata.name",
        "two NodeResourceTopology objects", id="two objects for one node are refused",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "field", "message"), BAD)
def test_bad_topology_is_refused_naming_the_field(doc: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_topologies(doc)
    assert e.value.field == field and message in e.value.message


@pytest.mark.parametrize(("doc", "field", "message"), BAD[5:7])
def test_the_command_line_names_the_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, field: str, message: str
) -> None:
    files = {
        "plan": plan_doc({"face_1vn": {"P4": 4}}, resources=[{"name": "P4"}]),
        "nodes": node_list([("n0", "P4", 8)]),
        "topology": doc,
    }
    for name, content in files.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(content))
    args = ["plan", str(tmp_path / "plan.yaml"), "--nodes", str(tmp_path / "nodes.yaml")]
    assert main([*args, "--topology", str(tmp_path / "topology.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and message in err and "Traceback" not in err


def test_topology_goes_with_nodes_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan_doc({"face_1vn": {"P4": 4}})))
    assert main(["plan", str(tmp_path / "plan.yaml"), "--topology", str(tmp_path / "plan.yaml")]) == 2
    assert "--topology goes with --nodes" in capsys.readouterr().err


# --- zones reconciled with the node -----------------------------------------------------------


def _topology(*zones: tuple[int, int]) -> NodeTopology:
    return NodeTopology(
        tuple(Zone(f"node-{i}", ((GPU, ZoneResource(g, g, f)),)) for i, (g, f) in enumerate(zones))
    )


RECONCILED = [
    pytest.param((4, 3), (4, 4), 7, {}, {}, [3, 4], False, id="zones that agree with the node are taken as they are"),
    pytest.param(
        (4, 1), (4, 4), 8, {"node-0": {GPU: 3}}, {}, [4, 4], False,
        id="the plan's own cards are given back to the zone that holds them",
    ),
    pytest.param(
        (4, 4), (4, 4), 6, {}, {"node-1": {GPU: 2}}, [4, 2], False,
        id="another plan's cards count as used in its zone before its pods run",
    ),
    pytest.param(
        (4, 4), (4, 2), 6, {"node-1": {GPU: 2}}, {}, [4, 2], False,
        id="given back cards whose pods do not run yet come off their zone first, unsaid",
    ),
    pytest.param(
        (4, 4), (4, 3), 5, {}, {}, [3, 2], True,
        id="a surplus over the node is taken from the zone with the most free cards, and said",
    ),
    pytest.param(
        (4, 2), (4, 2), 6, {}, {}, [2, 2], True,
        id="fewer free cards than the node's pods leave: the zones win, and it is said",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("z0", "z1", "node_free", "own", "reserved", "free", "noted"), RECONCILED)
def test_zone_free_cards_agree_with_the_node(
    z0: tuple[int, int],
    z1: tuple[int, int],
    node_free: int,
    own: dict[str, dict[str, int]],
    reserved: dict[str, dict[str, int]],
    free: list[int],
    noted: bool,
) -> None:
    found = zone_domains("n0", _topology(z0, z1), GPU, node_free, own, reserved)
    assert found is not None
    assert [len(d.free) for d in found.domains] == free and found.free == sum(free)
    assert [d.total for d in found.domains] == [z0[0], z1[0]]
    assert (found.note is not None) is noted
    if noted:
        assert found.note is not None and found.note.startswith("n0: its NodeResourceTopology shows")


def test_a_topology_without_the_gpu_resource_gives_no_domains() -> None:
    topo = NodeTopology((Zone("node-0", (("cpu", ZoneResource(8000, 8000, 8000)),)),))
    assert zone_domains("n0", topo, GPU, 8) is None


# --- planning on zones ------------------------------------------------------------------------


def _zone_cards(result: PlanResult) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    return [(n, z) for a in result.allocations for n, lists in a.zones for z in lists]


def test_an_instance_that_fits_a_numa_zone_is_kept_inside_one() -> None:
    # n0: 3 + 3 free (a pod holds one card in each zone); n1: 4 + 4. 1x4 fits one zone only on n1
    _, result = planned(
        {"face_1vn": {"P4": 4}},
        [operator("face_1vn", "machine")],
        {"n0": [(4, 3), (4, 3)], "n1": [(4, 4), (4, 4)]},
    )
    (a,) = result.allocations
    assert result.optimal and a.straddling == 0 and dict(a.nodes) == {"n1": 1}
    ((node, ((zone, cards),)),) = _zone_cards(result)
    assert (node, cards) == ("n1", 4) and zone in ("node-0", "node-1")
    assert a.devices == (), "cards in zones have no device names: nothing to claim"
    assert a.to_json()["zones"] == {"n1": [zone]} and a.to_json()["straddling"] == 0


@pytest.mark.parametrize(
    ("topology", "split", "straddling", "score"),
    [
        pytest.param("preferred", (1, 4), 1, 4, id="preferred straddles two zones when the score needs it"),
        pytest.param("required", (2, 2), 0, 2, id="required keeps each instance in one zone and scores less"),
    ],
)
def test_required_preferred_and_none_on_zones(
    topology: str, split: tuple[int, int], straddling: int, score: int
) -> None:
    # one node, 3 + 3 free in two 4-card zones: 1x4 scores 4 but must straddle; 2x2 scores 2
    _, result = planned(
        {"face_1vn": {"P4": 4}}, [operator("face_1vn", "machine", topology)], {"n0": [(4, 3), (4, 3)]}
    )
    (a,) = result.allocations
    assert (a.instances, a.units, a.straddling) == (*split, straddling) and result.score == score
    assert result.optimal
    if straddling:
        assert _zone_cards(result) == [("n0", (("node-0", 3), ("node-1", 1)))] or _zone_cards(result) == [
            ("n0", (("node-0", 1), ("node-1", 3)))
        ]
        assert a.to_json()["zones"]["n0"] == ["node-0+node-1"]
    else:
        assert sorted(z for _, z in _zone_cards(result)) == [(("node-0", 2),), (("node-1", 2),)]


@pytest.mark.parametrize(
    ("cpu", "zoned"),
    [
        pytest.param(None, False, id="none everywhere plans as if there were no zones, as fast as before"),
        pytest.param("4", False, id="a fixed CPU request does not need the zones either"),
        pytest.param("numaShare", True, id="a share of the NUMA node's CPUs needs the zones"),
    ],
)
def test_zones_are_used_only_when_an_operator_cares(cpu: str | None, zoned: bool) -> None:
    op = operator("face_1vn", "machine", "none") | ({"cpuRequest": cpu} if cpu else {})
    _, result = planned({"face_1vn": {"P4": 4}}, [op], {"n0": [(4, 3), (4, 3)]})
    (a,) = result.allocations
    assert (a.instances, a.units) == (1, 4) and result.score == 4
    assert bool(a.zones) is zoned and a.straddling == int(zoned)
    assert result.problems[0].zoned == ({"n0"} if zoned else set())


def test_a_single_numa_node_kubelet_is_warned_about_a_straddling_instance() -> None:
    _spec, result = planned(
        {"face_1vn": {"P4": 4}}, [operator("face_1vn", "machine")], {"n0": [(4, 3), (4, 3)]},
        policy="single-numa-node",
    )  # fmt: skip
    assert result.allocations[0].straddling == 1
    assert any("straddles NUMA zones node-0+node-1" in w and "refuse" in w for w in result.warnings)


def test_resource_slices_come_before_zones() -> None:
    spec = parse_plan(plan_doc({"face_1vn": {"P4": 4}}, resources=[{"name": "P4"}]))
    nodes = node_list([("n0", "P4", 0), ("n1", "P4", 8)])
    snap = snapshot(
        nodes,
        slices_doc=slices({"n0": [4, 4]}),
        topology_doc=nrt_list(nrt("n0", [(8, 8)]), nrt("n1", [(4, 4), (4, 4)])),
    )
    (problem,) = build_problems(spec, snap)
    assert [d.name for d in problem.domains["n0"]] == ["pci0", "pci1"] and "n0" not in problem.zoned
    assert [d.name for d in problem.domains["n1"]] == ["node-0", "node-1"] and problem.zoned == {"n1"}


def test_nodes_without_a_topology_stay_one_domain() -> None:
    spec = parse_plan(plan_doc({"face_1vn": {"P4": 4}}, resources=[{"name": "P4"}]))
    snap = snapshot(
        node_list([("n0", "P4", 8), ("n1", "P4", 8)]), topology_doc=nrt_list(nrt("n1", [(4, 4), (4, 4)]))
    )
    (problem,) = build_problems(spec, snap)
    assert set(problem.domains) == {"n1"} and dict(problem.nodes) == {"n0": 8, "n1": 8}


def test_a_zone_disagreement_is_a_warning_in_json_and_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "plan": plan_doc({"security_pass": {"P4": 2}}, resources=[{"name": "P4"}]),
        "nodes": node_list([("n0", "P4", 8)]),
        "topology": nrt_list(nrt("n0", [(4, 1), (4, 1)])),  # 2 free, but no pod holds any card
    }
    for name, content in files.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(content))
    args = [
        "plan",
        str(tmp_path / "plan.yaml"),
        "--nodes",
        str(tmp_path / "nodes.yaml"),
        "--topology",
        str(tmp_path / "topology.yaml"),
    ]
    assert main([*args, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["warnings"] == [
        "n0: its NodeResourceTopology shows 2 nvidia.com/gpu free, fewer than the 8 its pods and plans leave: planned with 2"
    ]
    assert sorted(doc["allocations"][0]["zones"]["n0"]) == ["node-0", "node-1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "NUMA zone n0: node-0, node-1" in text and "warning: n0: its NodeResourceTopology shows 2" in text


def test_free_cards_are_left_in_whole_zones() -> None:
    _, result = planned(
        {"security_pass": {"P4": 2}},
        [operator("security_pass", "single")],
        {"n0": [(4, 4), (4, 4)], "n1": [(4, 4), (4, 4)]},
    )
    zones = {(n, z[0][0]) for n, z in _zone_cards(result)}
    assert len(zones) == 1 and result.optimal


def test_reading_a_topology_leaves_the_document_as_it_was() -> None:
    """Parsing does not mutate what it reads (the operator reuses its list for the next reconcile)."""
    doc = nrt_list(nrt("n0", [(4, 3), (4, 4)]))
    before = copy.deepcopy(doc)
    parse_topologies(doc)
    assert doc == before
