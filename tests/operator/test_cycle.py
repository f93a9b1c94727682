"""The scheduling cycle against an in-memory API server: one snapshot, admission order, no
re-plan (and no write) of a plan whose spec and inputs did not change."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from gpuplan_operator.body import FINALIZER, PlanBody
from gpuplan_operator.cache.caches import ClusterCache
from gpuplan_operator.cluster import of_plan
from gpuplan_operator.cycle import session
from gpuplan_operator.cycle.order import Inputs, admission_order, held_by_others
from gpuplan_operator.cycle.session import Cycle, Report
from gpuplan_operator.service import Options, PlanService
from gpuplan_operator.status import Phase

from planner import PLAN_LABEL, plan_labels
from tests.operator.builders import NODES, NOW, PLANS_NS, cluster, node, plan, pod
from tests.operator.fake_kube import FakeKube


def body(name: str, priority: int | None = None, applied: bool = False, created: str = NOW) -> PlanBody:
    obj: dict[str, Any] = plan(name)
    obj["metadata"]["creationTimestamp"] = created
    if priority is not None:
        obj["spec"]["priority"] = priority
    if applied:
        obj["status"] = {"applied": {"units": {"n": {"nvidia.com/gpu": 1}}}}
    return PlanBody.from_object(obj)


def test_admission_order_is_priority_then_holding_then_age_then_name() -> None:
    plans = [
        body("new-low", 0, created="2026-01-01T00:00:03Z"),
        body("old-low", 0, created="2026-01-01T00:00:01Z"),
        body("holder-low", 0, applied=True, created="2026-01-01T00:00:09Z"),
        body("high", 10, created="2026-01-01T00:00:05Z"),
        body("bad", True),  # a bool is not a priority: counts as 0
    ]
    order = [p.name for p in admission_order(plans)]
    assert order == ["high", "holder-low", "bad", "old-low", "new-low"]


def test_inputs_say_what_changed() -> None:
    a = Inputs(1, (0, 0, 0, ()), "x")
    assert a.why_changed(None) == "new"
    assert a.why_changed(a) is None
    assert Inputs(2, a.cluster, "x").why_changed(a) == "spec"
    assert Inputs(1, (1, 0, 0, ()), "x").why_changed(a) == "cluster"
    assert Inputs(1, a.cluster, "y").why_changed(a) == "plans"


def test_what_others_hold_ignores_the_plan_itself_and_counts_plans_being_deleted() -> None:
    mine = body("a", applied=True)
    other = body("b", applied=True)
    assert held_by_others([mine], mine.uid) == held_by_others([], mine.uid)
    assert held_by_others([mine, other], mine.uid) != held_by_others([mine], mine.uid)
    leaving = PlanBody.from_object(
        {**dict(other.raw), "metadata": {**other.raw["metadata"], "deletionTimestamp": NOW}}
    )
    assert held_by_others([mine, leaving], mine.uid) == held_by_others([mine, other], mine.uid)


def listed(kube: FakeKube) -> ClusterCache:
    """A cache filled by one listing of each kind (what the informers do first)."""
    cache = ClusterCache(kube, lambda kind, matters: None)
    for informer in cache.informers:
        informer._list()
    return cache


def cycle_on(kube: FakeKube) -> tuple[Cycle, ClusterCache]:
    cache = listed(kube)
    svc = PlanService(kube, Options(plan_seconds=5, polish_seconds=0.2), lambda *a: None, clock=lambda: NOW)
    return Cycle(svc, cache), cache


def spec(cards: int, priority: int = 0) -> dict[str, Any]:
    return {"requests": {"face_feature_extract": {"P4": cards}}, "priority": priority}


def status_of(kube: FakeKube, name: str) -> dict[str, Any]:
    obj = kube.get_obj(PLANS_NS, name)
    assert obj is not None
    return dict(obj.get("status") or {})


def phase(kube: FakeKube, name: str) -> str:
    return str(status_of(kube, name).get("phase"))


def plan_pod(name: str, node_name: str, cards: int, of: str) -> dict[str, Any]:
    """A pod of plan ``of``'s Deployments in namespace ``ns``, labelled as the operator labels them."""
    labels = {"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": of}
    return {
        **pod(name, node_name, cards, labels),
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
    }


def a_plan_applied_then_its_first_node_cordoned() -> tuple[FakeKube, Cycle, ClusterCache, str]:
    """Plan ``a`` (8 cards on four P4 nodes) applied by a cycle, then the first node it uses
    cordoned in the API server (the cache not told yet)."""
    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    kube.put(PLANS_NS, plan("a", **spec(8)))
    cycle, cache = cycle_on(kube)
    cycle.run()
    victim = sorted({n for a in status_of(kube, "a")["allocations"] for n in a["nodes"]})[0]
    cordoned = node(victim, unschedulable=True)
    cordoned["metadata"]["labels"] = (kube.get_obj(NODES, victim) or {})["metadata"]["labels"]
    cordoned["metadata"]["resourceVersion"] = "999999"
    kube.put(NODES, cordoned)
    return kube, cycle, cache, victim


def test_a_cordon_that_lands_while_a_cycle_runs_is_planned_by_the_next_cycle() -> None:
    """The watch may deliver a node change after the cycle took its snapshot and before it
    recorded what it planned from: the cycle planned without the change, so the next one must
    see it as new (it once read the stores' change counts after the snapshot, and the cordon
    was never planned)."""
    kube, cycle, cache, victim = a_plan_applied_then_its_first_node_cordoned()
    cordoned = kube.get_obj(NODES, victim) or {}
    taken = cache.read

    def snapshot_then_the_cordon_lands() -> Any:
        read = taken()
        assert cache.nodes.apply("MODIFIED", cordoned)  # what the watch says, a moment too late
        return read

    cache.read = snapshot_then_the_cordon_lands  # type: ignore[method-assign]
    cycle.run()  # woken by something else: planned from the snapshot, without the cordon
    cache.read = taken  # type: ignore[method-assign]
    assert any(victim in a["nodes"] for a in status_of(kube, "a")["allocations"])

    assert cycle.run().planned == ["ns/a"]  # the cycle the cordon's own wake-up runs
    assert all(victim not in a["nodes"] for a in status_of(kube, "a")["allocations"])


def test_a_spec_edit_that_lands_while_a_cycle_runs_is_planned_by_the_next_cycle() -> None:
    """The same for the plan itself: an edit whose watch event arrives after the snapshot was
    planned by no one yet, whatever generation the cache holds once the cycle is done (the cycle
    once recorded that one, and the edit's own wake-up found nothing new: a chaos run's plan kept
    its first generation's status for good)."""
    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    kube.put(PLANS_NS, plan("a", **spec(8)))
    cycle, cache = cycle_on(kube)
    cycle.run()
    assert status_of(kube, "a")["observedGeneration"] == 1
    edited = dict(kube.get_obj(PLANS_NS, "a") or {})
    edited["metadata"] = {**edited["metadata"], "generation": 2, "resourceVersion": "999999"}
    edited["spec"] = spec(4)
    cordon(kube, cache, "p4-0")  # something else calls for the next cycle
    taken = cache.read

    def snapshot_then_the_edit_lands() -> Any:
        read = taken()
        kube.put(PLANS_NS, edited)
        assert cache.plans.apply("MODIFIED", kube.get_obj(PLANS_NS, "a") or {})  # the watch, a moment late
        return read

    cache.read = snapshot_then_the_edit_lands  # type: ignore[method-assign]
    cycle.run()  # planned generation 1 from the snapshot
    cache.read = taken  # type: ignore[method-assign]
    assert status_of(kube, "a")["observedGeneration"] == 1

    assert cycle.run().planned == ["ns/a"]  # the cycle the edit's own wake-up runs
    assert status_of(kube, "a")["observedGeneration"] == 2
    assert status_of(kube, "a")["cardsPlaced"] == 4


def test_a_pod_that_changes_after_an_apply_found_its_plan_ready_is_looked_at_by_the_next_cycle() -> None:
    """And for a plan's pods: the apply checks readiness from the pods cache, and a pod whose
    watch event arrives after that read (a plan just found Ready losing a pod) was seen by
    no one yet. The cycle once remembered the pods as they stood after the apply, and the next
    cycle skipped the plan as Ready with nothing changed."""
    import dataclasses

    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    kube.put(PLANS_NS, plan("d", deploy=True, gang="none", **spec(8)))
    cycle, cache = cycle_on(kube)
    completed = cycle.service.complete
    late = plan_pod("d-0", "p4-0", 8, "d")
    late["status"] = {"phase": "Pending"}
    labels = late["metadata"]["labels"]

    def ready_then_a_pod_changes(prepared: Any) -> Any:
        outcome = completed(prepared)
        stamp = cache.plan_pods_stamp("ns", labels)
        cache.pods.apply("ADDED", late)  # the watch, a moment after the check read the pods
        assert cache.plan_pods_stamp("ns", labels) != stamp
        return dataclasses.replace(outcome, ready=True)  # what the check saw: Ready

    cycle.service.complete = ready_then_a_pod_changes  # type: ignore[method-assign]
    assert cycle.run().planned == ["ns/d"]
    cycle.service.complete = completed  # type: ignore[method-assign]

    assert cycle.run().checked == 1  # the pod that changed is looked at


def test_new_plans_that_do_not_both_fit_go_by_priority_and_an_unchanged_cluster_is_left_alone() -> None:
    kube = cluster(*[node(f"p4-{i}") for i in range(4)])  # 32 cards
    low = plan("low", **spec(24))
    low["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"  # the older one
    high = plan("high", **spec(16, priority=10))
    high["metadata"]["creationTimestamp"] = "2026-01-01T00:00:05Z"
    kube.put(PLANS_NS, low)
    kube.put(PLANS_NS, high)
    cycle, _ = cycle_on(kube)

    report = cycle.run()
    assert report.planned == ["ns/high", "ns/low"]
    assert phase(kube, "high") == "Applied"
    assert phase(kube, "low") == "Infeasible"
    low_status = status_of(kube, "low")
    assert low_status["admission"] == "Preempted" and low_status["heldBy"] == ["ns/high"]
    assert low_status["conditions"][0]["reason"] == "Preempted"
    assert "preempted: ns/high (before it in the order) holds the cards it needs" in low_status["message"]

    writes = len(kube.writes)
    again = cycle.run()
    assert again.planned == [] and len(kube.writes) == writes


def test_a_cordon_re_plans_from_the_cache_then_nothing_is_planned_or_written() -> None:
    kube, cycle, cache, victim = a_plan_applied_then_its_first_node_cordoned()
    assert cache.nodes.replace(kube.request("GET", "/api/v1/nodes")["items"])  # what the watch would say

    assert cycle.run().planned == ["ns/a"]
    assert all(victim not in a["nodes"] for a in status_of(kube, "a")["allocations"])
    writes = len(kube.writes)
    assert cycle.run().planned == [] and len(kube.writes) == writes


def test_an_elastic_plan_shrinks_for_a_higher_one_and_grows_back_when_it_is_gone() -> None:
    kube = cluster(*[node(f"p4-{i}") for i in range(4)])  # 32 cards
    kube.put(PLANS_NS, plan("flex", requests={"face_feature_extract": {"P4": {"min": 8, "max": 32}}}))
    cycle, cache = cycle_on(kube)
    cycle.run()
    assert status_of(kube, "flex")["cardsPlaced"] == 32

    kube.put(PLANS_NS, plan("high", **spec(16, priority=10)))
    cache.plans.replace(kube.request("GET", f"/{PLANS_NS}")["items"])
    cycle.run()
    flex = status_of(kube, "flex")
    assert status_of(kube, "high")["phase"] == "Applied"
    assert (flex["phase"], flex["cardsPlaced"], flex["cards"]) == ("Applied", 16, "16/32")
    assert flex["elastic"][0]["reason"] == "HeldByPlans" and flex["elastic"][0]["heldBy"] == ["ns/high"]

    del kube.objects[(PLANS_NS, "high")]
    cache.plans.replace(kube.request("GET", f"/{PLANS_NS}")["items"])
    assert "ns/flex" in cycle.run().planned
    assert status_of(kube, "flex")["cardsPlaced"] == 32


POD_NS = "api/v1/namespaces/ns/pods"


def gang_pod(name: str, node_name: str, rv: str) -> dict[str, Any]:
    """A gated pod of plan ``g``, pinned to ``node_name`` by its node selector."""
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "labels": {"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": "g"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"rs-{name}", "controller": True}],
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "schedulingGates": [{"name": "gpuplan.ragnaros.io/gang"}],
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Pending"},
    }
    return pod


def test_the_cycle_releases_a_plans_gates_together_once_every_node_has_room() -> None:
    kube = cluster(node("p4-0"), node("p4-1"))
    for i in range(2):
        kube.put(POD_NS, gang_pod(f"g-{i}", f"p4-{i}", str(100 + i)))
    foreign = {
        "metadata": {"name": "foreign", "namespace": "ns", "resourceVersion": "1"},
        "spec": {
            "nodeName": "p4-1",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Running"},
    }
    kube.put(POD_NS, foreign)
    cycle, cache = cycle_on(kube)

    cycle.run()  # p4-1 lacks 4 cards: neither pod leaves its gate
    assert not [w for w in kube.writes if "/pods/" in w[1]]
    assert "p4-1 needs 8 nvidia.com/gpu, 4 free" in (cycle.service.gates.waiting("ns", "g") or "")

    del kube.objects[(POD_NS, "foreign")]
    assert cache.pods.replace(kube.request("GET", "/api/v1/pods")["items"])  # what the watch would say
    cycle.run()
    lifted = sorted(w[1].rsplit("/", 1)[-1] for w in kube.writes if "/pods/" in w[1])
    assert lifted == ["g-0", "g-1"]
    for i in range(2):
        pod = kube.get_obj(POD_NS, f"g-{i}") or {}
        assert "schedulingGates" not in pod["spec"]
        assert "gpuplan.ragnaros.io/released" in pod["metadata"]["annotations"]
    assert cycle.service.gates.waiting("ns", "g") is None


def test_events_of_plans_written_side_by_side_are_posted_in_the_cycle_s_context() -> None:
    """kopf.event reads kopf's settings from a context var; the cycle writes plans from a thread
    pool, whose threads start with an empty context. Posting from there must still see it (it
    raised LookupError and failed the whole cycle)."""
    import contextvars

    settings: contextvars.ContextVar[str] = contextvars.ContextVar("settings")
    posted: list[tuple[str, str]] = []

    def post(plan: PlanBody, type_: str, reason: str, message: str) -> None:
        posted.append((plan.name, settings.get()))  # LookupError outside the context

    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    for name in ("a", "b", "c"):
        kube.put(PLANS_NS, plan(name, deploy=True, **spec(8)))
    cache = listed(kube)
    svc = PlanService(kube, Options(plan_seconds=5, polish_seconds=0.2), post, clock=lambda: NOW)
    kube.fail_on = "/deployments"  # each plan's Deployments fail: its Error Event comes from the pool
    settings.set("kopf")
    report = contextvars.copy_context().run(Cycle(svc, cache).run)
    assert sorted(report.planned) == ["ns/a", "ns/b", "ns/c"]
    assert {p for p, _ in posted} == {"a", "b", "c"} and {s for _, s in posted} == {"kopf"}


class CountingKube(FakeKube):
    """Counts listings of Deployments (what the apply read on every re-plan before they were cached)."""

    def __init__(self) -> None:
        super().__init__()
        self.deployment_lists = 0
        self.selectors: list[str] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "GET" and path.rstrip("/").endswith("/deployments"):
            self.deployment_lists += 1
            self.selectors.append(str((kw.get("query") or {}).get("labelSelector")))
        return super().request(method, path, **kw)


def test_a_re_plan_compares_with_the_cached_deployments_and_the_cache_follows_its_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "CHECK_SPACING", 0.0)  # the cycles follow one another at once
    kube = CountingKube()
    for i in range(4):
        kube.put(NODES, node(f"p4-{i}"))
    kube.put(PLANS_NS, plan("d", deploy=True, gang="none", **spec(8)))
    cycle, cache = cycle_on(kube)
    lists = kube.deployment_lists  # the informer's own first listing
    cycle.run()
    assert phase(kube, "d") == "Applied"
    deps = "apis/apps/v1/namespaces/ns/deployments"
    written = sorted(d["metadata"]["name"] for d in kube.items(deps))
    assert (
        written
        and sorted(d["metadata"]["name"] for d in of_plan(cache.namespace_deployments("ns") or [], "d"))
        == written
    )

    victim = sorted({n for a in status_of(kube, "d")["allocations"] for n in a["nodes"]})[0]
    cordoned = node(victim, unschedulable=True)
    cordoned["metadata"]["labels"] = (kube.get_obj(NODES, victim) or {})["metadata"]["labels"]
    kube.put(NODES, cordoned)
    assert cache.nodes.replace(kube.request("GET", "/api/v1/nodes")["items"])
    assert cycle.run().planned == ["ns/d"]
    assert kube.deployment_lists == lists  # neither apply listed the plan's Deployments
    now = sorted(d["metadata"]["name"] for d in kube.items(deps))
    assert now != written and not any(victim in n for n in now)
    cached = of_plan(cache.namespace_deployments("ns") or [], "d")
    assert sorted(d["metadata"]["name"] for d in cached) == now  # deletes and applies taken in
    assert all("status" not in d and "managedFields" not in d["metadata"] for d in cached)
    writes = len(kube.writes)
    assert cycle.run().planned == [] and len(kube.writes) == writes

    kube.put("api/v1/namespaces/ns/pods", plan_pod("d-0", "p4-0", 8, "d"))
    assert cache.pods.replace(kube.request("GET", "/api/v1/pods")["items"])
    assert cycle.run().checked == 1  # its pods changed: readiness from the cached Deployments
    assert kube.deployment_lists == lists


def test_deployments_are_watched_where_the_operator_writes() -> None:
    everywhere = ClusterCache(FakeKube(), lambda kind, matters: None)
    paths = [i.path for i in everywhere.informers if i.store.kind == "deployments"]
    assert paths == ["/apis/apps/v1/deployments"]
    some = ClusterCache(FakeKube(), lambda kind, matters: None, namespaces=["b", "a", "team-*"])
    paths = [i.path for i in some.informers if i.store.kind == "deployments"]
    assert paths == ["/apis/apps/v1/namespaces/a/deployments", "/apis/apps/v1/namespaces/b/deployments"]
    for informer in some.informers:
        informer._list()
    assert some.namespace_deployments("a") == []
    assert some.namespace_deployments("team-x") is None  # a glob's namespace: listed when needed


def test_namespaces_given_as_globs_are_served_as_kopf_watches_them() -> None:
    kube = FakeKube()
    svc = PlanService(kube, Options(), lambda *a: None, clock=lambda: NOW)
    cycle = Cycle(svc, listed(kube), ["team-*", "ops"])
    assert cycle.serves(body("p")) is False  # namespace "ns"
    inside = PlanBody.from_object({**plan("p"), "metadata": {**plan("p")["metadata"], "namespace": "team-a"}})
    assert cycle.serves(inside)


def test_a_new_plan_finds_names_held_by_others_in_the_cache_and_one_listing_of_the_rest() -> None:
    """A new plan of many Deployments: the operator's own (other plans') come from the cache, and
    only Deployments of other owners are listed; one of them holding a wanted name is still
    found and not taken over."""
    deps = "apis/apps/v1/namespaces/ns/deployments"
    probe = cluster(*[node(f"p4-{i}") for i in range(12)])
    probe.put(PLANS_NS, plan("d", deploy=True, gang="none", **spec(12)))
    cycle_on(probe)[0].run()
    names = sorted(d["metadata"]["name"] for d in probe.items(deps))
    assert len(names) > 8

    kube = CountingKube()
    for i in range(12):
        kube.put(NODES, node(f"p4-{i}"))
    kube.put(PLANS_NS, plan("d", deploy=True, gang="none", **spec(12)))
    theirs = {"uid": "x", "kind": "GpuAllocationPlan", "name": "x", "controller": True}
    kube.put(deps, {"metadata": {"name": names[3], "namespace": "ns", "ownerReferences": [theirs]}})
    managed = {"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": "other"}
    for i in range(20):
        kube.put(deps, {"metadata": {"name": f"other-{i}", "namespace": "ns", "labels": managed}})
    cycle, _ = cycle_on(kube)
    listed_before = len(kube.selectors)
    cycle.run()
    assert phase(kube, "d") == "Error" and "belongs to GpuAllocationPlan/x" in str(
        status_of(kube, "d")["message"]
    )
    assert kube.selectors[listed_before:] == ["app.kubernetes.io/managed-by!=gpuplan"]


class ReadingKube(FakeKube):
    """Records every request, reads too."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        return super().request(method, path, **kw)


def test_a_re_plan_that_moves_nothing_writes_only_the_status_without_reading_the_plans_objects() -> None:
    kube = ReadingKube()
    for i in range(6):  # 8 cards spread as 4 instances of 2: two nodes stay unused
        kube.put(NODES, node(f"p4-{i}"))
    kube.put(PLANS_NS, plan("s", deploy=True, gang="none", **spec(8)))
    cycle, cache = cycle_on(kube)
    cycle.run()
    before = status_of(kube, "s")
    used = {n for a in before["allocations"] for n in a["nodes"]}
    idle = sorted({f"p4-{i}" for i in range(6)} - used)[0]

    cordoned = node(idle, unschedulable=True)  # fewer schedulable nodes: every spread score changes
    cordoned["metadata"]["labels"] = (kube.get_obj(NODES, idle) or {})["metadata"]["labels"]
    kube.put(NODES, cordoned)
    assert cache.nodes.replace(kube.request("GET", "/api/v1/nodes")["items"])
    kube.requests.clear()
    assert cycle.run().planned == ["ns/s"]
    after = status_of(kube, "s")
    assert after["score"] != before["score"] and after["allocations"] == before["allocations"]
    assert [m for m, _ in kube.requests if m != "GET"] == ["PATCH"]  # the status, nothing else
    assert kube.requests[-1][1].endswith("/gpuallocationplans/s/status")
    assert not [p for m, p in kube.requests if m == "GET" and ("configmaps" in p or "priorityclasses" in p)]

    # a process that did not write the plan itself compares it with the cluster first
    fresh, fresh_cache = cycle_on(kube)
    again = node(idle)
    again["metadata"]["labels"] = cordoned["metadata"]["labels"]
    kube.put(NODES, again)
    assert fresh_cache.nodes.replace(kube.request("GET", "/api/v1/nodes")["items"])
    kube.requests.clear()
    assert fresh.run().planned == ["ns/s"]
    assert status_of(kube, "s")["score"] == before["score"]
    assert [p for m, p in kube.requests if m == "GET" and "configmaps" in p]


def deployments(kube: FakeKube) -> list[dict[str, Any]]:
    return kube.items("apis/apps/v1/namespaces/ns/deployments")


def rendering_counted(cycle: Cycle) -> list[str]:
    """The plans the cycle's service renders from now on, by name, in order."""
    rendered: list[str] = []
    render = cycle.service.render

    def counted(plan: PlanBody, spec: Any, result: Any) -> Any:
        rendered.append(plan.name)
        return render(plan, spec, result)

    cycle.service.render = counted  # type: ignore[method-assign]
    return rendered


def cordon(kube: FakeKube, cache: ClusterCache, name: str, unschedulable: bool = True) -> None:
    """Cordon (or uncordon) ``name`` in the API server and in the cycle's node cache."""
    changed = node(name, unschedulable=unschedulable)
    changed["metadata"]["labels"] = (kube.get_obj(NODES, name) or {})["metadata"]["labels"]
    kube.put(NODES, changed)
    assert cache.nodes.replace(kube.request("GET", "/api/v1/nodes")["items"])


def test_a_plan_placed_as_its_last_apply_placed_it_is_not_rendered_again() -> None:
    """After a cordon elsewhere every plan is re-planned and its score changes; those whose
    instances stay keep what their last apply rendered (only the status is written). A plan
    that moves, or whose spec changed, is rendered again."""
    kube = cluster(*[node(f"p4-{i}") for i in range(6)])
    kube.put(PLANS_NS, plan("a", deploy=True, gang="none", **spec(8)))
    cycle, cache = cycle_on(kube)
    cycle.run()
    rendered = rendering_counted(cycle)
    used = {n for a in status_of(kube, "a")["allocations"] for n in a["nodes"]}
    idle = sorted({f"p4-{i}" for i in range(6)} - used)
    before = status_of(kube, "a")

    cordon(kube, cache, idle[0])  # fewer schedulable nodes: the spread score changes
    assert cycle.run().planned == ["ns/a"]
    assert status_of(kube, "a")["score"] != before["score"]
    assert status_of(kube, "a")["allocations"] == before["allocations"] and rendered == []

    victim = sorted(used)[0]
    cordon(kube, cache, victim)  # one of its own nodes: it moves, and is rendered
    assert cycle.run().moved == ["ns/a"] and rendered == ["a"]
    assert victim not in {n for a in status_of(kube, "a")["allocations"] for n in a["nodes"]}
    assert victim not in {
        n for d in deployments(kube) for n in d["spec"]["template"]["spec"]["nodeSelector"].values()
    }

    spec_changed = kube.get_obj(PLANS_NS, "a") or {}
    spec_changed["spec"]["image"] = "ragnaros/flamewaker:2"
    spec_changed["metadata"]["generation"] = 2
    kube.put(PLANS_NS, spec_changed)
    assert cache.plans.replace(kube.request("GET", PLANS_NS)["items"])
    cordon(kube, cache, idle[0], unschedulable=False)
    rendered.clear()
    cycle.run()
    assert rendered == ["a"]  # the same placement, a new spec: rendered again
    assert {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in deployments(kube)} == {
        "ragnaros/flamewaker:2"
    }


def test_a_plan_whose_rendering_reads_the_nodes_is_rendered_at_every_re_plan() -> None:
    """A CPU request sized from a node's CPUs depends on the node, which the placement does not
    say: such a plan is rendered again whenever it is re-planned."""
    kube = cluster(*[node(f"p4-{i}") for i in range(6)])
    operators = [{"name": "face_feature_extract", "cpuRequest": "numaShare"}]
    kube.put(PLANS_NS, plan("c", deploy=True, gang="none", operators=operators, **spec(8)))
    cycle, cache = cycle_on(kube)
    cycle.run()
    assert phase(kube, "c") == "Applied"
    rendered = rendering_counted(cycle)
    used = {n for a in status_of(kube, "c")["allocations"] for n in a["nodes"]}
    cordon(kube, cache, sorted({f"p4-{i}" for i in range(6)} - used)[0])
    assert cycle.run().planned == ["ns/c"]
    assert rendered == ["c"]


def test_the_readiness_of_several_plans_is_checked_side_by_side() -> None:
    """Each check may write a status (most of a second for a large plan on a busy API server);
    three checked one after another held a cordon's cycle back."""
    import threading
    import time

    from gpuplan_operator.cycle.session import _Memory
    from gpuplan_operator.service import Outcome

    kube = cluster(node("p4-0"))
    cycle, _ = cycle_on(kube)
    plans = {f"uid-{n}": body(n) for n in ("a", "b", "c")}
    for uid in plans:
        cycle.memory[uid] = _Memory(phase=Phase.APPLIED, ready=False)
    running, most = 0, 0
    lock = threading.Lock()

    def check(plan: PlanBody) -> Outcome:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.2)
        with lock:
            running -= 1
        return Outcome(Phase.APPLIED, "", ready=plan.name != "b")

    cycle.service.check_readiness = check  # type: ignore[method-assign]
    report = Report()
    assert cycle._readiness(plans, set(), report) == 3
    assert most == 3
    assert [cycle.memory[u].ready for u in plans] == [True, False, True]
    assert report.wake_in == cycle.options.ready_poll  # b is not Ready: looked at again soon


def test_a_plan_coming_up_is_checked_again_only_after_twenty_times_its_last_check() -> None:
    """Its pods change before nearly every cycle while it comes up (2,480 of them, about two
    cycles a second): each check is spaced by its own cost, at most the ready poll."""
    import time

    from gpuplan_operator.cycle.session import CHECK_SPACING, _Memory
    from gpuplan_operator.service import Outcome

    kube = cluster(node("p4-0"))
    cycle, _ = cycle_on(kube)
    plans = {"uid-a": body("a")}
    cycle.memory["uid-a"] = _Memory(phase=Phase.APPLIED, ready=False)
    checks = 0

    def check(plan: PlanBody) -> Outcome:
        nonlocal checks
        checks += 1
        time.sleep(0.02)
        return Outcome(Phase.APPLIED, "", ready=False)

    cycle.service.check_readiness = check  # type: ignore[method-assign]
    assert cycle._readiness(plans, set(), Report()) == 1
    took = cycle.memory["uid-a"].check_took
    assert 0.02 <= took < 0.1
    report = Report()
    assert cycle._readiness(plans, set(), report) == 0  # too soon: not checked again ...
    assert report.wake_in is not None and 0 < report.wake_in <= CHECK_SPACING * took  # ... but then
    cycle.memory["uid-a"].checked -= CHECK_SPACING * took
    assert cycle._readiness(plans, set(), Report()) == 1 and checks == 2
    # a slow check waits no longer than the ready poll
    cycle.memory["uid-a"].check_took = 10.0
    report = Report()
    assert cycle._readiness(plans, set(), report) == 0
    assert report.wake_in is not None and report.wake_in <= cycle.options.ready_poll


def test_a_cycle_says_how_long_the_change_that_called_for_it_waited_and_the_cpu_it_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    kube.put(PLANS_NS, plan("a", **spec(8)))
    cycle, _ = cycle_on(kube)
    with caplog.at_level(logging.INFO, logger="gpuplan_operator"):
        report = cycle.run(time.monotonic() - 0.75)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cycle: planned")]
    waited = float(line.split("ns/a ")[1].split("s after the change that called for it")[0])
    assert 0.75 <= waited < 5
    # planning and writing a plan takes CPU; the line and the metric say how much, the same figure
    used = float(line.split("the process used ")[1].split(" CPU s meanwhile")[0])
    assert report.cpu > 0 and used == round(report.cpu, 2)
    metrics = cycle.service.metrics.registry
    assert metrics.get_sample_value("gpuplan_cycle_cpu_seconds_total") == pytest.approx(report.cpu)


def labels_of(kube: FakeKube, name: str) -> dict[str, str]:
    """node -> the value of plan ``name``'s label there."""
    key = f"gpuplan.ragnaros.io/ns.{name}"
    return {
        n["metadata"]["name"]: n["metadata"]["labels"][key]
        for n in kube.items(NODES)
        if key in n["metadata"]["labels"]
    }


def test_a_plan_is_given_the_finalizer_before_anything_is_written_for_it() -> None:
    """A plan deleted before it carries the finalizer goes at once, and no clean-up runs for it:
    what a cycle had written for it meanwhile stayed (a node label, in the chaos suite). The
    cycle gives it the finalizer first, as kopf would (kopf adds it only while it handles an
    event of the plan), and writes nothing for it when that fails; a cycle soon after tries again."""
    kube = cluster(*[node(f"p4-{i}") for i in range(2)])
    bare = plan("a", **spec(2))
    bare["metadata"]["finalizers"] = ["someone.else/keep"]
    kube.put(PLANS_NS, bare)
    cycle, cache = cycle_on(kube)
    kube.fail_on = "gpuallocationplans/a"  # the finalizer's patch answers 500
    report = cycle.run()
    assert report.planned == [] and report.wake_in is not None and report.wake_in <= 2.0
    assert kube.writes == [] and labels_of(kube, "a") == {}

    kube.fail_on = None
    assert cycle.run().planned == ["ns/a"]
    obj = kube.get_obj(PLANS_NS, "a") or {}
    assert obj["metadata"]["finalizers"] == ["someone.else/keep", FINALIZER]
    assert kube.writes[0] == ("PATCH", f"/{PLANS_NS}/a")  # before any other write
    assert phase(kube, "a") == "Applied" and labels_of(kube, "a")
    assert cache.plan("ns", "a").guarded  # type: ignore[union-attr]


def changed_after_the_cache_read_it(meta: dict[str, Any]) -> tuple[FakeKube, Cycle, ClusterCache]:
    """Plan ``a`` without the finalizer, cached as it was, then changed in the cluster alone
    (``meta`` merged into its metadata, a newer resourceVersion): the cycle's patch of the cached
    copy fails its test."""
    kube = cluster(*[node(f"p4-{i}") for i in range(2)])
    bare = plan("a", **spec(2))
    bare["metadata"]["finalizers"] = []
    kube.put(PLANS_NS, bare)
    cycle, cache = cycle_on(kube)
    live = kube.get_obj(PLANS_NS, "a")
    assert live is not None
    live["metadata"].update(meta)
    live["metadata"]["resourceVersion"] = str(int(live["metadata"]["resourceVersion"]) + 1000)
    return kube, cycle, cache


@pytest.mark.parametrize("meanwhile", ["kopf's finalizer", "an annotation"])
def test_a_new_plan_changed_since_the_cache_read_it_is_guarded_and_planned_in_the_same_cycle(
    meanwhile: str,
) -> None:
    """kopf adds the same finalizer as it handles a new plan's creation, so the cycle's patch
    (made on the plan as the cache read it) usually meets a plan changed meanwhile. The cycle then
    left the plan out and planned it a cycle later (about half a second of a 1,000-node hand-over).
    Now it reads the plan once more: kopf's finalizer is enough, and another change gets the
    finalizer added on the fresh copy. Either way the plan is planned in this cycle."""
    changed = (
        {"finalizers": [FINALIZER]}
        if meanwhile == "kopf's finalizer"
        else {"annotations": {"someone.else/note": "x"}}
    )
    kube, cycle, cache = changed_after_the_cache_read_it(changed)
    assert not cache.plan("ns", "a").guarded  # type: ignore[union-attr]
    assert cycle.run().planned == ["ns/a"]
    obj = kube.get_obj(PLANS_NS, "a") or {}
    assert obj["metadata"]["finalizers"] == [FINALIZER]
    assert phase(kube, "a") == "Applied" and labels_of(kube, "a")


def test_a_plan_deleted_while_it_is_guarded_is_not_planned() -> None:
    """The fresh copy of a plan whose finalizer's patch failed is being deleted: nothing is
    written for it (its deletion goes at once; no clean-up would remove what a cycle wrote)."""
    kube, cycle, _ = changed_after_the_cache_read_it(
        {"deletionTimestamp": NOW, "finalizers": ["someone.else/keep"]}
    )
    report = cycle.run()
    assert report.planned == [] and labels_of(kube, "a") == {}
    assert (kube.get_obj(PLANS_NS, "a") or {})["metadata"]["finalizers"] == ["someone.else/keep"]


def test_a_plan_whose_clean_up_ran_is_not_written_again_while_the_cache_still_holds_it() -> None:
    """The clean-up (kopf's deletion handler) and the cache read the plans through watches of
    their own: the cache may still hold the plan as it was, not being deleted, after its clean-up
    ran. A cycle then re-planned it (a cordon: every plan is planned) and wrote its labels again,
    and the finalizer went with nothing left to remove them."""
    kube, cycle, cache, victim = a_plan_applied_then_its_first_node_cordoned()
    assert labels_of(kube, "a")
    gone = kube.get_obj(PLANS_NS, "a") or {}
    gone["metadata"]["deletionTimestamp"] = NOW  # in the API server; the cache not told yet
    cycle.service.cleanup(gone)
    assert labels_of(kube, "a") == {}
    assert cache.nodes.apply("MODIFIED", kube.get_obj(NODES, victim) or {})  # the cordon arrives
    cycle.run()
    assert labels_of(kube, "a") == {}


class DeletedOnStatus(FakeKube):
    """Plan ``gone`` is deleted (its finalizer removed by hand) the moment its status is written."""

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "PATCH" and path.endswith("/gone/status"):
            self.objects.pop((PLANS_NS, "gone"), None)
        return super().request(method, path, **kw)


def test_a_plan_gone_when_its_status_is_written_fails_alone() -> None:
    """One plan's status answering 404 (deleted meanwhile) is that plan's failure: the plans
    written beside it were said to have failed with its error (``Error``, an ``ApiError`` Event
    naming the other plan) and were written again after a backoff."""
    kube = DeletedOnStatus()
    for i in range(2):
        kube.put(NODES, node(f"p4-{i}"))
    for name in ("a", "gone", "z"):
        kube.put(PLANS_NS, plan(name, **spec(2)))
    posted: list[tuple[str, str, str]] = []
    cache = listed(kube)
    svc = PlanService(
        kube,
        Options(plan_seconds=5, polish_seconds=0.2),
        lambda p, t, r, m: posted.append((p.name, r, m)),
        clock=lambda: NOW,
    )
    cycle = Cycle(svc, cache)
    assert sorted(cycle.run().planned) == ["ns/a", "ns/gone", "ns/z"]
    assert phase(kube, "a") == "Applied" and phase(kube, "z") == "Applied"
    assert not [e for e in posted if e[0] != "gone" and "gone" in e[2]], posted
    assert cycle.memory["uid-a"].phase is Phase.APPLIED and cycle.memory["uid-gone"].phase is Phase.ERROR


def test_a_served_plans_node_label_that_no_plan_holds_is_removed_after_the_grace() -> None:
    """A plan gone without its clean-up (its finalizer removed by hand) left its node label; the
    cycle removes it once it has been an orphan for the grace, and a listing of the plans, not the
    cache, confirms that no plan holds it. Other namespaces' keys, settings and held keys stay."""
    gone, lagging, other = (
        "gpuplan.ragnaros.io/ns.gone",
        "gpuplan.ragnaros.io/ns.new",
        "gpuplan.ragnaros.io/x.b",
    )
    setting = "gpuplan.ragnaros.io/gpu-type"
    nodes = [node(f"p4-{i}") for i in range(2)]
    for n in nodes:
        n["metadata"]["labels"].update({gone: n["metadata"]["name"], lagging: "v", other: "v"})
    kube = cluster(*nodes)
    kube.put(PLANS_NS, plan("a", **spec(2)))
    cache = listed(kube)
    kube.put(PLANS_NS, plan("new", **spec(2)))  # created after the cache listed: it lags
    svc = PlanService(kube, Options(plan_seconds=5, orphan_grace=0.5), lambda *a: None, clock=lambda: NOW)
    cycle = Cycle(svc, cache, namespaces=("ns",))

    report = cycle.run()
    assert report.planned == ["ns/a"] and labels_of(kube, "gone") == {"p4-0": "p4-0", "p4-1": "p4-1"}
    assert report.wake_in is not None and report.wake_in <= 0.5  # a cycle then removes it
    time.sleep(0.6)
    cycle.run()
    assert labels_of(kube, "gone") == {}
    after = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.items(NODES)}
    for labels in after.values():
        assert labels[lagging] == "v" and labels[other] == "v" and labels[setting] == "P4"
    assert set(labels_of(kube, "a").values()) <= {"p4-0", "p4-1"} and labels_of(kube, "a")


def test_the_pods_of_a_plan_coming_up_are_quiet_until_a_check_finds_it_ready() -> None:
    """While a plan comes up its pods change thousands of times; the cycle checks it on a timer
    of its own, so the pods' cache is told to wake no cycle for those changes. When a check
    finds it Ready, a change that landed after the check read the pods (told as quiet under
    the old set) makes the next cycle come at once."""
    from gpuplan_operator.service import Outcome

    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    kube.put(PLANS_NS, plan("d", deploy=True, gang="none", **spec(8)))
    cycle, cache = cycle_on(kube)
    report = cycle.run()
    assert report.planned == ["ns/d"]
    assert cache.coming_up == {("ns", plan_labels("d")[PLAN_LABEL])}
    assert report.wake_in is not None and report.wake_in <= cycle.options.ready_poll  # its own timer

    def ready_then_a_pod_changes(plan: PlanBody) -> Outcome:
        cache.pods.apply("ADDED", plan_pod("d-0", "p4-0", 8, "d"))  # after the check read them
        return Outcome(Phase.APPLIED, "", ready=True)

    cycle.service.check_readiness = ready_then_a_pod_changes  # type: ignore[method-assign]
    report = cycle.run()
    assert report.checked == 1 and cache.coming_up == frozenset()
    assert report.wake_in == 0.0  # the pod is looked at by a cycle that comes at once ...
    cycle.service.check_readiness = lambda plan: Outcome(Phase.APPLIED, "", ready=True)  # type: ignore[method-assign]
    report = cycle.run()
    assert report.checked == 1  # ... and then the plan is Ready with nothing new
    assert report.wake_in is None or report.wake_in > 0
    assert cycle.run().checked == 0


FLEX_KEY = "gpuplan.ragnaros.io/ns.flex"
Request = Callable[..., Any]


def unlabels_flex(method: str, path: str, body: Any) -> bool:
    """Is this request the removal of plan flex's label from a node?"""
    return method == "PATCH" and "/nodes/" in path and body["metadata"]["labels"].get(FLEX_KEY, 0) is None


def flex_then_high(wrap: Callable[[Request], Request]) -> tuple[FakeKube, Cycle, ClusterCache, Request]:
    """An elastic plan on four nodes, then a higher one that takes two of them whole; every
    request of the second cycle goes through ``wrap`` (given the fake's own ``request``, which
    is returned for reading the fake directly)."""
    kube = cluster(*[node(f"p4-{i}") for i in range(4)])  # 32 cards
    flex = {"face_feature_extract": {"P4": {"min": 8, "max": 32}}}
    kube.put(PLANS_NS, plan("flex", deploy=True, gang="none", requests=flex))
    cycle, cache = cycle_on(kube)
    cycle.run()
    assert status_of(kube, "flex")["cardsPlaced"] == 32
    request = kube.request
    kube.request = wrap(request)  # type: ignore[method-assign]
    two_nodes = {"face_image_flow": {"resourceNum": {"P4": 16}, "machineNum": {"P4": 2}}}
    kube.put(PLANS_NS, plan("high", deploy=True, gang="none", priority=10, requests=two_nodes))
    cache.plans.replace(request("GET", f"/{PLANS_NS}")["items"])
    cache.nodes.replace(request("GET", f"/{NODES}")["items"])  # flex's labels, as the watch told them
    cycle.run()
    return kube, cycle, cache, request


HIGH_KEY = "gpuplan.ragnaros.io/ns.high"


def node_patches(bodies: list[tuple[str, str, Any]]) -> list[tuple[int, str, dict[str, Any]]]:
    """(index, node, labels) of every node patch among recorded requests."""
    return [
        (i, p.rsplit("/", 1)[-1], dict(b["metadata"]["labels"]))
        for i, (m, p, b) in enumerate(bodies)
        if m == "PATCH" and "/nodes/" in p
    ]


def recording(bodies: list[tuple[str, str, Any]]) -> Callable[[Request], Request]:
    def recorded(request: Request) -> Request:
        def run(method: str, path: str, **kwargs: Any) -> Any:
            bodies.append((method, path, kwargs.get("body")))
            return request(method, path, **kwargs)

        return run

    return recorded


def test_a_node_passing_from_one_plan_to_another_is_patched_once_with_both_keys() -> None:
    """The shrinking plan's key leaves each node the higher plan takes in the patch that labels it
    for the higher plan, after the shrinking plan's Deployments there are deleted and before the
    higher plan's Deployment that selects it: no patch of its own, sent last, as it once was (300
    node patches where 250 do, at 1,000 nodes)."""
    bodies: list[tuple[str, str, Any]] = []
    kube, *_ = flex_then_high(recording(bodies))
    assert status_of(kube, "flex")["cardsPlaced"] == 16 and phase(kube, "high") == "Applied"

    patches = node_patches(bodies)
    taken = sorted(n for a in status_of(kube, "high")["allocations"] for n in a["nodes"])
    assert len(taken) == 2 and sorted(n for _, n, _ in patches) == taken  # one patch per node
    drops = [i for i, (m, p, _) in enumerate(bodies) if m == "DELETE" and "/deployments/" in p]
    for i, _, labels in patches:
        assert labels[FLEX_KEY] is None and labels[HIGH_KEY]  # both keys, one patch
        assert drops and i > max(drops)
        selecting = [
            j
            for j, (m, p, b) in enumerate(bodies)
            if m == "POST" and p.endswith("/deployments")
            and b["spec"]["template"]["spec"]["nodeSelector"].get(HIGH_KEY) == labels[HIGH_KEY]
        ]  # fmt: skip
        assert selecting and i < min(selecting)
    assert not set(taken) & set(labels_of(kube, "flex")) and set(taken) <= set(labels_of(kube, "high"))


def test_a_taker_s_label_patch_that_fails_leaves_the_giver_s_key_to_its_clean_up() -> None:
    """The patch that carries both keys is refused: the higher plan is in error (retried), and the
    shrinking plan still removes its key from the nodes it left, in a patch of its own, last."""
    from kubernetes.client.exceptions import ApiException

    bodies: list[tuple[str, str, Any]] = []

    def refusing(request: Request) -> Request:
        def run(method: str, path: str, **kwargs: Any) -> Any:
            body: Any = kwargs.get("body")
            if method == "PATCH" and "/nodes/" in path and HIGH_KEY in body["metadata"]["labels"]:
                raise ApiException(status=500, reason="Injected")
            bodies.append((method, path, body))
            return request(method, path, **kwargs)

        return run

    kube, *_ = flex_then_high(refusing)
    assert phase(kube, "high") == "Error" and phase(kube, "flex") == "Applied"
    patches = node_patches(bodies)
    assert len(patches) == 2 and all(labels == {FLEX_KEY: None} for _, _, labels in patches)
    statuses = [i for i, (m, p, _) in enumerate(bodies) if m == "PATCH" and p.endswith("/status")]
    assert min(i for i, _, _ in patches) > max(statuses)
    assert len(labels_of(kube, "flex")) == 2


def test_a_clean_up_that_fails_is_an_error_and_the_retry_unlabels_the_nodes() -> None:
    """A plan that shrinks with nobody taking its nodes (its own spec edit) removes its key from
    them last; refused, the plan is in error and its retry removes them."""
    from kubernetes.client.exceptions import ApiException

    kube = cluster(*[node(f"p4-{i}") for i in range(4)])
    machines = {"face_feature_extract": {"resourceNum": {"P4": 32}, "machineNum": {"P4": 4}}}
    kube.put(PLANS_NS, plan("flex", deploy=True, gang="none", requests=machines))
    cycle, cache = cycle_on(kube)
    cycle.run()
    assert len(labels_of(kube, "flex")) == 4
    edited = dict(kube.get_obj(PLANS_NS, "flex") or {})
    edited["metadata"] = {**edited["metadata"], "generation": 2}
    fewer = {"face_feature_extract": {"resourceNum": {"P4": 16}, "machineNum": {"P4": 2}}}
    edited["spec"] = {**edited["spec"], "requests": fewer}
    kube.put(PLANS_NS, edited)
    request = kube.request
    refuse = [True]

    def run(method: str, path: str, **kwargs: Any) -> Any:
        if refuse[0] and unlabels_flex(method, path, kwargs.get("body")):
            raise ApiException(status=500, reason="Injected")
        return request(method, path, **kwargs)

    kube.request = run  # type: ignore[method-assign]
    cache.plans.replace(request("GET", f"/{PLANS_NS}")["items"])
    cache.nodes.replace(request("GET", f"/{NODES}")["items"])
    cycle.run()
    assert phase(kube, "flex") == "Error"
    assert len(labels_of(kube, "flex")) == 4

    refuse[0] = False
    for memory in cycle.memory.values():
        memory.retry_at = 0.0
    cache.plans.replace(request("GET", f"/{PLANS_NS}")["items"])
    cache.nodes.replace(request("GET", f"/{NODES}")["items"])
    cycle.run()
    assert phase(kube, "flex") == "Applied"
    assert len(labels_of(kube, "flex")) == 2


def test_the_taker_s_priority_class_goes_out_beside_the_giver_s_drops() -> None:
    """Classes take no cards: a higher plan's class is sent while the shrinking plan's Deployments
    are deleted, not in a round after them (its Deployments need it, and wait one round less)."""
    class_sent = threading.Event()
    during_drops: list[bool] = []

    def watching(request: Request) -> Request:
        def run(method: str, path: str, **kwargs: Any) -> Any:
            if "/priorityclasses" in path and method in ("POST", "PATCH", "PUT"):
                class_sent.set()
            if method == "DELETE" and "/deployments/" in path:
                during_drops.append(class_sent.wait(2.0))  # a drop in flight waits for the class
            return request(method, path, **kwargs)

        return run

    kube, *_ = flex_then_high(watching)
    assert status_of(kube, "flex")["cardsPlaced"] == 16 and phase(kube, "high") == "Applied"
    assert during_drops and all(during_drops)


def test_a_plan_whose_drops_fail_writes_nothing_more_and_others_still_apply() -> None:
    """Its rest (ConfigMap, Deployments, the drops sent again) waits for its retry."""
    from kubernetes.client.exceptions import ApiException

    after: list[tuple[str, str]] = []
    failed = [False]

    def refusing(request: Request) -> Request:
        def run(method: str, path: str, **kwargs: Any) -> Any:
            if method == "DELETE" and "/deployments/" in path and "flex" in path and not failed[0]:
                failed[0] = True  # once: a passing error, which the retry after the backoff mends
                raise ApiException(status=500, reason="Injected")
            if failed[0] and method != "GET":
                after.append((method, path))
            return request(method, path, **kwargs)

        return run

    kube, *_ = flex_then_high(refusing)
    assert phase(kube, "flex") == "Error" and phase(kube, "high") == "Applied"
    # the failed drop's wave finishes (its other drop), nothing after it: no ConfigMap, no drop again
    again = [p for m, p in after if m == "DELETE"]
    flex_writes = [(m, p) for m, p in after if "flex" in p and m != "DELETE" and not p.endswith("/status")]
    assert not flex_writes and len(again) == len(set(again)) <= 1
    assert any(m == "POST" and p.endswith("/deployments") for m, p in after)  # high's still went
