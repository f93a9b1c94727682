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


def validate(
    plan_path: str, nodes_path: str, answer: dict[str, Any] | None, free: dict[str, int] | None = None
) -> list[str]:
    """Every way ``answer`` breaks the rules; ``free``: cards per node, where the node's allocatable
    does not say (GPUs published by ResourceSlices)."""
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
        room = (
            free[name]
            if free is not None
            else _cards(by_name[name]["status"]["allocatable"].get("nvidia.com/gpu", 0))
        )
        if used > room:
            problems.append(f"{name}: {used} cards placed, {room} free")
    missing = set(asked) - seen
    if missing:
        problems.append(f"requests not placed: {sorted(missing)[:5]}")
    return problems


def validate_devices(
    plan_path: str, nodes_path: str, slices_path: str, claims_path: str, answer: dict[str, Any] | None
) -> tuple[list[str], int]:
    """The checks above with each node's free GPUs read from its ResourceSlices less the devices
    claims hold, then device by device: each instance has as many devices as its cards, on its
    node, free, none given twice. Also counts the instances whose devices span several PCIe roots
    (and checks the answer reports the same)."""
    if answer is None or not answer.get("feasible"):
        return [], 0
    attribute = "resource.kubernetes.io/pcieRoot"
    roots: dict[tuple[str, str], str] = {}
    for sl in json.loads(Path(slices_path).read_text())["items"]:
        node = sl["spec"]["nodeName"]
        for dev in sl["spec"]["devices"]:
            roots[node, dev["name"]] = dev["attributes"][attribute]["string"]
    held = {
        (r["pool"], r["device"])
        for claim in json.loads(Path(claims_path).read_text())["items"]
        for r in claim["status"]["allocation"]["devices"]["results"]
    }
    free: dict[str, int] = {}
    for node, _ in roots:
        free[node] = free.get(node, 0) + ((node, _) not in held)
    problems = validate(plan_path, nodes_path, answer, free)
    given: set[tuple[str, str]] = set()
    straddling = 0
    for a in answer["allocations"]:
        key = (a["operator"], a["resource"])
        spans = 0
        for node, count in a["nodes"].items():
            lists = a.get("devices", {}).get(node, [])
            if len(lists) != count:
                problems.append(f"{key}: {count} instances on {node}, {len(lists)} device lists")
            for devices in lists:
                if len(devices) != a["unitsPerInstance"]:
                    problems.append(f"{key}: an instance on {node} has {len(devices)} devices")
                for dev in devices:
                    if (node, dev) not in roots:
                        problems.append(f"{key}: {node} has no device {dev}")
                    elif (node, dev) in held:
                        problems.append(f"{key}: {node}/{dev} is held by a claim")
                    elif (node, dev) in given:
                        problems.append(f"{key}: {node}/{dev} given twice")
                    given.add((node, dev))
                spans += len({roots.get((node, dev)) for dev in devices}) > 1
        if spans != a.get("straddling", 0):
            problems.append(
                f"{key}: {spans} instances span PCIe roots, the answer says {a.get('straddling')}"
            )
        straddling += spans
    return problems, straddling
