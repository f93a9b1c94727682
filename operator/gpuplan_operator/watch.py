"""Pure: which cluster changes call for a re-plan, and how a node is planned while it is down.

Notes
-----
Node events are many and mostly irrelevant (heartbeats, conditions, our own label writes). A node
matters to planning only through its labels, allocatable, ``unschedulable`` and taints, so each
node is reduced to a :func:`node_fingerprint` and only a changed fingerprint counts. Plan label
keys are left out of the fingerprint: otherwise applying a plan's labels would trigger the next
re-plan of every plan, forever. So is the ``node.kubernetes.io/unschedulable`` taint of a cordoned
node: kube-controller-manager adds it moments after the cordon, and it says nothing planning did
not already read from ``unschedulable`` (one cordon is one change, not a burst of two).

Node health is held to a grace period, as kube-controller-manager holds pods on a NotReady node
(its ``node.kubernetes.io/not-ready`` and ``unreachable`` taints are tolerated for 300 s before
eviction). A node whose Ready condition has not been True for less than ``grace`` seconds is
planned as if healthy: its lifecycle taints are dropped (:func:`planning_view`), so a flapping
node neither triggers re-plans nor loses its instances. Once it has been down for ``grace`` it is
planned as unschedulable and its instances move; the cycle
(:mod:`.cycle.session`) runs again when that moment comes, since no node event marks it. A node
with no Ready condition at all keeps its taints as they are (it is being set up).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from planner import is_plan_label_key

Fingerprint = tuple[Any, ...]
NODE_GRACE = 60.0  # seconds a node may be not Ready before planning gives up on it
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
CORDON_TAINT = "node.kubernetes.io/unschedulable"  # kube-controller-manager's copy of a cordon


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
    cordoned = bool(spec.get("unschedulable"))
    taints = tuple(
        sorted(
            (t.get("key", ""), t.get("value") or "", t.get("effect", ""))
            for t in spec.get("taints") or []
            if not (cordoned and t.get("key") == CORDON_TAINT)  # says again what unschedulable says
        )
    )
    return (labels, allocatable, cordoned, taints)


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
