"""One cycle: snapshot the caches once, plan every plan that needs it in admission order, write.

Notes
-----
The cycle holds the service's lock from the snapshot to the last status, so no deletion's
clean-up runs in the middle of it. It reads nothing from the API server to plan: the snapshot
is :meth:`~gpuplan_operator.cache.caches.ClusterCache.read`. Plans are visited in
:func:`~.order.admission_order`; each is planned against what the plans before it were just
given (their status goes into the cache as soon as it is written) and what the plans after it
hold now. A plan whose :class:`~.order.Inputs` did not change is neither planned nor written.

After the plans, the readiness of applied plans whose pods changed (or which were not Ready)
is checked against the pods' cache. A failed plan (``Error``) is tried again after a backoff,
an ``Infeasible`` one every ``resync`` even when nothing it reads changed (what it misses may
be a pod outside every plan finishing).

Node health is the cycle's too: a node not Ready is planned as healthy within its grace and as
unschedulable after (:func:`~gpuplan_operator.watch.planning_view`); :attr:`Report.wake_in`
says when the next grace runs out, and the loop runs a cycle then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplan_operator.body import PlanBody
from gpuplan_operator.cache.caches import ClusterCache
from gpuplan_operator.cycle.order import Inputs, admission_order, held_by_others, pods_fingerprint
from gpuplan_operator.follow import backoff
from gpuplan_operator.metrics import Trigger
from gpuplan_operator.service import Outcome, PlanService
from gpuplan_operator.status import Phase
from gpuplan_operator.watch import down_since, is_down, utcnow

log = logging.getLogger("gpuplan_operator")

_TRIGGERS = {
    "new": Trigger.RESUMED,
    "spec": Trigger.SPEC_CHANGED,
    "cluster": Trigger.NODES_CHANGED,
    "plans": Trigger.PLANS_CHANGED,
    "retry": Trigger.RETRY,
}


@dataclass
class Report:
    """What one cycle did, for the loop, the logs and the metrics."""

    planned: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    checked: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    wake_in: float | None = None  # run again this soon (a grace running out, a retry, pods pending)

    def soon(self, seconds: float) -> None:
        self.wake_in = seconds if self.wake_in is None else min(self.wake_in, seconds)


@dataclass
class _Memory:
    """What the cycle remembers of one plan between cycles."""

    inputs: Inputs | None = None
    phase: Phase | None = None
    ready: bool = False
    failures: int = 0
    retry_at: float = 0.0
    pods: frozenset[Any] = frozenset()


class Cycle:
    """The operator's scheduling cycle over a :class:`ClusterCache` (one per operator)."""

    def __init__(self, service: PlanService, cache: ClusterCache) -> None:
        self.service = service
        self.cache = cache
        self.options = service.options
        self.memory: dict[str, _Memory] = {}
        service.pods_source = lambda plan: cache.plan_pods(plan.labels)
        service.on_status = cache.assume_plan

    def _cluster_inputs(self, nodes: list[Mapping[str, Any]], report: Report) -> tuple[Any, ...]:
        """The caches' counters of changes that matter, and which nodes are down past the grace."""
        now = utcnow()
        grace = self.options.node_grace
        down = []
        for node in nodes:
            since = down_since(node)
            if since is None:
                continue
            if is_down(node, now, grace):
                down.append(str((node.get("metadata") or {}).get("name")))
            else:
                report.soon(grace - (now - since).total_seconds() + 0.5)
        c = self.cache
        return (c.nodes.changes, c.slices.changes, c.topologies.changes, tuple(sorted(down)))

    def run(self) -> Report:
        """One cycle (blocking: run it in a worker thread)."""
        report = Report()
        started = time.perf_counter()
        with self.service.lock:
            locked = time.perf_counter()
            read = self.cache.read()
            snapped = time.perf_counter()
            cluster = self._cluster_inputs(read.nodes["items"], report)
            live = {p.uid for p in read.plans}
            for uid in set(self.memory) - live:
                del self.memory[uid]
            plans: dict[str, PlanBody] = {p.uid: p for p in read.plans}
            planning = 0.0
            for first in admission_order(read.plans):
                plan = plans[first.uid]
                memory = self.memory.setdefault(plan.uid, _Memory())
                inputs = Inputs(plan.generation, cluster, held_by_others(plans.values(), plan.uid))
                why = inputs.why_changed(memory.inputs)
                if why is None and memory.phase in (Phase.ERROR, Phase.INFEASIBLE):
                    if time.monotonic() >= memory.retry_at:
                        why = "retry"
                    else:
                        report.soon(memory.retry_at - time.monotonic())
                if why is None:
                    continue
                t0 = time.perf_counter()
                now_read = replace(read, plans=list(plans.values()))
                outcome = self.service.reconcile_with(plan, now_read, _TRIGGERS[why])
                planning += time.perf_counter() - t0
                report.planned.append(plan.ref)
                if outcome.moved:
                    report.moved.append(plan.ref)
                self._remember(memory, inputs, outcome, report)
                memory.pods = self._pods(plan)
                fresh = self.cache.plan(plan.namespace, plan.name)
                if fresh is not None and fresh.uid == plan.uid:
                    plans[plan.uid] = fresh
            planned = time.perf_counter()
            report.checked = self._readiness(plans, set(report.planned), report)
            done = time.perf_counter()
        report.stages = {
            "lock": locked - started,
            "snapshot": snapped - locked,
            "plan and write": planned - snapped,
            "readiness": done - planned,
        }
        self.service.metrics.cycle(report.stages, len(report.planned))
        if report.planned:
            took = ", ".join(f"{k} {v:.2f}s" for k, v in report.stages.items())
            log.info("cycle: planned %s (%s)", ", ".join(report.planned), took)
        return report

    def _remember(self, memory: _Memory, inputs: Inputs, outcome: Outcome, report: Report) -> None:
        memory.inputs = inputs
        memory.phase = outcome.phase
        memory.ready = outcome.ready
        if outcome.phase is Phase.ERROR:
            memory.failures += 1
            memory.retry_at = time.monotonic() + backoff(memory.failures)
            memory.inputs = None  # whatever happens, plan it again
            report.soon(memory.retry_at - time.monotonic())
        elif outcome.phase is Phase.INFEASIBLE:
            memory.failures = 0
            memory.retry_at = time.monotonic() + self.options.resync
            report.soon(self.options.resync)
        else:
            memory.failures = 0

    def _pods(self, plan: PlanBody) -> frozenset[Any]:
        return pods_fingerprint(self.cache.plan_pods(plan.labels)) if plan.deploy else frozenset()

    def _readiness(self, plans: Mapping[str, PlanBody], planned: set[str], report: Report) -> int:
        """Re-check ``Ready`` of applied plans whose pods changed, or that were not Ready (a plan
        applied in this cycle had its readiness checked by the apply)."""
        checked = 0
        for uid, plan in plans.items():
            memory = self.memory.get(uid)
            if plan.deleting or memory is None or memory.phase is not Phase.APPLIED:
                continue
            pods = self._pods(plan)
            if plan.ref in planned or (memory.ready and pods == memory.pods):
                if not memory.ready:
                    report.soon(self.options.ready_poll)
                continue
            outcome = self.service.check_readiness(plan)
            checked += 1
            memory.ready = outcome.ready
            memory.pods = pods
            if not outcome.ready:
                report.soon(self.options.ready_poll)
        return checked
