"""4. Churn: a node flapping Ready/NotReady every second for a minute, then a burst of 100 node
label changes, under a plan with an instance on every node.

The flapping node is taken from kwok (the test holds its lease, as a kubelet would) so its Ready
condition is what the test says; kube-controller-manager taints and untaints it as it would a
real one. Re-plans must stay bounded (at most one per ``--max-delay`` while changes keep coming),
no instance may move (the flapping node is never down long enough to give up on, and the labels
changed are none the plan selects on), nothing may be written, and the operator's memory must
stay flat. The burst is paced over 15 s, so the debounce never sees a quiet spell and only
``--max-delay`` bounds the re-plans.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from e2e.chaos.support import ChaosOperator, Figures, Sampler, converged
from e2e.support import Api, Kubectl, one_type, operator_entry, plan_manifest, wait_for

FLAP_S, BURST, BURST_S = 60, 100, 15.0
MAX_DELAY = 10.0  # the operator's default --max-delay
MAX_GROWTH_MIB = 25.0
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def placement_of(api: Api, ns: str) -> tuple[Any, ...]:
    """What would show an instance move: allocations, and each Deployment's identity and spec."""
    status = api.status(ns, "steady")
    allocations = tuple(
        sorted((a["operator"], tuple(sorted(a["nodes"].items()))) for a in status.get("allocations") or [])
    )
    deployments = tuple(
        sorted(
            (d["metadata"]["name"], d["metadata"]["uid"], d["metadata"]["generation"])
            for d in api.deployments(ns)
        )
    )
    return allocations, deployments


class Flapper:
    """Holds a node's lease and flips its Ready condition every second."""

    def __init__(self, api: Api, node: str) -> None:
        self.api, self.node = api, node
        self.flips = 0

    def _lease(self, holder: str | None) -> None:
        spec: dict[str, Any] = {"holderIdentity": holder}
        if holder:
            spec["renewTime"] = now()
        self.api.kube.merge_patch(f"{LEASES}/{self.node}", {"spec": spec}, "chaos")

    def _ready(self, ready: bool) -> None:
        stamp = now()[:19] + "Z"
        condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "chaos: flapping",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        path = f"/api/v1/nodes/{self.node}/status"
        self.api.kube.request("PATCH", path, body={"status": {"conditions": [condition]}},
                              content_type="application/strategic-merge-patch+json")  # fmt: skip

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        ready = True
        while time.monotonic() < deadline:
            tick = time.monotonic()
            self._lease("chaos-flapper")
            ready = not ready
            self._ready(ready)
            self.flips += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        self._ready(True)
        self._lease(None)  # kwok takes the node back


def test_flapping_node_and_label_burst(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    chaos_operator: ChaosOperator,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("churn", 4)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"steady": {"G": 4}}, [operator_entry("steady", "service")], deploy=True)
    kubectl.apply(plan_manifest(ns, "steady", spec))
    wait_for("the plan converged", converged(api, ns, "steady"), timeout=90)
    before = placement_of(api, ns)
    metrics = chaos_operator.metrics()
    rss_before = chaos_operator.rss_mib()

    def replans(samples: Any) -> float:
        return float(samples.value("gpuplan_replans_total", reason="nodes_changed"))

    # a minute of flapping
    flapper = Flapper(api, nodes[0])

    def flap_probe() -> tuple[Any, bool]:
        node = api.node(nodes[0]) or {}
        keys = {t["key"] for t in node.get("spec", {}).get("taints") or []}
        return placement_of(api, ns), "node.kubernetes.io/not-ready" in keys

    with Sampler(flap_probe, 0.5) as during_flap:
        flapper.run(FLAP_S)
    tainted = sum(1 for _, (_, t) in during_flap.samples if t)
    after_flap = chaos_operator.metrics()
    flap_replans = replans(after_flap) - replans(metrics)
    flap_writes = after_flap.total("gpuplan_writes_total") - metrics.total("gpuplan_writes_total")
    wait_for("the node back with kwok", lambda: converged(api, ns, "steady")(), timeout=60)

    # 100 label changes over 15 s: a change every 0.15 s, so the debounce never sees a quiet spell
    started = time.monotonic()
    lock = threading.Lock()
    sent = [0]

    def relabel(i: int) -> None:
        time.sleep(max(0.0, started + i * BURST_S / BURST - time.monotonic()))
        api.patch(
            "v1",
            "nodes",
            nodes[i % len(nodes)],
            {"metadata": {"labels": {"chaos.gpuplan.test/burst": str(i)}}},
        )
        with lock:
            sent[0] += 1

    with Sampler(lambda: placement_of(api, ns), 0.5) as during_burst:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(relabel, range(BURST)))
        burst_s = time.monotonic() - started

        # counted from after the flap: a cycle an earlier fault test cut short (its re-plans
        # started, never timed) must not keep this one waiting
        started_before = after_flap.total("gpuplan_replans_total")
        ended_before = after_flap.value("gpuplan_plan_duration_seconds_count")

        def settled() -> Any:
            now_ = chaos_operator.metrics()
            started_ = now_.total("gpuplan_replans_total") - started_before
            ended = now_.value("gpuplan_plan_duration_seconds_count") - ended_before
            return now_ if ended >= started_ and replans(now_) > replans(after_flap) else None

        time.sleep(2 * 2.0)  # the debounce, twice: the burst's last re-plan has started
        end = wait_for("the burst's re-plans to end", settled, timeout=60)
    burst_replans = replans(end) - replans(after_flap)
    burst_writes = end.total("gpuplan_writes_total") - after_flap.total("gpuplan_writes_total")
    rss_after = chaos_operator.rss_mib()
    seen = [p for _, (p, _) in during_flap.samples] + [p for _, p in during_burst.samples]
    moved = [p for p in seen if p != before]

    Figures.record(
        "churn",
        flap_seconds=FLAP_S,
        flips=flapper.flips,
        replans_during_flap=flap_replans,
        replans_per_flip=round(flap_replans / max(1, flapper.flips), 3),
        writes_during_flap=flap_writes,
        burst_label_changes=sent[0],
        burst_seconds=round(burst_s, 1),
        replans_after_burst=burst_replans,
        writes_after_burst=burst_writes,
        samples_with_a_move=len(moved),
        samples_with_the_node_tainted_not_ready=tainted,
        rss_mib_before=round(rss_before, 1),
        rss_mib_after=round(rss_after, 1),
    )
    assert tainted > 0, "the flapping never reached kube-controller-manager (no not-ready taint seen)"
    assert not moved and placement_of(api, ns) == before, "an instance moved"
    assert flap_replans <= FLAP_S / MAX_DELAY + 2, f"{flap_replans} re-plans in {FLAP_S}s of flapping"
    assert burst_replans <= burst_s / MAX_DELAY + 2, f"{burst_replans} re-plans for a {burst_s:.0f}s burst"
    assert flap_writes == 0 and burst_writes == 0, "churn that changes nothing wrote something"
    assert rss_after - rss_before <= MAX_GROWTH_MIB, f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB"
