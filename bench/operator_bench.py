"""``make bench`` (operator part): from ``kubectl apply`` to every pod Running on its planned node.

On the local control plane (real kube-apiserver, kube-scheduler, kube-controller-manager, kwok
nodes), for each size: create N fake GPU nodes, start the operator, create one plan with
``deploy: true`` whose requests make about 2.3 pods per node, and time

- **written**: the plan reports ``Applied`` (the operator has labelled, applied and deployed);
- **running**: every pod the plan owns is Running on the node the plan chose;
- **cordon**: the busiest node is cordoned; time until the plan's applied placement leaves it,
  and until the displaced pods run elsewhere.
- **urgent**: a second plan of priority 100 arrives (one 8-card instance per four nodes; the
  first plan spreads its instances over four nodes of five, so it must hand nodes over): time
  until every pod of both plans runs on its planned node. Its floor is the same hand-over done
  directly: the first plan's Deployments running, then the ones that leave deleted and the new
  ones created at once.

Then the plan goes, and the same Deployments (node selectors on ``kubernetes.io/hostname``, no
operator) are created directly with the operator's own client and parallelism: **floor** is the
time until all their pods run, what this control plane needs for that many pods whoever asks.
The operator's cost is its time over the floor, measured in the same run.

Then the nodes are deleted again. The control plane runs with the client rate limits a
production cluster of this size is given (``hack/cluster-up.sh``); the operator runs with its
defaults. Needs ``make cluster-up`` first (``make bench`` does it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from gpuplan_operator.apply import PARALLEL_WRITES  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from e2e.support import Api, Kubectl, OperatorProcess, fake_node, label_key, node_ready, wait_for  # noqa: E402

NS = "gpuplan-bench"
PLAN = "scale"
TYPE = "BENCH"  # a GPU type no sample node has, so only the bench nodes are used
TYPE_KEY = "gpuplan.ragnaros.io/gpu-type"
API = "gpuplan.ragnaros.io/v1alpha1"
OUT = ROOT / "bench" / "out"


class DefaultOperator(OperatorProcess):
    ARGS = ("--plan-seconds", "30")  # the operator's own defaults otherwise (debounce 1 s, ...)


def plan_spec(nodes: int) -> dict[str, Any]:
    """About 2.3 pods per node: 40% of the operators spread 8 instances, the rest mixed."""
    operators, requests = [], {}
    count = max(4, (nodes * 2) // 5)
    for i in range(count):
        name = f"svc{i:04d}"
        kind = ("service", "service", "single", "machine", "service")[i % 5]
        operators.append(
            {"name": name, "keyStrategy": kind, "services": {"key": name.replace("svc", "svc-")}}
        )
        requests[name] = {TYPE: {"service": 8, "single": 6, "machine": 8}[kind]}
    return {
        "resources": [{"name": TYPE, "kind": "GPU", "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": TYPE}}],
        "operators": operators,
        "requests": requests,
        "deploy": True,
    }


def on_planned_nodes(api: Api, key: str, expected: int, avoid: str | None = None, plan: str = PLAN) -> bool:
    pods = [
        p
        for p in api.pods(NS, f"gpuplan.ragnaros.io/plan={plan}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    running = [
        p
        for p in pods
        if p["status"].get("phase") == "Running"
        and p["spec"].get("nodeName") == (p["spec"].get("nodeSelector") or {}).get(key)
        and p["spec"].get("nodeName") != avoid
    ]
    return len(running) == expected == len(pods)


FLOOR = "floor"  # the label of the Deployments the floor run creates


def bare_deployments(api: Api, key: str, plan: str = PLAN) -> list[dict[str, Any]]:
    """The plan's Deployments as anyone would write them: pinned by hostname, no owner, no classes,
    no gang gate (nothing would lift it)."""
    out = []
    for d in api.kube.get(
        f"/apis/apps/v1/namespaces/{NS}/deployments", labelSelector=f"gpuplan.ragnaros.io/plan={plan}"
    )["items"]:
        pod = d["spec"]["template"]
        node = pod["spec"]["nodeSelector"][key]
        labels = {"app": FLOOR, "pin": d["metadata"]["name"][-63:].strip("-.")}
        dropped = ("nodeSelector", "priorityClassName", "schedulingGates")
        spec = {k: v for k, v in pod["spec"].items() if k not in dropped}
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        out.append({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": d["metadata"]["name"], "namespace": NS, "labels": {"app": FLOOR}},
            "spec": {
                "replicas": d["spec"]["replicas"],
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        })  # fmt: skip
    return out


def pod_poll(nodes: int) -> float:
    """Seconds between pod listings: at 1,000 nodes one listing is megabytes, and listing it five
    times a second would load the API server the bench measures."""
    return 0.2 if nodes <= 200 else 1.0


def floor(api: Api, deployments: list[dict[str, Any]], pods: int, poll: float) -> float:
    """Seconds from creating ``deployments`` (the operator's parallelism) to all ``pods`` Running."""
    start = time.monotonic()
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda d: api.create("apps/v1", "deployments", d, NS), deployments))

    wait_for("the floor's pods Running", running_floor(api, pods), 900, poll)
    took = time.monotonic() - start
    clear_floor(api)
    return took


def clear_floor(api: Api) -> None:
    """Remove what a floor run created, and wait until its pods are gone. Deleting 2,480
    Deployments at once can outlast the client's timeout on a loaded control plane; the API
    server goes on deleting, so the request is sent again until nothing is left."""

    def delete_all(path: str, body: dict[str, Any] | None = None) -> bool:
        try:
            api.kube.request("DELETE", path, query={"labelSelector": f"app={FLOOR}"}, body=body)
        except ApiException as e:
            if e.status != 0:  # not "no answer in time"
                raise
        return not api.kube.get(path, labelSelector=f"app={FLOOR}").get("items")

    wait_for(
        "the floor's Deployments gone",
        lambda: delete_all(f"/apis/apps/v1/namespaces/{NS}/deployments"),
        600,
        1,
    )
    pods = f"/api/v1/namespaces/{NS}/pods"
    wait_for("the floor's pods gone", lambda: delete_all(pods, {"gracePeriodSeconds": 0}), 600, 1)


URGENT = "urgent"  # the higher-priority plan that arrives while the first one runs


def urgent_spec(nodes: int) -> dict[str, Any]:
    """Priority 100: one whole node's cards for every fourth node, each one 8-card instance. The
    first plan (priority 0) spreads its instances over four nodes of five, so a fifth of the nodes
    are whole: it must hand over about one node in twenty (its instances there move)."""
    count = max(2, nodes // 4)
    names = [f"urg{i:04d}" for i in range(count)]
    return {
        "priority": 100,
        "resources": [{"name": TYPE, "kind": "GPU", "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": TYPE}}],
        "operators": [
            {"name": n, "keyStrategy": "single", "services": {"key": n.replace("urg", "urg-")}} for n in names
        ],
        "requests": {n: {"resourceNum": {TYPE: 8}, "machineNum": {TYPE: 1}} for n in names},
        "deploy": True,
    }


def running_floor(api: Api, pods: int) -> Callable[[], bool]:
    """A probe: exactly ``pods`` floor pods, every one Running."""

    def running() -> bool:
        found = api.pods(NS, f"app={FLOOR}")
        return sum(1 for p in found if p["status"].get("phase") == "Running") == pods == len(found)

    return running


def hand_over_floor(
    api: Api, before: list[dict[str, Any]], after: list[dict[str, Any]], poll: float
) -> float:
    """Seconds the control plane needs for the same hand-over with nobody planning: ``before``
    running, then the Deployments that leave deleted and the ones that arrive created at once (the
    operator's parallelism), until every pod of ``after`` runs."""
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda d: api.create("apps/v1", "deployments", d, NS), before))
    wait_for("the hand-over floor's first pods Running", running_floor(api, replicas(before)), 900, poll)
    was = {d["metadata"]["name"]: d for d in before}
    now = {d["metadata"]["name"]: d for d in after}
    start = time.monotonic()

    def change(name: str) -> None:
        if name not in now:
            api.delete("apps/v1", "deployments", name, NS)
        elif name not in was:
            api.create("apps/v1", "deployments", now[name], NS)
        elif was[name]["spec"]["replicas"] != now[name]["spec"]["replicas"]:
            api.patch(
                "apps/v1", "deployments", name, {"spec": {"replicas": now[name]["spec"]["replicas"]}}, NS
            )

    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(change, sorted(set(was) | set(now))))

    def settled() -> bool:
        found = [p for p in api.pods(NS, f"app={FLOOR}") if not p["metadata"].get("deletionTimestamp")]
        pins = {d["spec"]["selector"]["matchLabels"]["pin"] for d in after}
        ok = [
            p
            for p in found
            if p["status"].get("phase") == "Running" and p["metadata"]["labels"]["pin"] in pins
        ]
        return len(ok) == replicas(after) == len(found)

    wait_for("the hand-over floor's pods Running", settled, 900, poll)
    took = time.monotonic() - start
    clear_floor(api)
    return took


def replicas(deployments: list[dict[str, Any]]) -> int:
    return sum(int(d["spec"]["replicas"]) for d in deployments)


def clear_leftovers(api: Api) -> None:
    """Remove what an interrupted run left (its plan, Deployments, pods and nodes), so a bench
    stopped halfway does not stop the next one."""
    for plan in (PLAN, URGENT):
        if api.plan(NS, plan) is not None:
            # no operator runs now to release the finalizer; the plan's own objects go below
            api.patch(API, "gpuallocationplans", plan, {"metadata": {"finalizers": None}}, NS)
            api.delete(API, "gpuallocationplans", plan, NS)
    api.kube.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments")
    api.kube.request("DELETE", f"/api/v1/namespaces/{NS}/pods", body={"gracePeriodSeconds": 0})
    left = api.nodes(f"{TYPE_KEY}={TYPE}")
    for node in left:
        api.delete("v1", "nodes", node["metadata"]["name"])
    if left:
        print(f"(removed {len(left)} nodes an earlier run left)", flush=True)
    wait_for("leftover pods gone", lambda: not api.pods(NS), 300, 0.5)


def create_and_wait_applied(api: Api, name: str, spec: dict[str, Any]) -> None:
    """Create the plan and wait until its status says Applied."""
    manifest = {
        "apiVersion": API,
        "kind": "GpuAllocationPlan",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
    api.create(API, "gpuallocationplans", manifest, NS)
    wait_for(
        f"{name} Applied",
        lambda: (api.plan(NS, name) or {}).get("status", {}).get("phase") == "Applied",
        600,
        0.1,
    )


def moved_instances(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Instances of the first plan no longer where they were (its share of the hand-over)."""
    was = {(a["operator"], n): k for a in before["allocations"] for n, k in a["nodes"].items()}
    now = {(a["operator"], n): k for a in after["allocations"] for n, k in a["nodes"].items()}
    return sum(max(0, k - now.get(key, 0)) for key, k in was.items())


def one_size(api: Api, kubeconfig: str, nodes: int, log_dir: Path, floors: bool = True) -> dict[str, Any]:
    names = [f"bench-{i:04d}" for i in range(nodes)]
    for name in names:
        api.create("v1", "nodes", fake_node(name, TYPE))
    wait_for(
        f"{nodes} bench nodes Ready",
        lambda: (
            all(node_ready(n) for n in api.nodes(f"{TYPE_KEY}={TYPE}"))
            and len(api.nodes(f"{TYPE_KEY}={TYPE}")) == nodes
        ),
        600,
        1,
    )
    operator = DefaultOperator(kubeconfig, log_dir, name=f"bench-operator-{nodes}")
    operator.start()
    key = label_key(NS, PLAN)
    result: dict[str, Any] = {"nodes": nodes}
    poll = pod_poll(nodes)
    try:
        start = time.monotonic()
        create_and_wait_applied(api, PLAN, plan_spec(nodes))
        result["written"] = time.monotonic() - start
        status = api.status(NS, PLAN)
        pods = sum(a["instances"] for a in status["allocations"])
        result["pods"] = pods
        wait_for("pods Running", lambda: on_planned_nodes(api, key, pods), 900, poll)
        result["running"] = time.monotonic() - start

        held: dict[str, int] = {}
        for a in status["allocations"]:
            for n, c in a["nodes"].items():
                held[n] = held.get(n, 0) + c
        victim = max(held, key=lambda n: (held[n], n))
        start = time.monotonic()
        api.patch("v1", "nodes", victim, {"spec": {"unschedulable": True}})
        wait_for(
            "re-plan applied",
            lambda: (
                victim
                not in ((api.plan(NS, PLAN) or {}).get("status", {}).get("applied") or {}).get(
                    "units", {victim: 1}
                )
            ),
            120,
            0.1,
        )
        result["cordon_replanned"] = time.monotonic() - start
        wait_for("displaced pods Running", lambda: on_planned_nodes(api, key, pods, avoid=victim), 300, poll)
        result["cordon_running"] = time.monotonic() - start
        result["cordon_held"] = held[victim]
        api.patch("v1", "nodes", victim, {"spec": {"unschedulable": False}})
        bare = bare_deployments(api, key)

        # a plan of higher priority arrives: the first one hands cards over, then both run
        wait_for("the uncordon seen", lambda: on_planned_nodes(api, key, pods), 300, poll)
        time.sleep(3)  # past the debounce: the uncordon's cycle is done
        first = api.status(NS, PLAN)
        bare_before = bare_deployments(api, key)
        urgent_key = label_key(NS, URGENT)
        start = time.monotonic()
        create_and_wait_applied(api, URGENT, urgent_spec(nodes))
        urgent = api.status(NS, URGENT)
        after = api.status(NS, PLAN)
        urgent_pods = sum(a["instances"] for a in urgent["allocations"])
        pods_after = sum(a["instances"] for a in after["allocations"])
        wait_for(
            "both plans' pods Running",
            lambda: (
                on_planned_nodes(api, urgent_key, urgent_pods, plan=URGENT)
                and on_planned_nodes(api, key, pods_after)
            ),
            900,
            poll,
        )
        result["urgent_running"] = time.monotonic() - start
        result["urgent_pods"] = urgent_pods
        result["handed_over"] = moved_instances(first, after)
        bare_after = bare_deployments(api, key) + bare_deployments(api, urgent_key, URGENT)
    finally:
        for plan in (URGENT, PLAN):
            if api.plan(NS, plan) is not None:
                api.delete(API, "gpuallocationplans", plan, NS)
        try:
            wait_for(
                "the plans gone", lambda: api.plan(NS, PLAN) is None and api.plan(NS, URGENT) is None, 300
            )
        finally:
            operator.stop()
    try:
        wait_for(
            "the plan's pods gone", lambda: not api.pods(NS, f"gpuplan.ragnaros.io/plan={PLAN}"), 300, 0.5
        )
        nan = float("nan")
        result["floor"] = floor(api, bare, pods, poll) if floors else nan
        result["urgent_floor"] = hand_over_floor(api, bare_before, bare_after, poll) if floors else nan
    finally:
        for name in names:
            api.delete("v1", "nodes", name)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000", help="node counts (default 100,1000)")
    ap.add_argument(
        "--no-floors", action="store_true", help="skip the floors (a quicker look at the operator)"
    )
    args = ap.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig")
    api = Api(kubeconfig)
    kubectl = Kubectl(kubeconfig)
    kubectl.run("apply", "--server-side", "-f", str(ROOT / "crds" / "gpuallocationplans.yaml"))
    kubectl.run(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/gpuallocationplans.gpuplan.ragnaros.io"
    )
    if api.kube.get_or_none(f"/api/v1/namespaces/{NS}") is None:
        api.create("v1", "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    clear_leftovers(api)
    OUT.mkdir(exist_ok=True)
    head = (
        "nodes",
        "pods",
        "written s",
        "running s",
        "cordon: re-planned s",
        "moved",
        "running s",
        "floor s",
        "x floor",
        "urgent: pods",
        "moved",
        "running s",
        "floor s",
        "x floor",
    )
    widths = (6, 6, 10, 10, 21, 6, 10, 8, 8, 13, 6, 10, 8, 8)
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = one_size(api, kubeconfig, size, OUT, floors=not args.no_floors)
        rows.append(r)
        print(
            f"{r['nodes']:>6} {r['pods']:>6} {r['written']:>10.1f} {r['running']:>10.1f} "
            f"{r['cordon_replanned']:>21.1f} {r['cordon_held']:>6} {r['cordon_running']:>10.1f} "
            f"{r['floor']:>8.1f} {r['running'] / r['floor']:>8.2f} {r['urgent_pods']:>13} "
            f"{r['handed_over']:>6} {r['urgent_running']:>10.1f} {r['urgent_floor']:>8.1f} "
            f"{r['urgent_running'] / r['urgent_floor']:>8.2f}",
            flush=True,
        )
    (OUT / "operator-bench.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
