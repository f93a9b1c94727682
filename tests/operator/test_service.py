"""service.py against an in-memory API server: what gets written, and what never does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from gpuplan_operator.body import PlanBody
from gpuplan_operator.service import Options, PlanService

from tests.operator.builders import NODES, NOW, PLANS_NS, cluster, node, plan
from tests.operator.fake_kube import FakeKube

KEY = "gpuplan.ragnaros.io/ns.p"
CMS = "api/v1/namespaces/ns/configmaps"
DEPLOYS = "apis/apps/v1/namespaces/ns/deployments"
PCS = "apis/scheduling.k8s.io/v1/priorityclasses"
FACE4 = {"face_feature_extract": {"P4": 4}}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, plan: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


def service(kube: FakeKube) -> tuple[PlanService, Recorder]:
    rec = Recorder()
    return PlanService(kube, Options(plan_seconds=5, polish_seconds=0.2), rec, clock=lambda: NOW), rec


def p4_cluster(n: int = 4) -> FakeKube:
    return cluster(*[node(f"p4-{i}") for i in range(n)])


def status(kube: FakeKube, name: str = "p") -> dict[str, Any]:
    obj = kube.get_obj(PLANS_NS, name)
    assert obj is not None
    return dict(obj.get("status") or {})


def labelled(kube: FakeKube, key: str = KEY) -> dict[str, str]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"][key]
        for n in kube.items(NODES)
        if key in n["metadata"]["labels"]
    }


def test_a_new_plan_is_applied_with_owned_outputs() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, rec = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied" and out.moved
    s = status(kube)
    assert s["phase"] == "Applied" and s["cards"] == "4/4"
    assert labelled(kube) == {f"p4-{i}": f"p4-{i}" for i in range(4)}
    assert s["applied"]["units"] == {f"p4-{i}": {"nvidia.com/gpu": 1} for i in range(4)}
    assert [pc["metadata"]["name"] for pc in kube.items(PCS)] == ["ragnaros-cluster-critical-1"]
    cm = kube.get_obj(CMS, "p-flamewakers")
    assert cm is not None and cm["metadata"]["ownerReferences"][0]["uid"] == "uid-p"
    deps = kube.items(DEPLOYS)
    assert len(deps) == 4 and all(
        d["metadata"]["ownerReferences"][0]["kind"] == "GpuAllocationPlan" for d in deps
    )
    assert ("Normal", "Planned") in {(t, r) for t, r, _ in rec.events}


def test_a_rerun_on_an_unchanged_plan_writes_nothing() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, rec = service(kube)
    svc.reconcile("ns", "p")
    before, events = len(kube.writes), len(rec.events)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied" and not out.moved
    assert kube.writes[before:] == []
    assert rec.events[events:] == []


def test_an_invalid_spec_writes_only_status_and_only_once() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests={"no_such_operator": {"P4": 1}}))
    svc, rec = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Invalid"
    assert "requests.no_such_operator" in out.message
    assert all(path.endswith("/status") for _, path in kube.writes)
    assert status(kube)["phase"] == "Invalid"
    assert rec.events[-1][:2] == ("Warning", "Invalid")
    before = len(kube.writes)
    svc.reconcile("ns", "p")
    assert kube.writes[before:] == []


def test_infeasible_leaves_the_previous_applied_state_alone() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    applied = status(kube)
    cm_rv = kube.get_obj(CMS, "p-flamewakers")["metadata"]["resourceVersion"]  # type: ignore[index]
    kube.get_obj(PLANS_NS, "p")["spec"]["requests"] = {"face_1vn": {"P4": 64}}  # type: ignore[index]
    kube.get_obj(PLANS_NS, "p")["metadata"]["generation"] = 2  # type: ignore[index]
    before = len(kube.writes)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Infeasible"
    assert all(path.endswith("/status") for _, path in kube.writes[before:])
    s = status(kube)
    assert s["allocations"] == applied["allocations"] and s["applied"] == applied["applied"]
    assert "64 P4 cards" in s["message"] and s["observedGeneration"] == 2
    assert labelled(kube) == {f"p4-{i}": f"p4-{i}" for i in range(4)}
    assert kube.get_obj(CMS, "p-flamewakers")["metadata"]["resourceVersion"] == cm_rv  # type: ignore[index]


def test_two_plans_never_book_the_same_card() -> None:
    kube = p4_cluster(2)
    kube.put(PLANS_NS, plan("a", requests={"face_1vn": {"P4": 8}}))
    kube.put(PLANS_NS, plan("b", requests={"body_1vn": {"P4": 8}}))
    kube.put(PLANS_NS, plan("c", requests={"vehicle_1vn": {"P4": 1}}))
    svc, _ = service(kube)
    for name in "abc":
        svc.reconcile("ns", name)
    a, b, c = (status(kube, n) for n in "abc")
    assert a["phase"] == b["phase"] == "Applied"
    assert set(a["applied"]["units"]) != set(b["applied"]["units"])
    assert c["phase"] == "Infeasible"
    svc.cleanup(kube.get_obj(PLANS_NS, "a"))  # type: ignore[arg-type]
    kube.objects.pop((PLANS_NS, "a"))
    assert svc.reconcile("ns", "c").phase == "Applied"  # type: ignore[union-attr]


def test_a_cordoned_node_is_left_and_its_label_and_deployment_removed() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    kube.get_obj(NODES, "p4-3")["spec"]["unschedulable"] = True  # type: ignore[index]
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied" and out.moved
    assert "p4-3" not in labelled(kube)
    assert not any(d["metadata"]["name"].endswith("p4-3") for d in kube.items(DEPLOYS))
    assert "p4-3" not in status(kube)["applied"]["units"]


def test_a_re_plan_renders_only_what_moved_and_a_changed_spec_everything() -> None:
    """After a cordon, the Deployments the re-plan did not move are the objects the last render
    made (not rendered again); once the spec changes (a new generation), nothing is taken from
    the last render: every Deployment carries the new image."""
    kube = p4_cluster(6)  # four instances on four of six nodes: a cordon moves one
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    first = {d["metadata"]["name"]: d for d in svc._rendered["uid-p"][1].deployments}
    off = sorted(first)[0].rsplit("-p4-", 1)[1]
    kube.get_obj(NODES, f"p4-{off}")["spec"]["unschedulable"] = True  # type: ignore[index]
    out = svc.reconcile("ns", "p")
    assert out is not None and out.moved
    again = svc._rendered["uid-p"][1].deployments
    kept = [d["metadata"]["name"] for d in again if first.get(d["metadata"]["name"]) is d]
    assert sorted(kept) == sorted(first)[1:] and len(again) == 4
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True, image="registry.local/other:2", generation=2))
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied"
    images = {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in kube.items(DEPLOYS)}
    assert images == {"registry.local/other:2"}


def test_deleting_removes_everything_but_classes_others_use() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan("p", requests=FACE4, deploy=True))
    kube.put(PLANS_NS, plan("q", requests={"face_1vn": {"P4": 4}}))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    svc.reconcile("ns", "q")
    other_labels = labelled(kube, "gpuplan.ragnaros.io/ns.q")
    p_pcs = set(status(kube, "p")["applied"]["priorityClasses"])
    q_pcs = set(status(kube, "q")["applied"]["priorityClasses"])
    changes = svc.cleanup(kube.get_obj(PLANS_NS, "p"))  # type: ignore[arg-type]
    assert changes.unlabelled and changes.deployments_deleted and changes.configmap_deleted
    assert labelled(kube) == {}
    assert labelled(kube, "gpuplan.ragnaros.io/ns.q") == other_labels
    assert kube.get_obj(CMS, "p-flamewakers") is None and kube.items(DEPLOYS) == []
    assert {pc["metadata"]["name"] for pc in kube.items(PCS)} == q_pcs
    assert p_pcs - q_pcs, "the test needs a class only p used"


def test_plans_deleted_together_leave_no_priority_class() -> None:
    """``kubectl delete gpuplans --all``: every plan is being deleted when the first clean-up runs."""
    kube = p4_cluster()
    for name in "abc":
        kube.put(PLANS_NS, plan(name, requests={"face_1vn": {"P4": 1}}))
    svc, _ = service(kube)
    for name in "abc":
        assert svc.reconcile("ns", name).phase == "Applied"  # type: ignore[union-attr]
    assert [pc["metadata"]["name"] for pc in kube.items(PCS)] == ["ragnaros-cluster-critical-1"]
    for name in "abc":
        kube.get_obj(PLANS_NS, name)["metadata"]["deletionTimestamp"] = NOW  # type: ignore[index]
    for name in "abc":  # each clean-up runs while the others still exist (their finalizers)
        svc.cleanup(kube.get_obj(PLANS_NS, name))  # type: ignore[arg-type]
    assert kube.items(PCS) == []
    assert all(not labelled(kube, f"gpuplan.ragnaros.io/ns.{n}") for n in "abc")


def test_detached_link_services_get_their_own_priority_classes() -> None:
    kube = p4_cluster()
    kube.put(
        PLANS_NS, plan(requests={"face_image_flow": {"resourceNum": {"P4": 8}, "machineNum": {"P4": 2}}})
    )
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    names = {pc["metadata"]["name"] for pc in kube.items(PCS)}
    assert {"ragnaros-cluster-critical-3", "ragnaros-cluster-critical-1"} <= names


def test_dry_run_writes_only_status() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True, dryRun=True))
    svc, _ = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Planning"
    assert all(path.endswith("/status") for _, path in kube.writes)
    assert status(kube)["allocations"] and labelled(kube) == {}


@pytest.mark.parametrize("fail_on", ["deployments", "nodes/p4-1"])
def test_apply_errors_become_phase_error_and_the_next_run_converges(fail_on: str) -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, rec = service(kube)
    kube.fail_on = fail_on
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Error" and "500" in out.message
    assert status(kube)["phase"] == "Error" and rec.events[-1][:2] == ("Warning", "ApplyFailed")
    kube.fail_on = None
    assert svc.reconcile("ns", "p").phase == "Applied"  # type: ignore[union-attr]
    assert len(kube.items(DEPLOYS)) == 4 and len(labelled(kube)) == 4


def test_a_deployment_owned_by_someone_else_is_not_taken_over() -> None:
    kube = p4_cluster(1)
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 8}}, deploy=True))
    theirs = {"uid": "x", "kind": "GpuAllocationPlan", "name": "x", "controller": True}
    kube.put(DEPLOYS, {"metadata": {"name": "p-face-1vn-retrieval-p4-p4-0", "ownerReferences": [theirs]}})
    svc, _ = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Error" and "belongs to GpuAllocationPlan/x" in out.message


def scheduled_pods(kube: FakeKube, count: int) -> None:
    """The first ``count`` of the plan's Deployments get their pod, on its planned node."""
    for i, dep in enumerate(kube.items(DEPLOYS)[:count]):
        template = dep["spec"]["template"]
        pod = {"metadata": {"name": f"pod-{i}", "labels": template["metadata"]["labels"]}}
        pod["spec"] = {**template["spec"], "nodeName": template["spec"]["nodeSelector"][KEY]}
        kube.put("api/v1/namespaces/ns/pods", pod)


def ready_condition(kube: FakeKube) -> dict[str, Any]:
    conditions: dict[str, dict[str, Any]] = {c["type"]: c for c in status(kube)["conditions"]}
    return conditions["Ready"]


def test_readiness_is_refreshed_when_pods_get_scheduled() -> None:
    kube = p4_cluster(1)
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 8}}, deploy=True))
    svc, _ = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and not out.ready
    scheduled_pods(kube, 1)
    again = svc.refresh_readiness("ns", "p")
    assert again is not None and again.ready
    ready = {c["type"]: c for c in status(kube)["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["message"].startswith("1/1")


def test_a_readiness_check_raced_by_a_write_to_the_plan_leaves_the_condition_to_the_next_check() -> None:
    """Its reads run outside the lock: when the plan was written meanwhile (a reconcile), what it
    read may be half of that reconcile's work, so it writes nothing and says not ready."""
    kube = p4_cluster(1)
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 8}}, deploy=True))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    scheduled_pods(kube, 1)
    real = kube.request

    def racing(method: str, path: str, **kw: Any) -> Any:
        if method == "GET" and path.endswith("/namespaces/ns/pods"):  # a reconcile writes meanwhile
            obj = kube.get_obj(PLANS_NS, "p")
            assert obj is not None
            obj["metadata"]["resourceVersion"] += "0"
        return real(method, path, **kw)

    kube.request = racing  # type: ignore[method-assign]
    raced = svc.refresh_readiness("ns", "p")
    assert raced is not None and not raced.ready
    assert {c["type"]: c for c in status(kube)["conditions"]}["Ready"]["status"] == "False"
    kube.request = real  # type: ignore[method-assign]
    again = svc.refresh_readiness("ns", "p")
    assert again is not None and again.ready
    assert {c["type"]: c for c in status(kube)["conditions"]}["Ready"]["status"] == "True"


@pytest.mark.parametrize("costly", [True, False])
def test_progress_of_a_costly_plan_is_spaced_and_a_change_of_ready_is_written_at_once(costly: bool) -> None:
    """A status write of a plan of a thousand requests costs the API server half a CPU second:
    a Ready message that only counts pods waits for a spacing that follows the plan's last status
    write; Ready turning True does not wait. A cheap plan's progress is written at once."""
    kube = p4_cluster(4)
    kube.put(PLANS_NS, plan(requests={"face_feature_extract": {"P4": 16}}, deploy=True, gang="none"))
    spacing = 1e9 if costly else 0.0  # times the last write's seconds (at most progress_max)
    options = Options(plan_seconds=5, polish_seconds=0.2, progress_spacing=spacing, progress_max=600)
    svc = PlanService(kube, options, Recorder(), clock=lambda: NOW)
    svc.reconcile("ns", "p")
    deployments = len(kube.items(DEPLOYS))
    assert deployments >= 3
    first = ready_condition(kube)
    assert first["status"] == "False"

    def check() -> bool:
        obj = kube.get_obj(PLANS_NS, "p")
        assert obj is not None
        return svc.check_readiness(PlanBody.from_object(obj)).ready

    scheduled_pods(kube, 1)
    assert not check()
    progressed = ready_condition(kube)
    assert (progressed == first) is costly
    if not costly:
        assert progressed["status"] == "False" and progressed["message"] != first["message"]

    scheduled_pods(kube, deployments)
    assert check()
    assert ready_condition(kube)["status"] == "True"


def test_a_failing_read_of_the_cluster_is_reported_as_error() -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4))
    svc, _ = service(kube)
    real = kube.request

    def flaky(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "GET" and path.endswith("/api/v1/pods"):
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=503, reason="Unavailable")
        return real(method, path, **kw)

    kube.request = flaky  # type: ignore[method-assign]
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Error" and "503" in out.message
    assert status(kube)["phase"] == "Error"


def test_a_readiness_check_says_when_status_lags_the_spec() -> None:
    kube = p4_cluster(1)
    kube.put(PLANS_NS, plan(requests={"face_1vn": {"P4": 8}}))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    assert not svc.refresh_readiness("ns", "p").stale  # type: ignore[union-attr]
    kube.get_obj(PLANS_NS, "p")["metadata"]["generation"] = 2  # type: ignore[index]
    assert svc.refresh_readiness("ns", "p").stale  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("down_for", "moves"),
    [
        pytest.param(5, False, id="not Ready for 5 s (a flap): its instance stays"),
        pytest.param(120, True, id="not Ready for two minutes: its instance moves"),
    ],
)
def test_a_node_that_is_not_ready_keeps_its_instance_for_the_grace(down_for: int, moves: bool) -> None:
    kube = p4_cluster()
    kube.put(PLANS_NS, plan(requests=FACE4, deploy=True))
    svc, _ = service(kube)
    svc.reconcile("ns", "p")
    since = (datetime.now(UTC) - timedelta(seconds=down_for)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sick = kube.get_obj(NODES, "p4-3")
    assert sick is not None
    sick["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    sick["status"]["conditions"] = [{"type": "Ready", "status": "False", "lastTransitionTime": since}]
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied" and out.moved == moves
    assert ("p4-3" in labelled(kube)) != moves


def test_many_new_deployments_are_checked_for_other_owners_with_one_list() -> None:
    """A new plan of many Deployments: the names it wants are looked up in one listing of the
    namespace (a read by name each took minutes at 2,480), and one held by another owner is still
    found and not taken over."""
    kube = p4_cluster(12)
    kube.put(PLANS_NS, plan(requests={"face_feature_extract": {"P4": 12}}, deploy=True))
    reads: list[str] = []
    request = kube.request

    def counting(method: str, path: str, **kw: Any) -> Any:
        if method == "GET" and "/deployments/" in path:
            reads.append(path)
        return request(method, path, **kw)

    kube.request = counting  # type: ignore[method-assign]
    svc, _ = service(kube)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Applied", out
    names = sorted(d["metadata"]["name"] for d in kube.items(DEPLOYS))
    assert len(names) > 8 and reads == []

    again = p4_cluster(12)
    again.put(PLANS_NS, plan(requests={"face_feature_extract": {"P4": 12}}, deploy=True))
    theirs = {"uid": "x", "kind": "GpuAllocationPlan", "name": "x", "controller": True}
    again.put(DEPLOYS, {"metadata": {"name": names[3], "ownerReferences": [theirs]}})
    svc, _ = service(again)
    out = svc.reconcile("ns", "p")
    assert out is not None and out.phase == "Error" and "belongs to GpuAllocationPlan/x" in out.message
