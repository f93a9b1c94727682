"""When the cycle runs: changes from the watches, settled, and the cycle's own timers.

Notes
-----
The informers report every change from their threads (:meth:`Wake.poke`); only some call for a
cycle, and not all at once:

- a node, ResourceSlice or NodeResourceTopology change that matters to planning waits for the
  burst to settle (``debounce`` quiet seconds, at most ``max_delay`` after its first change), so a
  rack going down is one re-plan, not fifty;
- except the first change after a quiet spell (none for ``debounce`` seconds): it starts the
  cycle after ``settle`` seconds when no other change follows it within them (a cordon is
  re-planned at once, not a debounce later); a second change within the settle makes it a burst,
  which settles as above (the leading edge of kube-batch's period, the coalescing of a trailing
  debounce);
- a plan created, changed or deleted runs a cycle almost at once (a short coalescing window lets
  one ``kubectl apply`` of several plans be one cycle);
- a pod of a plan changing runs a cycle at once too, which only re-checks readiness; except a pod
  of a plan coming up, made or bound
  (:attr:`~gpuplan_operator.cache.caches.ClusterCache.coming_up`): the cycle checks such a plan
  on a timer of its own.

A cycle that moved a plan runs another right after, for the plans before it in the order (the
ones after it were already planned around it). Otherwise the next cycle comes when the last one
asked (:attr:`~.session.Report.wake_in`: a node's grace running out, a retry, pods pending) or
after ``resync`` seconds. Cycles run one at a time, in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from gpuplan_operator.cache.caches import PLANNING_KINDS, QUIET_KINDS
from gpuplan_operator.cycle.session import Cycle
from gpuplan_operator.follow import backoff
from gpuplan_operator.heap import Heap

log = logging.getLogger("gpuplan_operator")

COALESCE = 0.1  # seconds a plan or pod change waits for others of the same moment


class Wake:
    """What happened since the last cycle, and when the next one may start.

    ``settle``: an isolated change after a quiet spell starts the cycle this soon (0: it waits
    for the debounce like a burst)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, debounce: float, max_delay: float, settle: float = 0.0
    ) -> None:
        self.loop = loop
        self.debounce = debounce
        self.max_delay = max_delay
        self.settle = settle
        self.event = asyncio.Event()
        self.first: float | None = None  # the first debounced change of the burst
        self.last = -math.inf  # the last debounced change
        self.pokes = 0  # debounced changes of the burst
        self.leading = False  # the burst began after a quiet spell: it may start the cycle early
        self.urgent = False
        self.since: float | None = None  # the first change that calls for the next cycle
        self.queued = False  # an undebounced poke is on its way to the event loop

    def poke(self, kind: str, matters: bool) -> None:
        """A watch saw a change (any thread). Pod and plan changes that come while one is on its
        way to the event loop ride on it: a deploy's pods change some ten thousand times, and
        waking the loop for each was a twentieth of the operator's CPU through it."""
        if kind in QUIET_KINDS or not matters:  # claims, Deployments: read by each cycle, start none
            return
        debounced = kind in PLANNING_KINDS
        if not debounced:
            if self.queued:
                return
            self.queued = True
        self.loop.call_soon_threadsafe(self._poke, debounced)

    def now(self) -> None:
        """Run a cycle as soon as possible (event-loop thread)."""
        self._poke(False)

    def _poke(self, debounced: bool) -> None:
        if not debounced:
            self.queued = False  # a change from now on needs a poke of its own
        if self.since is None:
            self.since = time.monotonic()
        if debounced:
            t = time.monotonic()
            if self.first is None:
                self.first, self.pokes = t, 0
                self.leading = self.settle > 0 and t - self.last >= self.debounce
            self.pokes += 1
            self.last = t
        else:
            self.urgent = True
        self.event.set()

    async def wait(self, timeout: float | None) -> float | None:
        """Until something calls for a cycle (settled) or ``timeout`` passes: the monotonic time
        of the first change that called for it, None when the timeout did."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return None
        while not self.urgent and self.first is not None:  # a burst of node changes: let it settle
            t = time.monotonic()
            until = self._until()
            if t >= until:
                break
            try:
                await asyncio.wait_for(self._urgent(), until - t)
            except TimeoutError:
                continue  # look again: a later change may have moved the end of the burst
        await asyncio.sleep(COALESCE)
        self.event.clear()
        since, self.since = self.since, None
        self.first, self.urgent = None, False
        return since

    def _until(self) -> float:
        """When the pending node changes may start the cycle: an isolated change after a quiet
        spell once it has settled, a burst once it has been quiet for the debounce (at most
        ``max_delay`` after its first change)."""
        assert self.first is not None
        if self.leading and self.pokes == 1:
            return min(self.first + self.settle, self.first + self.max_delay)
        return min(self.last + self.debounce, self.first + self.max_delay)

    async def _urgent(self) -> None:
        while not self.urgent:
            self.event.clear()
            await self.event.wait()


async def run_cycles(
    cycle: Cycle, wake: Wake, acting: Callable[[], bool], resync: float, heap: Heap | None = None
) -> None:
    """Run cycles for as long as the operator runs (a task started at start-up). ``heap``: the
    garbage collector kept out of the cycles' way (:mod:`gpuplan_operator.heap`)."""
    heap = heap or Heap()
    while not cycle.cache.synced():
        await asyncio.sleep(0.1)
    heap.after_cycle()  # the caches' first listings
    failures = 0
    timeout: float | None = 0.0
    while True:
        called = await wake.wait(timeout)
        if not acting():  # another replica acts (peering), or no plan is followed yet
            timeout = resync
            continue
        try:
            report = await asyncio.to_thread(cycle.run, called)
        except Exception as e:  # a bug or the API server away: the cycle is tried again, with backoff
            failures += 1
            timeout = backoff(failures)
            log.warning("cycle failed (%r); again in %.1fs", e, timeout)
            continue
        finally:
            heap.after_cycle()
        failures = 0
        cycle.service.metrics.caches(cycle.cache.sizes())
        if report.moved:
            wake.now()
        timeout = min(report.wake_in, resync) if report.wake_in is not None else resync
