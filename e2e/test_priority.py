"""Plans planned together on the local cluster: priority, elastic requests, preemption.

Every scenario runs with a sampler that reads the pods on the test's nodes several times a
second and fails the test if any node ever holds more cards than it has (pods being deleted
count until they are gone). Every wait is a poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

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

CARDS = "nvidia.com/gpu"


class OverCommit:
    """Samples the cards held on ``nodes`` until stopped; remembers the worst moment."""

    def __init__(self, api: Api, nodes: list[str], cards: int = 8) -> None:
        self.api, self.nodes, self.cards = api, nodes, cards
        self.worst: dict[str, int] = {}
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def held(self, node: str) -> int:
        total = 0
        for pod in self.api.pods_on(node):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                total += int(((c.get("resources") or {}).get("limits") or {}).get(CARDS, 0))
        return total

    def run(self) -> None:
        while not self.stop.is_set():
            for node in self.nodes:
                self.worst[node] = max(self.worst.get(node, 0), self.held(node))
            self.samples += 1
            self.stop.wait(0.2)

    def check(self) -> None:
        over = {n: c for n, c in self.worst.items() if c > self.cards}
        assert not over, f"nodes over-committed at some moment: {over}"
        assert self.samples > 3, "the sampler did not run"


@pytest.fixture
def watch_cards(api: Api) -> Iterator[Callable[[list[str]], OverCommit]]:
    samplers: list[OverCommit] = []

    def start(nodes: list[str]) -> OverCommit:
        sampler = OverCommit(api, nodes)
        sampler.thread.start()
        samplers.append(sampler)
        return sampler

    yield start
    for s in samplers:
        s.stop.set()
        s.thread.join(5)
        s.check()


def plan(ns: str, name: str, gpu_type: str, cards: Any, priority: int = 0) -> dict[str, Any]:
    spec = one_type(gpu_type, {name: {"G": cards}}, [operator_entry(name)], deploy=True, priority=priority)
    return plan_manifest(ns, name, spec)


def placed(api: Api, ns: str, name: str) -> int:
    return int(api.status(ns, name).get("cardsPlaced") or 0)


def with_cards(api: Api, ns: str, name: str, cards: int, phase: str = "Applied") -> Callable[[], Any]:
    probe = settled(api, ns, name, phase=phase, ready=phase == "Applied")

    def check() -> Any:
        status = probe()
        return status if status is not None and status.get("cardsPlaced") == cards else None

    return check


def running_on_planned_nodes(api: Api, ns: str) -> bool:
    pods = live_pods(api, ns)
    return bool(pods) and all(
        p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in pods
    )


def test_an_elastic_plan_shrinks_for_a_higher_priority_one_and_grows_back(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]], watch_cards: Any
) -> None:
    nodes = make_nodes("elastic", 2)
    gpu = nodes[0].rsplit("-", 1)[0]
    watch_cards(nodes)
    kubectl.apply(plan(ns, "flex", gpu, {"min": 8, "max": 16}))
    alone = wait_for("flex takes its max", with_cards(api, ns, "flex", 16), timeout=90)
    assert alone["cards"] == "16/16" and alone["elastic"][0]["cards"] == 16

    kubectl.apply(plan(ns, "urgent", gpu, 8, priority=100))
    wait_for("urgent applied", with_cards(api, ns, "urgent", 8), timeout=90)
    shrunk = wait_for("flex shrinks to what is left", with_cards(api, ns, "flex", 8), timeout=90)
    assert shrunk["cards"] == "8/16"
    grant = shrunk["elastic"][0]
    assert (grant["cards"], grant["max"], grant["reason"], grant["heldBy"]) == (
        8,
        16,
        "HeldByPlans",
        [f"{ns}/urgent"],
    )
    wait_for("every pod Running on its planned node", lambda: running_on_planned_nodes(api, ns), timeout=90)
    events = kubectl.run("get", "events", "-n", ns, "--field-selector", "reason=Shrunk", "-o", "name")
    assert events.stdout.strip(), "no Shrunk event"

    kubectl.run("delete", "gpuplan", "urgent", "-n", ns, "--timeout=60s")
    grown = wait_for("flex grows back", with_cards(api, ns, "flex", 16), timeout=90)
    assert "reason" not in grown["elastic"][0]


def test_a_fixed_lower_plan_is_preempted_names_the_plan_and_keeps_what_nobody_needs(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]], watch_cards: Any
) -> None:
    nodes = make_nodes("preempt", 2)
    gpu = nodes[0].rsplit("-", 1)[0]
    watch_cards(nodes)
    kubectl.apply(plan(ns, "low", gpu, 16))
    wait_for("low applied", with_cards(api, ns, "low", 16), timeout=90)

    kubectl.apply(plan(ns, "high", gpu, 8, priority=10))
    wait_for("high applied", with_cards(api, ns, "high", 8), timeout=90)
    low = wait_for("low preempted", with_cards(api, ns, "low", 8, phase="Infeasible"), timeout=90)
    assert low["admission"] == "Preempted" and low["heldBy"] == [f"{ns}/high"]
    planned = {c["type"]: c for c in low["conditions"]}["Planned"]
    assert planned["reason"] == "Preempted" and f"{ns}/high" in planned["message"]
    events = kubectl.run("get", "events", "-n", ns, "--field-selector", "reason=Preempted", "-o", "name")
    assert events.stdout.strip(), "no Preempted event"
    wait_for("the kept instance and the newcomer run", lambda: running_on_planned_nodes(api, ns), timeout=90)


def test_at_equal_priority_the_plan_holding_its_cards_keeps_them(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]], watch_cards: Any
) -> None:
    nodes = make_nodes("holder", 2)
    gpu = nodes[0].rsplit("-", 1)[0]
    watch_cards(nodes)
    kubectl.apply(plan(ns, "first", gpu, 16))
    before = wait_for("first applied", with_cards(api, ns, "first", 16), timeout=90)
    kubectl.apply(plan(ns, "second", gpu, 8))
    second = wait_for(
        "second not admitted", settled(api, ns, "second", phase="Infeasible", ready=False), timeout=90
    )
    assert second["admission"] == "Preempted" and second["heldBy"] == [f"{ns}/first"]
    assert api.status(ns, "first")["allocations"] == before["allocations"]


def test_a_lost_node_shrinks_elastic_requests_before_anything_is_infeasible(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]], watch_cards: Any
) -> None:
    nodes = make_nodes("lost", 2)
    gpu = nodes[0].rsplit("-", 1)[0]
    watch_cards(nodes)
    kubectl.apply(plan(ns, "flex", gpu, {"min": 8, "max": 16}))
    wait_for("flex takes its max", with_cards(api, ns, "flex", 16), timeout=90)
    kubectl.run("cordon", nodes[1])
    try:
        shrunk = wait_for("flex shrinks onto the node left", with_cards(api, ns, "flex", 8), timeout=90)
        assert all(nodes[1] not in a["nodes"] for a in shrunk["allocations"])
        assert shrunk["elastic"][0]["reason"] == "NoRoom"
    finally:
        kubectl.run("uncordon", nodes[1])
