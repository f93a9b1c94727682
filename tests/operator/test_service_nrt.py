"""service.py with NUMA zones from NodeResourceTopology (no DRA): zones in status, CPU sizing, reservations."""

from __future__ import annotations

from typing import Any

from gpuplan_operator.service import Options, PlanService

from tests.operator.builders import NOW, PLANS_NS, cluster, node, plan, pod
from tests.operator.fake_kube import FakeKube
from tests.test_zones import nrt

NRTS = "apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
TEMPLATES = "apis/resource.k8s.io/v1/namespaces/ns/resourceclaimtemplates"
DEPLOYS = "apis/apps/v1/namespaces/ns/deployments"
RESOURCES = [{"name": "P4", "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": "P4"}}]
MANAGED = {"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": "p"}


def numa_cluster(zones: dict[str, list[tuple[int, int]]], cpu: int = 16) -> FakeKube:
    kube = cluster(*[node(n, cards=sum(g for g, _ in zs)) for n, zs in zones.items()])
    kube.serves_nrt = True
    kube.serves_dra = True  # served, but no driver publishes slices: the zones are what counts
    for n, zs in zones.items():
        kube.put(NRTS, nrt(n, zs, cpu=cpu))
    return kube


def service(kube: FakeKube) -> PlanService:
    return PlanService(kube, Options(plan_seconds=5, polish_seconds=0.2), lambda *_: None, clock=lambda: NOW)


def status(kube: FakeKube, name: str = "p") -> dict[str, Any]:
    obj = kube.get_obj(PLANS_NS, name)
    assert obj is not None
    return dict(obj.get("status") or {})


def numa_op(name: str, cpu: str = "numaShare") -> dict[str, Any]:
    return {"name": name, "topology": "required", "cpuRequest": cpu}


def test_zones_are_recorded_cpu_is_sized_and_no_claim_is_written() -> None:
    # n0: a foreign pod holds one card of node-0; n1 is free: the 1x4 instance fits one zone of n1
    kube = numa_cluster({"n0": [(4, 3), (4, 4)], "n1": [(4, 4), (4, 4)]})
    kube.put("api/v1/namespaces/other/pods", pod("foreign", "n0", 1))
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 4}}, resources=RESOURCES, deploy=True,
                            operators=[numa_op("face_1vn")]))  # fmt: skip
    svc = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied", out
    st = status(kube)
    (alloc,) = st["allocations"]
    assert alloc["nodes"] == {"n1": 1} and alloc["straddling"] == 0
    ((zone,),) = alloc["zones"].values()
    assert zone in ("node-0", "node-1") and st["applied"]["zones"] == {"n1": {zone: {"nvidia.com/gpu": 4}}}
    assert st["applied"]["units"] == {"n1": {"cpu": 16, "nvidia.com/gpu": 4}}, "its pods' CPU is held too"
    assert "devices" not in st["applied"] and kube.items(TEMPLATES) == []
    (dep,) = kube.items(DEPLOYS)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "16"}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4, "cpu": "16"}
    before = len(kube.writes)
    svc.reconcile("ns", "p")
    assert kube.writes[before:] == []


def test_its_own_running_pods_in_a_zone_do_not_move_it() -> None:
    kube = numa_cluster({"n0": [(4, 4), (4, 4)]})
    kube.put(
        PLANS_NS, plan(requests={"face_1vn": {"P4": 4}}, resources=RESOURCES, operators=[numa_op("face_1vn")])
    )
    svc = service(kube)
    svc.reconcile("ns", "p")
    zone = next(iter(status(kube)["applied"]["zones"]["n0"]))
    # its pod runs: the topology updater now shows the zone full, and the pod is the plan's own
    own = pod("p-0", "n0", 4, labels=MANAGED)
    own["metadata"]["namespace"] = "ns"
    kube.put("api/v1/namespaces/ns/pods", own)
    index = int(zone.split("-")[1])
    zones = [(4, 4), (4, 4)]
    zones[index] = (4, 0)
    kube.put(NRTS, nrt("n0", zones))
    before = len(kube.writes)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied" and not out.moved
    assert kube.writes[before:] == [] and status(kube)["allocations"][0]["zones"] == {"n0": [zone]}


def test_another_plans_zone_is_not_counted_on_before_its_pods_run() -> None:
    kube = numa_cluster({"n0": [(4, 4), (4, 4)]})
    kube.put(
        PLANS_NS,
        plan("a", requests={"face_1vn": {"P4": 4}}, resources=RESOURCES, operators=[numa_op("face_1vn")]),
    )
    kube.put(
        PLANS_NS,
        plan("b", requests={"body_1vn": {"P4": 4}}, resources=RESOURCES, operators=[numa_op("body_1vn")]),
    )
    svc = service(kube)
    for name in "ab":
        out = svc.reconcile("ns", name)
        assert out is not None and out.phase == "Applied", out
    a, b = (set(status(kube, n)["applied"]["zones"]["n0"]) for n in "ab")
    assert len(a) == len(b) == 1 and not a & b, (a, b)
    assert not status(kube, "b").get("warnings")


def test_without_the_crd_the_plan_is_what_it_was() -> None:
    kube = cluster(node("n0"), node("n1"))
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 4}}, resources=RESOURCES))
    out = service(kube).reconcile("ns", "p")
    assert out is not None and out.phase == "Applied"
    st = status(kube)
    assert "zones" not in st["allocations"][0] and "zones" not in st["applied"] and "warnings" not in st


def test_a_malformed_topology_is_one_message_naming_the_field() -> None:
    kube = numa_cluster({"n0": [(4, 4), (4, 4)]})
    broken = nrt("n0", [(4, 4), (4, 4)])
    broken["zones"][1]["resources"][0]["available"] = "lots"
    kube.put(NRTS, broken)
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 4}}, resources=RESOURCES))
    out = service(kube).reconcile("ns", "p")
    assert out is not None and out.phase == "Infeasible"
    assert status(kube)["message"] == (
        "no deployable plan: cluster snapshot: topology.items[0].zones[1].resources[0].available: "
        "not a quantity: 'lots'"
    )


def test_a_cpu_request_larger_than_the_zone_is_a_warning_in_status() -> None:
    kube = numa_cluster({"n0": [(4, 4), (4, 4)]}, cpu=12)
    kube.put(
        PLANS_NS,
        plan(requests={"face_1vn": {"P4": 4}}, resources=RESOURCES, operators=[numa_op("face_1vn", "20")]),
    )
    out = service(kube).reconcile("ns", "p")
    assert out is not None and out.phase == "Applied"
    (warning,) = status(kube)["warnings"]
    assert warning.startswith("face_1vn: cpuRequest 20 is more than the 12 CPUs of NUMA zone node-")
