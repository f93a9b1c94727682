"""handlers.py: the per-plan daemon hears about every reconcile, and backs off on failures.

The daemon runs for real on an event loop, with a scripted service in place of
:class:`~gpuplan_operator.service.PlanService`; waits are a few hundredths of a second, and every
assertion waits for an event with a timeout far above them (a loaded machine may be slow, never
wrong).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import pytest
from gpuplan_operator import handlers
from gpuplan_operator.follow import Plans
from gpuplan_operator.metrics import Trigger
from gpuplan_operator.service import Options, Outcome
from gpuplan_operator.status import Phase
from gpuplan_operator.watch import ChangeFeed, NodeTracker

POLL = 0.05
RESYNC = 30.0  # far beyond any test: a daemon that waits for it fails the test
PATIENCE = 5.0


class Stopped:
    """Enough of kopf's ``DaemonStopped`` for the daemon: truthiness and an awaitable ``wait()``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


class ScriptedService:
    """Answers reconciles and readiness checks from scripts; records when each was asked."""

    def __init__(self, reconciles: list[Outcome], checks: list[Outcome]) -> None:
        self.reconciles, self.checks = reconciles, checks
        self.calls: list[tuple[str, float]] = []

    def reconcile(self, namespace: str, name: str, trigger: Trigger = Trigger.RESUMED) -> Outcome | None:
        self.calls.append((f"reconcile:{trigger}", time.monotonic()))
        return self.reconciles.pop(0) if len(self.reconciles) > 1 else self.reconciles[0]

    def refresh_readiness(self, namespace: str, name: str) -> Outcome | None:
        self.calls.append(("readiness", time.monotonic()))
        return self.checks.pop(0) if len(self.checks) > 1 else self.checks[0]

    def count(self, what: str) -> int:
        return sum(1 for c, _ in self.calls if c.startswith(what))


def memo_for(service: ScriptedService) -> kopf.Memo:
    options = Options(ready_poll=POLL, resync=RESYNC, debounce=0.01, max_delay=0.1)
    return kopf.Memo(options=options, service=service, feed=ChangeFeed(), nodes=NodeTracker(), plans=Plans())


def call(handler: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
    """A handler called as kopf calls it (its decorator's type asks for every kwarg kopf has)."""
    return cast(Coroutine[Any, Any, None], handler(**kwargs))


async def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def run(scenario: Callable[[kopf.Memo, ScriptedService], Awaitable[None]], service: ScriptedService) -> None:
    async def main() -> None:
        memo = memo_for(service)
        stopped = Stopped()
        daemon = asyncio.create_task(
            call(handlers.follow_cluster, stopped=stopped, memo=memo, namespace="ns", name="p")
        )
        try:
            await scenario(memo, service)
        finally:
            stopped.event.set()
            await asyncio.wait_for(daemon, PATIENCE)
        assert memo.plans.states == {}, "the daemon forgets its plan when it stops"

    asyncio.run(main())


APPLIED_READY = Outcome(Phase.APPLIED, "ok", ready=True)
APPLIED_PENDING = Outcome(Phase.APPLIED, "ok", ready=False)


def test_a_spec_change_reconciled_by_the_update_handler_is_polled_until_ready() -> None:
    """Issue 11: the daemon knew only its own outcomes and slept a whole resync after an update."""
    service = ScriptedService([APPLIED_PENDING], [APPLIED_READY])

    async def scenario(memo: kopf.Memo, service: ScriptedService) -> None:
        await until("the first readiness check", lambda: service.count("readiness") >= 1)
        await asyncio.sleep(POLL * 4)
        assert service.count("readiness") == 1, "ready: the daemon waits for its resync"
        service.checks = [APPLIED_PENDING, APPLIED_READY]
        await call(handlers.plan_updated, memo=memo, namespace="ns", name="p", retry=0)
        await until("readiness polled after the update", lambda: service.count("readiness") >= 3)

    run(scenario, service)


def test_the_sweep_seeing_the_plans_pods_change_makes_the_daemon_check_readiness() -> None:
    service = ScriptedService([APPLIED_READY], [APPLIED_READY])

    async def scenario(memo: kopf.Memo, service: ScriptedService) -> None:
        await until("the first readiness check", lambda: service.count("readiness") >= 1)
        plans: Plans = memo.plans
        plans.sweep([], str)
        plans.sweep(
            [{"metadata": {"name": "x", "namespace": "ns", "labels": {"gpuplan.ragnaros.io/plan": "p"}}}], str
        )
        await until("a readiness check after the pods changed", lambda: service.count("readiness") >= 2)

    run(scenario, service)


def test_failed_retries_of_the_daemon_back_off() -> None:
    failing = Outcome(Phase.ERROR, "apply failed: 409 Conflict")
    service = ScriptedService([failing], [APPLIED_READY])

    async def scenario(memo: kopf.Memo, service: ScriptedService) -> None:
        await until("the first readiness check", lambda: service.count("readiness") >= 1)
        await memo.feed.bump(origin=None)  # a node changed: the daemon re-plans, and fails
        await until("two retries", lambda: service.count("reconcile") >= 3)
        times = [t for c, t in service.calls if c.startswith("reconcile")]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps[0] >= 0.8 * 1.0 and gaps[1] >= 0.8 * 2.0, f"no backoff between retries: {gaps}"
        assert service.calls[-1][0] == f"reconcile:{Trigger.RETRY}"

    run(scenario, service)


def test_a_plan_kopf_never_handled_is_reconciled_by_its_daemon() -> None:
    """The create handler never ran (kopf's finalizer patch was refused): the status stays stale."""
    stale = Outcome(Phase.PLANNING, "", stale=True)
    service = ScriptedService([APPLIED_READY], [stale])

    async def scenario(memo: kopf.Memo, service: ScriptedService) -> None:
        await until("the daemon's own reconcile", lambda: service.count("reconcile") >= 1)
        assert service.calls[-1][0] == f"reconcile:{Trigger.RETRY}"
        assert service.count("readiness") >= 1, "it looked first, and found the status stale"

    run(scenario, service)


@pytest.mark.parametrize(
    ("phase", "raises"),
    [
        pytest.param(Phase.ERROR, kopf.TemporaryError, id="an API error retries with backoff"),
        pytest.param(Phase.INVALID, kopf.PermanentError, id="an invalid spec is not retried"),
    ],
)
def test_handlers_tell_kopf_and_the_daemon(phase: Phase, raises: type[Exception]) -> None:
    service = ScriptedService([Outcome(phase, "no")], [APPLIED_READY])

    async def main() -> None:
        memo = memo_for(service)
        with pytest.raises(raises) as caught:
            await call(handlers.plan_created, memo=memo, namespace="ns", name="p", retry=3)
        if isinstance(caught.value, kopf.TemporaryError):
            assert 0.8 * 8 <= (caught.value.delay or 0) <= 1.2 * 8, "the fourth try waits ~8 s"
        state = memo.plans.state("ns/p")
        assert state.phase is phase and state.wake.is_set()

    asyncio.run(main())


def test_a_node_down_for_its_whole_grace_wakes_the_plans_without_an_event() -> None:
    """No node event marks the end of the grace: a timer does."""

    async def main() -> None:
        memo = memo_for(ScriptedService([APPLIED_READY], [APPLIED_READY]))
        memo.nodes = NodeTracker(grace=1.0)
        memo.node_timers, memo.background = {}, set()
        healthy = {
            "metadata": {"name": "n"},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        await call(handlers.node_event, memo=memo, event={"type": None}, body=healthy)
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        down = {
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": since}]},
        }
        await call(handlers.node_event, memo=memo, event={"type": "MODIFIED"}, body=down)
        assert memo.feed.version == 0, "a node just gone NotReady is not a change yet"
        await until("the grace to run out", lambda: memo.feed.version == 1)
        assert memo.node_timers == {}, "once is enough"

    asyncio.run(main())
