"""``make loop``: the whole loop on the real-kubelet nodes, its table and its picture.

Usage: ``python -m e2e.kubelet.run_loop [--out DIR] [--counts 1,2,4] [--quick]`` on a cluster with
real nodes (``make cluster-up KUBELETS=2 KUBELET_GPUS=12``; ``make loop`` starts them). It runs the
operator itself (as the e2e suites do), in a namespace of its own that it deletes first, and
writes ``loop.md`` (the table), ``loop.json`` (every measurement and both classifications) and
``loop.png`` into ``--out`` (default ``.cluster/loop``). See :mod:`e2e.kubelet.loop` for the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from e2e.kubelet.conftest import ENV_FILE, RealNodes, from_env, read_env
from e2e.kubelet.loop import (
    CPU_LIMIT,
    SERVICES,
    Loop,
    Measured,
    Settings,
    cards_of,
    classify_service,
    splits,
    table,
)
from e2e.support import REPO, Api, Kubectl, OperatorProcess, node_ready, wait_for
from loadtest.classify import Classification, render_text

NS = "gpuplan-loop"
PLAN = "loop"
CRDS = (REPO / "crds" / "gpuallocationplans.yaml", REPO / "crds" / "plans-admission-policy.yaml")


def real_nodes(api: Api) -> RealNodes:
    if not ENV_FILE.is_file():
        raise SystemExit("no real nodes: make cluster-up KUBELETS=2 KUBELET_GPUS=12")
    nodes = from_env(read_env(ENV_FILE))
    for name in nodes.names:
        if not node_ready(api.node(name)):
            raise SystemExit(f"real node {name} is not Ready: make cluster-up KUBELETS=2")
    return nodes


def run(loop: Loop, counts: Sequence[int], cards: int, naive: bool) -> dict[str, object]:
    """Measure and classify both services, plan and deploy them, measure the planner's split and
    (with ``naive``) every other split of the same cards."""
    loop.log(f"1. capacities at {', '.join(map(str, counts))} instances (CPU limit {CPU_LIMIT} each)")
    measured = {s: loop.measure_instances(s, counts) for s in SERVICES}
    classes: dict[str, Classification] = {}
    for s in SERVICES:
        classes[s] = classify_service(measured[s])
        loop.log(f"2. classify {s}:\n{render_text(classes[s])}")
    strategies = {s: classes[s].key_strategy for s in SERVICES}
    loop.log(f"3. plan {cards} cards each with {strategies}, deployed by the operator")
    status = loop.apply_plan(PLAN, strategies, cards)
    rows: list[Measured] = []
    sharded: dict[str, object] = {}
    for s in SERVICES:
        pods = loop.planned_pods(PLAN, s)
        k, g = len(pods), cards_of(pods[0])
        rows.append(loop.measure(s, pods, f"{k}x{g}", g, planner=True))
        # the same pods at 70% of that capacity from an Indexed Job of two shards, merged
        rate = round(0.7 * rows[-1].capacity_qps, 1)
        step = loop.measure_sharded(pods, rate)["steps"][0]
        sharded[s] = {"rate": rate, "held": step["held"], "throughput": step["throughput"]}
    loop.delete_plan(PLAN)
    if naive:
        loop.log(f"4. the naive splits of {cards} cards")
        for s in SERVICES:
            for k, g in splits(cards):
                name = f"{s}-{k}x{g}"
                pods = loop.deploy(s, name, k, g)
                rows.append(loop.measure(s, pods, f"{k}x{g}", g))
                loop.undeploy(name)
    return {
        "measured": {s: [m.row() for m in measured[s]] for s in SERVICES},
        "classified": {s: classes[s].to_dict() for s in SERVICES},
        "allocations": status.get("allocations"),
        "sharded": sharded,
        "rows": rows,
    }


def draw(rows: Sequence[Measured], path: Path) -> None:
    """Capacity, CPU and memory per allocation and service, the planner's split highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = (("capacity_qps", "capacity (req/s)"), ("cpu_cores", "CPU at the knee (cores)"),
               ("rss_mib", "memory (MiB)"))  # fmt: skip
    fig, axes = plt.subplots(len(metrics), len(SERVICES), figsize=(9, 8), squeeze=False)
    for col, service in enumerate(SERVICES):
        mine = [m for m in rows if m.service == service]
        labels = [("planner\n" if m.planner else "") + m.allocation for m in mine]
        for row, (key, title) in enumerate(metrics):
            ax = axes[row][col]
            values = [float(getattr(m, key) or 0) for m in mine]
            ax.bar(labels, values, color=["tab:orange" if m.planner else "tab:blue" for m in mine])
            ax.set_title(f"{service}: {title}", fontsize=9)
            ax.tick_params(labelsize=8)
    fig.suptitle(f"instances x cards, each instance limited to {CPU_LIMIT} CPU (real kubelets)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.kubelet.run_loop", description=__doc__)
    p.add_argument("--out", type=Path, default=REPO / ".cluster" / "loop")
    p.add_argument("--counts", default="1,2,4", help="instance counts to classify at")
    p.add_argument(
        "--cards",
        type=int,
        default=8,
        help="cards per service: the spread one takes cards/nodes of every node, so the concentrated "
        "one fits whole only when a node has cards + cards/nodes (12 for 8 on two nodes)",
    )
    p.add_argument("--quick", action="store_true", help="shorter load-test steps, no naive splits")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    kubeconfig = str(REPO / ".cluster" / "kubeconfig")
    os.environ["KUBECONFIG"] = kubeconfig
    api, kubectl = Api(kubeconfig), Kubectl(kubeconfig)
    nodes = real_nodes(api)
    args.out.mkdir(parents=True, exist_ok=True)
    kubectl.run("apply", "--server-side", "--force-conflicts", *[a for c in CRDS for a in ("-f", str(c))])
    kubectl.run("delete", "namespace", NS, "--ignore-not-found", "--wait=true", timeout=180)
    api.create("v1", "namespaces", {"metadata": {"name": NS}})
    wait_for("the namespace's default ServiceAccount", lambda: kubectl.run(
        "get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0)  # fmt: skip
    operator = OperatorProcess(kubeconfig, args.out)
    operator.start()
    settings = Settings(warmup=0.5, window=2.0, resolution=0.15) if args.quick else Settings()
    started = time.monotonic()
    try:
        loop = Loop(api, kubectl, NS, nodes, settings, log=lambda line: print(line, flush=True))
        report = run(loop, counts, args.cards, naive=not args.quick)
    finally:
        operator.stop()
    rows = report.pop("rows")
    assert isinstance(rows, list)
    text = table(rows)
    took = time.monotonic() - started
    (args.out / "loop.md").write_text(text)
    (args.out / "loop.json").write_text(json.dumps(report | {"rows": [m.row() for m in rows]}, indent=2))
    draw(rows, args.out / "loop.png")
    print(text)
    print(f"{len(rows)} allocations measured in {took:.0f}s; wrote {args.out}/loop.md, loop.json, loop.png")
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
