"""readiness.py: Ready means every owned pod is bound to its planned node."""

from __future__ import annotations

from typing import Any

from gpuplan_operator.readiness import Verdicts, gates_waiting, readiness

KEY = "gpuplan.ragnaros.io/ns.p"


def containers(cards: int) -> list[dict[str, Any]]:
    return [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": cards}}}]


def deployment(name: str, replicas: int, node: str, cards: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"fw": name}},
            "template": {"spec": {"nodeSelector": {KEY: node}, "containers": containers(cards)}},
        },
    }


def pod(name: str, fw: str, node: str | None, deleting: bool = False, cards: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"fw": fw}}
    if deleting:
        meta["deletionTimestamp"] = "now"
    status = {
        "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/2 nodes are available"}]
    }
    spec: dict[str, Any] = {"nodeSelector": {KEY: "n1"}, "containers": containers(cards)}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {} if node else status}


def test_all_bound_is_ready() -> None:
    r = readiness([deployment("a", 2, "n1")], [pod("a1", "a", "n1"), pod("a2", "a", "n1")], KEY, True)
    assert r.ready and r.reason == "AllScheduled" and r.message.startswith("2/2")


def test_pending_pods_are_named_with_the_scheduler_message() -> None:
    r = readiness([deployment("a", 2, "n1")], [pod("a1", "a", "n1"), pod("a2", "a", None)], KEY, True)
    assert not r.ready and r.reason == "Pending"
    assert "a2 (0/2 nodes are available)" in r.message


def test_missing_pods_and_terminating_pods() -> None:
    r = readiness([deployment("a", 2, "n1")], [pod("a1", "a", "n1", deleting=True)], KEY, True)
    assert not r.ready and "2 pod(s) not created yet" in r.message


def test_a_pod_on_another_node_is_misplaced() -> None:
    r = readiness([deployment("a", 1, "n1")], [pod("a1", "a", "n2")], KEY, True)
    assert not r.ready and r.reason == "Misplaced"


def test_a_pod_of_the_old_size_does_not_count() -> None:
    old = pod("a-old", "a", "n1", cards=8)
    assert not readiness([deployment("a", 1, "n1", cards=6)], [old], KEY, True).ready
    assert readiness(
        [deployment("a", 1, "n1", cards=6)], [old, pod("a-new", "a", "n1", cards=6)], KEY, True
    ).ready


def test_without_deploy_there_is_nothing_to_schedule() -> None:
    assert readiness([], [], KEY, False).ready


def test_gated_pods_make_the_plan_wait_with_the_decisions_words() -> None:
    gated = pod("p1", "d1", None)
    gated["spec"]["schedulingGates"] = [{"name": "gpuplan.ragnaros.io/gang"}]
    deps = [deployment("d1", 1, "n1")]
    said = readiness(deps, [gated], KEY, deploy=True, waiting="n1 needs 8 nvidia.com/gpu, 2 free")
    assert (said.ready, said.reason, said.message) == (False, "Waiting", "n1 needs 8 nvidia.com/gpu, 2 free")
    unsaid = readiness(deps, [gated], KEY, deploy=True)
    assert unsaid.reason == "Waiting" and unsaid.message.startswith("1 pod(s) gated")


def test_a_released_pod_pending_is_pending_not_waiting() -> None:
    released = pod("p1", "d1", None)
    said = readiness([deployment("d1", 1, "n1")], [released], KEY, deploy=True, waiting="stale words")
    assert said.reason == "Pending"


def test_gates_waiting_is_what_readiness_says_first_and_needs_no_deployments() -> None:
    gated = pod("p1", "d1", None)
    gated["spec"]["schedulingGates"] = [{"name": "gpuplan.ragnaros.io/gang"}]
    leaving = pod("p0", "d1", None, deleting=True)
    leaving["spec"]["schedulingGates"] = [{"name": "gpuplan.ragnaros.io/gang"}]
    bound = pod("p2", "d1", "n1")
    waits = gates_waiting([gated, leaving, bound], "n1 needs 8 nvidia.com/gpu, 2 free")
    assert waits == readiness(
        [deployment("d1", 2, "n1")], [gated, leaving, bound], KEY, True, waits.message if waits else None
    )
    assert waits is not None and waits.reason == "Waiting" and not waits.ready
    assert gates_waiting([leaving, bound]) is None  # a gated pod on its way out waits for nothing


def test_a_check_reuses_the_verdicts_of_deployments_whose_objects_did_not_change() -> None:
    deps = [deployment("a", 1, "n1"), deployment("b", 1, "n1")]
    pods = [pod("a1", "a", "n1"), pod("b1", "b", None)]
    kept = Verdicts()
    first = readiness(deps, pods, KEY, True, kept=kept)
    assert not first.ready and first.message.startswith("1/2")
    assert readiness(deps, pods, KEY, True, kept=kept) == first
    assert kept.hits == 2  # both Deployments, the second time
    # the cache replaces a pod that changes: the new object is compared again, the other reused
    bound = pod("b1", "b", "n1")
    again = readiness(deps, [pods[0], bound], KEY, True, kept=kept)
    assert again.ready and again.message.startswith("2/2") and kept.hits == 3
    # a pod gone, and one of another template (a resize): nothing reused hides either
    assert readiness(deps, [pods[0]], KEY, True, kept=kept).message.startswith("1/2")
    resized = pod("b2", "b", "n1", cards=2)
    assert "b: 1 pod(s) not created yet" in readiness(deps, [pods[0], resized], KEY, True, kept=kept).message


def test_verdicts_of_deployments_no_longer_the_plans_are_dropped() -> None:
    kept = Verdicts()
    a, b = deployment("a", 1, "n1"), deployment("b", 1, "n1")
    pods = [pod("a1", "a", "n1"), pod("b1", "b", "n1")]
    readiness([a, b], pods, KEY, True, kept=kept)
    readiness([a], pods, KEY, True, kept=kept)
    kept.hits = 0
    assert readiness([a, b], pods, KEY, True, kept=kept).ready
    assert kept.hits == 1  # b was forgotten and decided again
