"""The gang gates' release action: decide (:mod:`.gang`) from the cycle's caches, lift gates.

Notes
-----
The scheduling cycle calls :meth:`GateKeeper.decide_and_release` once per cycle, after the plans'
writes and before readiness, with the same snapshot it planned from: the nodes, and every pod its
pods cache holds (bound ones, Terminating ones, gated ones and released ones not bound yet). It
reads nothing else from the API server: what each plan's placement puts on each node is its
``status.applied.units``, from the plans cache. While a cycle writes, it calls it every second
too, with the placements it is writing (``placing``) in place of the statuses it has not written
yet. The caller writes conditions and Events and
re-plans the plans whose release timed out; the last decision per plan is kept here for the
``Ready`` condition's message.

Pods are found cluster-wide, not through the plans' labels: pods Ragnaros creates from a plan's
``values.yaml`` carry the gate and select the plan's node label key, but no label of the plan
(:func:`~.gang.read_own` groups them by that key, named back to the plan from the cached plans).

Which instance sets (ReplicaSets) have started is remembered from round to round, for an hour
after their last pod was seen: a pod recreated after all of its siblings went (two single-replica
pods deleted at once) is still released on its own.

A gate is lifted with a patch that tests the pod's ``resourceVersion`` as the cache holds it: a
pod that changed since is left alone and decided again in a later cycle. Nothing else is remembered
that the cluster does not show: an operator killed between two gate patches decides again from
the pods when it restarts, finds the plan's instance sets already started, and releases the rest.

A safety-net re-plan is asked for at most once per ``timeout`` per plan, so a plan whose pods
stay pending for another reason (no scheduler at all) is not re-planned in a loop.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from gpuplan_operator import cluster
from gpuplan_operator.apply import PARALLEL_WRITES, in_context
from gpuplan_operator.body import PlanBody
from gpuplan_operator.gang import (
    GangCode,
    GangDecision,
    GangPod,
    Ledger,
    NodeIndex,
    Selector,
    decide_all,
    placed,
    read_own,
)
from gpuplan_operator.gang_devices import DeviceIndex, DeviceShortfall
from gpuplan_operator.kube import KubeApi
from gpuplan_operator.metrics import Metrics
from planner import POD, is_plan_label_key

log = logging.getLogger("gpuplan_operator")

GANG_TIMEOUT = 180.0  # seconds a released pod may stay unscheduled before its plan is re-planned
RETRY = 0.5  # seconds until a gate whose pod changed under the patch is decided again
STARTED_KEPT = 3600.0  # seconds an instance set with no pod seen is still remembered as started


def _in_flight(pod: GangPod) -> bool:
    """Released by the operator, not bound yet, not going."""
    return not pod.bound and not pod.terminating and pod.released is not None


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _applied(plan: PlanBody, placing: Mapping[str, Mapping[str, Any]] | None) -> Mapping[str, Any]:
    """The plan's ``status.applied``, or what a cycle writing it is placing (:func:`_placements`)."""
    applied = (placing or {}).get(plan.ref)
    if applied is None:
        applied = plan.status.get("applied")
    return applied if isinstance(applied, Mapping) else {}


def _devices(
    pods: Sequence[GangPod],
    plans: Sequence[PlanBody],
    slices: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    placing: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, list[DeviceShortfall]]:
    """Group -> the devices of its plan's placement that cannot be allocated now, for the plans
    with gated pods that take their GPUs from claims (both names of the group, as
    :func:`_placements`)."""
    wanting = {p.group for p in pods if p.gated and p.claims and not p.terminating and p.group}
    if not wanting:
        return {}
    index = DeviceIndex(slices, claims)
    out: dict[str, list[DeviceShortfall]] = {}
    for plan in plans:
        placed = _applied(plan, placing).get("devices")
        groups = {f"{plan.namespace}/{plan.name}", plan.label_key} & wanting
        if not groups or not isinstance(placed, Mapping):
            continue
        live = {p.name for p in pods if p.group in groups and not p.terminating}
        devices = {str(n): [str(d) for d in names or []] for n, names in placed.items()}
        short = index.short(plan.namespace, plan.name, devices, live)
        for group in groups:
            out[group] = short
    return out


Placement = dict[str, dict[str, int]]  # node -> resource -> units


def _placement(units: Mapping[str, Any]) -> Placement:
    return {
        str(n): {str(k): int(v) for k, v in (r or {}).items() if isinstance(v, int)}
        for n, r in units.items()
        if isinstance(r, Mapping)
    }


def _placements(
    plans: Sequence[PlanBody],
    known: dict[str, tuple[Mapping[str, Any], Placement]] | None = None,
    placing: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Placement]:
    """Group -> node -> resource -> units each plan's placement puts there (``status.applied``),
    under both names its pods are grouped by: ``namespace/name`` (the plan's label) and the plan's
    node label key (pods Ragnaros makes from its values.yaml).

    ``placing``: ``namespace/name`` -> ``status.applied`` as it will be for the plans a cycle is
    writing, in place of what their statuses still say.

    ``known``: what the last round read, by plan (its ``units`` object and the placement read off
    it), kept up to date here: a cached plan's status is never changed in place, so the same
    object reads the same (a thousand nodes' units read again each round otherwise)."""
    out: dict[str, Placement] = {}
    seen: dict[str, tuple[Mapping[str, Any], Placement]] = {}
    for plan in plans:
        units = _applied(plan, placing).get("units")
        if not isinstance(units, Mapping):
            continue
        last = (known or {}).get(plan.ref)
        placed = last[1] if last is not None and last[0] is units else _placement(units)
        seen[plan.ref] = (units, placed)
        out[f"{plan.namespace}/{plan.name}"] = placed
        out[plan.label_key] = placed
    if known is not None:
        known.clear()
        known.update(seen)
    return out


class _Seen:
    """One pod object as a round read it, and where it was placed on which nodes' index."""

    __slots__ = ("placed", "pod", "read", "selector")

    def __init__(self, pod: Mapping[str, Any], read: GangPod, selector: Selector) -> None:
        self.pod, self.read, self.selector = pod, read, selector
        self.placed: tuple[NodeIndex, GangPod] | None = None  # one pair: replaced, never half-written

    def on(self, index: NodeIndex) -> GangPod:
        """The pod with the node its selector pins it to on ``index`` (:func:`~.gang.placed`)."""
        last = self.placed
        if last is not None and last[0] is index:
            return last[1]
        pod = placed(self.read, self.selector, index)
        self.placed = (index, pod)
        return pod


class GateKeeper:
    """Lifts the gang gates of the plans' pods, round by round."""

    def __init__(
        self,
        kube: KubeApi,
        metrics: Metrics,
        timeout: float = GANG_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.timeout = timeout
        self.clock = clock
        self.decisions: dict[str, GangDecision] = {}  # namespace/name -> the last decision
        self._replanned: dict[str, float] = {}  # namespace/name -> when a timeout last asked for it
        self.due_in: float | None = None  # seconds until a released pod's time is up, if one waits
        self._started: dict[str, float] = {}  # namespace/unit -> when a pod of it was last seen started
        self._pruned = 0.0
        # what the last round built, for the next one (:meth:`_node_index`, :func:`_placements`)
        self._nodes: tuple[list[Mapping[str, Any]], NodeIndex] | None = None  # the last round's
        self._seen: dict[int, _Seen] = {}  # the last round's pods, by the identity of their objects
        self._units: dict[str, tuple[Mapping[str, Any], Placement]] = {}
        # hears of each pod whose gate a round lifted, as the API server returned it (the cycle's
        # pods cache: the next round, a second later, must not find it gated and patch it again)
        self.on_lifted: Callable[[Mapping[str, Any]], object] | None = None

    def waiting(self, namespace: str, name: str) -> str | None:
        """Why the plan's gated pods wait, if the last round said so."""
        decision = self.decisions.get(f"{namespace}/{name}")
        return decision.message if decision is not None and decision.code is GangCode.WAITING else None

    def decide_and_release(
        self,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        plans: Sequence[PlanBody],
        slices: Sequence[Mapping[str, Any]] = (),
        claims: Sequence[Mapping[str, Any]] = (),
        placing: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[GangDecision]:
        """Decide on every plan's gated pods and lift the gates the decisions release.

        ``pods``: the pods bound to a node and not finished (Terminating ones too) and the pods
        not bound yet; ``plans``: every plan (to name pods grouped by a plan's node label key);
        ``slices`` and ``claims``: the ResourceSlices and ResourceClaims (DRA), for plans whose
        gated pods take their GPUs from claims; ``placing``: ``status.applied`` of the plans a
        cycle is writing, as it will be (``namespace/name`` -> applied), which their statuses do
        not say yet.
        """
        self.due_in = None
        now = self.clock()
        entries = self._read(pods)
        self._remember_started(entries, now)
        if not any(e.read.gated or _in_flight(e.read) for e in entries):
            self.decisions = {}
            self.metrics.gang_round(0)
            return []
        index = self._node_index(nodes)
        seen = [e.on(index) for e in entries]
        ledger = Ledger(index, seen)
        decisions = [
            self._named(d, plans)
            for d in decide_all(
                seen,
                ledger,
                now,
                self.timeout,
                _placements(plans, self._units, placing),
                self._started,
                _devices(seen, plans, slices, claims, placing),
            )
        ]
        at = _iso(now)
        still_gated = sum(1 for p in seen if p.gated and not p.terminating and p.group is not None)
        in_flight = [p.released for p in seen if p.released is not None and not p.bound and not p.terminating]
        if in_flight:  # the next cycle must come when the oldest released pod's time is up
            self.due_in = max(0.0, min(in_flight) + self.timeout - now) + 0.5
        releases = [(d, r) for d in decisions for r in d.releases]
        if releases:  # side by side, as an apply's writes: a 2,500-pod plan starts in a few round trips
            raw = {p.key: e.pod for e, p in zip(entries, seen, strict=True)}  # the objects to patch
            with ThreadPoolExecutor(max_workers=PARALLEL_WRITES, thread_name_prefix="gpuplan-gate") as pool:
                lifted = list(
                    pool.map(
                        in_context(lambda dr: cluster.release_gate(self.kube, raw[dr[1].pod.key], at)),
                        releases,
                    )
                )
            for (decision, r), pod in zip(releases, lifted, strict=True):
                if pod is not None:
                    if self.on_lifted is not None:
                        self.on_lifted(pod)
                    self.metrics.wrote(POD)
                    self.metrics.gang_released(r.code, r.waited)
                    still_gated -= 1
                else:
                    log.info(
                        "%s: pod %s changed before its release; deciding again", decision.plan, r.pod.name
                    )
                    self.due_in = RETRY if self.due_in is None else min(self.due_in, RETRY)
        for decision in decisions:
            if decision.releases:
                log.info("%s: %s: %s", decision.plan, decision.code, decision.message)
        self.decisions = {d.plan: d for d in decisions}
        self.metrics.gang_round(still_gated)
        return decisions

    def _read(self, pods: Sequence[Mapping[str, Any]]) -> list[_Seen]:
        """Every pod as the decision reads it, the same object read once: the cache replaces a
        pod it changes, never edits it, so an object seen by the last round is the same pod
        version (looked up by its identity, the cheapest key there is; the entries hold the
        objects, so no identity is reused while it is remembered). At 3,000 nodes a round reads
        7,440 pods, and reading each again (its uid and version, then the memo of
        :func:`~.gang.read_own`) was a fifth of the operator's CPU through the deploy."""
        known, kept, out = self._seen, {}, []
        for pod in pods:
            entry = known.get(id(pod))
            if entry is None or entry.pod is not pod:
                entry = _Seen(pod, *read_own(pod))
            kept[id(pod)] = entry
            out.append(entry)
        self._seen = kept  # the pods gone since the last round are forgotten
        return out

    def _node_index(self, nodes: Sequence[Mapping[str, Any]]) -> NodeIndex:
        """The nodes' index, kept while the nodes are the same objects (the cache never changes a
        node in place, it replaces it); a pod placed on it keeps its placement
        (:meth:`_Seen.on`). During a deploy the rounds follow every few pod changes and the
        nodes seldom change; indexing a thousand nodes' labels and placing every pod again was a
        tenth of the operator's CPU through a 1,000-node deploy."""
        last = self._nodes
        if (
            last is not None
            and len(last[0]) == len(nodes)
            and all(a is b for a, b in zip(last[0], nodes, strict=True))
        ):
            return last[1]
        index = NodeIndex(nodes)
        self._nodes = (list(nodes), index)
        return index

    def _remember_started(self, pods: Sequence[_Seen], now: float) -> None:
        """Note the instance sets with a pod not gated (started), forget those unseen for long
        (``namespace/unit``, as :func:`~.gang.decide_all` asks; pods of no plan count too: cheaper
        than telling them apart, and never asked about)."""
        for entry in pods:
            if not entry.read.gated:
                self._started[entry.read.unit_key] = now
        if now - self._pruned > STARTED_KEPT:
            self._started = {u: t for u, t in self._started.items() if now - t <= STARTED_KEPT}
            self._pruned = now

    @staticmethod
    def _named(decision: GangDecision, plans: Sequence[PlanBody]) -> GangDecision:
        """A decision about pods grouped by a plan's node label key, named after that plan."""
        if not is_plan_label_key(decision.plan):
            return decision
        for plan in plans:
            if plan.label_key == decision.plan:
                return dataclasses.replace(decision, plan=f"{plan.namespace}/{plan.name}")
        return decision

    def should_replan(self, decision: GangDecision) -> bool:
        """A timed-out (or stuck waiting) plan is re-planned once per ``timeout``, not every round."""
        if not (decision.code is GangCode.TIMED_OUT or decision.stuck) or is_plan_label_key(decision.plan):
            return False
        now = self.clock()
        last = self._replanned.get(decision.plan)
        if last is not None and now - last < self.timeout:
            return False
        self._replanned[decision.plan] = now
        self.metrics.gang_timed_out()
        return True
