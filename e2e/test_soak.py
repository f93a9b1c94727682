"""Soak: many re-plans in a row, watching the operator's memory (kopf #1172: growth under heavy
patching) and that every re-plan ends and writes nothing when nothing changed.

Each round relabels one of the plan's nodes with a label the plan does not select on: a node
change the operator must react to (a re-plan with the previous placement) that leads to the same
placement. Memory is read from the operator's own ``process_resident_memory_bytes`` after a
warm-up, and again at the end.
"""

from __future__ import annotations

from collections.abc import Callable

from e2e.support import (
    Api,
    Kubectl,
    OperatorProcess,
    one_type,
    operator_entry,
    plan_manifest,
    scrape,
    settled,
    settled_reconciles,
    wait_for,
    with_metrics,
)

WARMUP, ROUNDS = 5, 30
MAX_GROWTH_MIB = 25.0  # a leak of ~1 MiB per re-plan would show; allocator noise would not


def test_many_replans_keep_memory_flat_and_write_nothing(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
) -> None:
    url = with_metrics(operator)
    nodes = make_nodes("soak", 3)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"soak": {"G": 12}}, [operator_entry("soak", "machine")])
    kubectl.apply(plan_manifest(ns, "soak", spec))
    wait_for("the soak plan Applied", settled(api, ns, "soak", ready=False), timeout=90)

    rss: list[float] = []
    writes_after_warmup = 0.0
    for i in range(WARMUP + ROUNDS):
        before = scrape(url)
        api.patch(
            "v1", "nodes", nodes[i % len(nodes)], {"metadata": {"labels": {"e2e.gpuplan.test/round": str(i)}}}
        )
        now = wait_for(f"re-plan {i} to end", settled_reconciles(url, before, "nodes_changed"), timeout=60)
        rss.append(now.value("process_resident_memory_bytes") / 2**20)
        if i == WARMUP - 1:
            writes_after_warmup = now.total("gpuplan_writes_total")
    end = scrape(url)
    growth = rss[-1] - rss[WARMUP - 1]
    print(f"operator RSS over {ROUNDS} re-plans after warm-up (MiB): {[round(r, 1) for r in rss]}")
    assert growth <= MAX_GROWTH_MIB, f"RSS grew {growth:.1f} MiB over {ROUNDS} re-plans: {rss}"
    assert end.total("gpuplan_writes_total") == writes_after_warmup, "a same-placement re-plan wrote"
    status = api.status(ns, "soak")
    assert status["phase"] == "Applied"
