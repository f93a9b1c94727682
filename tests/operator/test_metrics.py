"""metrics.py through the service: a reconcile against the in-memory API server, then the samples."""

from __future__ import annotations

from typing import Any

import pytest
from gpuplan_operator.metrics import Metrics, Trigger
from gpuplan_operator.service import Options, PlanService
from gpuplan_operator.status import Phase
from prometheus_client import REGISTRY, generate_latest

from tests.operator.builders import NODES, NOW, PLANS_NS, cluster, node, plan
from tests.operator.fake_kube import FakeKube

FACE4 = {"face_feature_extract": {"P4": 4}}
KINDS = ("Node", "PriorityClass", "ConfigMap", "Deployment", "GpuAllocationPlan/status")


def service(kube: FakeKube) -> tuple[PlanService, Metrics]:
    metrics = Metrics()
    svc = PlanService(
        kube,
        Options(plan_seconds=5, polish_seconds=0.2),
        lambda *_: None,
        clock=lambda: NOW,
        metrics=metrics,
    )
    return svc, metrics


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def phases(metrics: Metrics) -> dict[str, float | None]:
    return {p.value: value(metrics, "gpuplan_plans", phase=p.value) for p in Phase}


def writes(metrics: Metrics) -> dict[str, float | None]:
    return {k: value(metrics, "gpuplan_writes_total", kind=k) for k in KINDS}


def cards(metrics: Metrics, name: str = "p") -> tuple[float | None, float | None]:
    return (
        value(metrics, "gpuplan_cards_placed", namespace="ns", plan=name),
        value(metrics, "gpuplan_cards_requested", namespace="ns", plan=name),
    )


def p4_cluster(n: int = 4) -> FakeKube:
    return cluster(*[node(f"p4-{i}") for i in range(n)])


def test_every_series_without_a_plan_starts_at_zero_on_its_own_registry() -> None:
    metrics = Metrics()
    assert set(phases(metrics).values()) == {0.0}
    assert set(writes(metrics).values()) == {0.0}
    for reason in Trigger:
        assert value(metrics, "gpuplan_replans_total", reason=reason.value) == 0.0
    assert value(metrics, "gpuplan_plan_duration_seconds_count") == 0.0
    assert REGISTRY.get_sample_value("gpuplan_plans", {"phase": "Applied"}) is None, "not the global one"
    assert Metrics().registry is not metrics.registry


def test_a_new_plan_is_counted_timed_and_its_writes_recorded() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, metrics = service(kube)
    out = svc.reconcile("ns", "p", Trigger.CREATED)
    assert out is not None and out.phase == "Applied"

    assert value(metrics, "gpuplan_replans_total", reason="created") == 1.0
    assert value(metrics, "gpuplan_replans_total", reason="nodes_changed") == 0.0
    assert value(metrics, "gpuplan_plan_duration_seconds_count") == 1.0
    assert value(metrics, "gpuplan_planner_seconds_count") == 1.0
    total = value(metrics, "gpuplan_plan_duration_seconds_sum")
    planner = value(metrics, "gpuplan_planner_seconds_sum")
    assert total is not None and planner is not None and 0 < planner <= total
    # one P4 type, answered by the fast path: one observation of 0 branches
    assert value(metrics, "gpuplan_planner_branches_count", method="fast-path") == 1.0
    assert value(metrics, "gpuplan_planner_branches_sum", method="fast-path") == 0.0

    assert phases(metrics) == {"Planning": 0, "Applied": 1, "Infeasible": 0, "Invalid": 0, "Error": 0}
    assert cards(metrics) == (4.0, 4.0)
    # 4 node labels, 1 PriorityClass, the ConfigMap, 4 Deployments, status Planning then Applied
    assert writes(metrics) == {
        "Node": 4,
        "PriorityClass": 1,
        "ConfigMap": 1,
        "Deployment": 4,
        "GpuAllocationPlan/status": 2,
    }
    assert sum(v or 0 for v in writes(metrics).values()) == len(kube.writes), "every write, once"


def test_a_no_op_reconcile_writes_nothing_and_says_so() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, metrics = service(kube)
    svc.reconcile("ns", "p", Trigger.CREATED)
    before = writes(metrics)
    for trigger in (Trigger.NODES_CHANGED, Trigger.PLANS_CHANGED, Trigger.RESUMED):
        svc.reconcile("ns", "p", trigger)
    assert writes(metrics) == before
    for reason in ("nodes_changed", "plans_changed", "resumed"):
        assert value(metrics, "gpuplan_replans_total", reason=reason) == 1.0
    assert value(metrics, "gpuplan_plan_duration_seconds_count") == 4.0
    assert phases(metrics)["Applied"] == 1 and cards(metrics) == (4.0, 4.0)


def test_a_plan_changing_phase_moves_between_labels() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, metrics = service(kube)
    svc.reconcile("ns", "p", Trigger.CREATED)
    obj = kube.get_obj(PLANS_NS, "p")
    assert obj is not None
    obj["spec"]["requests"] = {"face_1vn": {"P4": 64}}
    obj["metadata"]["generation"] = 2
    out = svc.reconcile("ns", "p", Trigger.SPEC_CHANGED)
    assert out is not None and out.phase == "Infeasible"
    assert phases(metrics) == {"Planning": 0, "Applied": 0, "Infeasible": 1, "Invalid": 0, "Error": 0}
    assert cards(metrics) == (4.0, 4.0), "the previous placement stays, and so do its cards"
    assert value(metrics, "gpuplan_replans_total", reason="spec_changed") == 1.0


def test_plans_are_counted_per_phase_and_a_deleted_plan_disappears() -> None:
    kube = p4_cluster(2)
    kube.put(PLANS_NS, plan("a", requests={"face_1vn": {"P4": 8}}))
    kube.put(PLANS_NS, plan("b", requests={"body_1vn": {"P4": 8}}))
    kube.put(PLANS_NS, plan("c", requests={"vehicle_1vn": {"P4": 1}}))
    kube.put(PLANS_NS, plan("d", requests={"no_such_operator": {"P4": 1}}))
    svc, metrics = service(kube)
    for name in "abcd":
        svc.reconcile("ns", name, Trigger.CREATED)
    assert phases(metrics) == {"Planning": 0, "Applied": 2, "Infeasible": 1, "Invalid": 1, "Error": 0}
    assert cards(metrics, "a") == (8.0, 8.0) and cards(metrics, "d") == (None, None)

    a = kube.get_obj(PLANS_NS, "a")
    assert a is not None
    before = writes(metrics)
    svc.cleanup(a)
    kube.objects.pop((PLANS_NS, "a"))
    assert phases(metrics)["Applied"] == 1
    assert cards(metrics, "a") == (None, None), "a deleted plan's series are removed"
    after = writes(metrics)
    assert after["Node"] == (before["Node"] or 0) + 1 and after["ConfigMap"] == (before["ConfigMap"] or 0) + 1

    svc.reconcile("ns", "c", Trigger.PLANS_CHANGED)  # a's cards are free now
    assert phases(metrics) == {"Planning": 0, "Applied": 2, "Infeasible": 0, "Invalid": 1, "Error": 0}

    kube.objects.pop((PLANS_NS, "d"))  # gone without a clean-up (no finalizer): the next look forgets it
    assert svc.reconcile("ns", "d", Trigger.RETRY) is None
    assert phases(metrics)["Invalid"] == 0
    assert value(metrics, "gpuplan_replans_total", reason="retry") == 0.0, "a missing plan is not planned"


@pytest.mark.parametrize(("fail_on", "kind"), [("deployments", "Deployment"), ("nodes/p4-1", "Node")])
def test_apply_errors_are_counted_by_the_kind_that_failed(fail_on: str, kind: str) -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, metrics = service(kube)
    kube.fail_on = fail_on
    out = svc.reconcile("ns", "p", Trigger.CREATED)
    assert out is not None and out.phase == "Error"
    errors = {k: value(metrics, "gpuplan_apply_errors_total", kind=k) for k in KINDS[:4]}
    assert errors == {k: (1.0 if k == kind else 0.0) for k in KINDS[:4]}
    assert phases(metrics)["Error"] == 1
    kube.fail_on = None
    assert svc.reconcile("ns", "p", Trigger.RETRY).phase == "Applied"  # type: ignore[union-attr]
    assert phases(metrics)["Error"] == 0 and phases(metrics)["Applied"] == 1
    assert value(metrics, "gpuplan_apply_errors_total", kind=kind) == 1.0


def test_a_conflict_with_another_owner_is_an_apply_error_of_that_kind() -> None:
    kube = p4_cluster(1)
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 8}}, deploy=True))
    theirs = {"uid": "x", "kind": "GpuAllocationPlan", "name": "x", "controller": True}
    kube.put(
        "apis/apps/v1/namespaces/ns/deployments",
        {"metadata": {"name": "p-face-1vn-retrieval-p4-p4-0", "ownerReferences": [theirs]}},
    )
    svc, metrics = service(kube)
    out = svc.reconcile("ns", "p", Trigger.CREATED)
    assert out is not None and out.phase == "Error"
    assert value(metrics, "gpuplan_apply_errors_total", kind="Deployment") == 1.0


def test_the_exposition_lists_every_metric() -> None:
    kube = cluster(node("p4-0"))
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 8}}))
    svc, metrics = service(kube)
    svc.reconcile("ns", "p", Trigger.CREATED)
    text = generate_latest(metrics.registry).decode()
    for line in (
        'gpuplan_plans{phase="Applied"} 1.0',
        'gpuplan_cards_placed{namespace="ns",plan="p"} 8.0',
        'gpuplan_cards_requested{namespace="ns",plan="p"} 8.0',
        'gpuplan_replans_total{reason="created"} 1.0',
        'gpuplan_writes_total{kind="Node"} 1.0',
        'gpuplan_apply_errors_total{kind="Node"} 0.0',
        "gpuplan_plan_duration_seconds_count 1.0",
        "gpuplan_planner_seconds_count 1.0",
        'gpuplan_planner_branches_count{method="fast-path"} 1.0',
    ):
        assert line in text.splitlines(), line


def test_a_node_change_that_moves_nothing_is_a_replan_without_writes() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, metrics = service(kube)
    svc.reconcile("ns", "p", Trigger.CREATED)
    before = writes(metrics)
    n: Any = kube.get_obj(NODES, "p4-0")
    n["metadata"]["labels"]["team"] = "vision"  # a label the plan does not select on
    svc.reconcile("ns", "p", Trigger.NODES_CHANGED)
    assert writes(metrics) == before
    assert value(metrics, "gpuplan_replans_total", reason="nodes_changed") == 1.0
