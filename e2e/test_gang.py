"""All-or-nothing deploys: a plan's pods start together, or not at all (the gang scheduling gate).

Each test uses nodes of a GPU type of its own. kube-scheduler is the real one: it leaves a pod that
carries a scheduling gate alone (``PodScheduled=False``, reason ``SchedulingGated``), so a pod of
the plan is bound only after the operator lifted its gate.

What holds cards here, besides the plans: a pod bound by hand (``spec.nodeName``, as a pod some
other scheduler placed), and pods labelled as a plan's (``app.kubernetes.io/managed-by=gpuplan``)
that no live plan accounts for any more: the leaving pods of a plan that was deleted. The planner
leaves those out (their plan accounts for them), so a new plan is planned onto their cards and
must wait for them to go.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from e2e.support import (
    GROUP,
    Api,
    Kubectl,
    OperatorProcess,
    conditions,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    stays,
    wait_for,
)

GATE = f"{GROUP}/gang"
RELEASED = f"{GROUP}/released"
HOLD = "e2e.gpuplan.ragnaros.io/hold"  # the test's own finalizer: a leaving pod stays Terminating


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])


def plan_pods(api: Api, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in live_pods(api, ns) if p["metadata"]["labels"].get(f"{GROUP}/plan") == name]


def all_gated(api: Api, ns: str, name: str, count: int) -> list[dict[str, Any]] | None:
    pods = plan_pods(api, ns, name)
    return (
        pods if len(pods) == count and all(gated(p) and not p["spec"].get("nodeName") for p in pods) else None
    )


def all_bound(api: Api, ns: str, name: str, count: int) -> list[dict[str, Any]] | None:
    pods = plan_pods(api, ns, name)
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def held_pod(ns: str, name: str, node: str, cards: int, labels: dict[str, str]) -> dict[str, Any]:
    """A pod bound to ``node`` by hand, holding ``cards``."""
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(cards)}}}
            ],
        },
    }


def leaving(plan: str) -> dict[str, str]:
    """Labels of a pod of a plan that was deleted: its plan no longer accounts for it."""
    return {"app.kubernetes.io/managed-by": "gpuplan", f"{GROUP}/plan": plan}


def gang_spec(gpu_type: str, cards: int, strategy: str = "machine", **extra: Any) -> dict[str, Any]:
    return one_type(
        gpu_type, {"spread": {"G": cards}}, [operator_entry("spread", strategy)], **({"deploy": True} | extra)
    )


def event_reasons(kubectl: Kubectl, ns: str, name: str) -> set[str]:
    out = kubectl.run("get", "events", "-n", ns, "-o", "json").stdout
    items = json.loads(out).get("items") or []
    return {e.get("reason") for e in items if (e.get("involvedObject") or {}).get("name") == name}


def ready_reason(api: Api, ns: str, name: str) -> str:
    return str(conditions(api.status(ns, name)).get("Ready", {}).get("reason", ""))


def test_gang_plan_gates_its_pods_and_gang_none_does_not(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("gang", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    kubectl.apply(plan_manifest(ns, "gated", gang_spec(gpu_type, 8)))
    kubectl.apply(plan_manifest(ns, "free", gang_spec(gpu_type, 8, gang="none")))
    wait_for(
        "both plans Ready", lambda: settled(api, ns, "gated")() and settled(api, ns, "free")(), timeout=90
    )

    templates = {
        d["metadata"]["labels"][f"{GROUP}/plan"]: d["spec"]["template"]["spec"] for d in api.deployments(ns)
    }
    assert templates["gated"].get("schedulingGates") == [{"name": GATE}]
    assert "schedulingGates" not in templates["free"]
    (released,) = plan_pods(api, ns, "gated")
    (free,) = plan_pods(api, ns, "free")
    assert RELEASED in released["metadata"].get("annotations", {})  # its gate was lifted by the operator
    assert not gated(released) and released["spec"].get("nodeName")
    assert RELEASED not in (free["metadata"].get("annotations") or {}) and free["spec"].get("nodeName")


def owners(deployment: dict[str, Any]) -> set[tuple[str, str]]:
    """Who owns the Deployment's fields, and how (its status subresource left out)."""
    entries = deployment["metadata"].get("managedFields") or []
    return {(m["manager"], m["operation"]) for m in entries if not m.get("subresource")}


def test_a_created_deployment_loses_what_its_plan_stops_setting(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    """A new Deployment is created whole, and owned by that create; the first change moves the
    ownership to the operator's apply, so a field the plan no longer sets (the gang gate, once
    ``gang: none``) leaves it, rather than staying owned by the create."""
    (node,) = make_nodes("ungate", 1)
    gpu_type = node.rsplit("-", 1)[0]
    kubectl.apply(plan_manifest(ns, "toggle", gang_spec(gpu_type, 8)))
    wait_for("the gated plan Ready", settled(api, ns, "toggle"), timeout=90)
    (created,) = api.deployments(ns)
    assert created["spec"]["template"]["spec"].get("schedulingGates") == [{"name": GATE}]
    assert ("gpuplan-operator", "Update") in owners(created)

    kubectl.apply(plan_manifest(ns, "toggle", gang_spec(gpu_type, 8, gang="none")))

    def ungated() -> dict[str, Any] | None:
        (d,) = api.deployments(ns)
        return d if "schedulingGates" not in d["spec"]["template"]["spec"] else None

    changed = wait_for("the gate gone from the Deployment", ungated, timeout=60)
    assert changed["metadata"]["name"] == created["metadata"]["name"]  # the same one, changed
    assert ("gpuplan-operator", "Apply") in owners(changed)
    assert ("gpuplan-operator", "Update") not in owners(changed)
    wait_for("the plan Ready again", settled(api, ns, "toggle"), timeout=90)


def test_a_foreign_pod_bound_after_planning_holds_back_every_pod_of_the_plan(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    a, b = make_nodes("gang", 2)
    gpu_type = a.rsplit("-", 1)[0]
    # a leaving pod of a deleted plan holds b: the plan is planned onto b and waits for it
    api.create("v1", "pods", held_pod(ns, "leaving", b, 8, leaving("gone")), ns=ns)
    kubectl.apply(plan_manifest(ns, "gang", gang_spec(gpu_type, 16)))  # two 8-card instances, a and b
    wait_for("the plan's two pods, gated", lambda: all_gated(api, ns, "gang", 2), timeout=60)
    wait_for("Ready Waiting", lambda: ready_reason(api, ns, "gang") == "Waiting", timeout=30)

    # after planning, a foreign pod (no plan's) is bound to a; then b's leaving pod goes
    api.create("v1", "pods", held_pod(ns, "foreign", a, 4, {}), ns=ns)
    api.delete("v1", "pods", "leaving", ns=ns, grace=0)
    wait_for(
        "the leaving pod gone", lambda: not [p for p in api.pods_on(b) if p["metadata"]["name"] == "leaving"]
    )
    stays(
        "every pod of the plan gated (b alone has room; a lacks 4)",
        lambda: bool(all_gated(api, ns, "gang", 2)),
        5,
    )
    ready = conditions(api.status(ns, "gang"))["Ready"]
    assert ready["reason"] == "Waiting" and f"{a} needs 8 nvidia.com/gpu, 4 free" in ready["message"], ready

    api.delete("v1", "pods", "foreign", ns=ns, grace=0)
    pods = wait_for(
        "both pods bound once the foreign pod is gone", lambda: all_bound(api, ns, "gang", 2), timeout=30
    )
    assert sorted(p["spec"]["nodeName"] for p in pods) == [a, b]
    wait_for("Ready", settled(api, ns, "gang"), timeout=30)
    wait_for(
        "Waiting and Released Events", lambda: {"Waiting", "Released"} <= event_reasons(kubectl, ns, "gang")
    )


def test_hand_over_from_a_deleted_plan_waits_for_its_terminating_pods(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    (node,) = make_nodes("gang", 1)
    gpu_type = node.rsplit("-", 1)[0]
    kubectl.apply(plan_manifest(ns, "old", gang_spec(gpu_type, 8)))
    wait_for("the old plan Ready", settled(api, ns, "old"), timeout=60)
    (old_pod,) = plan_pods(api, ns, "old")
    name = old_pod["metadata"]["name"]
    api.patch("v1", "pods", name, {"metadata": {"finalizers": [HOLD]}}, ns=ns)

    kubectl.run("delete", "-n", ns, "gpuallocationplans/old", "--wait=false")
    wait_for("the old plan gone", lambda: api.plan(ns, "old") is None, timeout=60)
    api.delete("v1", "pods", name, ns=ns, grace=0)  # its Deployment went; the finalizer holds the pod

    def terminating() -> bool:
        pod = api.kube.get_or_none(f"/api/v1/namespaces/{ns}/pods/{name}")
        return bool(pod and pod["metadata"].get("deletionTimestamp") and pod["spec"].get("nodeName") == node)

    wait_for("the old pod Terminating on the node", terminating, timeout=30)
    kubectl.apply(plan_manifest(ns, "new", gang_spec(gpu_type, 8)))
    wait_for("the new plan's pod, gated", lambda: all_gated(api, ns, "new", 1), timeout=60)

    def gated_by_the_scheduler() -> bool:
        pods = all_gated(api, ns, "new", 1)
        if not pods:
            return False
        scheduled = [
            c for c in pods[0].get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"
        ]
        return (
            bool(scheduled)
            and scheduled[0]["status"] == "False"
            and scheduled[0]["reason"] == "SchedulingGated"
        )

    wait_for("PodScheduled=False, reason SchedulingGated", gated_by_the_scheduler, timeout=30)
    wait_for("Ready Waiting", lambda: ready_reason(api, ns, "new") == "Waiting", timeout=30)
    stays(
        "the new pod gated while the old one holds the cards",
        lambda: terminating() and gated_by_the_scheduler(),
        5,
    )
    assert f"{node} needs 8 nvidia.com/gpu, 0 free" in conditions(api.status(ns, "new"))["Ready"]["message"]

    api.patch("v1", "pods", name, {"metadata": {"finalizers": None}}, ns=ns)
    freed = time.monotonic()
    wait_for("the new plan's pod bound", lambda: all_bound(api, ns, "new", 1), timeout=30)
    took = time.monotonic() - freed
    print(f"\nhand-over: the new pod was bound {took:.1f}s after the finalizer's removal")
    assert took < 15
    wait_for("the new plan Ready", settled(api, ns, "new"), timeout=30)


def test_an_operator_killed_half_way_through_a_release_finishes_it(
    api: Api, kubectl: Kubectl, ns: str, operator: OperatorProcess, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("gang", 4)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    api.create("v1", "pods", held_pod(ns, "leaving", nodes[0], 8, leaving("gone")), ns=ns)
    kubectl.apply(plan_manifest(ns, "gang", gang_spec(gpu_type, 4, "service")))  # 4 pods, one per node
    wait_for("four pods, gated", lambda: all_gated(api, ns, "gang", 4), timeout=60)
    wait_for("Ready Waiting", lambda: ready_reason(api, ns, "gang") == "Waiting", timeout=30)

    operator.stop()
    api.delete("v1", "pods", "leaving", ns=ns, grace=0)
    wait_for("the leaving pod gone", lambda: not api.pods_on(nodes[0]))
    # the restarted operator dies right after its second write: at most one status write comes
    # before the release (Ready's message), so it lifts one or two of the four gates
    mark = operator.mark()
    operator.start(extra_env={"GPUPLAN_FAULT_EXIT_AFTER_WRITES": "2"}, wait_healthy=False)
    wait_for("the operator to die mid-release", lambda: operator.exited() is not None, timeout=60)
    assert "GPUPLAN_FAULT_EXIT_AFTER_WRITES=2 reached" in operator.log_since(mark)
    pods = plan_pods(api, ns, "gang")
    released = [p for p in pods if not gated(p)]
    assert 1 <= len(released) <= 2 and len(pods) == 4, [p["metadata"]["name"] for p in released]

    operator.start()
    bound = wait_for(
        "all four pods bound after the restart", lambda: all_bound(api, ns, "gang", 4), timeout=60
    )
    assert sorted(p["spec"]["nodeName"] for p in bound) == sorted(nodes)
    assert all(RELEASED in p["metadata"]["annotations"] for p in bound)
    wait_for("Ready", settled(api, ns, "gang"), timeout=30)


def test_released_pods_not_scheduled_in_time_get_their_plan_replanned(
    api: Api, kubectl: Kubectl, ns: str, operator: OperatorProcess, make_nodes: Callable[..., list[str]]
) -> None:
    """The safety net: a pod of the plan released 10 minutes ago (past ``--gang-timeout``) and still
    not bound. The pod is the test's own (it asks more cards than the node has, so it stays
    Pending), standing for a released pod whose cards something took in between."""
    (node,) = make_nodes("gang", 1)
    gpu_type = node.rsplit("-", 1)[0]
    kubectl.apply(plan_manifest(ns, "gang", gang_spec(gpu_type, 4)))
    wait_for("the plan Ready", settled(api, ns, "gang"), timeout=60)
    mark = operator.mark()
    stuck = held_pod(
        ns, "stuck", node, 16, {"app.kubernetes.io/managed-by": "gpuplan", f"{GROUP}/plan": "gang"}
    )
    del stuck["spec"]["nodeName"]
    stuck["spec"]["nodeSelector"] = {f"{GROUP}/{ns}.gang": node}
    released = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    stuck["metadata"]["annotations"] = {RELEASED: released}
    api.create("v1", "pods", stuck, ns=ns)

    wait_for(
        "a TimedOut Event on the plan", lambda: "TimedOut" in event_reasons(kubectl, ns, "gang"), timeout=30
    )
    wait_for(
        "the re-plan it asked for",
        lambda: (
            "re-planning around what took their cards" in operator.log_since(mark)
            and f"{ns}/gang" in operator.log_since(mark)
        ),
        timeout=30,
    )
    stays(
        "one re-plan per timeout, not one per round",
        lambda: operator.log_since(mark).count("not scheduled in time") == 1,
        4,
    )
    api.delete("v1", "pods", "stuck", ns=ns, grace=0)


def test_two_pods_deleted_at_once_are_each_released_when_their_node_has_room(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    """Both single-replica pods of a running plan are deleted at once (a node drained, a pod
    deleted by hand); their replacements are pods of instance sets that had started, so each one
    goes as soon as its own node has room, not when both have."""
    a, b = make_nodes("gang", 2)
    gpu_type = a.rsplit("-", 1)[0]
    kubectl.apply(plan_manifest(ns, "gang", gang_spec(gpu_type, 16)))  # two 8-card instances, a and b
    wait_for("the plan Ready", settled(api, ns, "gang"), timeout=60)
    old = {p["metadata"]["name"] for p in plan_pods(api, ns, "gang")}
    assert len(old) == 2
    api.create("v1", "pods", held_pod(ns, "foreign", b, 8, {}), ns=ns)  # bound by hand: b is full
    for name in old:
        api.delete("v1", "pods", name, ns=ns, grace=0)

    def replaced() -> dict[str, dict[str, Any]] | None:
        pods = [p for p in plan_pods(api, ns, "gang") if p["metadata"]["name"] not in old]
        by_node = {p["spec"]["nodeSelector"][f"{GROUP}/{ns}.gang"]: p for p in pods}
        return by_node if len(pods) == 2 and by_node.get(a, {}).get("spec", {}).get("nodeName") else None

    pods = wait_for("a's new pod bound while b's waits", replaced, timeout=30)
    assert gated(pods[b]) and not pods[b]["spec"].get("nodeName")
    stays(
        "b's new pod gated while the foreign pod holds b",
        lambda: all(
            gated(p)
            for p in plan_pods(api, ns, "gang")
            if p["spec"]["nodeSelector"].get(f"{GROUP}/{ns}.gang") == b
        ),
        4,
    )
    api.delete("v1", "pods", "foreign", ns=ns, grace=0)
    wait_for("both new pods bound once b is free", lambda: all_bound(api, ns, "gang", 2), timeout=30)
    wait_for("Ready", settled(api, ns, "gang"), timeout=30)


def ragnaros_pod(ns: str, entry: dict[str, Any], index: int) -> dict[str, Any]:
    """A pod of a flamewaker entry of the plan's values.yaml, made as Ragnaros makes it: the entry's
    podAttributes (node selector, priority class, the gang gate) and containerAttributes, labels of
    its own (none of the plan's)."""
    container = {"name": "flamewaker", "image": entry.get("image", "busybox")}
    container.update(entry.get("containerAttributes") or {})
    return {
        "metadata": {
            "name": f"{entry['name']}-{index}"[:63].rstrip("-."),
            "namespace": ns,
            "labels": {"app": "ragnaros"},
        },
        "spec": {**entry["podAttributes"], "terminationGracePeriodSeconds": 0, "containers": [container]},
    }


def test_pods_ragnaros_creates_from_values_yaml_start_only_when_all_of_the_plan_can(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    """No Deployments: Ragnaros creates the pods from the flamewaker entries, whose podAttributes
    carry the gate. The operator releases them by the plan's node label key, only once every node
    of the plan has the cards for all of its instances, including those not created yet."""
    a, b = make_nodes("gang", 2)
    gpu_type = a.rsplit("-", 1)[0]
    key = f"{GROUP}/{ns}.gang"
    kubectl.apply(plan_manifest(ns, "gang", gang_spec(gpu_type, 16, deploy=False)))
    wait_for("the plan Applied", settled(api, ns, "gang", ready=False), timeout=60)
    assert not api.deployments(ns)
    cm = wait_for("its values.yaml", lambda: api.configmap(ns, "gang-flamewakers"), timeout=30)
    entries = yaml.safe_load(cm["data"]["values.yaml"])["flamewakers"]
    assert all(e["podAttributes"]["schedulingGates"] == [{"name": GATE}] for e in entries)
    by_node = {e["podAttributes"]["nodeSelector"][key]: e for e in entries}
    assert sorted(by_node) == sorted([a, b]) and all(e["instanceNumber"] == 1 for e in entries)

    def ragnaros_pods() -> list[dict[str, Any]]:
        return [p for p in api.pods(ns, "app=ragnaros") if not p["metadata"].get("deletionTimestamp")]

    api.create("v1", "pods", held_pod(ns, "foreign", b, 4, {}), ns=ns)  # after planning: b lacks 4
    api.create("v1", "pods", ragnaros_pod(ns, by_node[a], 0), ns=ns)  # a has room; b's pod not there yet
    stays(
        "a's pod gated: b lacks the cards of the instance not created yet",
        lambda: len(ragnaros_pods()) == 1 and all(gated(p) for p in ragnaros_pods()),
        5,
    )
    api.create("v1", "pods", ragnaros_pod(ns, by_node[b], 0), ns=ns)
    stays(
        "both pods gated while b lacks 4 cards",
        lambda: len(ragnaros_pods()) == 2 and all(gated(p) for p in ragnaros_pods()),
        3,
    )
    api.delete("v1", "pods", "foreign", ns=ns, grace=0)

    def bound() -> list[dict[str, Any]] | None:
        pods = ragnaros_pods()
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for("both pods bound once b is free", bound, timeout=30)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted([a, b])
    assert all(RELEASED in p["metadata"]["annotations"] for p in pods)
