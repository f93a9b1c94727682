"""3. Node changes re-plan: cordoned or deleted nodes are left and pods move; a new node moves nothing.

One service-strategy request of 4 cards on nodes of its own type. The service strategy spreads
over as many nodes as it can (k instances, k <= usable nodes): 4 x 1 card on four nodes; 2 x 2 on
two or three nodes. Adding a third usable node to two changes the score (p*k/n) but no split is
better, so the re-plan keeps every instance where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e.support import (
    Api,
    Kubectl,
    fake_node,
    label_key,
    labelled_nodes,
    node_ready,
    one_type,
    operator_entry,
    placement,
    plan_manifest,
    settled,
    wait_for,
)


def nodes_of(status: dict[str, Any]) -> dict[str, int]:
    (alloc,) = status["allocations"]
    return dict(alloc["nodes"])


def moved_off(api: Api, ns: str, gone: str) -> Callable[[], dict[str, Any] | None]:
    """Settled, Ready, and nothing of the plan left on node ``gone`` (allocations, pods, label)."""

    def probe() -> dict[str, Any] | None:
        status = settled(api, ns, "spread")()
        if not status or gone in nodes_of(status):
            return None
        where = placement(api, ns, "spread")
        if gone in where.values() or "" in where.values():
            return None
        if gone in labelled_nodes(api, label_key(ns, "spread")):
            return None
        return status

    return probe


def test_cordon_delete_and_add_nodes(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("replan", 4)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"spread": {"G": 4}}, [operator_entry("spread", "service")], deploy=True)
    kubectl.apply(plan_manifest(ns, "spread", spec))
    status = wait_for("4 x 1 card on 4 nodes", settled(api, ns, "spread"), timeout=90)
    assert nodes_of(status) == dict.fromkeys(nodes, 1)
    assert sorted(placement(api, ns, "spread").values()) == nodes

    # cordon: the plan leaves the node, 2 x 2 cards on two of the three others
    kubectl.run("cordon", nodes[3])
    status = wait_for(f"the plan off cordoned {nodes[3]}", moved_off(api, ns, nodes[3]), timeout=90)
    (alloc,) = status["allocations"]
    assert alloc["instances"] == 2 and alloc["unitsPerInstance"] == 2

    # delete a node that holds an instance: its instance moves to the free one
    victim = sorted(nodes_of(status))[0]
    api.delete("v1", "nodes", victim)
    status = wait_for(f"the plan off deleted {victim}", moved_off(api, ns, victim), timeout=90)
    assert len(nodes_of(status)) == 2
    before = nodes_of(status)
    deployments = {
        d["metadata"]["name"]: (d["metadata"]["uid"], d["metadata"]["generation"])
        for d in api.deployments(ns)
    }

    # a node appears: usable nodes 2 -> 3 changes the score, not the best split: nothing moves
    api.create("v1", "nodes", fake_node(f"{gpu_type}-new", gpu_type))
    wait_for("the new node Ready", lambda: node_ready(api.node(f"{gpu_type}-new")), timeout=60)
    usable = 3
    status = wait_for(
        "the re-plan for 3 usable nodes",
        lambda: (s := settled(api, ns, "spread")()) and abs(s["score"] - 4 * 2 / usable) < 1e-6 and s,
        timeout=60,
    )
    assert nodes_of(status) == before, "adding a node moved instances"
    after = {
        d["metadata"]["name"]: (d["metadata"]["uid"], d["metadata"]["generation"])
        for d in api.deployments(ns)
    }
    assert after == deployments, "adding a node rewrote Deployments"
    api.delete("v1", "nodes", f"{gpu_type}-new")


def test_an_instance_resized_in_place_is_rescheduled(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    """Same node, same Deployment, other card count: the old pod must go before the new one fits.

    Growing is helped by priorities (the larger pod preempts); shrinking is not, so only replacing
    the pod (not rolling it) gets there.
    """
    (node,) = make_nodes("resize", 1)
    gpu_type = node.rsplit("-", 1)[0]

    def spec(cards: int) -> dict[str, Any]:
        request = {"resourceNum": {"G": cards}, "machineNum": {"G": 1}}
        return one_type(gpu_type, {"solo": request}, [operator_entry("solo")], deploy=True)

    for cards in (6, 8, 5):
        kubectl.apply(plan_manifest(ns, "solo", spec(cards)))
        status = wait_for(f"{cards} cards applied", settled(api, ns, "solo"), timeout=60)
        assert status["cards"] == f"{cards}/{cards}"

        def one_pod(cards: int = cards) -> bool:
            pods = [p for p in api.pods(ns) if not p["metadata"].get("deletionTimestamp")]
            limits = [p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p in pods]
            return limits == [str(cards)] and pods[0]["spec"].get("nodeName") == node

        wait_for(f"one {cards}-card pod on {node}", one_pod, timeout=60)
