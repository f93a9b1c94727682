"""Which cluster changes call for a re-plan, and a feed that debounces them.

Notes
-----
Node events are many and mostly irrelevant (heartbeats, conditions, our own label writes). A node
matters to planning only through its labels, allocatable, ``unschedulable`` and taints, so each
node is reduced to a :func:`node_fingerprint` and only a changed fingerprint counts. Plan label
keys are left out of the fingerprint: otherwise applying a plan's labels would trigger the next
re-plan of every plan, forever.

Node health is held to a grace period, as kube-controller-manager holds pods on a NotReady node
(its ``node.kubernetes.io/not-ready`` and ``unreachable`` taints are tolerated for 300 s before
eviction). A node whose Ready condition has not been True for less than ``grace`` seconds is
planned as if healthy: its lifecycle taints are dropped (:func:`planning_view`), so a flapping
node neither triggers re-plans nor loses its instances. Once it has been down for ``grace`` it is
planned as unschedulable and its instances move; :class:`NodeTracker` says when that moment comes
(:meth:`NodeTracker.recheck_in`), since no node event marks it. A node with no Ready condition
at all keeps its taints as they are (it is being set up).

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
from datetime import UTC, datetime
from typing import Any

from planner import is_plan_label_key

Fingerprint = tuple[Any, ...]
NODE_GRACE = 60.0  # seconds a node may be not Ready before planning gives up on it
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def utcnow() -> datetime:
    return datetime.now(UTC)


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def down_since(node: Mapping[str, Any]) -> datetime | None:
    """When the node's Ready condition left True, if it is not True now; None when it is (or has
    no Ready condition at all)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return None
            return _parse_time(c.get("lastTransitionTime")) or datetime.min.replace(tzinfo=UTC)
    return None


def _has_ready_condition(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" for c in (node.get("status") or {}).get("conditions") or [])


def is_down(node: Mapping[str, Any], now: datetime, grace: float) -> bool:
    """Has the node been not Ready for ``grace`` seconds or more?"""
    since = down_since(node)
    return since is not None and (now - since).total_seconds() >= grace


def planning_view(node: Mapping[str, Any], now: datetime, grace: float = NODE_GRACE) -> dict[str, Any]:
    """The node as planning sees it: health taints dropped within the grace, unschedulable after."""
    if not _has_ready_condition(node):
        return dict(node)
    spec = dict(node.get("spec") or {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in LIFECYCLE_TAINTS]
    if is_down(node, now, grace):
        spec["unschedulable"] = True
        taints = list(spec.get("taints") or [])
    spec["taints"] = taints
    if not taints:
        del spec["taints"]
    return {**node, "spec": spec}


def node_fingerprint(
    node: Mapping[str, Any], now: datetime | None = None, grace: float = NODE_GRACE
) -> Fingerprint:
    view = planning_view(node, now or utcnow(), grace)
    meta = view.get("metadata") or {}
    spec = view.get("spec") or {}
    status = view.get("status") or {}
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
    """Remembers each node's fingerprint; says whether an event changed anything that matters."""

    def __init__(self, grace: float = NODE_GRACE) -> None:
        self.grace = grace
        self.fingerprints: dict[str, Fingerprint] = {}
        self._nodes: dict[str, Mapping[str, Any]] = {}  # nodes that are down, within the grace

    def observe(self, event_type: str | None, node: Mapping[str, Any], now: datetime | None = None) -> bool:
        name = str((node.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            self._nodes.pop(name, None)
            return self.fingerprints.pop(name, None) is not None
        now = now or utcnow()
        fp = node_fingerprint(node, now, self.grace)
        before = self.fingerprints.get(name)
        self.fingerprints[name] = fp
        if down_since(node) is not None and not is_down(node, now, self.grace):
            self._nodes[name] = node  # its grace runs out later, with no event to say so
        else:
            self._nodes.pop(name, None)
        # the initial listing (type None) only learns the cluster: resume handlers plan it anyway
        return event_type is not None and before != fp

    def recheck_in(self, name: str, now: datetime | None = None) -> float | None:
        """Seconds until a down node's grace runs out (then :meth:`recheck` it); None if not down."""
        node = self._nodes.get(name)
        since = down_since(node) if node is not None else None
        if since is None:
            return None
        return max(0.0, self.grace - ((now or utcnow()) - since).total_seconds())

    def recheck(self, name: str, now: datetime | None = None) -> bool:
        """Did the node's grace run out since its last event (a change that matters)?"""
        node = self._nodes.get(name)
        return node is not None and self.observe("MODIFIED", node, now)


class SpecTracker:
    """The same for DRA ResourceSlices and NodeResourceTopologies: each object reduced to what
    planning reads of it (``fingerprint``); only a changed fingerprint counts."""

    def __init__(self, fingerprint: Callable[[Mapping[str, Any]], Fingerprint]) -> None:
        self.fingerprint = fingerprint
        self.fingerprints: dict[str, Fingerprint] = {}

    def observe(self, event_type: str | None, obj: Mapping[str, Any]) -> bool:
        name = str((obj.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            return self.fingerprints.pop(name, None) is not None
        fp = self.fingerprint(obj)
        before, self.fingerprints[name] = self.fingerprints.get(name), fp
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
