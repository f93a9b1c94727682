"""The product's loop on real pods, small: measure, classify, plan, deploy through the operator, compare.

``make loop`` runs the whole experiment (1, 2, 4 instances, every naive split of 8 cards); this is
its CI version on the suite's two nodes of 4 cards (2 cards per service): both samples at 1 and 2
instances, classified
from what the load tester measured, planned with those strategies, deployed by the operator on the
kubelets, and the planner's split measured beside the alternatives already measured. In these
samples a card does not change an instance's speed, so ``k`` instances measured while classifying
are the ``k x (n/k)`` split of the comparison: 1 instance is the concentrated ``1 x n``, 2 the
``2 x n/2``. Every number asserted here comes from the run (the load tester's capacities, the
instances' own CPU and memory, the backend's own count of what it served), none is written down.
"""

from __future__ import annotations

import pytest

from e2e.kubelet.conftest import RealNodes
from e2e.kubelet.loop import CPU_LIMIT_CORES, Loop, Settings, cards_of, classify_service, table
from e2e.support import Api, Kubectl

# short steps: 0.5 s of warm-up, 2 s measured (about 25 s per load test). A 5% resolution: the
# ratios below ask 1.6x of what should be about 1.8-2x, and at 15% one search stopped at 48 req/s
# between 48 held and 55.9 failed while another held 55.9, so the ratio was the search's grid
CI = Settings(warmup=0.5, window=2.0, resolution=0.05, max_steps=10)
CPU_MS = 2.0  # the cpu sample's CPU per request (SERVER_ARGS)
BEST_OF = 2  # load tests per cpu capacity, the best kept


@pytest.mark.timeout(600)  # nine load tests of about 25 s, two deploys and a sharded run: about 330 s
def test_measure_classify_plan_deploy_and_compare_on_real_pods(
    api: Api, kubectl: Kubectl, ns: str, real_nodes: RealNodes
) -> None:
    loop = Loop(api, kubectl, ns, real_nodes, CI)
    # the cpu service's capacities are compared by ratio: each the best of two load tests (see measure)
    cpu = loop.measure_instances("cpu", (1, 2), best_of=BEST_OF)
    io = loop.measure_instances("io", (1, 2))

    # cpu: each instance is held to its CPU limit at the knee, spends at least the 2 ms it burns
    # per request, and two instances serve about twice what one does
    for m in cpu:
        assert m.cpu_cores is not None and m.cpu_cores >= 0.75 * CPU_LIMIT_CORES * m.instances, m
        assert 1000 * m.cpu_cores / m.capacity_qps >= 0.9 * CPU_MS, m
    assert cpu[1].capacity_qps >= 1.6 * cpu[0].capacity_qps, (cpu[0], cpu[1])

    # io: bounded by the shared backend whatever the instances; the backend's own figure (what
    # its slots served while requests queued) is what it announced, within 10%
    backend = loop.backend_stats()
    announced, served = backend["expected_capacity_qps"], backend["measured_capacity_qps"]
    assert served is not None and abs(served - announced) <= 0.1 * announced, backend
    for m in io:
        assert 0.75 * served <= m.capacity_qps <= 1.1 * served, (m, served)
    assert io[1].capacity_qps <= 1.2 * io[0].capacity_qps, (io[0], io[1])

    c_cpu, c_io = classify_service(cpu), classify_service(io)
    assert (c_cpu.key_strategy, c_cpu.bound) == ("service", "compute"), c_cpu.reasons
    assert (c_io.key_strategy, c_io.bound) == ("machine", "io"), c_io.reasons

    # the plan with those strategies, deployed by the operator: the compute-bound service spread
    # one instance per node, the IO-bound one in a single instance with all its cards. Half a
    # node's cards each: the spread service takes some of every node, and a whole node's cards
    # would then be left nowhere for the concentrated one (the planner would split it too)
    cards = real_nodes.gpus // 2
    loop.apply_plan("loop", {"cpu": c_cpu.key_strategy, "io": c_io.key_strategy}, cards)
    cpu_pods, io_pods = loop.planned_pods("loop", "cpu"), loop.planned_pods("loop", "io")
    spread = min(len(real_nodes.names), cards)
    assert len(cpu_pods) == len({p["spec"]["nodeName"] for p in cpu_pods}) == spread, cpu_pods
    assert sum(cards_of(p) for p in cpu_pods) == cards
    assert [cards_of(p) for p in io_pods] == [cards]

    split = f"{spread}x{cards // spread}"
    planned_cpu = loop.measure("cpu", cpu_pods, split, cards // spread, planner=True, best_of=BEST_OF)
    planned_io = loop.measure("io", io_pods, f"1x{cards}", cards, planner=True)
    # the load tester as an Indexed Job of two shards on the real nodes, merged: below the knee
    # the planner's cpu split holds the rate, and the merged throughput is the whole of it
    rate = round(0.7 * planned_cpu.capacity_qps, 1)
    merged = loop.measure_sharded(cpu_pods, rate, shards=2)
    (step,) = merged["steps"]
    assert step["held"] and abs(step["throughput"] - rate) <= 0.1 * rate, step
    assert len(merged["merged_from"]) == 2, merged["merged_from"]
    print("\n" + table([cpu[0], cpu[1], planned_cpu, io[0], io[1], planned_io]))
    # the planner's split against the alternatives: the spread cpu service serves about twice the
    # concentrated 1 x n; the io service in one instance serves what two did, with less memory
    assert planned_cpu.capacity_qps >= 1.6 * cpu[0].capacity_qps, (planned_cpu, cpu[0])
    assert planned_io.capacity_qps >= 0.85 * io[1].capacity_qps, (planned_io, io[1])
    assert planned_io.rss_mib is not None and io[1].rss_mib is not None
    assert planned_io.rss_mib < 0.75 * io[1].rss_mib, (planned_io, io[1])
