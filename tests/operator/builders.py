"""Small builders for the operator's unit tests: nodes, pods and plans as the API server returns them."""

from __future__ import annotations

from typing import Any

from gpuplan_operator.body import FINALIZER

from planner.base.vocab import GROUP, PLURAL, VERSION
from tests.operator.fake_kube import FakeKube

TYPE_LABEL = "gpuplan.ragnaros.io/gpu-type"
NODES = "api/v1/nodes"
PLANS_NS = f"apis/{GROUP}/{VERSION}/namespaces/ns/{PLURAL}"
NOW = "2026-01-01T00:00:00Z"


def node(name: str, typ: str = "P4", cards: int = 8, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {TYPE_LABEL: typ, "kubernetes.io/hostname": name}},
        "spec": dict(spec),
        "status": {"allocatable": {"nvidia.com/gpu": str(cards), "cpu": "32"}},
    }


def pod(
    name: str, node_name: str, cards: int, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "other", "labels": labels or {}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(cards)}}}],
            **spec,
        },
        "status": {"phase": "Running"},
    }


def plan(name: str = "p", uid: str | None = None, generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GpuAllocationPlan",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid or f"uid-{name}",
            "generation": generation,
            "finalizers": [FINALIZER],  # what kopf adds first: the operator writes no plan without it
        },
        "spec": spec,
    }


def cluster(*nodes: dict[str, Any]) -> FakeKube:
    kube = FakeKube()
    for n in nodes:
        kube.put(NODES, n)
    return kube
