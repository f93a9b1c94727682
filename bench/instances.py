"""Benchmark instances, generated from a fixed seed so every run plans the same cluster."""

from __future__ import annotations

import random
from math import prod
from typing import Any

from planner.base.strategies import divisors

TYPES = ("P4", "T4", "A10", "L4")


def nodes_doc(per_type: dict[str, int], rng: random.Random, used: list[int]) -> dict[str, Any]:
    items = []
    for typ, n in per_type.items():
        for i in range(n):
            name = f"{typ.lower()}-{i:03d}"
            items.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": {"gpuplan.ragnaros.io/gpu-type": typ}},
                    "status": {"allocatable": {"nvidia.com/gpu": str(8 - rng.choice(used))}},
                }
            )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def plan_doc(name: str, types: list[str], requests: list[tuple[str, str, int, int]]) -> dict[str, Any]:
    """requests: (strategy, type, cards, machineNum or 0)."""
    operators, reqs = [], {}
    for i, (strategy, typ, cards, machines) in enumerate(requests):
        op = f"op{i:03d}"
        operators.append({"name": op, "keyStrategy": strategy, "services": {"key": op.replace("op", "svc-")}})
        reqs[op] = {"resourceNum": {typ: cards}, "machineNum": {typ: machines}} if machines else {typ: cards}
    return {
        "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
        "kind": "GpuAllocationPlan",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "resources": [{"name": t, "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": t}} for t in types],
            "operators": operators,
            "requests": reqs,
        },
    }


def option_count(strategy: str, cards: int, nodes: int, largest: int = 8) -> int:
    if strategy == "single":
        return 1
    ks = [k for k in divisors(cards) if cards // k <= largest]
    if strategy == "service":
        ks = [k for k in ks if k <= nodes]
    return len(ks)


def medium() -> tuple[dict[str, Any], dict[str, Any], int]:
    """Two types, 20 nodes, 18 requests: about 3 million combinations for the seed's method."""
    rng = random.Random(7)
    nodes = nodes_doc({"P4": 10, "T4": 10}, rng, [0, 0, 0, 2, 4])
    reqs = []
    for typ in ("P4", "T4"):
        reqs += [
            ("machine", typ, 12, 0), ("machine", typ, 8, 0), ("service", typ, 8, 0),
            ("service", typ, 4, 0), ("machine", typ, 2, 0), ("service", typ, 3, 0),
            ("service", typ, 2, 0), ("single", typ, 3, 0), ("machine", typ, 4, 2),
        ]  # fmt: skip
    combos = prod(option_count(s, c, 10) if not m else 1 for s, _, c, m in reqs)
    return plan_doc("medium", ["P4", "T4"], reqs), nodes, combos


def large(tight: bool = False) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Three types × 120 nodes, 80 requests, nodes partly used.

    The plain case asks for about 70% of the free cards and is answered by the fast path; the
    tight one asks for about 95% on fragmented nodes, so the best splits do not fit and the exact
    search has to prove what does.
    """
    rng = random.Random(153 if tight else 11)  # 153: every type 96-98% full
    used = [0, 1, 2, 3, 4, 5, 6, 7, 8] if tight else [0, 0, 0, 0, 2, 3, 4, 5, 8]
    nodes = nodes_doc({t: 120 for t in TYPES[:3]}, rng, used)
    sizes = [8, 12, 16, 16, 20, 24, 32] if tight else [4, 6, 8, 8, 12, 16, 16, 24, 32]
    reqs = []
    for i in range(80):
        typ = TYPES[i % 3]
        strategy = rng.choice(["machine", "machine", "service", "service", "single", "special"])
        cards = rng.choice(sizes)
        machines = 0
        if strategy == "special":
            strategy = "machine"
            machines = rng.choice([k for k in divisors(cards) if cards // k <= 8])
        reqs.append((strategy, typ, cards, machines))
    combos = prod(option_count(s, c, 120) if not m else 1 for s, _, c, m in reqs)
    return plan_doc("large", list(TYPES[:3]), reqs), nodes, combos


def scale(
    nodes: int, requests: int | None, fill: float, seed: int = 1, types: int = 4
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """``nodes`` nodes over ``types`` card types, asking for about ``fill`` of the free cards.

    Nodes are partly used (0-8 cards free); requests mix every strategy and sizes from 1 to 32
    cards, including fixed machine counts. With ``requests`` None, requests are drawn until the
    fill is reached (so the count grows with the cluster); with a number, that many are drawn and
    the fill is only the target of their total. A tight fill leaves the best splits unplaceable:
    the exact search has to work.
    """
    rng = random.Random(seed + 7919)  # requests: the same set whatever the node count
    names = TYPES[:types]
    per_type = {t: nodes // types + (1 if i < nodes % types else 0) for i, t in enumerate(names)}
    used = [0, 1, 2, 3, 4, 5, 6, 7, 8] if fill > 0.9 else [0, 0, 0, 0, 2, 3, 4, 5, 8]
    doc = nodes_doc(per_type, random.Random(seed), used)
    free = {t: 0 for t in names}
    for item in doc["items"]:
        free[item["metadata"]["labels"]["gpuplan.ragnaros.io/gpu-type"]] += int(
            item["status"]["allocatable"]["nvidia.com/gpu"]
        )
    sizes = [1, 2, 2, 3, 4, 4, 6, 8, 8, 12, 16, 16, 24, 32]
    reqs: list[tuple[str, str, int, int]] = []
    target = {t: int(free[t] * fill) for t in names}
    asked = dict.fromkeys(names, 0)
    count = requests if requests is not None else 10**9
    i = 0
    while len(reqs) < count:
        typ = names[i % types]
        i += 1
        if requests is None and all(asked[t] >= target[t] for t in names):
            break
        room = target[typ] - asked[typ]
        if room <= 0:
            if requests is None:
                continue
            room = 1
        cards = min(rng.choice(sizes), room) if requests is None else rng.choice(sizes)
        strategy = rng.choice(["machine", "machine", "service", "service", "single", "special"])
        machines = 0
        if strategy == "special":
            strategy = "machine"
            machines = rng.choice([k for k in divisors(cards) if cards // k <= 8])
        reqs.append((strategy, typ, cards, machines))
        asked[typ] += cards
    return plan_doc(f"scale-{nodes}", list(names), reqs), doc, len(reqs)


DRIVER = "gpu.bench.gpuplan.io"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def topology(
    n: int, fill: float, seed: int = 1
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], int]:
    """A DRA cluster: ``n`` nodes of 8 GPUs in two PCIe roots of four, 0-3 GPUs already held by
    claims, requests of 1-16 cards (machine, service, single) for ``fill`` of the free GPUs.
    Returns the plan, the NodeList, the ResourceSlices, the ResourceClaims, and the request count."""
    rng = random.Random(seed)
    nodes, slices, results = [], [], []
    free = 0
    for i in range(n):
        name = f"dra-{i:04d}"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"gpuplan.ragnaros.io/gpu-type": "P4"}},
                "status": {"allocatable": {"cpu": "64"}},
            }
        )
        devices = [
            {
                "name": f"gpu-{g}",
                "attributes": {PCIE_ROOT: {"string": f"pci-{g // 4}"}, "index": {"int": g}},
            }
            for g in range(8)
        ]
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
        held = rng.sample(range(8), rng.choice([0, 0, 1, 2, 3]))
        results += [{"request": "gpus", "driver": DRIVER, "pool": name, "device": f"gpu-{g}"} for g in held]
        free += 8 - len(held)
    requests: list[tuple[str, str, int, int]] = []
    total = 0
    while True:
        cards = rng.choice([1, 2, 4, 4, 8, 8, 16])
        if total + cards > free * fill:
            break
        requests.append((rng.choice(["machine", "service", "single"]), "P4", cards, 0))
        total += cards
    plan = plan_doc(f"dra-{n}", ["P4"], requests)
    claims = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "held", "namespace": "other"},
                "status": {"allocation": {"devices": {"results": results}}},
            }
        ],
    }
    list_of = {"apiVersion": "v1", "kind": "List"}
    return plan, list_of | {"items": nodes}, list_of | {"items": slices}, claims, len(requests)
