"""The process's garbage collector, kept out of the cycles' way.

Notes
-----
CPython frees most objects by reference counting; its cyclic collector only finds cycles, but
to do so a full collection walks every tracked object. The operator holds a large, long-lived
heap (the caches' nodes, pods and Deployments, what the last apply of each plan rendered), and a
cycle that renders a moved plan makes about as many new objects again: that trips a full
collection in the middle of the cycle (the collector runs one whenever the objects that survived
since the last grow past a quarter of the old ones). At 1,000 nodes a render took 0.15 s, and
0.4-0.65 s in the renders a full collection fell into; a cordon's re-plan waits for it.

So after each cycle everything alive is moved out of the collector's sight (``gc.freeze``): the
collections inside a cycle walk only what was made since the last one. Objects frozen are still
freed by reference counting when they are dropped (the caches replace objects, they never keep
two); only a reference cycle that became garbage before a freeze would stay. Every
:data:`CLEAN_EVERY` seconds, after a cycle, the collector looks at everything once
(``gc.unfreeze``, a full collection, ``gc.freeze``): such cycles live at most that long, and the
full collection's pause falls between cycles, not inside one.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("gpuplan_operator")

CLEAN_EVERY = 300.0  # seconds between full collections of everything (after a cycle)


class Heap:
    """Freezes what survived each cycle; collects everything now and then (:mod:`.heap`)."""

    def __init__(self, every: float = CLEAN_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self.cleaned = clock()

    def after_cycle(self) -> None:
        """Call between cycles (the event loop's thread, no cycle running)."""
        now = self.clock()
        if now - self.cleaned >= self.every:
            started = time.perf_counter()
            gc.unfreeze()
            found = gc.collect()
            self.cleaned = now
            log.debug("full collection: %d unreachable, %.2fs", found, time.perf_counter() - started)
        gc.freeze()
