"""2. Seed 001's case: pods of 5, 4, 4 and 3 cards on two 8-card nodes, created in the worst order.

Without the operator's labels and priorities kube-scheduler spreads the first two 4-card pods over
both nodes, and the 5-card pod then fits nowhere. With the operator's output (each pod pinned to
its planned node by the plan's node label, larger pods on higher PriorityClasses) the same pods,
in the same order, all schedule: 5+3 on one node, 4+4 on the other.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from e2e.support import (
    TYPE_LABEL,
    Api,
    Kubectl,
    label_key,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
)

WORST_ORDER = (4, 4, 5, 3)
REQUESTS = {"five": 5, "four_a": 4, "four_b": 4, "three": 3}


def pod(
    name: str, cards: int, node_selector: Mapping[str, str], priority_class: str | None = None
) -> dict[str, Any]:
    # a CPU request makes kube-scheduler's least-allocated scoring prefer the emptier node, as
    # real pods do; it is what spreads the two 4-card pods
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": "fake",
                "resources": {"limits": {"nvidia.com/gpu": str(cards)}, "requests": {"cpu": "4"}},
            }
        ],
        "nodeSelector": dict(node_selector),
        "terminationGracePeriodSeconds": 0,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"e2e": "seed001"}},
        "spec": spec,
    }


def scheduled_or_stuck(api: Api, ns: str, name: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        p = next((p for p in api.pods(ns) if p["metadata"]["name"] == name), None)
        if p is None:
            return None
        if p["spec"].get("nodeName"):
            return str(p["spec"]["nodeName"])
        for c in p["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return "PENDING"
        return None

    return probe


def create_in_order(api: Api, ns: str, pods: list[dict[str, Any]]) -> dict[str, str]:
    """Create pods one by one, each after the previous was scheduled or found unschedulable."""
    where = {}
    for p in pods:
        api.create("v1", "pods", p, ns)
        name = p["metadata"]["name"]
        where[name] = wait_for(
            f"pod {name} scheduled or unschedulable", scheduled_or_stuck(api, ns, name), timeout=60
        )
    return where


def delete_pods(api: Api, ns: str, names: list[str]) -> None:
    for name in names:
        api.delete("v1", "pods", name, ns, grace=0)
    wait_for("test pods gone", lambda: not [p for p in api.pods(ns, "e2e=seed001")], timeout=60)


def test_5_4_4_3_on_two_8_card_nodes(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    gpu_type = f"s001-{uuid.uuid4().hex[:6]}"
    nodes = make_nodes("s001", 2, cards=8, gpu_type=gpu_type)

    # without the operator: only the GPU type selects nodes, no priorities; one pod strands
    plain = [pod(f"plain-{i}-{c}", c, {TYPE_LABEL: gpu_type}) for i, c in enumerate(WORST_ORDER)]
    where = create_in_order(api, ns, plain)
    stranded = [n for n, w in where.items() if w == "PENDING"]
    assert stranded == ["plain-2-5"], where
    delete_pods(api, ns, list(where))

    # with the operator's plan: the same pods, from its values.yaml entries, in the same order
    spec = one_type(
        gpu_type,
        {op: {"resourceNum": {"G": c}, "machineNum": {"G": 1}} for op, c in REQUESTS.items()},
        [operator_entry(op) for op in REQUESTS],
    )
    kubectl.apply(plan_manifest(ns, "seed001", spec))
    status = wait_for("the plan applied", settled(api, ns, "seed001"), timeout=90)
    assert status["cards"] == "16/16"
    loads: dict[str, int] = {}
    for a in status["allocations"]:
        for node, n in a["nodes"].items():
            loads[node] = loads.get(node, 0) + n * a["unitsPerInstance"]
    assert loads == {nodes[0]: 8, nodes[1]: 8}

    cm = api.configmap(ns, "seed001-flamewakers")
    assert cm is not None
    entries = yaml.safe_load(cm["data"]["values.yaml"])["flamewakers"]
    by_cards: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        by_cards.setdefault(e["containerAttributes"]["resources"]["limits"]["nvidia.com/gpu"], []).append(e)
    pinned = []
    for i, cards in enumerate(WORST_ORDER):
        e = by_cards[cards].pop()
        attrs = e["podAttributes"]
        pinned.append(pod(f"pinned-{i}-{cards}", cards, attrs["nodeSelector"], attrs["priorityClassName"]))
    key = label_key(ns, "seed001")
    planned = {p["metadata"]["name"]: p["spec"]["nodeSelector"][key] for p in pinned}
    where = create_in_order(api, ns, pinned)
    assert where == planned, f"scheduled {where}, planned {planned}"
    delete_pods(api, ns, list(where))

    # and the operator's own Deployments (deploy: true): every pod scheduled where planned
    kubectl.run("patch", "gpuplan", "seed001", "-n", ns, "--type=merge", "-p", '{"spec":{"deploy":true}}')
    wait_for("the deployed plan Ready", settled(api, ns, "seed001"), timeout=90)
    pods = live_pods(api, ns)
    assert len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)
