"""``make bench`` (planner part): several plans planned together, and a validator for the answer.

The instance: ``nodes`` nodes over four card types, ``plans`` plans of three priorities asking
``requests`` requests in all, a third of them elastic (``{min: about half, max: about twice}``).
The mins ask for about ``fill`` of the free cards and the maxes for well over all of them, so the
cluster is contended: admission, growth by priority and the score all have work to do.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from instances import TYPES, nodes_doc

TYPE_LABEL = "gpuplan.ragnaros.io/gpu-type"
PRIORITIES = (0, 100, 500)


def together(
    nodes: int, plans: int, requests: int, fill: float = 0.6, seed: int = 5
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The plans (oldest first) and the NodeList."""
    per_type = {t: nodes // 4 + (1 if i < nodes % 4 else 0) for i, t in enumerate(TYPES)}
    doc = nodes_doc(per_type, random.Random(seed + 1), [0, 0, 0, 0, 2, 3, 4, 5, 8])
    return plans_for(doc, plans, requests, fill, seed), doc


def plans_for(
    doc: dict[str, Any], plans: int, requests: int, fill: float = 0.6, seed: int = 5
) -> list[dict[str, Any]]:
    """``plans`` plans of ``requests`` requests in all, sized on the free cards of the NodeList."""
    rng = random.Random(seed)
    free = dict.fromkeys(TYPES, 0)
    for item in doc["items"]:
        free[item["metadata"]["labels"][TYPE_LABEL]] += int(item["status"]["allocatable"]["nvidia.com/gpu"])
    per_plan = requests // plans
    # a request's size: its share of ``fill`` of its type's free cards, give or take half
    mean = {t: free[t] * fill / plans / (per_plan / 4) for t in TYPES}
    out = []
    for p in range(plans):
        operators, reqs = [], {}
        for i in range(per_plan):
            typ = TYPES[i % 4]
            op = f"op{i:03d}"
            strategy = rng.choice(["machine", "machine", "service", "service", "single", "special"])
            cards = max(1, round(mean[typ] * rng.uniform(0.5, 1.5)))
            machines = 0
            if strategy == "special":
                strategy = "machine"
                machines = -(-cards // rng.choice([4, 8]))  # instances of 4 to 8 cards
                cards = max(machines, cards // machines * machines)
            operators.append({"name": op, "keyStrategy": strategy, "services": {"key": f"svc-{p}-{i}"}})
            count: Any = cards
            if i % 3 == 2:  # a third elastic: from about half to twice
                step = machines or 1
                count = {"min": (cards // 2) // step * step, "max": cards * 2}
            reqs[op] = (
                {"resourceNum": {typ: count}, "machineNum": {typ: machines}} if machines else {typ: count}
            )
        out.append(
            {
                "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
                "kind": "GpuAllocationPlan",
                "metadata": {"name": f"plan-{p:02d}", "namespace": "bench"},
                "spec": {
                    "priority": PRIORITIES[p % 3],
                    "resources": [{"name": t, "nodeSelector": {TYPE_LABEL: t}} for t in TYPES],
                    "operators": operators,
                    "requests": reqs,
                },
            }
        )
    return out


def _asked(body: Any, res: str) -> tuple[int, int, int]:
    """(min, max, machineNum) of one request."""
    cards = body.get("resourceNum", body)[res]
    machines = int((body.get("machineNum") or {}).get(res, 0) or 0)
    if isinstance(cards, dict):
        return int(cards["min"]), int(cards["max"]), machines
    return int(cards), int(cards), machines


def validate_together(plan_paths: list[str], nodes_path: str, answer: dict[str, Any]) -> list[str]:
    """Every way the answer breaks the rules: counts outside a range, a machineNum not kept,
    service instances sharing a node, a node given more cards than it has (all plans together)."""
    nodes = {n["metadata"]["name"]: n for n in json.loads(Path(nodes_path).read_text())["items"]}
    load: dict[str, int] = {}
    problems = []
    for path, got in zip(plan_paths, answer["plans"], strict=True):
        spec = json.loads(Path(path).read_text())["spec"]
        strategies = {o["name"]: o["keyStrategy"] for o in spec["operators"]}
        if not got["admitted"]:
            if got["allocations"]:
                problems.append(f"{got['name']}: not admitted, yet allocations")
            continue
        placed = {(a["operator"], a["resource"]): a for a in got["allocations"]}
        for op, body in spec["requests"].items():
            res = next(iter(body.get("resourceNum", body)))
            low, high, machines = _asked(body, res)
            a = placed.get((op, res))
            cards = a["instances"] * a["unitsPerInstance"] if a else 0
            if not low <= cards <= high:
                problems.append(f"{got['name']} {op}: {cards} cards outside {low}-{high}")
            if a is None:
                continue
            if machines and a["instances"] != machines:
                problems.append(f"{got['name']} {op}: {a['instances']} instances, machineNum {machines}")
            if strategies[op] == "service" and not machines and any(c > 1 for c in a["nodes"].values()):
                problems.append(f"{got['name']} {op}: service instances share a node")
            for name, c in a["nodes"].items():
                if nodes[name]["metadata"]["labels"][TYPE_LABEL] != res:
                    problems.append(f"{got['name']} {op}: {name} is not {res}")
                load[name] = load.get(name, 0) + c * a["unitsPerInstance"]
    for name, used in load.items():
        room = int(nodes[name]["status"]["allocatable"]["nvidia.com/gpu"])
        if used > room:
            problems.append(f"{name}: {used} cards placed, {room} free")
    return problems
