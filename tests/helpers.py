"""Builders shared by the unit tests: problems, nodes and plans without YAML."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.base.strategies import Strategy
from planner.model.options import Item, TypeProblem, build_item
from planner.model.spec import Request, ResourceKind, ResourceType

P4 = ResourceType("P4", ResourceKind.GPU, "nvidia.com/gpu", (("gpuplan.ragnaros.io/gpu-type", "P4"),))


def problem(
    free: list[int],
    requests: Sequence[tuple[str, int, int | None]],
    scoring: str = "v1",
) -> TypeProblem:
    """A one-type problem from node free cards and (strategy, cards, machineNum) requests."""
    nodes = tuple((f"n{i}", f) for i, f in enumerate(free))
    largest = max(free, default=0)
    items: list[Item] = []
    for i, (strategy, cards, machines) in enumerate(requests):
        req = Request(f"op{i}", "P4", cards, machines)
        strat = Strategy.SPECIAL if machines else Strategy(strategy)
        items.append(build_item(i, req, strat, len(nodes), largest, scoring))
    return TypeProblem(P4, nodes, tuple(items))


def node_list(nodes: list[tuple[str, str, int]], **extra: Any) -> dict[str, Any]:
    """A NodeList of (name, gpu type, cards) as kubectl prints it."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"gpuplan.ragnaros.io/gpu-type": typ, "kubernetes.io/hostname": name},
                },
                "spec": dict(extra.get(name, {})),
                "status": {"allocatable": {"nvidia.com/gpu": str(cards), "cpu": "32"}},
            }
            for name, typ, cards in nodes
        ],
    }


def plan_doc(requests: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
        "kind": "GpuAllocationPlan",
        "metadata": {"name": "test", "namespace": "default"},
        "spec": {"requests": requests, **spec},
    }


def check_placement(prob: TypeProblem, choice: list[int], nodes: list[dict[str, int]]) -> list[str]:
    """Every way a placement can break the rules, as sentences (empty: deployable)."""
    errors = []
    load: dict[str, int] = {}
    for it in prob.items:
        split = it.splits[choice[it.index]]
        placed = nodes[it.index]
        if sum(placed.values()) != split.instances:
            errors.append(f"{it.label}: {sum(placed.values())} placed, {split.instances} wanted")
        if it.distinct and any(c > 1 for c in placed.values()):
            errors.append(f"{it.label}: service instances share a node")
        for n, c in placed.items():
            load[n] = load.get(n, 0) + c * split.units
    for n, f in prob.nodes:
        if load.get(n, 0) > f:
            errors.append(f"{n}: {load[n]} cards placed, {f} free")
    return errors
