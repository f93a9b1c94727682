"""1. Concurrency: 50 plans created, edited and deleted concurrently in five namespaces, sharing
six nodes (48 cards for ~60 requested, so plans compete for them).

While they live, a sampler reads every plan's reservations (``status.applied.units``) and every
pod on the nodes twice a second: no node may ever hold more cards than it has, by either count.
When the dust settles every plan has an answer for its latest spec; then all of them are deleted
at once (``kubectl delete gpuplans --all -A``) and nothing of gpuplan may be left: no plan label
on a node, no PriorityClass, ConfigMap or Deployment.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from e2e.chaos.support import ChaosOperator, Figures, Sampler
from e2e.support import (
    GROUP,
    MANAGED_BY,
    PLAN_API,
    PLURAL,
    Api,
    one_type,
    operator_entry,
    plan_manifest,
    wait_for,
)

NAMESPACES, PER_NAMESPACE, NODES, CARDS = 5, 10, 6, 8
GPU = "nvidia.com/gpu"
PC_API = "scheduling.k8s.io/v1"


@pytest.fixture
def namespaces(api: Api, ns: str) -> Iterator[list[str]]:
    """The test's namespace and four more (deleted afterwards, their plans first)."""
    extra = [f"{ns[:50]}-{i}" for i in range(1, NAMESPACES)]
    for name in extra:
        api.create("v1", "namespaces", {"metadata": {"name": name}})
    yield [ns, *extra]
    for name in extra:
        for plan in plans_in(api, name):
            api.delete(PLAN_API, PLURAL, plan["metadata"]["name"], name)
    wait_for(
        "the extra namespaces' plans gone", lambda: not any(plans_in(api, n) for n in extra), timeout=120
    )
    for name in extra:
        api.delete("v1", "namespaces", name)


def plans_in(api: Api, ns: str | None = None) -> list[dict[str, Any]]:
    path = f"/apis/{PLAN_API}" + (f"/namespaces/{ns}" if ns else "") + f"/{PLURAL}"
    return list(api.kube.get(path).get("items") or [])


def gpus(value: Any) -> int:
    return int(str(value or 0))


def overcommit(api: Api, nodes: list[str], namespaces: list[str]) -> dict[str, int]:
    """Cards over each node's allocatable: by the plans' reservations, and by bound pods."""
    allocatable = {n["metadata"]["name"]: gpus(n["status"]["allocatable"].get(GPU)) for n in api.nodes()}
    reserved = dict.fromkeys(nodes, 0)
    for plan in plans_in(api):
        for node, resources in ((plan.get("status") or {}).get("applied", {}).get("units") or {}).items():
            if node in reserved:
                reserved[node] += gpus((resources or {}).get(GPU))
    held = dict.fromkeys(nodes, 0)
    pending = 0
    for ns in namespaces:
        for pod in api.pods(ns):
            phase = (pod.get("status") or {}).get("phase")
            node = pod["spec"].get("nodeName")
            if phase in ("Succeeded", "Failed"):
                continue
            if node in held:
                held[node] += sum(
                    gpus((c.get("resources") or {}).get("limits", {}).get(GPU))
                    for c in pod["spec"]["containers"]
                )
            elif not node:
                pending += 1
    return {
        "reserved": max(reserved[n] - allocatable[n] for n in nodes),
        "pods": max(held[n] - allocatable[n] for n in nodes),
        "pending_pods": pending,
    }


def leftovers(api: Api, namespaces: list[str]) -> dict[str, list[str]]:
    """What gpuplan wrote that no live plan accounts for."""
    prefixes = tuple(f"{GROUP}/{ns}." for ns in namespaces)
    labels = [
        f"{n['metadata']['name']}:{k}"
        for n in api.nodes()
        for k in n["metadata"].get("labels", {})
        if k.startswith(prefixes)
    ]
    in_use = {
        pc
        for plan in plans_in(api)
        for pc in (plan.get("status") or {}).get("applied", {}).get("priorityClasses") or []
    }
    pcs = api.kube.get(f"/apis/{PC_API}/priorityclasses", labelSelector=MANAGED_BY).get("items") or []
    configmaps = [
        f"{ns}/{c['metadata']['name']}"
        for ns in namespaces
        for c in api.kube.get(f"/api/v1/namespaces/{ns}/configmaps", labelSelector=MANAGED_BY).get("items")
        or []
    ]
    deployments = [f"{ns}/{d['metadata']['name']}" for ns in namespaces for d in api.deployments(ns)]
    return {
        "node labels": labels,
        "priority classes": [p["metadata"]["name"] for p in pcs if p["metadata"]["name"] not in in_use],
        "configmaps": configmaps,
        "deployments": deployments,
    }


def test_fifty_plans_at_once_never_overcommit_and_leave_nothing(
    api: Api,
    namespaces: list[str],
    chaos_operator: ChaosOperator,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("conc", NODES, cards=CARDS)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    rng = random.Random(11)
    names = [(ns, f"p{i:02d}") for ns in namespaces for i in range(PER_NAMESPACE)]
    edited = set(rng.sample(names, 20))
    deleted = set(rng.sample(names, 15))

    def spec(cards: int, deploy: bool) -> dict[str, Any]:
        return one_type(gpu_type, {"svc": {"G": cards}}, [operator_entry("svc")], deploy=deploy)

    def script(ns: str, name: str, cards: int, deploy: bool) -> str:
        """One plan's life: created, maybe edited, maybe deleted, with pauses in between."""
        api.create(PLAN_API, PLURAL, plan_manifest(ns, name, spec(cards, deploy)), ns)
        if (ns, name) in edited:
            time.sleep(rng.uniform(0, 3))
            api.patch(PLAN_API, PLURAL, name, {"spec": spec(3 - cards, deploy)}, ns)
        if (ns, name) in deleted:
            time.sleep(rng.uniform(0, 3))
            api.delete(PLAN_API, PLURAL, name, ns)
        return name

    jobs = [(ns, name, 2 if i % 5 == 0 else 1, i % 2 == 0) for i, (ns, name) in enumerate(names)]
    rng.shuffle(jobs)
    started = time.monotonic()
    with Sampler(lambda: overcommit(api, nodes, namespaces), 0.5) as sampler:
        with ThreadPoolExecutor(max_workers=10) as pool:
            for future in [pool.submit(script, *job) for job in jobs]:
                future.result()
        operations = time.monotonic() - started

        def answered() -> bool:
            live = [p for ns in namespaces for p in plans_in(api, ns)]
            return len(live) == len(names) - len(deleted) and all(
                (p.get("status") or {}).get("observedGeneration") == p["metadata"]["generation"]
                and p["status"].get("phase") in ("Applied", "Infeasible")
                for p in live
            )

        wait_for("every live plan answered for its latest spec", answered, timeout=240, interval=1)
        settled_after = time.monotonic() - started
        live = [p for ns in namespaces for p in plans_in(api, ns)]
        phases = {ph: sum(1 for p in live if p["status"]["phase"] == ph) for ph in ("Applied", "Infeasible")}

        # kubectl delete gpuplans --all -A
        deleting = time.monotonic()
        with ThreadPoolExecutor(max_workers=10) as pool:
            list(
                pool.map(
                    lambda p: api.delete(PLAN_API, PLURAL, p["metadata"]["name"], p["metadata"]["namespace"]),
                    live,
                )
            )
        wait_for(
            "every plan gone",
            lambda: not any(plans_in(api, ns) for ns in namespaces),
            timeout=180,
            interval=1,
        )
        cleaned_after = time.monotonic() - deleting

    left = leftovers(api, namespaces)
    worst = {k: max(s[k] for _, s in sampler.samples) for k in ("reserved", "pods", "pending_pods")}
    Figures.record(
        "concurrency",
        plans=len(names),
        edited=len(edited),
        deleted_midway=len(deleted),
        namespaces=len(namespaces),
        nodes=NODES,
        cards=NODES * CARDS,
        samples=len(sampler.samples),
        max_overcommit_reserved_cards=worst["reserved"],
        max_overcommit_pod_cards=worst["pods"],
        max_pending_pods=worst["pending_pods"],
        answered_after_s=round(settled_after, 1),
        operations_s=round(operations, 1),
        cleaned_after_s=round(cleaned_after, 1),
        phases=phases,
        leaked={k: len(v) for k, v in left.items()},
    )
    assert len(sampler.samples) >= 20, f"too few over-commit samples: {sampler.errors[:3]}"
    assert worst["reserved"] <= 0 and worst["pods"] <= 0, f"a node was over-committed: {worst}"
    assert phases["Applied"] >= len(live) // 2, f"most plans should fit: {phases}"
    assert left == {k: [] for k in left}, f"left behind: {left}"
