"""One release round of the gang gates: read what holds the cards, decide (:mod:`.gang`), lift gates.

Notes
-----
The round is self-contained and narrow on purpose: it takes the plans' pods (the readiness
sweep's list, or a watch cache's), reads the nodes and the bound pods only when some pod is gated
or released but not bound yet (otherwise it costs nothing), and returns the decisions. Whoever
calls it (today the pod sweep, later a scheduling cycle) writes the conditions and Events and
re-plans the plans whose release timed out; the last decision per plan is kept here for the
``Ready`` condition's message.

The reads are consistent lists (not the API server's watch cache): a pod bound a moment ago must
count, or a gate could be lifted onto cards that are already taken. Nothing is remembered that the
cluster does not show: an operator killed between two gate patches decides again from the pods
when it restarts, finds the plan's instance sets already started and releases the rest.

A safety-net re-plan is asked for at most once per ``timeout`` per plan, so a plan whose pods
stay pending for another reason (no scheduler at all) is not re-planned in a loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuplan_operator import cluster
from gpuplan_operator.gang import GangCode, GangDecision, Ledger, NodeIndex, decide_all, is_gated, read_pod
from gpuplan_operator.kube import KubeApi
from gpuplan_operator.metrics import Metrics
from planner import POD, RELEASED_ANNOTATION

log = logging.getLogger("gpuplan_operator")

GANG_TIMEOUT = 180.0  # seconds a released pod may stay unscheduled before its plan is re-planned


def _in_flight(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not meta.get("deletionTimestamp")
        and RELEASED_ANNOTATION in (meta.get("annotations") or {})
    )


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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

    def waiting(self, namespace: str, name: str) -> str | None:
        """Why the plan's gated pods wait, if the last round said so."""
        decision = self.decisions.get(f"{namespace}/{name}")
        return decision.message if decision is not None and decision.code is GangCode.WAITING else None

    def release(self, plan_pods: Sequence[Mapping[str, Any]]) -> list[GangDecision]:
        """One round over the plans' pods; the decisions of plans that had anything to decide."""
        if not any(is_gated(p) or _in_flight(p) for p in plan_pods):
            self.decisions = {}
            self.metrics.gang_round(0)
            return []
        nodes = cluster.list_nodes(self.kube)["items"]
        bound = cluster.list_active_pods(self.kube)["items"]
        now = self.clock()
        index = NodeIndex(nodes)
        raw = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in plan_pods}
        mine = [read_pod(p, index) for p in plan_pods]
        holders = {p.key: p for p in (read_pod(b, index) for b in bound)} | {p.key: p for p in mine}
        decisions = decide_all(mine, Ledger(index, holders.values()), now, self.timeout)
        at = _iso(now)
        still_gated = sum(1 for p in mine if p.gated and not p.terminating)
        for decision in decisions:
            for r in decision.releases:
                if cluster.release_gate(self.kube, raw[r.pod.key], at):
                    self.metrics.wrote(POD)
                    self.metrics.gang_released(r.code, r.waited)
                    still_gated -= 1
                else:
                    log.info(
                        "%s: pod %s changed before its release; deciding again", decision.plan, r.pod.name
                    )
            if decision.releases:
                log.info("%s: %s: %s", decision.plan, decision.code, decision.message)
        self.decisions = {d.plan: d for d in decisions}
        self.metrics.gang_round(still_gated)
        return decisions

    def should_replan(self, decision: GangDecision) -> bool:
        """A timed-out plan is re-planned once per ``timeout``, not every round."""
        if decision.code is not GangCode.TIMED_OUT:
            return False
        now = self.clock()
        last = self._replanned.get(decision.plan)
        if last is not None and now - last < self.timeout:
            return False
        self._replanned[decision.plan] = now
        self.metrics.gang_timed_out()
        return True
