"""3. API faults: conflicts on every kind the operator writes (the gang gates' pod patches too),
throttling (of the gates' patches too), the API server restarted mid-apply, watch streams that go
silent.

Each fault is injected by the proxy between the operator and the API server (or, for the
restart, by killing kube-apiserver itself). The operator must retry with backoff (a bounded
number of attempts while a fault lasts), never exit, and converge within 30 s of the fault
clearing to a cluster that holds the whole plan: labels on exactly its nodes, its classes, a
ConfigMap listing exactly its Deployments, a bound pod for each. A plan deleted while the API
refuses writes is cleaned up completely once it accepts them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.chaos.support import ChaosOperator, ControlPlane, FaultProxy, Figures, converged
from e2e.support import (
    Api,
    Kubectl,
    label_key,
    labelled_nodes,
    one_type,
    operator_entry,
    plan_manifest,
    wait_for,
)

RECOVERY_S = 30.0
WRITES = ["PATCH", "POST", "PUT", "DELETE"]
# what the operator writes (gpuallocationplans: kopf's finalizer and annotations; events: kopf's;
# pods: the gang gates lifted, the last write of an apply)
KINDS = [
    "gpuallocationplans/status",
    "nodes",
    "priorityclasses",
    "configmaps",
    "deployments",
    "gpuallocationplans",
    "pods",
]


@pytest.fixture
def faults(proxy: FaultProxy, chaos_operator: ChaosOperator) -> Iterator[FaultProxy]:
    proxy.clear()
    yield proxy
    proxy.clear()


def spec_for(nodes: list[str], cards: int) -> dict[str, Any]:
    gpu_type = nodes[0].rsplit("-", 1)[0]
    return one_type(gpu_type, {"svc": {"G": cards}}, [operator_entry("svc", "service")], deploy=True)


def recover(what: str, api: Api, ns: str, name: str, cleared: float) -> float:
    """Seconds from the fault clearing to the whole plan in the cluster (at most 30)."""
    wait_for(f"{what}: convergence", converged(api, ns, name), timeout=RECOVERY_S + 60, interval=0.5)
    took = time.monotonic() - cleared
    assert took <= RECOVERY_S, f"{what}: converged {took:.1f}s after the fault cleared (bound {RECOVERY_S}s)"
    return took


def alive(operator: ChaosOperator, starts: int) -> None:
    assert operator.exited() is None, f"the operator exited ({operator.exited()})"
    assert operator.starts == starts, "the operator was restarted"


def test_conflicts_on_every_kind_it_writes(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    faults: FaultProxy,
    chaos_operator: ChaosOperator,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("conflict", 4)
    starts = chaos_operator.starts
    figures: dict[str, Any] = {}

    # 1. two conflicts on each kind in turn: the apply is cut short at every step and finishes
    faults.rules(
        *[
            {"status": 409, "methods": WRITES, "kinds": [k], "count": 2, "listeners": ["operator"]}
            for k in KINDS
        ]
    )
    kubectl.apply(plan_manifest(ns, "clash", spec_for(nodes, 4)))
    wait_for("every kind to see its conflicts", lambda: faults.injected() >= 2 * len(KINDS), timeout=90)
    cleared = time.monotonic()
    counts = faults.stats()["counts"]
    for kind in KINDS:
        assert (
            sum(n for k, n in counts.items() if k.startswith("injected 409") and k.endswith(f" {kind}")) == 2
        ), (kind, counts)
    figures["per_kind_recovery_s"] = round(recover("conflicts per kind", api, ns, "clash", cleared), 1)
    alive(chaos_operator, starts)

    # 2. every write refused for 10 s while the spec changes: retries back off, then it converges
    before = faults.injected()
    faults.rules({"status": 409, "methods": WRITES, "kinds": KINDS, "listeners": ["operator"]})
    kubectl.apply(plan_manifest(ns, "clash", spec_for(nodes, 6)))
    time.sleep(10)
    faults.clear()
    cleared = time.monotonic()
    refused = faults.injected() - before
    figures["writes_refused_in_10s"] = refused
    figures["all_refused_recovery_s"] = round(recover("all writes refused", api, ns, "clash", cleared), 1)
    assert refused <= 40, f"{refused} writes refused in 10 s: retries do not back off"
    alive(chaos_operator, starts)

    # 3. deleted while every write is refused: the finalizer holds it until the clean-up is done
    faults.rules({"status": 409, "methods": WRITES, "kinds": KINDS[1:], "listeners": ["operator"]})
    kubectl.run("delete", "gpuplan", "clash", "-n", ns, "--wait=false")
    time.sleep(5)
    assert api.plan(ns, "clash") is not None, "the plan went before its clean-up"
    faults.clear()
    cleared = time.monotonic()
    wait_for("the plan and all it wrote gone", lambda: api.plan(ns, "clash") is None
             and not labelled_nodes(api, label_key(ns, "clash")) and not api.deployments(ns)
             and api.configmap(ns, "clash-flamewakers") is None, timeout=RECOVERY_S + 30)  # fmt: skip
    figures["cleanup_recovery_s"] = round(time.monotonic() - cleared, 1)
    assert figures["cleanup_recovery_s"] <= RECOVERY_S
    alive(chaos_operator, starts)
    Figures.record("409 conflicts", **figures)


def test_throttling(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    faults: FaultProxy,
    chaos_operator: ChaosOperator,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("throttle", 4)
    starts = chaos_operator.starts
    gates = {"status": 429, "methods": ["PATCH"], "kinds": ["pods"], "count": 3, "listeners": ["operator"]}
    faults.rules(gates, {"status": 429, "probability": 0.5, "listeners": ["operator"], "watches": True})
    kubectl.apply(plan_manifest(ns, "slow", spec_for(nodes, 4)))
    time.sleep(8)
    kubectl.apply(plan_manifest(ns, "slow", spec_for(nodes, 6)))
    time.sleep(8)
    # the gates' patches are throttled until three were refused (the pods may only now be there)
    faults.rules(gates)

    def gate_lifts_refused() -> int:
        return int(faults.stats()["counts"].get("injected 429 PATCH pods", 0))

    wait_for("three gate lifts throttled", lambda: gate_lifts_refused() >= 3, timeout=60)
    throttled = faults.injected()
    counts = faults.stats()["counts"]
    faults.clear()
    cleared = time.monotonic()
    took = recover("throttled", api, ns, "slow", cleared)
    alive(chaos_operator, starts)
    gate_patches = counts.get("injected 429 PATCH pods", 0)
    Figures.record(
        "429 throttling",
        throttled_requests=throttled,
        gate_lifts_throttled=gate_patches,
        recovery_s=round(took, 1),
    )
    assert throttled > 0
    assert gate_patches >= 3, counts  # the release was throttled too, and still finished


def test_api_server_restarted_mid_apply(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    faults: FaultProxy,
    chaos_operator: ChaosOperator,
    control_plane: ControlPlane,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("restart", 6)
    starts = chaos_operator.starts
    writes_at_start = faults.stats()["writes"].get("operator", 0)
    faults.hold("operator", after=5)  # Planning status, then a few node labels, then it waits
    kubectl.apply(plan_manifest(ns, "bounce", spec_for(nodes, 6)))
    wait_for(
        "the apply to reach the held write", lambda: faults.stats()["held"] >= 1, timeout=60, interval=0.2
    )
    killed = time.monotonic()
    writes_before = faults.stats()["writes"].get("operator", 0) - writes_at_start
    control_plane.stop("kube-apiserver")
    faults.release()  # the held writes meet a dead API server
    time.sleep(3)
    control_plane.start("kube-apiserver")
    wait_for("the API server back", lambda: kubectl.run("get", "--raw", "/readyz", "--request-timeout=3s",
             check=False).returncode == 0, timeout=90, interval=0.5)  # fmt: skip
    up = time.monotonic()
    revived = control_plane.revive()
    took = recover("API server restart", api, ns, "bounce", up)
    alive(chaos_operator, starts)
    Figures.record(
        "API server restart",
        down_s=round(up - killed, 1),
        recovery_after_ready_s=round(took, 1),
        operator_writes_before_the_kill=writes_before,
        components_revived=revived,
    )


def test_watch_streams_that_go_silent(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    faults: FaultProxy,
    chaos_operator: ChaosOperator,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("silent", 4)
    kubectl.apply(plan_manifest(ns, "quiet", spec_for(nodes, 4)))
    wait_for("the plan converged", converged(api, ns, "quiet"), timeout=90)
    starts = chaos_operator.starts

    faults.stall()  # every watch open now goes silent; the ones opened later work
    stalled = time.monotonic()
    victim = nodes[0]
    kubectl.run("cordon", victim)  # seen only through the nodes watch
    kubectl.apply(plan_manifest(ns, "late", spec_for(nodes, 1)))  # seen only through the plans watch

    def moved() -> bool:
        status = converged(api, ns, "quiet")()
        return status is not None and all(victim not in a["nodes"] for a in status["allocations"])

    wait_for("the cordoned node left", moved, timeout=RECOVERY_S + 60, interval=0.5)
    node_s = time.monotonic() - stalled
    wait_for("the new plan applied", converged(api, ns, "late"), timeout=RECOVERY_S + 60, interval=0.5)
    plan_s = time.monotonic() - stalled
    alive(chaos_operator, starts)
    kubectl.run("uncordon", victim)
    Figures.record(
        "silent watch",
        node_change_seen_after_s=round(node_s, 1),
        new_plan_applied_after_s=round(plan_s, 1),
        stalled_streams=sum(n for k, n in faults.stats()["counts"].items() if k.startswith("stalled")),
    )
    assert max(node_s, plan_s) <= RECOVERY_S, (
        f"a silent watch held changes back {node_s:.1f}s / {plan_s:.1f}s"
    )
