"""CPU for GPU pods (operators[].cpuRequest): sizing, rendering, warnings, and the CPU types' view."""

from __future__ import annotations

import re
from typing import Any

import pytest

from planner.base.errors import InvalidInput
from planner.model.result import PlanResult
from planner.output.render import render_desired, render_flamewakers
from planner.planning import plan
from planner.read.parse import parse_plan, snapshot
from tests.helpers import node_list, plan_doc
from tests.test_topology import slices
from tests.test_zones import nrt, nrt_list

P4_ONLY = [{"name": "P4"}]


def op(name: str, strategy: str, cpu: Any, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "keyStrategy": strategy,
        "services": {"key": name.replace("_", "-")},
        "cpuRequest": cpu,
        **extra,
    }


def cpus(result: PlanResult, spec: Any) -> dict[str, list[str | None]]:
    """Entry name -> its CPU request and limit (None when it asks for none)."""
    out = {}
    for f in render_flamewakers(spec, result):
        resources = f.entry["containerAttributes"]["resources"]
        out[f.entry["name"]] = [(resources.get("requests") or {}).get("cpu"), resources["limits"].get("cpu")]
    return out


def one_cpu(result: PlanResult, spec: Any) -> str | None:
    (value,) = {req for req, _ in cpus(result, spec).values()}
    return value


# (nodes' cpu, the node's detail, instance cards, machineNum) -> CPUs each pod requests
SHARES = [
    pytest.param(
        "32", {"topology": nrt_list(nrt("n0", [(4, 4), (4, 4)], cpu=15))}, 4, 1, "15",
        id="a whole zone's instance gets all the CPUs its NodeResourceTopology zone has",
    ),
    pytest.param(
        "32", {"topology": nrt_list(nrt("n0", [(4, 4), (4, 4)], cpu=15))}, 3, 1, "11",
        id="three of a zone's four cards get three quarters of its CPUs, rounded down",
    ),
    pytest.param(
        "32", {"topology": nrt_list(nrt("n0", [(4, 4), (4, 4)], cpu=15))}, 2, 2, "7",
        id="each of two instances in different zones gets half of its own zone's CPUs",
    ),
    pytest.param(
        "32", {"topology": nrt_list(nrt("n0", [(4, 4), (4, 4)], cpu=None))}, 3, 1, "12",
        id="a zone without cpu gets the node's CPUs in proportion to its cards",
    ),
    pytest.param("32", {}, 3, 1, "12", id="a node without zones is one domain: its CPUs by cards"),
    pytest.param(
        "32", {"slices": slices({"n0": [4, 4]})}, 4, 1, "16",
        id="a DRA domain gets the node's CPUs in proportion to its devices",
    ),
    pytest.param(
        "31500m", {}, 1, 1, "3", id="a fraction of a CPU is dropped: the static CPU manager wants whole ones",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("node_cpu", "detail", "cards", "machines", "expected"), SHARES)
def test_numa_share_is_the_share_of_the_domains_cpus(
    node_cpu: str, detail: dict[str, Any], cards: int, machines: int, expected: str
) -> None:
    doc = plan_doc(
        {"face_1vn": {"resourceNum": {"P4": cards * machines}, "machineNum": {"P4": machines}}},
        resources=P4_ONLY,
        operators=[op("face_1vn", "machine", "numaShare", topology="required")],
    )
    spec = parse_plan(doc)
    nodes = node_list([("n0", "P4", 0 if "slices" in detail else 8)])
    nodes["items"][0]["status"]["allocatable"]["cpu"] = node_cpu
    snap = snapshot(nodes, slices_doc=detail.get("slices"), topology_doc=detail.get("topology"))
    result = plan(spec, snap)
    assert result.feasible and not result.warnings
    for request, limit in cpus(result, spec).values():
        assert request == limit == expected, "requests equal limits: a Guaranteed pod can get whole CPUs"


def test_a_straddling_instance_gets_the_cpus_of_both_zones_by_its_cards() -> None:
    doc = plan_doc(
        {"face_1vn": {"P4": 4}}, resources=P4_ONLY, operators=[op("face_1vn", "machine", "numaShare")]
    )
    spec = parse_plan(doc)
    nodes = node_list([("n0", "P4", 8)])
    pods = {"kind": "List", "items": [
        {"kind": "Pod", "spec": {"nodeName": "n0", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}]},
         "status": {"phase": "Running"}},
    ]}  # fmt: skip
    # zones of 4 cards with 3 free each, 14 and 10 CPUs: 3 cards of one and 1 of the other
    topology = nrt_list(nrt("n0", [(4, 3), (4, 3)], cpu=14))
    topology["items"][0]["zones"][1]["resources"][1]["allocatable"] = "10"
    result = plan(spec, snapshot(nodes, pods, topology_doc=topology))
    (a,) = result.allocations
    assert a.straddling == 1
    ((_, (zones,)),) = a.zones
    expected = sum({"node-0": 14, "node-1": 10}[z] * c / 4 for z, c in zones)
    assert one_cpu(result, spec) == str(int(expected))


def test_a_detached_link_requests_the_share_of_its_own_card() -> None:
    link = op("face_image_flow", "service", "numaShare", linkStrategy="detach-4-1")
    link["services"]["link"] = ["face-surveillance-retrieval"]
    spec = parse_plan(plan_doc({"face_image_flow": {"P4": 4}}, resources=P4_ONLY, operators=[link]))
    result = plan(
        spec,
        snapshot(node_list([("n0", "P4", 8)]), topology_doc=nrt_list(nrt("n0", [(4, 4), (4, 4)], cpu=16))),
    )
    got = cpus(result, spec)
    assert sorted(v[0] for v in got.values() if v[0]) == ["12", "4"], got  # 3 cards and 1 of a 16-CPU zone


def test_a_fixed_request_is_the_same_for_every_pod_and_lands_in_the_deployment() -> None:
    doc = plan_doc(
        {"security_pass": {"P4": 3}},
        resources=P4_ONLY,
        operators=[op("security_pass", "single", "3500m")],
        deploy=True,
    )
    spec = parse_plan(doc)
    result = plan(spec, snapshot(node_list([("n0", "P4", 8)])))
    assert one_cpu(result, spec) == "3500m" and not result.warnings
    (deployment,) = render_desired(spec, result).deployments
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "3500m"} and resources["limits"]["cpu"] == "3500m"
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert dict(result.pod_cpu) == {"n0": 3 * 3500}


def test_the_templates_command_and_environment_land_in_the_deployment() -> None:
    run = {
        "command": ["python3", "-m", "loadtest"],
        "args": ["sample-server", "--host", "0.0.0.0"],
        "env": [{"name": "MODE", "value": "cpu"}],
        "ports": [{"containerPort": 8080}],
        "resources": {"limits": {"cpu": "100m"}},
        "securityContext": {"privileged": True},  # not one of the keys a Deployment takes over
    }
    ops = [op("security_pass", "single", None) | {"flamewaker": {"containerAttributes": run}}]
    spec = parse_plan(plan_doc({"security_pass": {"P4": 2}}, resources=P4_ONLY, operators=ops, deploy=True))
    (deployment,) = render_desired(spec, plan(spec, snapshot(node_list([("n0", "P4", 8)])))).deployments
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {k: container[k] for k in ("command", "args", "env", "ports")} == {
        k: run[k] for k in ("command", "args", "env", "ports")
    }
    assert "securityContext" not in container
    assert container["resources"]["limits"] == {"cpu": "100m", "nvidia.com/gpu": 1}


@pytest.mark.parametrize(
    ("policy", "amount", "warned"),
    [
        pytest.param("single-numa-node", "20", "n0's kubelet runs single-numa-node and refuses it", id="larger than the zone on a single-numa-node kubelet is refused"),
        pytest.param(None, "20", "a kubelet with topologyManagerPolicy single-numa-node refuses it", id="larger than the zone elsewhere would be refused by such a kubelet"),
        pytest.param("single-numa-node", "15", None, id="exactly the zone's CPUs is no warning"),
    ],
)  # fmt: skip
def test_a_fixed_request_larger_than_the_numa_node_is_warned(
    policy: str | None, amount: str, warned: str | None
) -> None:
    doc = plan_doc({"face_1vn": {"P4": 4}}, resources=P4_ONLY, operators=[op("face_1vn", "machine", amount)])
    spec = parse_plan(doc)
    topology = nrt_list(nrt("n0", [(4, 4), (4, 4)], cpu=15, policy=policy))
    result = plan(spec, snapshot(node_list([("n0", "P4", 8)]), topology_doc=topology))
    assert result.feasible
    if warned is None:
        assert result.warnings == ()
    else:
        (text,) = result.warnings
        assert re.match(
            r"face_1vn: cpuRequest 20 is more than the 15 CPUs of NUMA zone node-[01] on n0, ", text
        )
        assert warned in text


def test_a_share_below_one_cpu_requests_none_and_says_so() -> None:
    doc = plan_doc(
        {"security_pass": {"P4": 1}},
        resources=P4_ONLY,
        operators=[op("security_pass", "single", "numaShare")],
    )
    spec = parse_plan(doc)
    nodes = node_list([("n0", "P4", 8)])
    nodes["items"][0]["status"]["allocatable"]["cpu"] = "4"
    result = plan(spec, snapshot(nodes))
    assert cpus(result, spec) == {"test-security-pass-p4-n0": [None, None]}
    assert result.warnings == (
        "security_pass: numaShare of 1 card(s) on n0 is less than one whole CPU: its pods request no CPU",
    )


def test_gpu_pods_asking_more_cpu_than_is_free_are_warned() -> None:
    doc = plan_doc({"face_1vn": {"P4": 8}}, resources=P4_ONLY, operators=[op("face_1vn", "machine", "30")])
    spec = parse_plan(doc)
    pods = {"kind": "List", "items": [
        {"kind": "Pod", "spec": {"nodeName": "n0", "containers": [{"resources": {"requests": {"cpu": "8"}}}]},
         "status": {"phase": "Running"}},
    ]}  # fmt: skip
    result = plan(spec, snapshot(node_list([("n0", "P4", 8)]), pods))
    assert result.warnings == (
        "n0: the plan's GPU pods request 30 CPUs, only 24 are free there: some of them will stay Pending",
    )


# --- the CPU types see the CPU the GPU pods take ----------------------------------------------


def cpu_and_gpu(resources: list[dict[str, Any]] | None, requests: dict[str, Any]) -> tuple[Any, PlanResult]:
    """n0 (P4) and n1 (T4), 32 CPUs each, no node labelled CPU: CPU requests use every node."""
    doc = plan_doc(requests, operators=[op("face_1vn", "machine", "24")])
    if resources is not None:
        doc["spec"]["resources"] = resources
    spec = parse_plan(doc)
    return spec, plan(spec, snapshot(node_list([("n0", "P4", 8), ("n1", "T4", 8)])))


ALL: list[dict[str, Any]] = [
    {"name": "P4"},
    {"name": "T4"},
    {"name": "CPU", "kind": "CPU", "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": "P4"}},
]


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param(None, id="the default resources, CPU on every node"),
        pytest.param(
            [{"name": "CPU", "kind": "CPU"}, ALL[0], ALL[1]],
            id="a CPU type of every node listed before the GPU types sees the GPU pods too",
        ),
    ],
)
def test_a_cpu_request_does_not_count_on_cpu_a_gpu_pod_takes(resources: list[dict[str, Any]] | None) -> None:
    _spec, result = cpu_and_gpu(resources, {"face_1vn": {"P4": 8}, "body_1vn": {"CPU": 16}})
    assert result.feasible, result.reason
    where = {(a.operator, a.resource): dict(a.nodes) for a in result.allocations}
    assert where[("face_1vn", "P4")] == {"n0": 1}
    assert where[("body_1vn", "CPU")] == {"n1": 1}, "n0 has 32 - 24 = 8 CPUs left"
    order = [a.resource for a in result.allocations]
    assert order == (["P4", "CPU"] if resources is None else ["CPU", "P4"]), (
        "allocations keep the spec's order"
    )


def test_a_cpu_request_that_only_fits_without_the_gpu_pods_is_a_conflict_naming_them() -> None:
    _spec, result = cpu_and_gpu([ALL[0], ALL[2]], {"face_1vn": {"P4": 8}, "body_1vn": {"CPU": 16}})
    assert not result.feasible
    (c,) = result.conflicts
    assert c.resource == "CPU" and "the plan's GPU pods request 24 CPUs on n0" in c.detail
    assert {a.resource for a in result.partial} == {"P4"}


def test_without_cpu_requests_nothing_changes_for_cpu_types() -> None:
    doc = plan_doc({"face_1vn": {"P4": 8}, "body_1vn": {"CPU": 32}})
    spec = parse_plan(doc)
    result = plan(spec, snapshot(node_list([("n0", "P4", 8)])))
    assert result.feasible and result.pod_cpu == () and dict(result.allocations[1].nodes) == {"n0": 1}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(True, "must be numaShare or a CPU quantity", id="true is not an amount of CPU"),
        pytest.param([4], "must be numaShare or a CPU quantity", id="a list is not an amount of CPU"),
        pytest.param(0, "must be more than 0 CPUs", id="zero CPUs is refused"),
        pytest.param("0m", "must be more than 0 CPUs", id="zero millicores is refused"),
        pytest.param(-2, "must be numaShare or a CPU quantity", id="a negative number is refused"),
    ],
)
def test_a_bad_cpu_request_names_the_operator(value: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_plan(plan_doc({}, operators=[{"name": "face_1vn", "cpuRequest": value}]))
    assert e.value.field == "operators[0].cpuRequest" and message in e.value.message


def test_a_builtin_operator_keeps_its_catalog_values_with_a_cpu_request() -> None:
    spec = parse_plan(plan_doc({}, operators=[{"name": "face_1vn", "cpuRequest": 4}]))
    face = spec.operator("face_1vn")
    assert face.key_strategy.value == "machine" and face.cpu_request is not None
    assert face.cpu_request.millicores == 4000


def test_with_dra_each_detached_link_pod_claims_a_card_of_its_own() -> None:
    """Two detached links of an 8-card instance: two entries of one pod and one device each (one
    entry of two pods sharing a two-device claim would leave the second pod waiting forever)."""
    link = {
        "name": "face_image_flow",
        "keyStrategy": "machine",
        "linkStrategy": "detach-4-2",
        "services": {"key": "face-image-flow", "link": ["face-surveillance-retrieval"]},
    }
    spec = parse_plan(plan_doc({"face_image_flow": {"P4": 8}}, resources=P4_ONLY, operators=[link]))
    result = plan(spec, snapshot(node_list([("n0", "P4", 8)]), slices_doc=slices({"n0": [4, 4]})))
    entries = render_flamewakers(spec, result)
    links = [f for f in entries if "link" in f.entry["name"]]
    assert len(links) == 2 and len({f.entry["name"] for f in links}) == 2, [f.entry["name"] for f in links]
    assert all(f.entry["instanceNumber"] == 1 and len(f.entry["devices"]) == 1 for f in links)
    (key,) = [f for f in entries if f not in links]
    claimed = [d for f in entries for d in f.entry["devices"]]
    assert len(key.entry["devices"]) == 6 and sorted(claimed) == sorted(set(claimed)) and len(claimed) == 8


@pytest.mark.parametrize(
    ("zones_a", "zones_b", "cpu_a", "cpu_b"),
    [
        pytest.param([(4, 4), (4, 0)], [(4, 0), (4, 4)], 15, 15, id="the same instance in the other zone"),
        pytest.param([(4, 4), (4, 4)], [(4, 4), (4, 4)], 15, None, id="the same zone, other CPUs"),
    ],
)
def test_a_render_like_the_last_one_renders_again_what_moved_zone_or_cpus(
    zones_a: list[tuple[int, int]], zones_b: list[tuple[int, int]], cpu_a: int | None, cpu_b: int | None
) -> None:
    """An instance on the same node that counted on another NUMA zone, or gets other CPUs, is a
    new entry: a render given the last one (same spec) renders it as a fresh render does."""
    doc = plan_doc(
        {"face_1vn": {"resourceNum": {"P4": 3}, "machineNum": {"P4": 1}}},
        resources=P4_ONLY,
        operators=[op("face_1vn", "machine", "numaShare", topology="required")],
    )
    spec = parse_plan(doc)
    nodes = node_list([("n0", "P4", 8)])
    a = plan(spec, snapshot(nodes, topology_doc=nrt_list(nrt("n0", zones_a, cpu=cpu_a))))
    b = plan(spec, snapshot(nodes, topology_doc=nrt_list(nrt("n0", zones_b, cpu=cpu_b))))
    first, fresh = render_desired(spec, a), render_desired(spec, b)
    assert first.configmaps != fresh.configmaps  # the two differ, in zone or CPUs
    assert render_desired(spec, b, like=first) == fresh
