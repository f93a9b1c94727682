"""service.py with devices published one by one (DRA): claim templates, reservations, clean-up."""

from __future__ import annotations

from typing import Any

from gpuplan_operator.service import Options, PlanService

from tests.operator.builders import NOW, PLANS_NS, cluster, node, plan
from tests.operator.fake_kube import FakeKube
from tests.test_topology import DRIVER, slices

SLICES = "apis/resource.k8s.io/v1/resourceslices"
TEMPLATES = "apis/resource.k8s.io/v1/namespaces/ns/resourceclaimtemplates"
DEPLOYS = "apis/apps/v1/namespaces/ns/deployments"
RESOURCES = [{"name": "P4", "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": "P4"}}]


def dra_cluster(domains: dict[str, list[int]]) -> FakeKube:
    kube = cluster(*[node(n, cards=0) for n in domains])
    kube.serves_dra = True
    for item in slices(domains)["items"]:
        kube.put(SLICES, item)
    return kube


def service(kube: FakeKube) -> PlanService:
    return PlanService(kube, Options(plan_seconds=5, polish_seconds=0.2), lambda *_: None, clock=lambda: NOW)


def status(kube: FakeKube, name: str = "p") -> dict[str, Any]:
    obj = kube.get_obj(PLANS_NS, name)
    assert obj is not None
    return dict(obj.get("status") or {})


def test_every_instance_gets_a_claim_template_on_its_devices_and_a_rerun_writes_nothing() -> None:
    kube = dra_cluster({"n0": [4, 4], "n1": [4, 4]})
    kube.put(
        PLANS_NS,
        plan(requests={"face_1vn": {"P4": 8}, "security_pass": {"P4": 2}}, resources=RESOURCES, deploy=True),
    )
    svc = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied", out
    templates = kube.items(TEMPLATES)
    assert len(templates) == 1 + 2  # face_1vn 1x8, security_pass 2x1
    for t in templates:
        request = t["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert (
            request["deviceClassName"] == DRIVER and "index" in request["selectors"][0]["cel"]["expression"]
        )
        assert t["metadata"]["ownerReferences"][0]["uid"] == "uid-p"
    held = status(kube)["applied"]["devices"]
    assert sum(len(v) for v in held.values()) == 10
    deps = kube.items(DEPLOYS)
    assert all(d["spec"]["template"]["spec"]["resourceClaims"][0]["name"] == "gpus" for d in deps)
    assert all(
        "nvidia.com/gpu"
        not in (d["spec"]["template"]["spec"]["containers"][0]["resources"].get("limits") or {})
        for d in deps
    )
    before = len(kube.writes)
    svc.reconcile("ns", "p")
    assert kube.writes[before:] == []


def test_another_plans_devices_are_not_given_twice_and_deletion_removes_templates() -> None:
    kube = dra_cluster({"n0": [4, 4]})
    kube.put(PLANS_NS, plan("a", requests={"face_1vn": {"P4": 4}}, resources=RESOURCES))
    kube.put(PLANS_NS, plan("b", requests={"body_1vn": {"P4": 4}}, resources=RESOURCES))
    svc = service(kube)
    for name in "ab":
        out = svc.reconcile("ns", name)
        assert out is not None and out.phase == "Applied", out
    a, b = (set(status(kube, n)["applied"]["devices"]["n0"]) for n in "ab")
    assert len(a) == len(b) == 4 and not a & b
    obj = kube.get_obj(PLANS_NS, "a")
    assert obj is not None
    changes = svc.cleanup(obj)
    assert changes.claim_templates_deleted and all(
        t["metadata"]["labels"]["gpuplan.ragnaros.io/plan"] == "b" for t in kube.items(TEMPLATES)
    )


def test_a_node_losing_a_device_moves_that_instance_to_a_new_template() -> None:
    kube = dra_cluster({"n0": [4, 4], "n1": [4, 4]})
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 4}}, resources=RESOURCES))
    svc = service(kube)
    svc.reconcile("ns", "p")
    (first,) = kube.items(TEMPLATES)
    node_name = next(iter(status(kube)["applied"]["devices"]))
    kube.objects.pop((SLICES, f"{node_name}-{DRIVER}"))  # the driver withdrew that node's GPUs
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied" and out.moved
    (second,) = kube.items(TEMPLATES)
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert node_name not in status(kube)["applied"]["devices"]
