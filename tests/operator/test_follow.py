"""follow.py: what a plan's daemon knows, when it looks again, and which plans' pods changed."""

from __future__ import annotations

from typing import Any

import pytest
from gpuplan_operator.follow import Plans, PlanState, backoff, pod_fingerprints
from gpuplan_operator.status import Phase

from planner.base.vocab import PLAN_LABEL

POLL, RESYNC = 2.0, 60.0


def no_jitter() -> float:
    return 0.5  # the middle of the ±20% band: exactly the base delay


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [
        pytest.param(0, 0.0, id="no failure waits nothing"),
        pytest.param(1, 1.0, id="the first retry comes after a second"),
        pytest.param(3, 4.0, id="each failure doubles the wait"),
        pytest.param(5, 10.0, id="the wait is capped at ten seconds"),
        pytest.param(500, 10.0, id="however many failures"),
    ],
)
def test_backoff_doubles_up_to_a_cap(failures: int, seconds: float) -> None:
    assert backoff(failures, no_jitter) == pytest.approx(seconds)


def test_backoff_jitter_stays_within_a_fifth() -> None:
    assert backoff(3, lambda: 0.0) == pytest.approx(3.2)
    assert backoff(3, lambda: 1.0) == pytest.approx(4.8)


def state_after(*steps: tuple[str, Any]) -> PlanState:
    state = PlanState()
    for step, arg in steps:
        if step == "record":
            state.record(*arg)
        elif step == "checked":
            state.checked(*arg)
        elif step == "failed":
            state.failed()
    return state


@pytest.mark.parametrize(
    ("steps", "wait"),
    [
        pytest.param([], POLL, id="nothing known yet: look soon"),
        pytest.param([("record", (Phase.APPLIED, False))], POLL,
                     id="a handler applied a spec change and pods are pending: poll readiness"),
        pytest.param([("record", (Phase.APPLIED, True))], RESYNC, id="applied and ready: resync"),
        pytest.param([("record", (Phase.APPLIED, True)), ("record", (Phase.APPLIED, False))], POLL,
                     id="ready, then an update handler's reconcile is not: poll again"),
        pytest.param([("record", (Phase.INFEASIBLE, False))], RESYNC, id="infeasible: re-plan at resync"),
        pytest.param([("record", (Phase.INVALID, False))], RESYNC, id="invalid: nothing to poll"),
        pytest.param([("record", (Phase.ERROR, False))], 1.0, id="the daemon's reconcile failed: back off"),
        pytest.param([("record", (Phase.ERROR, False)), ("record", (Phase.ERROR, False))], 2.0,
                     id="twice in a row: twice as long"),
        pytest.param([("record", (Phase.ERROR, False))], 1.0,
                     id="a handler's reconcile failed: the daemon retries it too (kopf may lose its retry)"),
        pytest.param([("record", (Phase.ERROR, False)), ("record", (Phase.APPLIED, True))], RESYNC,
                     id="a success resets the failures"),
        pytest.param([("checked", (Phase.APPLIED, True)), ("failed", None), ("failed", None)], 2.0,
                     id="a readiness read that raised twice backs off too"),
    ],
)  # fmt: skip
def test_the_daemon_waits_by_the_last_outcome_whoever_ran_it(
    steps: list[tuple[str, Any]], wait: float
) -> None:
    assert state_after(*steps).next_wait(POLL, RESYNC, no_jitter) == pytest.approx(wait)


def test_a_stale_status_makes_the_daemon_reconcile_unless_someone_else_does() -> None:
    """kopf drops a create whose finalizer patch failed: the daemon must not wait for it forever."""
    state = PlanState()
    state.checked(Phase.PLANNING, False, stale=True)
    assert state.next_wait(POLL, RESYNC, no_jitter) == POLL and state.must_reconcile()
    state.record(Phase.APPLIED, True)  # the handler got there first
    assert not state.must_reconcile() and state.next_wait(POLL, RESYNC, no_jitter) == RESYNC


def test_recording_an_outcome_wakes_the_daemon() -> None:
    state = PlanState()
    assert not state.wake.is_set()
    state.record(Phase.APPLIED, False)
    assert state.wake.is_set() and not state.take_recheck()


def pod(ns: str, plan: str, name: str, node: str = "", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": {PLAN_LABEL: plan}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def test_pod_fingerprints_group_by_plan_and_ignore_other_pods() -> None:
    pods = [
        pod("a", "p", "p-1", "n1"),
        pod("a", "p", "p-2"),
        pod("b", "p", "p-1", "n2"),
        {"metadata": {"name": "x"}},
    ]
    got = pod_fingerprints(pods)
    assert got == {
        ("a", "p"): frozenset({("p-1", "n1", False), ("p-2", "", False)}),
        ("b", "p"): frozenset({("p-1", "n2", False)}),
    }


@pytest.mark.parametrize(
    ("after", "changed"),
    [
        pytest.param([pod("ns", "p", "p-1", "n1")], [], id="the same pods: nobody wakes"),
        pytest.param([pod("ns", "p", "p-1", "n1", deleting=True)], ["ns/p"], id="a pod being deleted"),
        pytest.param([], ["ns/p"], id="a pod gone"),
        pytest.param([pod("ns", "p", "p-9")], ["ns/p"], id="a replacement, not scheduled yet"),
        pytest.param([pod("ns", "p", "p-1", "n2")], ["ns/p"], id="bound elsewhere"),
        pytest.param(
            [pod("ns", "p", "p-1", "n1"), pod("ns", "q", "q-1")], ["ns/q"], id="only the plan with a new pod"
        ),
    ],
)
def test_the_sweep_wakes_exactly_the_plans_whose_pods_changed(
    after: list[dict[str, Any]], changed: list[str]
) -> None:
    plans = Plans()
    p, q = plans.state("ns/p"), plans.state("ns/q")
    assert plans.sweep([pod("ns", "p", "p-1", "n1")], str) == [], "the first sweep only learns"
    assert plans.sweep(after, str) == changed
    for key, state in (("ns/p", p), ("ns/q", q)):
        assert state.take_recheck() == state.wake.is_set() == (key in changed)


def test_a_dropped_plan_is_forgotten() -> None:
    plans = Plans()
    plans.state("ns/p")
    plans.sweep([pod("ns", "p", "p-1", "n1")], str)
    plans.drop("ns/p")
    assert plans.states == {} and plans.sweep([], str) == []
