"""5. Plans of three priorities, fixed and elastic, created, resized and deleted at once.

Twelve plans (priorities 0, 50 and 100, half of them elastic) compete for four nodes (32 cards
for about twice that asked). They are created together, half of them are resized together, a
third are deleted together. A sampler reads every pod on the nodes and every plan's reservations
several times a second: no node may ever hold more cards than it has, by either count. After the
last change every plan's status must describe its latest spec within 5 s (Applied, or
Infeasible naming why), the higher priorities must hold their cards before the lower ones, and
once all plans are deleted nothing of gpuplan may be left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from e2e.chaos.support import ChaosOperator, Figures, Sampler, converged
from e2e.support import (
    MANAGED_BY,
    PLAN_API,
    PLURAL,
    Api,
    Kubectl,
    label_key,
    labelled_nodes,
    one_type,
    operator_entry,
    plan_manifest,
    wait_for,
)

CARDS, GPU = 8, "nvidia.com/gpu"
STATUS_S = 5.0
PRIORITIES = (0, 50, 100)


def requests_of(i: int, bigger: bool = False) -> Any:
    cards = 8 if bigger else 4
    return {"min": 4, "max": cards + 4} if i % 2 else cards


def spec(gpu: str, name: str, i: int, bigger: bool = False) -> dict[str, Any]:
    priority = PRIORITIES[i % 3]
    return one_type(
        gpu, {name: {"G": requests_of(i, bigger)}}, [operator_entry(name)], deploy=True, priority=priority
    )


def answered(api: Api, ns: str, name: str) -> dict[str, Any] | None:
    plan = api.plan(ns, name) or {}
    status = plan.get("status") or {}
    if status.get("observedGeneration") != (plan.get("metadata") or {}).get("generation"):
        return None
    return dict(status) if status.get("phase") in ("Applied", "Infeasible") else None


def test_three_priorities_created_resized_and_deleted_at_once(
    api: Api, kubectl: Kubectl, ns: str, chaos_operator: ChaosOperator, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("prio", 4)
    gpu = nodes[0].rsplit("-", 1)[0]
    names = [f"p{i}" for i in range(12)]

    def held() -> dict[str, tuple[int, int, dict[str, int]]]:
        pods = {n: 0 for n in nodes}
        for n in nodes:
            for pod in api.pods_on(n):
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                for c in pod["spec"].get("containers") or []:
                    pods[n] += int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))
        by_plan: dict[str, dict[str, int]] = {n: {} for n in nodes}
        listed = api.kube.get(f"/apis/{PLAN_API}/namespaces/{ns}/{PLURAL}")  # one list: one moment
        for plan in listed.get("items") or []:
            status = plan.get("status") or {}
            units = (status.get("applied") or {}).get("units") or {}
            for n in nodes:
                if cards := int((units.get(n) or {}).get(GPU, 0)):
                    by_plan[n][f"{plan['metadata']['name']} ({status.get('phase')})"] = cards
        return {n: (pods[n], sum(by_plan[n].values()), by_plan[n]) for n in nodes}

    def create(i: int, bigger: bool = False) -> None:
        kubectl.apply(plan_manifest(ns, names[i], spec(gpu, names[i], i, bigger)))

    def resize(i: int) -> None:
        create(i, bigger=True)

    def delete(name: str) -> None:
        kubectl.run("delete", "gpuplan", name, "-n", ns, "--wait=false")

    def answer_of(name: str) -> Callable[[], dict[str, Any] | None]:
        return lambda: answered(api, ns, name)

    with Sampler(held, 0.3) as sampler, ThreadPoolExecutor(12) as pool:
        list(pool.map(create, range(12)))
        for name in names:
            wait_for(f"{name} answered", answer_of(name), timeout=120)
        gone = names[::3]
        list(pool.map(resize, range(0, 12, 2)))
        list(pool.map(delete, gone))
        last_change = time.monotonic()
        live = [n for n in names if n not in gone]
        for name in live:
            wait_for(f"{name} answered its latest spec", answer_of(name), timeout=60, interval=0.2)
        status_s = time.monotonic() - last_change
        statuses = {n: answered(api, ns, n) or {} for n in live}
        for name, status in statuses.items():
            if status["phase"] == "Applied":
                wait_for(f"{name} converged", converged(api, ns, name), timeout=90)
    worst = {n: max((s[n][0] for _, s in sampler.samples), default=0) for n in nodes}
    worst_reserved = max((s[n][1] for _, s in sampler.samples for n in nodes), default=0)
    assert len(sampler.samples) > 10
    assert all(v <= CARDS for v in worst.values()), f"pods over-committed a node: {worst}"
    over = [(t, n, s[n][2]) for t, s in sampler.samples for n in nodes if s[n][1] > CARDS]
    assert not over, f"reservations over-committed: {over[:3]}"
    # the highest priority's mins (8 + 4 + 8 + 4 cards) fit the 32: every one of its plans runs,
    # whatever the lower ones asked first
    top = [n for n in live if PRIORITIES[int(n[1:]) % 3] == max(PRIORITIES)]
    assert top and all(statuses[n]["phase"] == "Applied" for n in top), {
        n: statuses[n]["message"] for n in top
    }
    for status in statuses.values():
        if status["phase"] == "Infeasible":
            assert status["message"].startswith("no deployable plan"), status["message"]

    kubectl.run("delete", "gpuplans", "--all", "-n", ns, "--timeout=120s")
    plans_path = f"/apis/{PLAN_API}/namespaces/{ns}/{PLURAL}"
    wait_for("every plan gone", lambda: not api.kube.get(plans_path).get("items"), timeout=120)
    assert not any(labelled_nodes(api, label_key(ns, n)) for n in names)
    assert not api.deployments(ns)
    wait_for("the plans' pods gone", lambda: not api.pods(ns, MANAGED_BY), timeout=90)
    Figures.record(
        "three priorities at once",
        statuses_true_after_last_change_s=round(status_s, 1),
        worst_cards_per_node_by_pods=max(worst.values()),
        worst_cards_per_node_by_reservations=worst_reserved,
        samples=len(sampler.samples),
    )
    assert status_s <= STATUS_S, f"statuses took {status_s:.1f}s after the last change"
