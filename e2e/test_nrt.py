"""NUMA zones without DRA: NodeResourceTopology objects on the real API server, and CPU per zone.

Two kwok nodes of a GPU type of their own, 8 cards and 32 CPUs each, get NodeResourceTopology
objects as node-feature-discovery's topology updater would write them: two NUMA zones of 4 cards
and 16 CPUs; on the first node a pod holds 3 cards of its second zone. A plan of two 4-card
instances (``topology: required``) and one 1-card instance must keep every instance inside one
zone that has room, record the zones in its status, and its pods must request the CPU the plan
sized: a zone's share for ``numaShare`` (all 16 CPUs for 4 of 4 cards, 4 for one card), the fixed
amount otherwise. Then a zone loses cards: the operator notices (it watches the objects) and
re-plans off it, saying that the node's topology shows fewer cards than the node.

The CRD comes from ``e2e/noderesourcetopology-crd.yaml`` when the cluster has none (the
``nrt_crd`` fixture; it goes afterwards); the objects are named after this test's own nodes and
deleted after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import (
    Api,
    Kubectl,
    gpuplan_cli,
    live_pods,
    one_type,
    plan_manifest,
    settled,
    wait_for,
)

NRT_API = "topology.node.k8s.io/v1alpha2"
NRTS = "noderesourcetopologies"
GPU = "nvidia.com/gpu"


def topology(node: str, zones: list[tuple[int, int]], cpu: int = 16) -> dict[str, Any]:
    """Per zone (cards, of which available), ``cpu`` CPUs allocatable each, as NFD writes it."""
    return {
        "apiVersion": NRT_API,
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "attributes": [
            {"name": "topologyManagerScope", "value": "container"},
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        ],
        "zones": [
            {
                "name": f"node-{i}",
                "type": "Node",
                "costs": [{"name": f"node-{j}", "value": 10 if i == j else 20} for j in range(len(zones))],
                "resources": [
                    {"name": "cpu", "capacity": str(cpu), "allocatable": str(cpu), "available": str(cpu)},
                    {"name": GPU, "capacity": cards, "allocatable": cards, "available": free},
                ],
            }
            for i, (cards, free) in enumerate(zones)
        ],
    }


@pytest.fixture
def topologies(api: Api, nrt_crd: None) -> Iterator[Callable[[str, list[tuple[int, int]]], None]]:
    """Create or replace a node's NodeResourceTopology; the test's objects are deleted after it."""
    made: list[str] = []

    def put(node: str, zones: list[tuple[int, int]]) -> None:
        if node in made:
            api.patch(NRT_API, NRTS, node, {"zones": topology(node, zones)["zones"]})
            return
        api.create(NRT_API, NRTS, topology(node, zones))
        made.append(node)

    yield put
    for node in made:
        api.delete(NRT_API, NRTS, node)


def holder_pod(ns: str, node: str, cards: int) -> dict[str, Any]:
    """A pod outside any plan that holds cards (and so, on a real node, a zone's cards)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holder", "namespace": ns},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "holder", "resources": {"limits": {GPU: str(cards), "cpu": "1"}}}
            ],
        },
    }


def numa_op(name: str, strategy: str, cpu: str | int) -> dict[str, Any]:
    return {
        "name": name,
        "keyStrategy": strategy,
        "topology": "required",
        "cpuRequest": cpu,
        "services": {"key": name.replace("_", "-")},
    }


def zones_held(status: dict[str, Any]) -> dict[tuple[str, str], int]:
    """(node, zone) -> cards the plan counted there, from its status.applied.zones."""
    return {
        (node, zone): res[GPU]
        for node, zones in (status.get("applied") or {}).get("zones", {}).items()
        for zone, res in zones.items()
    }


def contained(status: dict[str, Any]) -> bool:
    """Every instance sits in one zone, and the status lists a zone for every instance."""
    for a in status["allocations"]:
        zones = a.get("zones") or {}
        if a["straddling"] or {n: len(z) for n, z in zones.items()} != a["nodes"]:
            return False
        if any("+" in z for lists in zones.values() for z in lists):
            return False
    return True


def pod_cpu(api: Api, ns: str) -> dict[str, set[tuple[str, str]]]:
    """Entry (Deployment) name -> the (request, limit) of cpu its live pods carry."""
    out: dict[str, set[tuple[str, str]]] = {}
    for p in live_pods(api, ns):
        res = p["spec"]["containers"][0]["resources"]
        name = p["metadata"]["labels"]["gpuplan.ragnaros.io/flamewaker"]
        out.setdefault(name, set()).add((res["requests"]["cpu"], res["limits"]["cpu"]))
    return out


def test_instances_stay_in_one_numa_zone_and_request_their_zones_cpu(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    make_nodes: Callable[..., list[str]],
    topologies: Callable[[str, list[tuple[int, int]]], None],
    tmp_path: Path,
) -> None:
    a, b = make_nodes("nrt", 2)
    gpu_type = a.rsplit("-", 1)[0]
    api.create("v1", "pods", holder_pod(ns, a, 3), ns=ns)
    topologies(a, [(4, 4), (4, 1)])  # the holder's 3 cards sit in a's second zone
    topologies(b, [(4, 4), (4, 4)])
    spec = one_type(
        gpu_type,
        {"numa_big": {"G": 4}, "numa_fixed": {"G": 4}, "numa_small": {"G": 1}},
        [
            numa_op("numa_big", "machine", "numaShare"),
            numa_op("numa_fixed", "machine", 2),
            numa_op("numa_small", "single", "numaShare"),
        ],
        deploy=True,
    )
    kubectl.apply(plan_manifest(ns, "numa", spec))
    status = wait_for("the plan applied and every pod scheduled", settled(api, ns, "numa"), timeout=120)

    assert contained(status), status["allocations"]
    free = {(a, "node-0"): 4, (a, "node-1"): 1, (b, "node-0"): 4, (b, "node-1"): 4}
    held = zones_held(status)
    assert sum(held.values()) == 9 and all(cards <= free[where] for where, cards in held.items()), held
    by_op = {x["operator"]: x for x in status["allocations"]}
    assert (by_op["numa_big"]["instances"], by_op["numa_big"]["unitsPerInstance"]) == (1, 4)
    assert not status.get("warnings"), status.get("warnings")
    assert not kubectl.run("get", "resourceclaimtemplates", "-n", ns, "-o", "name").stdout.strip()

    cpu = pod_cpu(api, ns)
    expected = {"numa-big": ("16", "16"), "numa-fixed": ("2", "2"), "numa-small": ("4", "4")}
    for entry, requests in cpu.items():  # entries are <plan>-<service>-<type>-<node>
        (service,) = [k for k in expected if f"-{k}-" in entry]
        assert requests == {expected[service]}, (entry, requests)
    assert {k for k in expected if any(f"-{k}-" in e for e in cpu)} == set(expected)

    # the command line reads the same objects from the cluster
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan_manifest(ns, "numa", spec)))
    proc = gpuplan_cli("plan", str(tmp_path / "plan.yaml"), "-o", "json", "-q")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert all(x.get("zones") and x["straddling"] == 0 for x in doc["allocations"]), doc["allocations"]

    # b's second zone loses two cards: the operator re-plans off it and says why
    topologies(b, [(4, 4), (2, 2)])

    def replanned() -> dict[str, Any] | None:
        now = settled(api, ns, "numa")()
        if not now or not any("shows 6 nvidia.com/gpu free" in w for w in now.get("warnings") or []):
            return None
        return now if contained(now) and zones_held(now).get((b, "node-1"), 0) <= 2 else None

    status = wait_for(f"a re-plan off {b}'s smaller zone", replanned, timeout=90)
    (warning,) = [w for w in status["warnings"] if b in w]
    assert warning == (
        f"{b}: its NodeResourceTopology shows 6 nvidia.com/gpu free, fewer than the 8 its pods and "
        "plans leave: planned with 6"
    )


def test_the_api_server_refuses_a_cpu_request_that_is_no_amount(kubectl: Kubectl, ns: str) -> None:
    spec = one_type("none", {"numa_big": {"G": 4}}, [numa_op("numa_big", "machine", "lots")])
    proc = kubectl.apply(plan_manifest(ns, "bad", spec), check=False)
    assert proc.returncode != 0 and "spec.operators[0].cpuRequest" in proc.stderr, proc.stderr
