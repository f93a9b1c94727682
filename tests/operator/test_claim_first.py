"""A new gang plan of many Deployments claims its cards in status first, and its pods' gates are
lifted while the rest of its Deployments are still being written (creation and scheduling
overlap); never before the claim, never when another plan of the cycle gives cards up."""

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
from gpuplan_operator.cycle import actions
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.writes import Step, Verb, Write

from planner import Gang
from tests.operator.builders import NODES, NOW, PLANS_NS, node, plan
from tests.operator.fake_kube import FakeKube
from tests.operator.test_cycle import POD_NS, cycle_on

GATE = "gpuplan.ragnaros.io/gang"


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


def test_a_new_plans_gates_are_lifted_while_its_deployments_are_still_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(actions, "CLAIM_FIRST", 2)
    monkeypatch.setattr(apply, "MEANWHILE_EVERY", 0.02)
    kube = ReplicaSetKube(delay=0.05)
    for i in range(6):
        kube.put(NODES, node(f"p4-{i}"))
    requests = {op: {"P4": 8} for op in ("face_feature_extract", "body_feature_extract", "face_1vn")}
    kube.put(PLANS_NS, plan("g", deploy=True, requests=requests))
    cycle, cache = cycle_on(kube)
    kube.cache = cache

    with caplog.at_level(logging.INFO, logger="gpuplan_operator"):
        cycle.run()

    # its nodes' labels go out with its Deployments (the gates wait for them), not a round before
    assert re.search(r"label_nodes \d+\+configmap 1\+deployments \d+", caplog.text), caplog.text
    deployments = positions(kube, "/deployments/")
    lifts = positions(kube, "/pods/")
    (claim, *rest) = positions(kube, "/gpuallocationplans/g/status")
    assert len(deployments) >= 4
    assert lifts, "no gate lifted"
    assert claim < deployments[0]  # status.applied is written before the first Deployment
    assert claim < lifts[0]
    assert lifts[0] < deployments[-1]  # pods start while Deployments are still being written
    assert rest and rest[0] > deployments[-1]  # the full status once every write landed
    pods = kube.items(POD_NS)
    assert pods and all(GATE not in str(p["spec"].get("schedulingGates")) for p in pods)


def test_without_the_gang_gate_or_with_few_deployments_the_status_comes_after_the_writes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(apply, "MEANWHILE_EVERY", 0.02)
    for gang, claim_first in (("none", 2), ("plan", 1000)):
        monkeypatch.setattr(actions, "CLAIM_FIRST", claim_first)
        kube = ReplicaSetKube(delay=0.02)
        for i in range(6):
            kube.put(NODES, node(f"p4-{i}"))
        requests = {op: {"P4": 8} for op in ("face_feature_extract", "body_feature_extract")}
        kube.put(PLANS_NS, plan("g", deploy=True, gang=gang, requests=requests))
        cycle, cache = cycle_on(kube)
        kube.cache = cache
        with caplog.at_level(logging.INFO, logger="gpuplan_operator"):
            cycle.run()
        if gang == "none":  # pods not gated: a pod needs its node's label before it is created
            assert re.search(r"label_nodes \d+\+priority_classes \d+ ", caplog.text), caplog.text
        else:  # gated, without a claim: the labels still go with the Deployments
            assert re.search(r"label_nodes \d+\+configmap 1\+deployments \d+", caplog.text), caplog.text
        caplog.clear()
        statuses = positions(kube, "/gpuallocationplans/g/status")
        assert statuses and statuses[0] > positions(kube, "/deployments/")[-1], gang


def prepared(deployments: int, delta: dict[tuple[str, str], int], gang: Gang = Gang.PLAN) -> Any:
    writes = [Write(Step.DEPLOYMENTS, Verb.APPLY, "Deployment", f"d{i}", "ns") for i in range(deployments)]
    return SimpleNamespace(spec=SimpleNamespace(deploy=True, gang=gang), writes=writes, delta=delta)


def test_nobody_claims_first_when_a_plan_of_the_cycle_gives_cards_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actions, "_delta", lambda p: p.delta)
    big = prepared(actions.CLAIM_FIRST, {("n", "nvidia.com/gpu"): 8})
    small = prepared(actions.CLAIM_FIRST - 1, {("m", "nvidia.com/gpu"): 8})
    loose = prepared(actions.CLAIM_FIRST, {("k", "nvidia.com/gpu"): 8}, Gang.NONE)
    assert actions.claims_first([big, small, loose]) == [big]
    shrinking = prepared(1, {("n", "nvidia.com/gpu"): -4, ("m", "nvidia.com/gpu"): 4})
    assert actions.claims_first([big, shrinking]) == []


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


def test_a_round_during_the_writes_decides_for_every_plan_that_claimed_its_cards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(actions, "CLAIM_FIRST", 1000)  # first applied as usual
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

    cycle._claimed = {"ns/g"}  # g claimed first; h's writer runs the round
    cycle.release_meanwhile("ns/h")

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
