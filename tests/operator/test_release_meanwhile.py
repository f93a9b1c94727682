"""A gang plan's pods have their gates lifted while the rest of its Deployments are still being
written (creation and scheduling overlap), against the placement the cycle is writing rather than
a status written only after them; cards another plan gives up are taken only once its leaving
pods are gone. Also: the order the statuses of a cycle are written in."""

from __future__ import annotations

import logging
import re
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from gpuplan_operator import apply
from gpuplan_operator.cache.caches import ClusterCache
from gpuplan_operator.cycle import actions, session
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.writes import Step, Verb, Write

from tests.operator.builders import NODES, NOW, PLANS_NS, cluster, node, plan, pod
from tests.operator.fake_kube import FakeKube
from tests.operator.test_cycle import POD_NS, cycle_on, gang_pod

GATE = "gpuplan.ragnaros.io/gang"


@pytest.fixture(autouse=True)
def every_call_a_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``release_meanwhile`` runs a round (the pacing has a test of its own)."""
    monkeypatch.setattr(session, "ROUND_EVERY", 0.0)
    monkeypatch.setattr(session, "ROUND_SOON", 0.0)


class ReplicaSetKube(FakeKube):
    """A slow API server with a ReplicaSet controller in it: Deployments are written one at a time,
    each taking ``delay`` seconds, and each makes its gated pods at once; the cache hears of the
    pods, their lifted gates and the nodes' new labels as its watches would."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.cache: ClusterCache | None = None
        self._one_at_a_time = threading.Lock()

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if not (method in ("PATCH", "POST") and "/deployments" in path):  # an apply or a create
            out = super().request(method, path, **kw)
            if method == "PATCH" and self.cache is not None:
                if "/nodes/" in path:
                    self.cache.nodes.assume(out)
                elif "/pods/" in path:
                    self.cache.pods.assume(out)
            return out
        with self._one_at_a_time:
            time.sleep(self.delay)
            out = super().request(method, path, **kw)
        assert self.cache is not None
        template = out["spec"]["template"]
        for i in range(int(out["spec"].get("replicas", 1))):
            pod = {
                "metadata": {
                    "name": f"{out['metadata']['name']}-{i}",
                    "namespace": out["metadata"]["namespace"],
                    "labels": dict(template["metadata"].get("labels") or {}),
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": out["metadata"]["name"], "controller": True}
                    ],
                    "creationTimestamp": NOW,
                },
                "spec": dict(template["spec"]),
                "status": {"phase": "Pending"},
            }
            self.cache.pods.assume(self.put(POD_NS, pod))
        return out


def positions(kube: FakeKube, fragment: str) -> list[int]:
    return [i for i, (_, path) in enumerate(kube.writes) if fragment in path]


def on_six_nodes(delay: float, operators: tuple[str, ...], **spec: Any) -> tuple[ReplicaSetKube, Any]:
    """Plan ``g`` (8 cards per operator, deployed) on six P4 nodes behind a :class:`ReplicaSetKube`
    writing one Deployment every ``delay`` seconds, and the cycle that will apply it."""
    kube = ReplicaSetKube(delay=delay)
    for i in range(6):
        kube.put(NODES, node(f"p4-{i}"))
    kube.put(PLANS_NS, plan("g", deploy=True, requests={op: {"P4": 8} for op in operators}, **spec))
    cycle, cache = cycle_on(kube)
    kube.cache = cache
    return kube, cycle


def test_a_new_plans_gates_are_lifted_while_its_deployments_are_still_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(apply, "MEANWHILE_EVERY", 0.02)
    kube, cycle = on_six_nodes(0.05, ("face_feature_extract", "body_feature_extract", "face_1vn"))

    with caplog.at_level(logging.INFO, logger="gpuplan_operator"):
        cycle.run()

    # its nodes' labels go out with its Deployments (the gates wait for them), not a round before
    assert re.search(r"label_nodes \d+\+configmap 1\+deployments \d+", caplog.text), caplog.text
    deployments = positions(kube, "/deployments/")
    lifts = positions(kube, "/pods/")
    statuses = positions(kube, "/gpuallocationplans/g/status")
    assert len(deployments) >= 4
    assert lifts, "no gate lifted"
    assert lifts[0] < deployments[-1]  # pods start while Deployments are still being written
    assert statuses and statuses[0] > deployments[-1]  # no status before every write landed
    pods = kube.items(POD_NS)
    assert pods and all(GATE not in str(p["spec"].get("schedulingGates")) for p in pods)


def test_without_the_gang_gate_the_labels_go_with_the_deployments_and_nothing_is_lifted_meanwhile(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(apply, "MEANWHILE_EVERY", 0.02)
    kube, cycle = on_six_nodes(0.02, ("face_feature_extract", "body_feature_extract"), gang="none")
    rounds: list[int] = []
    monkeypatch.setattr(cycle, "release_meanwhile", lambda: rounds.append(1))
    cycle.service.meanwhile = cycle.release_meanwhile
    with caplog.at_level(logging.INFO, logger="gpuplan_operator"):
        cycle.run()
    # pods not gated: the labels go out with the Deployments, each Deployment once the label it
    # selects has landed (apply's after_labels), not a round before them all
    assert re.search(r"label_nodes \d+\+configmap 1\+deployments \d+", caplog.text), caplog.text
    assert not rounds
    statuses = positions(kube, "/gpuallocationplans/g/status")
    assert statuses and statuses[0] > positions(kube, "/deployments/")[-1]


def leaving(name: str, node_name: str) -> dict[str, Any]:
    """A pod of another plan, bound to ``node_name`` and Terminating: it holds its 8 cards until
    it is gone."""
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "7",
            "deletionTimestamp": NOW,
            "labels": {"app.kubernetes.io/managed-by": "gpuplan", "gpuplan.ragnaros.io/plan": "old"},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def waiting_for_a_leaving_pod() -> tuple[FakeKube, Any, ClusterCache]:
    """``g`` is being given both nodes by the cycle (its status says nothing yet), its two pods
    gated; a pod of the plan that gave p4-1 up is still Terminating there."""
    kube = cluster(node("p4-0"), node("p4-1"))
    kube.put(PLANS_NS, plan("g", deploy=True, requests={"face_feature_extract": {"P4": 16}}))
    for i in range(2):
        kube.put(POD_NS, gang_pod(f"g-{i}", f"p4-{i}", str(100 + i)))
    kube.put(POD_NS, leaving("old-0", "p4-1"))
    cycle, cache = cycle_on(kube)
    cycle.placing({"ns/g": {"units": {"p4-0": {"nvidia.com/gpu": 8}, "p4-1": {"nvidia.com/gpu": 8}}}})
    return kube, cycle, cache


def test_a_round_during_the_writes_takes_given_up_cards_only_once_the_leaving_pods_are_gone() -> None:
    kube, cycle, cache = waiting_for_a_leaving_pod()

    cycle.release_meanwhile()  # p4-1 still held: nothing of g starts
    assert not [w for w in kube.writes if "/pods/" in w[1]]
    assert "p4-1 needs 8 nvidia.com/gpu, 0 free" in (cycle.service.gates.waiting("ns", "g") or "")

    del kube.objects[(POD_NS, "old-0")]
    assert cache.pods.replace(kube.request("GET", "/api/v1/pods")["items"])  # what the watch would say
    cycle.release_meanwhile()
    lifted = sorted(w[1].rsplit("/", 1)[-1] for w in kube.writes if "/pods/" in w[1])
    assert lifted == ["g-0", "g-1"]


def test_a_round_comes_soon_after_a_pod_goes_while_a_plan_waits_for_cards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rounds during the writes come a second apart, except when the last one left a plan waiting
    for cards and a pod has gone since: then at once (the hand-over's leaving pod is gone)."""
    monkeypatch.setattr(session, "ROUND_EVERY", 3600.0)
    kube, cycle, cache = waiting_for_a_leaving_pod()
    rounds: list[int] = []
    decide = cycle.service.gates.decide_and_release

    def counted(*args: Any, **kw: Any) -> Any:
        rounds.append(1)
        return decide(*args, **kw)

    monkeypatch.setattr(cycle.service.gates, "decide_and_release", counted)
    cycle.release_meanwhile()  # the first round: g waits for p4-1
    cycle.release_meanwhile()  # nothing gone since: no round before ROUND_EVERY
    assert len(rounds) == 1

    del kube.objects[(POD_NS, "old-0")]
    assert cache.pods.replace(kube.request("GET", "/api/v1/pods")["items"])
    cycle.release_meanwhile()
    assert len(rounds) == 2
    assert sorted(w[1].rsplit("/", 1)[-1] for w in kube.writes if "/pods/" in w[1]) == ["g-0", "g-1"]
    cycle.release_meanwhile()  # g started, nobody waits: the next round a ROUND_EVERY later
    assert len(rounds) == 2


def test_a_round_during_the_writes_decides_on_the_placement_being_written_not_the_status() -> None:
    """``g``'s status still places it on p4-0 alone; the cycle is moving its second instance
    to p4-1. Read from the status, the pod pinned to p4-1 would be a card more than planned there
    and p4-0's planned cards would wait for a pod that is not coming."""
    kube = cluster(node("p4-0"), node("p4-1"), node("p4-2"))
    old = plan("g", deploy=True, requests={"face_feature_extract": {"P4": 16}})
    old["status"] = {"applied": {"units": {"p4-0": {"nvidia.com/gpu": 8}, "p4-2": {"nvidia.com/gpu": 8}}}}
    kube.put(PLANS_NS, old)
    kube.put(POD_NS, gang_pod("g-1", "p4-1", "101"))
    kube.put(POD_NS, pod_of_g_on("p4-0"))
    kube.put(POD_NS, pod("someone", "p4-2", 8))
    cycle, _ = cycle_on(kube)

    cycle.release_meanwhile()  # by the status: p4-2's cards (held by someone) are g's to wait for
    assert not [w for w in kube.writes if "/pods/" in w[1]]
    assert "p4-2 needs 8 nvidia.com/gpu, 0 free" in (cycle.service.gates.waiting("ns", "g") or "")

    units = {"p4-0": {"nvidia.com/gpu": 8}, "p4-1": {"nvidia.com/gpu": 8}}
    cycle.placing({"ns/g": {"units": units}})
    cycle.release_meanwhile()
    assert [w[1].rsplit("/", 1)[-1] for w in kube.writes if "/pods/" in w[1]] == ["g-1"]


def pod_of_g_on(node_name: str) -> dict[str, Any]:
    """A started pod of ``g`` (its instance set began: not gated), bound to ``node_name``."""
    started = gang_pod("g-0", node_name, "100")
    started["spec"] = {k: v for k, v in started["spec"].items() if k != "schedulingGates"}
    started["spec"]["nodeName"] = node_name
    started["status"] = {"phase": "Running"}
    return started


def test_meanwhile_runs_during_a_long_wave_and_never_after_the_last() -> None:
    calls: list[float] = []
    kube = ReplicaSetKube(delay=0.03)
    kube.cache = ClusterCache(kube, lambda kind, matters: None)
    writes = [
        Write(Step.DEPLOYMENTS, Verb.APPLY, "Deployment", f"d{i}", "ns", _deployment(f"d{i}"))
        for i in range(8)
    ]
    started = time.monotonic()
    apply.perform(kube, writes, Metrics(), meanwhile=lambda: calls.append(time.monotonic()), every=0.05)
    ended = time.monotonic()
    assert len(calls) >= 2  # eight writes one at a time: about 0.24 s of waiting
    assert all(started < t < ended for t in calls)
    time.sleep(0.1)
    assert all(t < ended for t in calls)


def _deployment(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"replicas": 0, "template": {"metadata": {}, "spec": {}}},
    }


def test_a_round_during_the_writes_decides_for_every_plan() -> None:
    kube = ReplicaSetKube(delay=0.0)
    for i in range(12):
        kube.put(NODES, node(f"p4-{i}"))
    requests = {op: {"P4": 8} for op in ("face_feature_extract", "body_feature_extract")}
    for name in ("g", "h"):
        kube.put(PLANS_NS, plan(name, deploy=True, requests=requests))
    cycle, cache = cycle_on(kube)
    kube.cache = cache
    cycle.run()
    cycle.run()  # the labels the first cycle wrote are in the cache now: every gate lifted
    assert not [p for p in kube.items(POD_NS) if p["spec"].get("schedulingGates")]
    # each plan's pods made again by new ReplicaSets, gated, as a re-plan's would be
    for old in kube.items(POD_NS):
        del kube.objects[(POD_NS, old["metadata"]["name"])]
        cache.pods.forget(f"ns/{old['metadata']['name']}")
        pod = dict(old, spec={**old["spec"], "schedulingGates": [{"name": GATE}]})
        pod["metadata"] = {
            **old["metadata"],
            "name": "new-" + old["metadata"]["name"],
            "ownerReferences": [{"kind": "ReplicaSet", "name": "new", "controller": True}],
        }
        cache.pods.assume(kube.put(POD_NS, pod))
    writes = len(kube.writes)

    cycle.release_meanwhile()  # one writer's round decides for both plans

    lifted = [path.rsplit("/", 1)[-1] for _, path in kube.writes[writes:] if "/pods/" in path]
    assert any(n.startswith("new-g-") for n in lifted) and any(n.startswith("new-h-") for n in lifted)


def moving(name: str, old: dict[str, int], new: dict[str, int]) -> Any:
    """A prepared plan that held ``old`` cards per node and now holds ``new``."""

    def units(held: dict[str, int]) -> dict[str, dict[str, int]]:
        return {n: {"nvidia.com/gpu": k} for n, k in held.items()}

    return SimpleNamespace(
        name=name, units=units(new), plan=SimpleNamespace(status={"applied": {"units": units(old)}})
    )


def rounds(prepared: list[Any]) -> list[list[tuple[str, str]]]:
    names = {id(p): p.name for p in prepared}
    return [[(step.value, names[id(p)]) for step, p in group] for group in actions.release_rounds(prepared)]


def test_statuses_of_plans_that_wait_on_nobody_are_written_in_one_round() -> None:
    # a cordon: both plans leave node c for nodes of their own
    a = moving("a", {"c": 2, "x": 1}, {"x": 1, "y": 2})
    b = moving("b", {"c": 1}, {"z": 1})
    assert rounds([a, b]) == [[("complete", "a"), ("complete", "b")]]


def test_a_plan_taking_what_another_gives_up_writes_its_status_after_it() -> None:
    a = moving("a", {"x": 1}, {"y": 1})
    b = moving("b", {"y": 2}, {"z": 2})  # b gives y up, a takes it: b first
    c = moving("c", {"w": 1}, {"v": 1})  # waits on nobody
    assert rounds([a, b, c]) == [[("complete", "b"), ("complete", "c")], [("complete", "a")]]


def test_plans_swapping_nodes_are_broken_open_by_a_release_of_their_own() -> None:
    a = moving("a", {"x": 1}, {"y": 1})
    b = moving("b", {"y": 1}, {"x": 1})
    assert rounds([a, b]) == [[("release", "a")], [("complete", "b")], [("complete", "a")]]


def test_plans_whose_units_stay_write_their_status_in_the_last_round() -> None:
    a = moving("a", {"x": 1}, {"y": 1})
    b = moving("b", {"y": 2}, {"z": 2})  # b gives y up, a takes it
    score_only = moving("s", {"w": 4}, {"w": 4})  # a cordon elsewhere changed only its score
    assert rounds([score_only, a, b]) == [[("complete", "b")], [("complete", "a"), ("complete", "s")]]
    assert rounds([score_only]) == [[("complete", "s")]]


class SlowStatusKube(ReplicaSetKube):
    """:class:`ReplicaSetKube` whose plan status patches take ``status_delay`` seconds (a large
    plan's status under a deploy's load)."""

    def __init__(self, delay: float, status_delay: float) -> None:
        super().__init__(delay)
        self.status_delay = status_delay

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "PATCH" and path.endswith("/status") and "/gpuallocationplans/" in path:
            time.sleep(self.status_delay)
        return super().request(method, path, **kw)


def test_gates_are_lifted_while_the_statuses_are_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods of the last Deployments written are not left gated until the plan's status lands."""
    monkeypatch.setattr(apply, "MEANWHILE_EVERY", 0.02)
    kube = SlowStatusKube(delay=0.01, status_delay=0.3)
    for i in range(6):
        kube.put(NODES, node(f"p4-{i}"))
    requests = {op: {"P4": 8} for op in ("face_feature_extract", "body_feature_extract", "face_1vn")}
    kube.put(PLANS_NS, plan("g", deploy=True, requests=requests))
    cycle, cache = cycle_on(kube)
    kube.cache = cache

    cycle.run()

    deployments = [path for _, path in kube.writes if "/deployments/" in path]
    last = deployments[-1].rsplit("/", 1)[-1].split("?")[0]
    lifted = positions(kube, f"/pods/{last}-0")
    statuses = positions(kube, "/gpuallocationplans/g/status")
    assert lifted and statuses
    assert lifted[0] < statuses[0]  # lifted during the status patch, not after it


def test_no_round_during_the_statuses_of_plans_without_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apply, "MEANWHILE_EVERY", 0.02)
    kube = SlowStatusKube(delay=0.0, status_delay=0.2)
    for i in range(6):
        kube.put(NODES, node(f"p4-{i}"))
    kube.put(PLANS_NS, plan("g", deploy=True, gang="none", requests={"face_feature_extract": {"P4": 8}}))
    cycle, cache = cycle_on(kube)
    kube.cache = cache
    rounds: list[int] = []
    monkeypatch.setattr(cycle, "release_meanwhile", lambda: rounds.append(1))
    cycle.service.meanwhile = cycle.release_meanwhile

    cycle.run()

    assert positions(kube, "/gpuallocationplans/g/status")
    assert not rounds
