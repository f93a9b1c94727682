"""``make bench`` (operator part): from ``kubectl apply`` to every pod Running on its planned node.

On the local control plane (real kube-apiserver, kube-scheduler, kube-controller-manager, kwok
nodes), for each size: create N fake GPU nodes, start the operator, create one plan with
``deploy: true`` whose requests make about 2.3 pods per node (past 1,000 nodes, one such plan per
1,000 nodes, created one after another: a plan lists at most 1,024 requests), and time

- **written**: every plan reports ``Applied`` (the operator has labelled, applied and deployed);
- **running**: every pod the plans own is Running on the node its plan chose;
- **cordon**: once the controller-manager has caught up with the new Deployments
  (:func:`controllers_settled`), the busiest node is cordoned; time until every plan's applied
  placement leaves it, and until the displaced pods run elsewhere.
- **urgent**: a second plan of priority 100 arrives (one 8-card instance per four nodes; the
  first plan spreads its instances over four nodes of five, so it must hand nodes over): time
  until every pod of both plans runs on its planned node. Its floor is the same hand-over done
  directly: the first plan's Deployments running, then the ones that leave deleted and the new
  ones created at once; its gated floor adds the resource's writes as the gated floor below does
  (each plan's node labels set and removed, every pod gated and its gate lifted as it shows up:
  :func:`gated_hand_over_floor`).

Then the plan goes, and the same Deployments (node selectors on ``kubernetes.io/hostname``, no
operator) are created directly with the operator's own client and parallelism: **floor** is the
time until all their pods run, what this control plane needs for that many pods whoever asks.
The operator's cost is its time over the floor, measured in the same run. **gated floor** adds
what the resource itself asks for to the floor and decides nothing: the planned nodes labelled,
the Deployments pinned by that label and created with the gang gate, each pod's gate lifted by
the bench as soon as the pod shows up (:func:`gated_floor`); it splits the operator's time over
the floor into the cost of those writes and the operator's own.

Every phase's work is kept in a ledger (:mod:`ledger`: the API server's requests by kind and the
seconds it took answering them, each control-plane process's CPU), printed after the table.
``--floor-before`` times the floor once more before the operator starts (the control plane
slows down within a run, so the later floor alone flatters the operator); ``--gang none`` deploys
every plan without the gang gate, the urgent one too (the gated floors are not timed; with
``--rounds`` the labelled ones are: the labels the resource asks for, without gates); ``--profile DIR``
records the API server's CPU profile of the first minute of the deploy and each floor (one at
a time, as the API server allows); ``--rounds N`` runs, instead of the phases, the floor, the
gated floor and the deploy N times each in turns, and prints the deploy's ratio over each floor
round by round (one run's ratio moves by a tenth or more on a shared machine: two floors in a
row took 95 s and 78 s, and a gated floor 81 s after the other phases, 132 s on fresh nodes).
``--rounds N --hand-over`` does the same for the higher-priority plan's hand-over and its floors.
Each run's ledger is printed after its line, and at the end each kind's runs and the operator's
fastest over each floor's fastest (a run on a shared machine is slowed by what else runs, never
sped up).
The bench
reads its namespace's plans and pods from watches (:mod:`watched`), not from the API server at
each look: it must not load what it times.

Then the nodes are deleted again. The control plane runs with the client rate limits a
production cluster of this size is given (``hack/cluster-up.sh``); the operator runs with its
defaults. Needs ``make cluster-up`` first (``make bench`` does it).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import ledger  # noqa: E402
from gpuplan_operator.apply import PARALLEL_WRITES  # noqa: E402
from gpuplan_operator.cluster import release_gate  # noqa: E402
from gpuplan_operator.gang import is_gated  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from watched import WatchedApi  # noqa: E402

from e2e.support import (  # noqa: E402
    METRICS_PORT_ENV,
    Api,
    Kubectl,
    OperatorProcess,
    fake_node,
    free_port,
    label_key,
    node_ready,
    wait_for,
)
from planner import GANG_GATE  # noqa: E402

NS = "gpuplan-bench"
PLAN = "scale"
TYPE = "BENCH"  # a GPU type no sample node has, so only the bench nodes are used
TYPE_KEY = "gpuplan.ragnaros.io/gpu-type"
API = "gpuplan.ragnaros.io/v1alpha1"
OUT = ROOT / "bench" / "out"


class DefaultOperator(OperatorProcess):
    ARGS = ("--plan-seconds", "30")  # the operator's own defaults otherwise (debounce 1 s, ...)


GANG: str | None = None  # --gang: every plan's spec.gang, the urgent one's too (None: the default, plan)
PROFILES: Path | None = None  # --profile: the API server's CPU profile of the deploy and the floor
PROFILE_SECONDS = 60


RECORDING: list[tuple[str, threading.Thread]] = []  # the profiles started, in order


def profile(api: Api, name: str) -> None:
    """With ``--profile``, record the API server's CPU for the next minute (a thread of its own).
    The API server records one profile at a time: while the last one runs, this one is skipped
    and says so."""
    if PROFILES is None:
        return
    if RECORDING and RECORDING[-1][1].is_alive():
        busy = RECORDING[-1][0]
        print(f"no profile of the {name}: the API server still records the {busy}'s", file=sys.stderr)
        return
    PROFILES.mkdir(parents=True, exist_ok=True)
    RECORDING.append((name, ledger.profile(api.kube, PROFILE_SECONDS, PROFILES / f"{name}.pprof")))


POD_POLL = 0.2  # seconds between looks at the pods (a watch keeps them: a look costs the API server nothing)
NODES_PER_PLAN = 1000  # a plan lists at most 1,024 requests (the CRD's bound): larger sizes get several


TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
# kube-controller-manager's TTL controller (pkg/controller/ttl): the TTL it wants on every node of
# a cluster that grew to a size, by the size's upper bound
TTL_STEPS = ((100, 0), (500, 15), (1000, 30), (2000, 60))


def node_ttl(count: int) -> str:
    return str(next((ttl for most, ttl in TTL_STEPS if count <= most), 300))


def settle_nodes(api: Api, selector: str) -> None:
    """Leave the new nodes as a running cluster's are before anything is timed.

    The controller-manager finishes new nodes after they are Ready (the beta labels, the
    not-ready taint lifted), and its TTL controller sets each node's ``node.alpha.kubernetes.io/ttl``
    by the cluster's size, but only for a node it hears of: added, or written. A kubelet's status
    updates keep every node current; kwok's nodes are seldom written, so a node created before
    the cluster crossed a size keeps the older TTL until its first write, which here is the
    operator's label in the middle of the timed deploy: 800 extra node writes and their watch
    events at 1,000 nodes, seen in the node watch, and none in the floor's phases, which write no
    node. So the bench sets every node's TTL to the value the controller wants at this size, waits
    until the controller-manager has finished every node, then checks that the controller left
    the TTLs as set (a different table in another Kubernetes release would show here)."""
    want = node_ttl(len(api.nodes()))
    stale = [
        n["metadata"]["name"] for n in api.nodes(selector)
        if (n["metadata"].get("annotations") or {}).get(TTL_ANNOTATION) != want
    ]  # fmt: skip
    patch = {"metadata": {"annotations": {TTL_ANNOTATION: want}}}
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda name: api.patch("v1", "nodes", name, patch), stale))

    def finished(node: dict[str, Any]) -> bool:
        meta, taints = node["metadata"], (node.get("spec") or {}).get("taints") or []
        return (
            (meta.get("annotations") or {}).get(TTL_ANNOTATION) == want
            and "beta.kubernetes.io/os" in (meta.get("labels") or {})
            and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)
        )

    wait_for("the new nodes finished", lambda: all(map(finished, api.nodes(selector))), 600, 1)
    time.sleep(3)
    moved = [n["metadata"]["name"] for n in api.nodes(selector) if not finished(n)]
    if moved:
        raise SystemExit(f"the TTL controller did not keep ttl {want} on {len(moved)} nodes ({moved[0]} ...)")


KWOK_LISTS = "LIST pods (cluster)"  # kwok lists each node's pods once when it takes the node on


def kwok_took_on(api: Api, before: int, count: int) -> None:
    """Wait until kwok has taken on ``count`` new nodes, ``before`` being the API server's count of
    cluster-wide pod listings before they were created.

    kwok lists a node's pods (a cluster-wide LIST by ``spec.nodeName``) once, when it starts
    faking the node, and works through a thousand new nodes at its own pace: in a run on
    2026-11-27 about 550 of those 1,000 listings came after the operator's deploy had started,
    an API server load that the floors, timed later, never see. Nothing is timed until the
    count has risen by one per node and then stayed put for two seconds."""

    def lists() -> int:
        return ledger.read(api.kube).requests[KWOK_LISTS]

    started = time.monotonic()
    wait_for(f"kwok taking on {count} nodes", lambda: lists() - before >= count, 600, 1)
    steady(lists, 2.0, 600.0, "kwok's node listings")
    print(
        f"kwok took on {count} nodes ({lists() - before} pod listings, "
        f"{time.monotonic() - started:.0f} s more)",
        file=sys.stderr,
    )


def steady(count: Callable[[], int], quiet: float, timeout: float, what: str) -> None:
    """Wait until ``count`` (a counter of the API server's requests) has not moved for ``quiet``
    seconds; stop the bench after ``timeout``."""
    started = time.monotonic()
    last, since = count(), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{what} did not settle in {timeout:.0f} s")
        time.sleep(0.5)
        now = count()
        if now != last:
            last, since = now, time.monotonic()


CHURN = ("deployments", "replicasets", "pods")  # what a deploy, a clear and the controllers write
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
CHURN_WRITES = frozenset((verb, kind) for verb in WRITES for kind in CHURN)  # ledger keys' first words


def controllers_settled(api: Api, what: str = "", quiet: float = 3.0, timeout: float = 600.0) -> float:
    """Wait until nothing has written a Deployment, ReplicaSet or pod (statuses and deletions too)
    for ``quiet`` seconds; the seconds waited (printed, with ``what`` is waited for).

    Neither all Running nor all gone ends the controllers' work: at 3,000 nodes the
    controller-manager went on writing 3,718 of the new Deployments' statuses through the cordon
    that followed, with a core of CPU (a 2026-11-27 run); at 1,000 nodes 1,269 pod deletions of
    the plan just deleted landed in the floor timed after it, and the floor's own clear in the
    phase after that. A timed phase starts on settled controllers."""

    def count() -> int:
        requests = ledger.read(api.kube).requests
        return sum(n for key, n in requests.items() if tuple(key.split(" ")[:2]) in CHURN_WRITES)

    started = time.monotonic()
    steady(count, quiet, timeout, "the controllers")
    took = time.monotonic() - started
    if what:
        print(f"the controllers settled {took:.0f} s before {what}", file=sys.stderr)
    return took


def plan_names(nodes: int) -> list[str]:
    """The load's plans: one per 1,000 nodes (``scale``, ``scale-2``, ...), all on the same nodes."""
    count = max(1, -(-nodes // NODES_PER_PLAN))
    return [PLAN] + [f"{PLAN}-{i}" for i in range(2, count + 1)]


def plan_spec(nodes: int, first: int = 0) -> dict[str, Any]:
    """About 2.3 pods per node: 40% of the operators spread 8 instances, the rest mixed.

    ``first``: the number of the first operator (several plans name theirs apart)."""
    operators, requests = [], {}
    count = max(4, (nodes * 2) // 5)
    for i in range(first, first + count):
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
        **({"gang": GANG} if GANG else {}),
    }


def all_on_planned_nodes(api: Api, counts: dict[str, int], avoid: str | None = None) -> bool:
    """Every plan of ``counts`` (plan -> its pods) has exactly that many live pods, each Running on
    its planned node (and not on ``avoid``). One listing for all the plans."""
    live: dict[str, int] = {}
    running: dict[str, int] = {}
    for p in api.pods(NS, "gpuplan.ragnaros.io/plan"):
        if p["metadata"].get("deletionTimestamp"):
            continue
        plan = p["metadata"]["labels"]["gpuplan.ragnaros.io/plan"]
        live[plan] = live.get(plan, 0) + 1
        node = p["spec"].get("nodeName")
        if (
            p["status"].get("phase") == "Running"
            and node == (p["spec"].get("nodeSelector") or {}).get(label_key(NS, plan))
            and node != avoid
        ):
            running[plan] = running.get(plan, 0) + 1
    return all(live.get(p, 0) == running.get(p, 0) == n for p, n in counts.items())


FLOOR = "floor"  # the label of the Deployments the floor run creates
PLAN_LABEL = "gpuplan.ragnaros.io/bench.plan"  # the plan a floor Deployment stands for


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
            "metadata": {
                "name": d["metadata"]["name"],
                "namespace": NS,
                "labels": {"app": FLOOR, PLAN_LABEL: plan},
            },
            "spec": {
                "replicas": d["spec"]["replicas"],
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        })  # fmt: skip
    return out


def floor(
    api: Api,
    deployments: list[dict[str, Any]],
    pods: int,
    poll: float,
    phase: Callable[[str], None] = lambda _: None,
    name: str = "floor",
) -> float:
    """Seconds from creating ``deployments`` (the operator's parallelism) to all ``pods`` Running,
    started on settled controllers."""
    controllers_settled(api, f"the {name}")
    phase(f"before the {name}")
    profile(api, name)
    start = time.monotonic()
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda d: api.create("apps/v1", "deployments", d, NS), deployments))
    written = time.monotonic() - start
    wait_for("the floor's pods Running", running_floor(api, pods), 900, poll)
    took = time.monotonic() - start
    phase(name)
    print(f"{name}: {len(deployments)} Deployments written in {written:.1f} s", file=sys.stderr)
    clear_floor(api)
    return took


FLOOR_KEY = "gpuplan.ragnaros.io/bench.floor"  # the node label the gated floor pins its pods by


def gated_deployments(
    deployments: list[dict[str, Any]], per_plan: bool = False, gate: bool = True
) -> list[dict[str, Any]]:
    """The floor's Deployments as the resource asks a plan's to be: pinned by a node label of
    their own (not the hostname; with ``per_plan``, one key per plan, as each plan has its own)
    and, with ``gate``, every pod created with the gang gate (``--gang none``: without)."""
    out = []
    for d in deployments:
        d = copy.deepcopy(d)
        spec = d["spec"]["template"]["spec"]
        key = floor_key(d["metadata"]["labels"][PLAN_LABEL]) if per_plan else FLOOR_KEY
        spec["nodeSelector"] = {key: spec["nodeSelector"]["kubernetes.io/hostname"]}
        if gate:
            spec["schedulingGates"] = [{"name": GANG_GATE}]
        out.append(d)
    return out


def floor_key(plan: str) -> str:
    """The node label a gated floor pins ``plan``'s Deployments by."""
    return f"{FLOOR_KEY}.{plan}"


def pins(deployments: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(node, label key) of every node label the gated ``deployments`` select."""
    return {
        (value, key)
        for d in deployments
        for key, value in d["spec"]["template"]["spec"]["nodeSelector"].items()
    }


def label_changes(
    before: set[tuple[str, str]], after: set[tuple[str, str]]
) -> dict[str, dict[str, str | None]]:
    """Node -> the labels to set (the node's name) or remove (None) to go from the pins of
    ``before`` to those of ``after``: one merge patch per node."""
    out: dict[str, dict[str, str | None]] = {}
    for node, key in after - before:
        out.setdefault(node, {})[key] = node
    for node, key in before - after:
        out.setdefault(node, {})[key] = None
    return out


def lift_gates(api: Api, stop: threading.Event) -> int:
    """Until ``stop``: lift the gang gate of every floor pod that shows up gated, at once, with the
    operator's own patch (:func:`gpuplan_operator.cluster.release_gate`), deciding nothing.
    The number of patches that landed."""
    path = f"/api/v1/namespaces/{NS}/pods"
    selector = f"app={FLOOR}"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    futures = []
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:

        def listed() -> str:  # the pods now (the gated ones lifted), and where to watch from
            doc = api.kube.get(path, labelSelector=selector)
            for pod in doc.get("items") or []:
                if is_gated(pod):
                    futures.append(pool.submit(release_gate, api.kube, pod, at))
            return str(doc["metadata"]["resourceVersion"])

        version = listed()
        while not stop.is_set():
            query = {
                "labelSelector": selector,
                "watch": "true",
                "resourceVersion": version,
                "timeoutSeconds": 5,
            }
            for event in api.kube.stream(path, query, 15):
                pod = event.get("object") or {}
                if event.get("type") == "ERROR":  # too old to resume from (410): list again
                    version = listed()
                    break
                version = str(pod.get("metadata", {}).get("resourceVersion") or version)
                if event.get("type") in ("ADDED", "MODIFIED") and is_gated(pod):
                    futures.append(pool.submit(release_gate, api.kube, pod, at))
                if stop.is_set():
                    break
    return sum(1 for f in futures if f.result())


@contextmanager
def lifting_gates(api: Api, on: bool) -> Iterator[list[int]]:
    """While inside, with ``on``: every floor pod that shows up gated has its gate lifted
    (:func:`lift_gates`, in a thread of its own); once left, the list holds the number of patches
    that landed. Without ``on`` nothing runs and the list stays empty."""
    lifted: list[int] = []
    if not on:
        yield lifted
        return
    stop = threading.Event()
    lifter = threading.Thread(target=lambda: lifted.append(lift_gates(api, stop)), daemon=True)
    lifter.start()
    try:
        yield lifted
    finally:
        stop.set()
        lifter.join(60)


def lifts(lifted: list[int], gate: bool, before: int = 0) -> str:
    """How many gates a floor lifted (less the ``before`` pods' own), for its line: "no" without
    the gate, "?" when the lifter did not say."""
    if not gate:
        return "no"
    return str(lifted[0] - before) if lifted else "?"


def gated_floor(
    api: Api,
    deployments: list[dict[str, Any]],
    pods: int,
    poll: float,
    phase: Callable[[str], None] = lambda _: None,
    gate: bool = True,
) -> float:
    """The floor with the writes the resource itself asks for, and nothing decided: every planned
    node labelled, the Deployments (gated, pinned by that label) created with the labels, each
    pod's gate lifted as soon as it shows up (one patch each, as the operator sends). What the
    operator's deploy takes over this is its own cost; what this takes over the floor is the
    cost of the labels and the gates. Without ``gate`` (``--gang none``, plans that make no gated
    pods): the labelled floor, the labels alone."""
    gated = gated_deployments(deployments, gate=gate)
    name = "gated floor" if gate else "labelled floor"
    nodes = sorted({d["spec"]["template"]["spec"]["nodeSelector"][FLOOR_KEY] for d in gated})
    controllers_settled(api, f"the {name}")
    phase(f"before the {name}")

    def label(name: str, value: str | None) -> None:
        api.patch("v1", "nodes", name, {"metadata": {"labels": {FLOOR_KEY: value}}})

    with lifting_gates(api, gate) as lifted:
        start = time.monotonic()
        with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
            labels = [pool.submit(label, n, n) for n in nodes]
            created = [pool.submit(api.create, "apps/v1", "deployments", d, NS) for d in gated]
            for w in labels:
                w.result()
            for c in created:
                c.result()
        written = time.monotonic() - start
        wait_for(f"the {name}'s pods Running", running_floor(api, pods), 900, poll)
        took = time.monotonic() - start
    phase(name)
    print(
        f"{name}: {len(nodes)} nodes labelled and {len(gated)} Deployments written in {written:.1f} s, "
        f"{lifts(lifted, gate)} gates lifted",
        file=sys.stderr,
    )
    clear_floor(api)
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda n: label(n, None), nodes))
    return took


def delete_all(api: Api, path: str, selector: str | None = None, body: dict[str, Any] | None = None) -> None:
    """Delete a collection (``selector``: only those) and wait until it is empty. Deleting 2,480
    Deployments at once can outlast the client's timeout on a loaded control plane; the API
    server goes on deleting, so the request is sent again until nothing is left."""
    query = {"labelSelector": selector} if selector else {}

    def gone() -> bool:
        try:
            api.kube.request("DELETE", path, query=query, body=body)
        except ApiException as e:
            if e.status != 0:  # not "no answer in time"
                raise
        return not api.kube.get(path, **query).get("items")

    wait_for(f"{path} gone", gone, 600, 1)


def clear_floor(api: Api) -> None:
    """Remove what a floor run created, and wait until its pods are gone."""
    delete_all(api, f"/apis/apps/v1/namespaces/{NS}/deployments", f"app={FLOOR}")
    delete_all(api, f"/api/v1/namespaces/{NS}/pods", f"app={FLOOR}", {"gracePeriodSeconds": 0})


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
        **({"gang": GANG} if GANG else {}),
    }


def running_floor(api: Api, pods: int) -> Callable[[], bool]:
    """A probe: exactly ``pods`` floor pods, every one Running."""

    def running() -> bool:
        found = api.pods(NS, f"app={FLOOR}")
        return sum(1 for p in found if p["status"].get("phase") == "Running") == pods == len(found)

    return running


def hand_over_floor(
    api: Api,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    poll: float,
    phase: Callable[[str], None] = lambda _: None,
) -> float:
    """Seconds the control plane needs for the same hand-over with nobody planning: ``before``
    running, then the Deployments that leave deleted and the ones that arrive created at once (the
    operator's parallelism), until every pod of ``after`` runs."""
    start = hand_over_start(api, before, poll, phase, "hand-over floor")
    hand_over(api, before, after)
    written = time.monotonic() - start
    wait_for("the hand-over floor's pods Running", handed_over(api, after), 900, poll)
    took = time.monotonic() - start
    phase("hand-over floor")
    print(f"hand-over floor: its Deployments written in {written:.1f} s", file=sys.stderr)
    clear_floor(api)
    return took


def gated_hand_over_floor(
    api: Api,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    poll: float,
    phase: Callable[[str], None] = lambda _: None,
    gate: bool = True,
) -> float:
    """The hand-over floor with the writes the resource itself asks for, deciding nothing: each
    plan's Deployments pinned by a node label of that plan's own and created with the gang gate.
    ``before`` running, then at once: the labels the arriving instances select set and those of
    the leaving ones removed (one patch per node), the Deployments that leave deleted, the ones
    that arrive created, and each pod's gate lifted as soon as it shows up. What the operator's
    hand-over takes over this is its own cost (deciding who leaves, and lifting no gate before
    the cards are free); what this takes over the hand-over floor is the labels' and the gates'.
    Without ``gate`` (``--gang none``): the labelled hand-over floor, the labels alone."""
    name = "gated hand-over floor" if gate else "labelled hand-over floor"
    gated_before = gated_deployments(before, per_plan=True, gate=gate)
    gated_after = gated_deployments(after, per_plan=True, gate=gate)
    was, now = pins(gated_before), pins(gated_after)

    def label(node: str, labels: dict[str, str | None]) -> None:
        api.patch("v1", "nodes", node, {"metadata": {"labels": labels}})

    with lifting_gates(api, gate) as lifted:
        with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
            list(pool.map(lambda item: label(*item), label_changes(set(), was).items()))
        start = hand_over_start(api, gated_before, poll, phase, name)
        changes = label_changes(was, now)
        with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
            labelled = [pool.submit(label, node, labels) for node, labels in changes.items()]
            hand_over(api, gated_before, gated_after)
            for w in labelled:
                w.result()
        written = time.monotonic() - start
        wait_for(f"the {name}'s pods Running", handed_over(api, gated_after), 900, poll)
        took = time.monotonic() - start
    phase(name)
    print(
        f"{name}: {len(changes)} nodes' labels changed, "
        f"{lifts(lifted, gate, replicas(before))} gates lifted in the hand-over; "
        f"labels and Deployments written in {written:.1f} s",
        file=sys.stderr,
    )
    clear_floor(api)
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda item: label(*item), label_changes(now, set()).items()))
    return took


def hand_over_start(
    api: Api, before: list[dict[str, Any]], poll: float, phase: Callable[[str], None], name: str
) -> float:
    """A hand-over floor's start: ``before`` created, its pods Running, the controllers settled
    and the phase before it marked; the monotonic time its timing starts from."""
    with ThreadPoolExecutor(PARALLEL_WRITES) as pool:
        list(pool.map(lambda d: api.create("apps/v1", "deployments", d, NS), before))
    wait_for(f"the {name}'s first pods Running", running_floor(api, replicas(before)), 900, poll)
    controllers_settled(api, f"the {name}")
    phase(f"before the {name}")
    return time.monotonic()


def hand_over(api: Api, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """From the Deployments ``before`` to those ``after``, directly and at once (the operator's
    parallelism): the ones that leave deleted, the ones that arrive created, replicas changed."""
    was = {d["metadata"]["name"]: d for d in before}
    now = {d["metadata"]["name"]: d for d in after}

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


def handed_over(api: Api, after: list[dict[str, Any]]) -> Callable[[], bool]:
    """A probe: the floor's pods are exactly those of ``after``, every one Running."""
    wanted = {d["spec"]["selector"]["matchLabels"]["pin"] for d in after}

    def settled() -> bool:
        found = [p for p in api.pods(NS, f"app={FLOOR}") if not p["metadata"].get("deletionTimestamp")]
        ok = [
            p
            for p in found
            if p["status"].get("phase") == "Running" and p["metadata"]["labels"]["pin"] in wanted
        ]
        return len(ok) == replicas(after) == len(found)

    return settled


def replicas(deployments: list[dict[str, Any]]) -> int:
    return sum(int(d["spec"]["replicas"]) for d in deployments)


def clear_leftovers(api: Api) -> None:
    """Remove what an interrupted run left (its plan, Deployments, pods and nodes), so a bench
    stopped halfway does not stop the next one."""
    for item in api.kube.get(f"/apis/{API}/namespaces/{NS}/gpuallocationplans").get("items") or []:
        plan = item["metadata"]["name"]
        # no operator runs now to release the finalizer; the plan's own objects go below
        api.patch(API, "gpuallocationplans", plan, {"metadata": {"finalizers": None}}, NS)
        api.delete(API, "gpuallocationplans", plan, NS)
    delete_all(api, f"/apis/apps/v1/namespaces/{NS}/deployments")
    delete_all(api, f"/api/v1/namespaces/{NS}/pods", body={"gracePeriodSeconds": 0})
    left = api.nodes(f"{TYPE_KEY}={TYPE}")
    for node in left:
        api.delete("v1", "nodes", node["metadata"]["name"])
    if left:
        print(f"(removed {len(left)} nodes an earlier run left)", flush=True)
    wait_for("leftover pods gone", lambda: not api.pods(NS), 300, 0.5)


def create_plan(api: Api, name: str, spec: dict[str, Any]) -> None:
    manifest = {
        "apiVersion": API,
        "kind": "GpuAllocationPlan",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
    api.create(API, "gpuallocationplans", manifest, NS)


def wait_applied(api: Api, name: str) -> None:
    """Wait until the plan's status says Applied (the plan as the bench's watch keeps it)."""
    wait_for(
        f"{name} Applied",
        lambda: (api.plan(NS, name) or {}).get("status", {}).get("phase") == "Applied",
        900,
        0.1,
    )


def create_load(api: Api, plans: list[str], share: int) -> None:
    """Create the load's plans one after another (as ``kubectl apply -f`` of a folder would), each
    on ``share`` nodes, and wait until each says Applied."""
    first = 0
    for plan in plans:
        spec = plan_spec(share, first)
        first += len(spec["operators"])
        create_plan(api, plan, spec)
    for plan in plans:
        wait_applied(api, plan)


def remove_plans(api: Api, plans: list[str], operator: OperatorProcess) -> None:
    """Delete the plans that exist, wait until the operator has cleaned each up, stop it."""
    for plan in plans:
        if api.plan(NS, plan) is not None:
            api.delete(API, "gpuallocationplans", plan, NS)
    try:
        wait_for("the plans gone", lambda: all(api.plan(NS, p) is None for p in plans), 300)
    finally:
        operator.stop()


def moved_instances(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Instances of the first plan no longer where they were (its share of the hand-over)."""
    was = {(a["operator"], n): k for a in before["allocations"] for n, k in a["nodes"].items()}
    now = {(a["operator"], n): k for a in after["allocations"] for n, k in a["nodes"].items()}
    return sum(max(0, k - now.get(key, 0)) for key, k in was.items())


def instances(status: dict[str, Any]) -> int:
    return sum(int(a["instances"]) for a in status.get("allocations") or [])


def start_operator(kubeconfig: str, log_dir: Path, nodes: int) -> OperatorProcess:
    """The operator with its defaults, its metrics on a free port, its log in ``log_dir``."""
    operator = DefaultOperator(kubeconfig, log_dir, name=f"bench-operator-{nodes}")
    operator.start(extra_env={METRICS_PORT_ENV: str(free_port())})
    return operator


def bench_nodes(api: Api, nodes: int) -> list[str]:
    """Create ``nodes`` fake GPU nodes and wait until kwok keeps them Ready and settled; their names."""
    names = [f"bench-{i:04d}" for i in range(nodes)]
    kwok_lists = ledger.read(api.kube).requests[KWOK_LISTS]
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
    settle_nodes(api, f"{TYPE_KEY}={TYPE}")
    kwok_took_on(api, kwok_lists, nodes)
    return names


@dataclass(frozen=True)
class Arrival:
    """The higher-priority plan's arrival: seconds until every plan's pods ran on their planned
    nodes, its pods, the instances the others moved, and the floors' Deployments before and after."""

    took: float
    urgent_pods: int
    moved: int
    before: list[dict[str, Any]]
    after: list[dict[str, Any]]


def urgent_arrives(api: Api, plans: list[str], nodes: int, settled: Callable[[], object]) -> Arrival:
    """With ``plans`` applied and running: ``settled()``, then create the urgent plan and time it
    until every plan's pods (the urgent plan's, and the others' after they handed cards over)
    run on their planned nodes."""
    before = {p: api.status(NS, p) for p in plans}
    bare_before = [d for p in plans for d in bare_deployments(api, label_key(NS, p), p)]
    settled()
    start = time.monotonic()
    create_plan(api, URGENT, urgent_spec(nodes))
    wait_applied(api, URGENT)
    urgent_pods = instances(api.status(NS, URGENT))
    after = {p: api.status(NS, p) for p in plans}
    wanted = {p: instances(st) for p, st in after.items()} | {URGENT: urgent_pods}
    wait_for("every plan's pods Running", lambda: all_on_planned_nodes(api, wanted), 900, POD_POLL)
    took = time.monotonic() - start
    moved = sum(moved_instances(before[p], after[p]) for p in plans)
    bare_after = [d for p in [*plans, URGENT] for d in bare_deployments(api, label_key(NS, p), p)]
    return Arrival(took, urgent_pods, moved, bare_before, bare_after)


def one_size(
    api: Api, kubeconfig: str, nodes: int, log_dir: Path, floors: bool = True, floor_before: bool = False
) -> dict[str, Any]:
    names = bench_nodes(api, nodes)
    plans = plan_names(nodes)
    share = nodes // len(plans)
    result: dict[str, Any] = {"nodes": nodes, "plans": len(plans), "ledger": {}}
    poll = POD_POLL
    metrics: str | None = None  # the operator's, once it runs: its cycles go into the ledger
    mark = ledger.read(api.kube)

    def phase(name: str) -> None:
        """Note what the control plane did since the last phase ended."""
        nonlocal mark
        now = ledger.read(api.kube, metrics)
        result["ledger"][name] = ledger.between(mark, now)
        mark = now

    saved = OUT / f"floor-{nodes}.json"  # the floor's Deployments of the last run at this size
    if floor_before and not saved.exists():
        print(f"no floor before at {nodes} nodes: {saved} is written by a first run", file=sys.stderr)
    elif floor_before:  # the floor before the operator ever ran: does the order matter?
        first_bare = json.loads(saved.read_text())
        result["floor_before"] = floor(api, first_bare, replicas(first_bare), poll, phase, "floor before")
    controllers_settled(api, "the operator starts")
    operator = start_operator(kubeconfig, log_dir, nodes)
    metrics = operator.metrics_url
    try:
        phase("idle")
        profile(api, "deploy")
        start = time.monotonic()
        create_load(api, plans, share)
        result["written"] = time.monotonic() - start
        statuses = {p: api.status(NS, p) for p in plans}
        counts = {p: instances(st) for p, st in statuses.items()}
        pods = sum(counts.values())
        result["pods"] = pods
        wait_for("pods Running", lambda: all_on_planned_nodes(api, counts), 900, poll)
        result["running"] = time.monotonic() - start
        phase("deploy")

        held: dict[str, int] = {}
        for st in statuses.values():
            for a in st["allocations"]:
                for n, c in a["nodes"].items():
                    held[n] = held.get(n, 0) + c
        victim = max(held, key=lambda n: (held[n], n))

        def left_victim() -> bool:
            for p in plans:
                units = ((api.plan(NS, p) or {}).get("status", {}).get("applied") or {}).get("units")
                if units is None or victim in units:
                    return False
            return True

        result["settled"] = controllers_settled(api, "the cordon")
        phase("settle")
        start = time.monotonic()
        api.patch("v1", "nodes", victim, {"spec": {"unschedulable": True}})
        wait_for("re-plan applied", left_victim, 120, 0.1)
        result["cordon_replanned"] = time.monotonic() - start
        wait_for("displaced pods Running", lambda: all_on_planned_nodes(api, counts, avoid=victim), 300, poll)
        result["cordon_running"] = time.monotonic() - start
        result["cordon_held"] = held[victim]
        phase("cordon")
        api.patch("v1", "nodes", victim, {"spec": {"unschedulable": False}})
        bare = [d for p in plans for d in bare_deployments(api, label_key(NS, p), p)]
        saved.write_text(json.dumps(bare))

        # a plan of higher priority arrives: the first ones hand cards over, then all run
        wait_for("the uncordon seen", lambda: all_on_planned_nodes(api, counts), 300, poll)
        time.sleep(3)  # past the debounce: the uncordon's cycle is done

        def settled() -> None:
            controllers_settled(api, "the urgent plan")
            phase("uncordon")

        arrival = urgent_arrives(api, plans, nodes, settled)
        result["urgent_running"] = arrival.took
        result["urgent_pods"] = arrival.urgent_pods
        result["handed_over"] = arrival.moved
        phase("urgent")
        bare_before, bare_after = arrival.before, arrival.after
    finally:
        remove_plans(api, [URGENT, *plans], operator)
    try:
        wait_for("the plans' pods gone", lambda: not api.pods(NS, "gpuplan.ragnaros.io/plan"), 300, 0.5)
        nan = float("nan")
        phase("plans deleted")
        result["floor"] = floor(api, bare, pods, poll, phase) if floors else nan
        gated = floors and GANG != "none"  # without the gate, the gated floors time writes nobody made
        try:  # a failure here loses no figure measured before it
            result["gated_floor"] = gated_floor(api, bare, pods, poll, phase) if gated else nan
        except Exception as e:
            print(f"the gated floor failed: {e!r}", file=sys.stderr)
            result["gated_floor"] = nan
            clear_floor(api)
        result["urgent_floor"] = hand_over_floor(api, bare_before, bare_after, poll, phase) if floors else nan
        try:
            result["urgent_gated_floor"] = (
                gated_hand_over_floor(api, bare_before, bare_after, poll, phase) if gated else nan
            )
        except Exception as e:
            print(f"the gated hand-over floor failed: {e!r}", file=sys.stderr)
            result["urgent_gated_floor"] = nan
            clear_floor(api)
    finally:
        for name in names:
            api.delete("v1", "nodes", name)
    return result


PLAIN, GATED, DEPLOY = "floor", "gated floor", "deploy"
KINDS = [PLAIN, GATED, DEPLOY]  # what --rounds times, in this order in its first round
# ... and with --hand-over: the operator's first (its run gives the floors their Deployments)
HAND_PLAIN, HAND_GATED, HAND_OVER = "hand-over floor", "gated hand-over floor", "hand-over"
HAND_KINDS = [HAND_OVER, HAND_GATED, HAND_PLAIN]
# without the gang gate the resource's writes are the labels alone: the labelled floors
LABELLED, HAND_LABELLED = "labelled floor", "labelled hand-over floor"


def timed_kinds(hand: bool, gang: str | None) -> list[str]:
    """What ``--rounds`` times: the deploy (``hand``: the hand-over) and its floors; without the
    gang gate (``gang`` none) the labelled floors stand where the gated ones stand (the plans
    make no gated pods: what the resource asks beyond the plain floor is their labels)."""
    kinds = HAND_KINDS if hand else KINDS
    if gang != "none":
        return list(kinds)
    return [{GATED: LABELLED, HAND_GATED: HAND_LABELLED}.get(k, k) for k in kinds]


def in_turns(count: int, kinds: Sequence[str] = KINDS) -> list[str]:
    """The order of ``count`` rounds of ``kinds``: forward, then backward (floor, gated floor,
    deploy, deploy, gated floor, floor, ...), so that a drift of the control plane within the run
    favours no side."""
    order: list[str] = []
    for i in range(count):
        order += kinds if i % 2 == 0 else kinds[::-1]
    return order


def ratios(order: list[str], took: list[float], over: str, kinds: Sequence[str] = KINDS) -> list[float]:
    """The operator's run (the kind of ``kinds`` that is no floor) over ``over`` in each round
    (``len(kinds)`` runs after one another in ``order``)."""
    subject = next(k for k in kinds if "floor" not in k)
    out = []
    for i in range(0, len(order) - len(kinds) + 1, len(kinds)):
        by = dict(zip(order[i : i + len(kinds)], took[i : i + len(kinds)], strict=True))
        out.append(by[subject] / by[over])
    return out


def deploy_once(
    api: Api, kubeconfig: str, nodes: int, log_dir: Path, phase: Callable[[str], None] = lambda _: None
) -> float:
    """Start the operator, create the load's plans and time them until every pod runs on its
    planned node; then delete them, stop the operator and wait until their pods are gone.
    ``phase`` is called as the timing starts and as it ends."""
    plans = plan_names(nodes)
    share = nodes // len(plans)
    controllers_settled(api, "the deploy")
    operator = start_operator(kubeconfig, log_dir, nodes)
    try:
        phase("before the deploy")
        start = time.monotonic()
        create_load(api, plans, share)
        counts = {p: instances(api.status(NS, p)) for p in plans}
        wait_for("pods Running", lambda: all_on_planned_nodes(api, counts), 900, POD_POLL)
        took = time.monotonic() - start
        phase("deploy")
    finally:
        remove_plans(api, plans, operator)
    wait_for("the plans' pods gone", lambda: not api.pods(NS, "gpuplan.ragnaros.io/plan"), 300, 0.5)
    return took


def hand_over_once(
    api: Api, kubeconfig: str, nodes: int, log_dir: Path, phase: Callable[[str], None] = lambda _: None
) -> Arrival:
    """Start the operator, apply the load and wait until its pods run (not timed), then time the
    urgent plan's arrival (:func:`urgent_arrives`); then delete the plans, stop the operator and
    wait until their pods are gone. ``phase`` is called as the timing starts and as it ends."""
    plans = plan_names(nodes)
    controllers_settled(api, "the load")
    operator = start_operator(kubeconfig, log_dir, nodes)

    def settled() -> None:
        controllers_settled(api, "the urgent plan")
        phase("before the hand-over")

    try:
        create_load(api, plans, nodes // len(plans))
        counts = {p: instances(api.status(NS, p)) for p in plans}
        wait_for("pods Running", lambda: all_on_planned_nodes(api, counts), 900, POD_POLL)
        arrival = urgent_arrives(api, plans, nodes, settled)
        phase("hand-over")
    finally:
        remove_plans(api, [URGENT, *plans], operator)
    wait_for("the plans' pods gone", lambda: not api.pods(NS, "gpuplan.ragnaros.io/plan"), 300, 0.5)
    return arrival


class RunLedger:
    """The ``phase`` callback of ``--rounds``: what the control plane did in each timed run (from
    its ``before the ...`` mark to the mark that ends it), kept in ``last`` for the run's line."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.mark: ledger.Reading | None = None
        self.last = ""

    def __call__(self, name: str) -> None:
        now = ledger.read(self.api.kube)
        if name.startswith("before ") or self.mark is None:
            self.mark = now
            return
        self.last = f" {name}\n{ledger.summary(ledger.between(self.mark, now))}"
        self.mark = None


def in_rounds(
    api: Api, kubeconfig: str, nodes: int, log_dir: Path, count: int, hand: bool = False
) -> dict[str, list[float]]:
    """``--rounds``: the floor, the gated floor and the deploy (``hand``: the hand-over and its two
    floors), ``count`` times each in :func:`in_turns` order on the same nodes; prints each run and
    returns the operator's ratio over each floor, round by round. The deploy's floors run the
    Deployments an earlier full run saved; the hand-over's those of the first hand-over."""
    saved = OUT / f"floor-{nodes}.json"
    if not hand and not saved.exists():
        raise SystemExit(f"--rounds at {nodes} nodes needs {saved}: run the bench at that size once first")
    bare = [] if hand else json.loads(saved.read_text())
    names = bench_nodes(api, nodes)
    kinds = timed_kinds(hand, GANG)
    order = in_turns(count, kinds)
    took: list[float] = []
    first: Arrival | None = None
    phase = RunLedger(api)
    try:
        for i, kind in enumerate(order):
            if kind == PLAIN:
                took.append(floor(api, bare, replicas(bare), POD_POLL, phase))
            elif kind in (GATED, LABELLED):
                took.append(gated_floor(api, bare, replicas(bare), POD_POLL, phase, gate=kind == GATED))
            elif kind == DEPLOY:
                took.append(deploy_once(api, kubeconfig, nodes, log_dir, phase))
            elif kind == HAND_OVER:
                arrival = hand_over_once(api, kubeconfig, nodes, log_dir, phase)
                first = first or arrival
                took.append(arrival.took)
            else:
                assert first is not None  # the hand-over runs first
                if kind == HAND_PLAIN:
                    took.append(hand_over_floor(api, first.before, first.after, POD_POLL, phase))
                else:
                    gate = kind == HAND_GATED
                    took.append(
                        gated_hand_over_floor(api, first.before, first.after, POD_POLL, phase, gate=gate)
                    )
            print(f"{nodes} nodes, run {i + 1} of {len(order)}: {kind} {took[-1]:.1f} s", flush=True)
            print(phase.last, flush=True)
    finally:
        for name in names:
            api.delete("v1", "nodes", name)
    floors = [k for k in kinds if "floor" in k]
    for line in fastest(order, took, kinds):
        print(f"{nodes} nodes: {line}", flush=True)
    return {over: ratios(order, took, over, kinds) for over in floors}


def fastest(order: list[str], took: list[float], kinds: Sequence[str]) -> list[str]:
    """Each kind's runs, and the operator's fastest over each floor's fastest: on a shared machine
    a run is slowed by what else runs, never sped up, so the fastest of several runs is the one
    least disturbed (what ``timeit`` reports). Said beside the median of the round-by-round
    ratios, not instead of it."""
    runs = {k: [t for o, t in zip(order, took, strict=True) if o == k] for k in kinds}
    subject = next(k for k in kinds if "floor" not in k)
    lines = [
        f"{k} runs: " + ", ".join(f"{t:.1f}" for t in ts) + f" s (fastest {min(ts):.1f} s)"
        for k, ts in runs.items()
        if ts
    ]
    best = min(runs[subject])
    lines += [
        f"the fastest {subject} over the fastest {k}: {best:.1f} / {min(ts):.1f} s = {best / min(ts):.2f}x"
        for k, ts in runs.items()
        if k != subject and ts
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000", help="node counts (default 100,1000)")
    ap.add_argument(
        "--no-floors", action="store_true", help="skip the floors (a quicker look at the operator)"
    )
    ap.add_argument(
        "--floor-before",
        action="store_true",
        help="also time the floor before the operator runs (its Deployments saved by an earlier run)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help=f"record the API server's CPU profile of the first {PROFILE_SECONDS} s of each floor and the "
        "deploy (one at a time: a phase that starts while one records goes without, and says so)",
    )
    ap.add_argument(
        "--gang",
        choices=("plan", "none"),
        help="every plan's spec.gang, the urgent one's too (default: the resource's default, plan): "
        "with none, no gate is lifted, and --rounds times labelled floors (the plans' labels, no gates) "
        "where the gated ones stand",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="instead of the phases: the floor, the gated floor and the deploy N times each, in "
        "turns (forward, then backward), and the deploy's ratio over each floor round by round: "
        "one run's ratio moves by a tenth or more on this machine",
    )
    ap.add_argument(
        "--hand-over",
        action="store_true",
        help="with --rounds: time the higher-priority plan's arrival (the load running, not timed) "
        "and its two floors instead of the deploy",
    )
    args = ap.parse_args()
    global GANG, PROFILES
    GANG = args.gang
    PROFILES = args.profile
    kubeconfig = os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig")
    api = WatchedApi(kubeconfig, NS)
    kubectl = Kubectl(kubeconfig)
    kubectl.run("apply", "--server-side", "-f", str(ROOT / "crds" / "gpuallocationplans.yaml"))
    kubectl.run(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/gpuallocationplans.gpuplan.ragnaros.io"
    )
    if api.kube.get_or_none(f"/api/v1/namespaces/{NS}") is None:
        api.create("v1", "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    api.start()
    clear_leftovers(api)
    OUT.mkdir(exist_ok=True)
    if args.rounds:
        for size in (int(s) for s in args.sizes.split(",")):
            for over, got in in_rounds(api, kubeconfig, size, OUT, args.rounds, args.hand_over).items():
                print(
                    f"{size} nodes: all Running over the {over}, round by round: "
                    + ", ".join(f"{r:.2f}x" for r in got)
                    + f"; median {statistics.median(got):.2f}x",
                    flush=True,
                )
        return
    head = (
        "nodes",
        "plans",
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
    widths = (6, 5, 6, 10, 10, 21, 6, 10, 8, 8, 13, 6, 10, 8, 8)
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = one_size(api, kubeconfig, size, OUT, floors=not args.no_floors, floor_before=args.floor_before)
        rows.append(r)
        print(
            f"{r['nodes']:>6} {r['plans']:>5} {r['pods']:>6} {r['written']:>10.1f} {r['running']:>10.1f} "
            f"{r['cordon_replanned']:>21.1f} {r['cordon_held']:>6} {r['cordon_running']:>10.1f} "
            f"{r['floor']:>8.1f} {r['running'] / r['floor']:>8.2f} {r['urgent_pods']:>13} "
            f"{r['handed_over']:>6} {r['urgent_running']:>10.1f} {r['urgent_floor']:>8.1f} "
            f"{r['urgent_running'] / r['urgent_floor']:>8.2f}",
            flush=True,
        )
        if "floor_before" in r:
            mean = (r["floor_before"] + r["floor"]) / 2
            print(
                f"{'':>6} the floor before the operator ran: {r['floor_before']:.1f} s; all Running "
                f"{r['running'] / r['floor_before']:.2f}x that, "
                f"{r['running'] / mean:.2f}x the mean of both floors",
                flush=True,
            )
        if not math.isnan(r.get("gated_floor", math.nan)):  # the floors ran
            print(
                f"{'':>6} the floor with the resource's writes (node labels, gates lifted as pods appear): "
                f"{r['gated_floor']:.1f} s, {r['gated_floor'] / r['floor']:.2f}x the floor; "
                f"all Running {r['running'] / r['gated_floor']:.2f}x that",
                flush=True,
            )
        if not math.isnan(r.get("urgent_gated_floor", math.nan)):
            print(
                f"{'':>6} the hand-over floor with the resource's writes (each plan's node labels, "
                f"gates lifted as pods appear): {r['urgent_gated_floor']:.1f} s, "
                f"{r['urgent_gated_floor'] / r['urgent_floor']:.2f}x the hand-over floor; "
                f"the hand-over {r['urgent_running'] / r['urgent_gated_floor']:.2f}x that",
                flush=True,
            )
    (OUT / "operator-bench.json").write_text(json.dumps(rows, indent=2))
    for _, thread in RECORDING:  # the last profile may still be recording
        thread.join()
    for r in rows:  # where the control plane's work went, phase by phase
        print(f"\n{r['nodes']} nodes:")
        for name, used in r["ledger"].items():
            print(f" {name}\n{ledger.summary(used)}")


if __name__ == "__main__":
    main()
