"""The cycle's loop and the per-plan daemon, on a real event loop.

Waits are a few hundredths of a second; every assertion waits for an event with a timeout far
above them (a loaded machine may be slow, never wrong).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import time
from collections.abc import Coroutine
from typing import Any, cast

import kopf
from gpuplan_operator import handlers
from gpuplan_operator.cycle.loop import Wake
from gpuplan_operator.service import Options

PATIENCE = 5.0


class Stopped:
    """Enough of kopf's ``DaemonStopped`` for the daemon: truthiness and an awaitable ``wait()``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


def call(handler: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
    """A handler called as kopf calls it (its decorator's type asks for every kwarg kopf has)."""
    return cast(Coroutine[Any, Any, None], handler(**kwargs))


def test_a_burst_of_node_changes_settles_before_the_cycle_and_a_plan_change_does_not_wait() -> None:
    async def scenario() -> tuple[float, float, float]:
        wake = Wake(asyncio.get_running_loop(), debounce=0.3, max_delay=5.0)
        started = time.monotonic()

        async def burst() -> None:
            for _ in range(4):
                wake.poke("nodes", True)
                await asyncio.sleep(0.1)

        poking = asyncio.create_task(burst())
        await asyncio.wait_for(wake.wait(None), PATIENCE)
        settled = time.monotonic() - started
        await poking

        wake.poke("nodes", False)  # a heartbeat: no cycle
        t = time.monotonic()
        await asyncio.wait_for(wake.wait(0.3), PATIENCE)
        quiet = time.monotonic() - t

        t = time.monotonic()
        wake.poke("plans", True)
        await asyncio.wait_for(wake.wait(None), PATIENCE)
        return settled, quiet, time.monotonic() - t

    settled, quiet, plan = asyncio.run(scenario())
    assert settled >= 0.3 + 0.3  # the last of the burst came at 0.3 s, then 0.3 s of quiet
    assert quiet >= 0.3  # the heartbeat woke nothing: the wait ran out
    assert plan < 0.3  # a plan changed: no debounce


def test_pod_changes_while_a_poke_is_on_its_way_ride_on_it_and_later_ones_wake_again() -> None:
    async def scenario() -> tuple[int, float | None, float | None]:
        loop = asyncio.get_running_loop()
        wake = Wake(loop, debounce=0.3, max_delay=5.0)
        scheduled = 0
        schedule = loop.call_soon_threadsafe

        def counted(callback: Any, *args: Any) -> Any:
            nonlocal scheduled
            scheduled += callback == wake._poke
            return schedule(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]

        for _ in range(500):  # a watch's burst of pod events, before the loop runs a callback
            wake.poke("pods", True)
        first = await asyncio.wait_for(wake.wait(None), PATIENCE)
        wake.poke("pods", True)  # after the loop took the first: a cycle again
        second = await asyncio.wait_for(wake.wait(0.5), PATIENCE)
        return scheduled, first, second

    scheduled, first, second = asyncio.run(scenario())
    assert scheduled == 2  # one for the 500, one for the change after
    assert first is not None and second is not None and second > first


def test_a_burst_never_waits_longer_than_max_delay() -> None:
    async def scenario() -> float:
        wake = Wake(asyncio.get_running_loop(), debounce=0.2, max_delay=0.5)
        started = time.monotonic()

        async def endless() -> None:
            while True:
                wake.poke("nodes", True)
                await asyncio.sleep(0.05)

        poking = asyncio.create_task(endless())
        await asyncio.wait_for(wake.wait(None), PATIENCE)
        poking.cancel()
        return time.monotonic() - started

    took = asyncio.run(scenario())
    assert 0.5 <= took < 0.5 + 1.0


def test_an_isolated_node_change_after_a_quiet_spell_starts_the_cycle_after_the_settle() -> None:
    async def scenario() -> tuple[float, float]:
        wake = Wake(asyncio.get_running_loop(), debounce=1.0, max_delay=5.0, settle=0.05)
        t = time.monotonic()
        wake.poke("nodes", True)  # a cordon, nothing before it
        await asyncio.wait_for(wake.wait(None), PATIENCE)
        alone = time.monotonic() - t

        t = time.monotonic()
        wake.poke("nodes", True)  # another, right after: not after a quiet spell
        await asyncio.wait_for(wake.wait(None), PATIENCE)
        return alone, time.monotonic() - t

    alone, soon_after = asyncio.run(scenario())
    assert alone < 0.5  # the settle and the coalescing window, not the 1 s debounce
    assert soon_after >= 1.0  # the change before it was less than a debounce ago: debounced


def test_a_burst_after_a_quiet_spell_still_settles_as_one() -> None:
    async def scenario() -> float:
        wake = Wake(asyncio.get_running_loop(), debounce=0.3, max_delay=5.0, settle=0.2)
        started = time.monotonic()

        async def burst() -> None:
            for _ in range(4):
                wake.poke("nodes", True)
                await asyncio.sleep(0.02)

        poking = asyncio.create_task(burst())
        await asyncio.wait_for(wake.wait(None), PATIENCE)
        await poking
        return time.monotonic() - started

    assert asyncio.run(scenario()) >= 0.06 + 0.3  # the last change, then the whole debounce


def test_the_plan_daemon_marks_this_replica_acting_while_it_runs() -> None:
    async def scenario() -> tuple[set[str], set[str]]:
        running = handlers.CycleTask()
        running.task = asyncio.create_task(asyncio.sleep(PATIENCE))  # a cycle task already runs
        memo = kopf.Memo(acting=set(), wake=Wake(asyncio.get_running_loop(), 0.1, 1.0), cycles=running)
        stopped = Stopped()
        daemon = asyncio.create_task(
            call(handlers.follow_plan, stopped=stopped, memo=memo, namespace="ns", name="p")
        )
        await asyncio.sleep(0.05)
        during = set(memo.acting)
        stopped.event.set()
        await asyncio.wait_for(daemon, PATIENCE)
        running.task.cancel()
        return during, set(memo.acting)

    during, after = asyncio.run(scenario())
    assert during == {"ns/p"} and after == set()


def body(raw: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, raw))


def test_kopfs_last_handled_state_is_a_digest_not_a_copy_of_the_spec() -> None:
    storage = handlers.DigestDiffBase(prefix="gpuplan.ragnaros.io", key="last-handled-configuration")
    spec = {"requests": {f"svc{i:04d}": {"P4": 8} for i in range(400)}}
    meta: dict[str, Any] = {"name": "p", "namespace": "ns"}
    raw: dict[str, Any] = {"metadata": meta, "spec": spec, "status": {"phase": "Applied"}}
    essence = storage.build(body=body(raw))
    patch = kopf.Patch()
    storage.store(body=body(raw), patch=patch, essence=essence)
    stored = dict(patch["metadata"]["annotations"])
    last = stored["gpuplan.ragnaros.io/last-handled-configuration"]
    assert len(last) < 200 < len(json.dumps(spec))  # not a copy of a 400-entry spec

    def build(obj: dict[str, Any]) -> Any:
        return storage.build(body=body(obj))

    assert storage.fetch(body=body({**raw, "metadata": {**meta, "annotations": stored}})) == essence
    assert build({**raw, "status": {"phase": "Error"}}) == essence  # status is no change to kopf
    # the same digest as kopf's own build of the whole object (plans annotated before keep theirs)
    whole = kopf.AnnotationsDiffBaseStorage.build(
        storage, body=body({**raw, "metadata": {**meta, "labels": {"a": "b"}}})
    )
    text = json.dumps(whole, sort_keys=True, separators=(",", ":"))
    labelled = build({**raw, "metadata": {**meta, "labels": {"a": "b"}}})
    assert dict(labelled) == {"digest": hashlib.sha256(text.encode()).hexdigest()}
    assert labelled != essence
    changed = {**raw, "spec": {**spec, "priority": 5}}
    assert build(changed) != essence  # a spec change still is


def test_the_daemons_of_several_plans_start_one_cycle_between_them(monkeypatch: Any) -> None:
    """kopf gives each plan a shallow copy of the operator's memo: the cycle's task must be shared
    through it, not set on one plan's copy."""
    started: list[int] = []

    async def cycles(*_: Any) -> None:
        started.append(1)
        await asyncio.sleep(PATIENCE)

    monkeypatch.setattr(handlers, "run_cycles", cycles)

    async def scenario() -> int:
        base = kopf.Memo(
            acting=set(),
            wake=Wake(asyncio.get_running_loop(), 0.1, 1.0),
            cycles=handlers.CycleTask(),
            cycle=None,
            options=Options(),
        )
        stops = [Stopped() for _ in range(3)]
        daemons = [
            asyncio.create_task(
                call(handlers.follow_plan, stopped=stop, memo=copy.copy(base), namespace="ns", name=f"p{i}")
            )
            for i, stop in enumerate(stops)
        ]
        await asyncio.sleep(0.05)
        for stop in stops:
            stop.event.set()
        await asyncio.wait_for(asyncio.gather(*daemons), PATIENCE)
        task = base.cycles.task
        assert task is not None
        task.cancel()
        return len(started)

    assert asyncio.run(scenario()) == 1


def test_a_wake_gives_the_time_of_the_first_change_that_called_for_the_cycle() -> None:
    async def scenario() -> tuple[float | None, float, float | None]:
        wake = Wake(asyncio.get_running_loop(), debounce=0.2, max_delay=5.0)
        first = time.monotonic()
        wake.poke("nodes", True)
        await asyncio.sleep(0.05)
        wake.poke("nodes", True)  # the same burst: the first change still says when it began
        since = await asyncio.wait_for(wake.wait(None), PATIENCE)
        timed_out = await wake.wait(0.05)  # nothing since: the timeout woke it
        return since, first, timed_out

    since, first, timed_out = asyncio.run(scenario())
    assert since is not None and first <= since < first + 0.04
    assert timed_out is None
