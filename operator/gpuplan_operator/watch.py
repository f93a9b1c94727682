"""Which cluster changes call for a re-plan, and a feed that debounces them.

Notes
-----
Node events are many and mostly irrelevant (heartbeats, conditions, our own label writes). A node
matters to planning only through its labels, allocatable, ``unschedulable`` and taints, so each
node is reduced to a :func:`node_fingerprint` and only a changed fingerprint counts. Plan label
keys are left out of the fingerprint: otherwise applying a plan's labels would trigger the next
re-plan of every plan, forever.

The :class:`ChangeFeed` is a version counter with the origin of each bump (``None`` for nodes,
a plan's ``namespace/name`` when that plan's placement changed). Each plan's daemon waits for a
version it has not seen, then for the burst to settle (``debounce`` quiet seconds, at most
``max_delay``), and re-plans once; a burst caused only by the plan itself is skipped.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from planner.vocab import is_plan_label_key

Fingerprint = tuple[Any, ...]


def node_fingerprint(node: Mapping[str, Any]) -> Fingerprint:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = tuple(sorted((k, v) for k, v in (meta.get("labels") or {}).items() if not is_plan_label_key(k)))
    allocatable = tuple(sorted((status.get("allocatable") or {}).items()))
    taints = tuple(
        sorted(
            (t.get("key", ""), t.get("value") or "", t.get("effect", "")) for t in spec.get("taints") or []
        )
    )
    return (labels, allocatable, bool(spec.get("unschedulable")), taints)


def slice_fingerprint(slice_: Mapping[str, Any]) -> Fingerprint:
    """A ResourceSlice matters through its spec: which node, which devices, which attributes."""
    return (json.dumps(slice_.get("spec") or {}, sort_keys=True),)


def topology_fingerprint(nrt: Mapping[str, Any]) -> Fingerprint:
    """A NodeResourceTopology matters through its zones' shape and sizes and the kubelet's policy.

    ``available`` is left out: it moves whenever a pod holding GPUs or exclusive CPUs starts or
    stops (this operator's own pods included, which would re-plan every plan for nothing), and it
    is read afresh at every re-plan, as pods are.
    """
    zones = tuple(
        (
            z.get("name"),
            z.get("type"),
            tuple(
                sorted(
                    (str(r.get("name")), str(r.get("capacity")), str(r.get("allocatable")))
                    for r in z.get("resources") or []
                    if isinstance(r, Mapping)
                )
            ),
        )
        for z in nrt.get("zones") or []
        if isinstance(z, Mapping)
    )
    attributes = tuple(
        sorted(
            (str(a.get("name")), str(a.get("value")))
            for a in nrt.get("attributes") or []
            if isinstance(a, Mapping)
        )
    )
    return (zones, attributes)


class NodeTracker:
    """Remembers each object's fingerprint; says whether an event changed anything that matters."""

    def __init__(self, fingerprint: Callable[[Mapping[str, Any]], Fingerprint] = node_fingerprint) -> None:
        self.fingerprints: dict[str, Fingerprint] = {}
        self.fingerprint = fingerprint

    def observe(self, event_type: str | None, node: Mapping[str, Any]) -> bool:
        name = str((node.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            return self.fingerprints.pop(name, None) is not None
        fp = self.fingerprint(node)
        before = self.fingerprints.get(name)
        self.fingerprints[name] = fp
        # the initial listing (type None) only learns the cluster: resume handlers plan it anyway
        return event_type is not None and before != fp


class ChangeFeed:
    """A version counter that plan daemons wait on. Bumped from the event loop's thread only."""

    def __init__(self, history: int = 256) -> None:
        self.version = 0
        self._origins: deque[tuple[int, str | None]] = deque(maxlen=history)
        self._changed = asyncio.Condition()
        self._last_bump = time.monotonic()

    async def bump(self, origin: str | None = None) -> None:
        async with self._changed:
            self.version += 1
            self._origins.append((self.version, origin))
            self._last_bump = time.monotonic()
            self._changed.notify_all()

    def origins_since(self, seen: int) -> set[str | None]:
        """Who bumped after version ``seen``; ``None`` in the set also when history was lost."""
        got = {o for v, o in self._origins if v > seen}
        if self._origins and self._origins[0][0] > seen + 1:
            got.add(None)
        return got

    async def wait_beyond(self, seen: int, timeout: float) -> bool:
        """Wait until the version passes ``seen``; False on timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.version > seen), timeout)
            except TimeoutError:
                return False
            return True

    async def settle(self, debounce: float, max_delay: float) -> int:
        """Wait for a quiet spell of ``debounce`` seconds (at most ``max_delay``); the version then."""
        deadline = time.monotonic() + max_delay
        while True:
            now = time.monotonic()
            quiet_at = self._last_bump + debounce
            if now >= quiet_at or now >= deadline:
                return self.version
            await asyncio.sleep(min(quiet_at, deadline) - now)
