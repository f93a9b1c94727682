"""6. Two plans share nodes without over-booking any; deleting one frees its cards for a third."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e.support import (
    Api,
    Kubectl,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
)


def units(status: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in status["allocations"]:
        for node, n in a["nodes"].items():
            out[node] = out.get(node, 0) + n * a["unitsPerInstance"]
    return out


def test_two_plans_share_the_cluster(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("share", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]

    def plan(name: str, cards: int) -> dict[str, Any]:
        # one instance of all the cards (machineNum 1): it fits only on a node with that many free
        request = {"resourceNum": {"G": cards}, "machineNum": {"G": 1}}
        spec = one_type(gpu_type, {name: request}, [operator_entry(name)], deploy=True)
        return plan_manifest(ns, name, spec)

    kubectl.apply(plan("alpha", 6))
    kubectl.apply(plan("beta", 6))
    alpha = wait_for("alpha applied", settled(api, ns, "alpha"), timeout=90)
    beta = wait_for("beta applied", settled(api, ns, "beta"), timeout=90)
    load = {n: units(alpha).get(n, 0) + units(beta).get(n, 0) for n in nodes}
    assert all(v <= 8 for v in load.values()), load
    assert sum(load.values()) == 12
    pods = live_pods(api, ns)
    assert pods and all(p["spec"].get("nodeName") for p in pods)
    assert not [p for p in pods if p["status"].get("phase") == "Pending"]

    # a third plan finds only 2 + 2 free cards: one 4-card instance does not fit
    kubectl.apply(plan("gamma", 4))
    gamma = wait_for(
        "gamma infeasible", settled(api, ns, "gamma", phase="Infeasible", ready=False), timeout=60
    )
    assert "no deployable plan" in gamma["message"]

    # deleting alpha frees its cards: gamma is re-planned and applied without being touched
    kubectl.run("delete", "gpuplan", "alpha", "-n", ns, "--timeout=60s")
    gamma = wait_for("gamma applied once alpha is gone", settled(api, ns, "gamma"), timeout=60)
    load = {n: units(gamma).get(n, 0) + units(beta).get(n, 0) for n in nodes}
    assert all(v <= 8 for v in load.values()), load
    assert all(p["spec"].get("nodeName") for p in live_pods(api, ns))
