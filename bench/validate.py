"""An independent check of a ``gpuplan plan -o json`` answer against its inputs.

It shares no code with the planner: it reads the plan manifest and the NodeList as they are and
checks that every request is placed exactly as split (instances × units = cards asked), that
instances sit only on schedulable nodes of their type, that no node gets more than it has, and
that the instances of a service request sit on distinct nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TYPE_LABEL = "gpuplan.ragnaros.io/gpu-type"


def _cards(value: Any) -> int:
    return int(str(value))


def validate(plan_path: str, nodes_path: str, answer: dict[str, Any] | None) -> list[str]:
    if answer is None:
        return []
    if not answer.get("feasible"):
        return []
    plan = json.loads(Path(plan_path).read_text())
    nodes = json.loads(Path(nodes_path).read_text())["items"]
    spec = plan["spec"]
    selectors = {r["name"]: r.get("nodeSelector", {TYPE_LABEL: r["name"]}) for r in spec.get("resources", [])}
    strategies = {o["name"]: o.get("keyStrategy") for o in spec.get("operators", [])}
    asked: dict[tuple[str, str], tuple[int, int]] = {}
    for op, body in spec["requests"].items():
        cards = body.get("resourceNum", body)
        machines = body.get("machineNum", {})
        for res, n in cards.items():
            if n:
                asked[op, res] = (int(n), int(machines.get(res, 0) or 0))
    by_name = {n["metadata"]["name"]: n for n in nodes}
    load: dict[str, int] = {}
    problems = []
    seen = set()
    for a in answer["allocations"]:
        key = (a["operator"], a["resource"])
        seen.add(key)
        cards, machines = asked.get(key, (0, 0))
        k, g = a["instances"], a["unitsPerInstance"]
        if k * g != cards:
            problems.append(f"{key}: {k}x{g} != {cards} cards asked")
        if machines and k != machines:
            problems.append(f"{key}: {k} instances, machineNum {machines}")
        if sum(a["nodes"].values()) != k:
            problems.append(f"{key}: nodes hold {sum(a['nodes'].values())}, not {k}")
        if (
            strategies.get(a["operator"]) == "service"
            and not machines
            and any(c > 1 for c in a["nodes"].values())
        ):
            problems.append(f"{key}: service instances share a node")
        for name, c in a["nodes"].items():
            node = by_name.get(name)
            if node is None:
                problems.append(f"{key}: unknown node {name}")
                continue
            labels = node["metadata"].get("labels", {})
            if any(labels.get(lk) != lv for lk, lv in selectors.get(a["resource"], {}).items()):
                problems.append(f"{key}: {name} is not of type {a['resource']}")
            if (node.get("spec") or {}).get("unschedulable"):
                problems.append(f"{key}: {name} is cordoned")
            load[name] = load.get(name, 0) + c * g
    for name, used in load.items():
        free = _cards(by_name[name]["status"]["allocatable"].get("nvidia.com/gpu", 0))
        if used > free:
            problems.append(f"{name}: {used} cards placed, {free} free")
    missing = set(asked) - seen
    if missing:
        problems.append(f"requests not placed: {sorted(missing)[:5]}")
    return problems
