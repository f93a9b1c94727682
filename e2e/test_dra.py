"""Dynamic Resource Allocation on the real control plane: the tests publish GPUs as a driver would,
kube-scheduler allocates the claims, kwok runs the pods.

What the topology work builds on: a claim pinned to a domain (CEL on ``pcieRoot``) or to exact
cards (CEL on ``uuid``/``index``) gets exactly those cards, ``matchAttribute`` keeps a claim's cards
in one domain, no card is ever allocated to two claims, and deleting the Deployment frees its
cards. And the contrast the planner exists for: a claim without a domain takes the first free
cards, straddling two domains on a half-used node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from e2e.dra import (
    NUMA_NODE,
    PCIE_ROOT,
    DeviceRef,
    Gpu,
    by_ref,
    cel_equals,
    cel_in,
    claim_deployment,
    claim_spec,
    claim_template,
    claims,
    domains_of,
    hold_devices,
    holders,
    pod_devices,
)
from e2e.support import Api, Kubectl, wait_for

Selectors = Callable[[list[Gpu]], list[str]]


def pods(api: Api, ns: str, app: str) -> list[dict[str, Any]]:
    return [p for p in api.pods(ns, f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def running(api: Api, ns: str, app: str, replicas: int = 1) -> Callable[[], list[dict[str, Any]] | None]:
    def probe() -> list[dict[str, Any]] | None:
        live = pods(api, ns, app)
        ok = len(live) == replicas and all(p["status"].get("phase") == "Running" for p in live)
        return live if ok else None

    return probe


def unschedulable(api: Api, ns: str, app: str) -> str | None:
    """The scheduler's message on the first of the app's pods it could not place (yet)."""
    for p in pods(api, ns, app):
        for c in p["status"].get("conditions") or []:
            # Unschedulable when no node fits; SchedulerError when a filter failed (a CEL error)
            if c["type"] == "PodScheduled" and c.get("status") == "False" and c.get("message"):
                return str(c.get("message", ""))
    return None


def waiting(api: Api, ns: str, app: str) -> Callable[[], str | None]:
    """A probe: the unschedulable message of the app's one pod; fails at once if it got a node."""

    def probe() -> str | None:
        for p in pods(api, ns, app):
            if p["spec"].get("nodeName"):
                raise RuntimeError(f"{p['metadata']['name']} was scheduled to {p['spec']['nodeName']}")
        return unschedulable(api, ns, app)

    return probe


def deploy(kubectl: Kubectl, ns: str, name: str, node: str, spec: dict[str, Any], replicas: int = 1) -> None:
    kubectl.apply([claim_template(ns, name, spec), claim_deployment(ns, name, name, node, replicas)])


def no_double_allocation(api: Api) -> None:
    doubled = {ref: who for ref, who in holders(api).items() if len(who) > 1}
    assert not doubled, f"devices allocated to more than one claim: {doubled}"


# --- one claim on one node: which cards does the scheduler give? ------------------------------


@dataclass(frozen=True)
class Case:
    held: Sequence[int]  # GPU indices another claim holds before ours is made
    selectors: Selectors
    match_domain: bool  # constraints: matchAttribute on pcieRoot
    expect: Sequence[int] | str  # the indices allocated, "straddles" or "waits"
    why: str = "cannot allocate all claims"  # what the scheduler says when the pod waits


def domain_of(i: int) -> Selectors:
    return lambda gpus: [cel_equals(PCIE_ROOT, gpus[i].pcie_root)]


def no_selectors(gpus: list[Gpu]) -> list[str]:
    return []


CASES = {
    "a pcieRoot selector gets exactly that domain's four cards": Case((), domain_of(4), False, (4, 5, 6, 7)),
    "a numaNode selector gets exactly that NUMA node's four cards": Case(
        (), lambda g: [cel_equals(NUMA_NODE, 0)], False, (0, 1, 2, 3)
    ),
    "exact cards chosen by uuid are the cards allocated": Case(
        (), lambda g: [cel_in("uuid", [g[i].uuid for i in (1, 2, 5, 6)])], False, (1, 2, 5, 6)
    ),
    "exact cards chosen by index are the cards allocated, skipping none held": Case(
        (2,), lambda g: [cel_in("index", [0, 3, 4, 7])], False, (0, 3, 4, 7)
    ),
    "matchAttribute keeps four cards in the whole domain of a half-used node": Case(
        (0, 1), no_selectors, True, (4, 5, 6, 7)
    ),
    "a naive claim on a half-used node straddles the two domains": Case(
        (0, 1), no_selectors, False, "straddles"
    ),
    "a pinned domain with one card held elsewhere cannot give four cards": Case(
        (5,), domain_of(4), False, "waits"
    ),
    "matchAttribute waits rather than straddle when no domain is whole": Case(
        (0, 4), no_selectors, True, "waits"
    ),
    "a selector on an attribute the devices lack is an error, not a mismatch": Case(
        (), lambda g: [cel_equals("nvlinkGroup", 0)], False, "waits", "CEL runtime error: no such key"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_claim_gets_the_cards_it_selects(
    api: Api, kubectl: Kubectl, plain_ns: str, gpu_nodes: Callable[..., dict[str, list[Gpu]]], case: Case
) -> None:
    [(node, gpus)] = gpu_nodes("dra").items()
    held = [gpus[i] for i in case.held]
    if held:
        hold_devices(api, plain_ns, "elsewhere", held)
    spec = claim_spec(4, case.selectors(gpus), PCIE_ROOT if case.match_domain else None)
    deploy(kubectl, plain_ns, "inst", node, spec)

    if case.expect == "waits":
        message = wait_for("the scheduler to give up for now", waiting(api, plain_ns, "inst"), timeout=60)
        assert case.why in message, message
        assert not [
            c for c in claims(api, plain_ns) if c["metadata"]["name"] != "elsewhere" and c.get("status")
        ]
        no_double_allocation(api)
        return
    [pod] = wait_for("the pod Running", running(api, plain_ns, "inst"), timeout=60)
    assert pod["spec"]["nodeName"] == node
    got = [by_ref(gpus)[ref] for ref in pod_devices(api, pod)]
    assert len(got) == 4 and not set(got) & set(held), got
    if case.expect == "straddles":
        assert len({g.pcie_root for g in got}) == 2, f"expected cards of both domains, got {got}"
    else:
        assert [g.index for g in got] == list(case.expect)
    no_double_allocation(api)


# --- claims compete, Deployments go -----------------------------------------------------------


def test_deleting_the_deployment_frees_its_cards_for_a_waiting_one(
    api: Api, kubectl: Kubectl, plain_ns: str, gpu_nodes: Callable[..., dict[str, list[Gpu]]]
) -> None:
    [(node, gpus)] = gpu_nodes("free").items()
    first = domains_of(gpus)[gpus[0].pcie_root]
    pinned = claim_spec(4, [cel_equals(PCIE_ROOT, first[0].pcie_root)])
    deploy(kubectl, plain_ns, "first", node, pinned)
    [pod] = wait_for("the first pod Running", running(api, plain_ns, "first"), timeout=60)
    assert pod_devices(api, pod) == [g.ref for g in first]
    [first_claim] = claims(api, plain_ns)
    assert first_claim["metadata"]["ownerReferences"][0]["name"] == pod["metadata"]["name"]

    # the same domain again: every card of it is held, so the second pod waits ...
    deploy(kubectl, plain_ns, "second", node, pinned)
    message = wait_for("the second pod to wait", waiting(api, plain_ns, "second"), timeout=60)
    assert "cannot allocate all claims" in message, message
    no_double_allocation(api)

    # ... until the first Deployment is deleted: its claim goes with its pod, the cards are free
    kubectl.run("delete", "deployment", "first", "-n", plain_ns, "--wait=false")
    wait_for(
        "the first claim to be deleted",
        lambda: first_claim["metadata"]["name"] not in {c["metadata"]["name"] for c in claims(api, plain_ns)},
        timeout=60,
    )
    [pod] = wait_for("the second pod Running", running(api, plain_ns, "second"), timeout=60)
    assert pod_devices(api, pod) == [g.ref for g in first]
    no_double_allocation(api)


def test_competing_claims_never_share_a_card(
    api: Api, kubectl: Kubectl, plain_ns: str, gpu_nodes: Callable[..., dict[str, list[Gpu]]]
) -> None:
    [(node, gpus)] = gpu_nodes("race").items()
    hold_devices(api, plain_ns, "elsewhere", [gpus[0]])
    # four pods of two cards each, every pair in one domain: domain 0 has 3 free cards (one
    # pair), domain 1 has 4 (two pairs), so three pods run and the fourth waits
    deploy(kubectl, plain_ns, "pairs", node, claim_spec(2, match_attribute=PCIE_ROOT), replicas=4)

    def settled() -> list[dict[str, Any]] | None:
        live = pods(api, plain_ns, "pairs")
        up = [p for p in live if p["status"].get("phase") == "Running"]
        if len(up) > 3:
            raise RuntimeError(f"{len(up)} pods of two cards each run on 7 free cards")
        return up if len(live) == 4 and len(up) == 3 and unschedulable(api, plain_ns, "pairs") else None

    up = wait_for("three pods Running and one waiting", settled, timeout=90)
    got: list[DeviceRef] = [ref for p in up for ref in pod_devices(api, p)]
    assert len(got) == 6 and len(set(got)) == 6, got
    assert gpus[0].ref not in got
    cards = by_ref(gpus)
    for p in up:
        assert len({cards[ref].pcie_root for ref in pod_devices(api, p)}) == 1, pod_devices(api, p)
    no_double_allocation(api)


# --- shapes the v1 API refuses at admission ----------------------------------------------------

REJECTED = {
    "the v1beta1 request shape, deviceClassName and count outside exactly": (
        {"devices": {"requests": [{"name": "gpus", "deviceClassName": "gpu.gpuplan.test", "count": 4}]}},
        'unknown field "spec.spec.devices.requests[0].count"',
    ),
    "a matchAttribute without its domain": (
        claim_spec(4, match_attribute="pcieRoot"),
        "must include a domain",
    ),
    "a CEL selector on the device's name, which CEL cannot see": (
        claim_spec(1, ['device.name == "gpu-0"']),
        "undefined field 'name'",
    ),
}


@pytest.mark.parametrize(("spec", "error"), REJECTED.values(), ids=list(REJECTED))
def test_the_api_server_refuses(
    kubectl: Kubectl, device_class: str, spec: dict[str, Any], error: str
) -> None:
    doc = claim_template("default", "refused", spec)
    proc = kubectl.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(doc), check=False)
    assert proc.returncode != 0 and error in proc.stderr, proc.stderr
