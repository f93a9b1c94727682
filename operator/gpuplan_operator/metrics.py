"""The operator's Prometheus metrics, on a registry of their own, and how they are recorded.

Notes
-----
Every metric lives on :attr:`Metrics.registry`, never on ``prometheus_client``'s global default
registry: ``python -m gpuplan_operator`` builds one :class:`Metrics` at start-up, keeps it in
kopf's memo and serves it (``--metrics-port N``); each test builds its own, so values never leak
from one test to another. No I/O here besides what ``prometheus_client`` does when served.

The service records; handlers never do. What is recorded, and when:

- ``gpuplan_replans_total{reason}``: each reconcile of an existing plan, by what triggered it
  (:class:`Trigger`); ``created`` is a plan's first planning run.
- ``gpuplan_plan_duration_seconds``: the whole reconcile (reads, planning, apply, status);
  ``gpuplan_planner_seconds``: the planner call alone.
- ``gpuplan_planner_branches{method}``: one observation per GPU type searched, its search
  branches, labelled with the method that decided it (:class:`planner.base.codes.Method`). A
  histogram rather than a per-plan gauge: it aggregates over plans and re-plans (how often the
  fast path answers, how deep CP-SAT goes), costs no series per plan, and needs no clean-up.
- ``gpuplan_plans{phase}``, ``gpuplan_cards_placed`` and ``gpuplan_cards_requested``: from the
  status each reconcile ends with (what ``kubectl get gpuplans`` shows), kept per plan, so a
  plan that changes phase moves between labels and a deleted plan disappears.
- ``gpuplan_writes_total{kind}``: write requests the API server accepted (PATCH/DELETE, 2xx),
  by the kind written; a reconcile with nothing to change adds nothing.
- ``gpuplan_apply_errors_total{kind}``: failed steps of an apply or a clean-up (an API error or a
  conflict with another owner), by the kind of object that step was writing.
- ``gpuplan_conflicts_total{kind}``: each conflict an Infeasible reconcile reports, by its
  :class:`planner.base.codes.ConflictKind` (also the ``Planned`` condition's reason).
- ``gpuplan_cycles_total``, ``gpuplan_cycle_seconds{stage}`` and ``gpuplan_cycle_plans_planned``:
  each scheduling cycle, the seconds of its stages, the plans it planned;
  ``gpuplan_cycle_cpu_seconds_total``: the process's CPU seconds while cycles ran (a cycle much
  longer than its CPU waited on the API server).
- All-or-nothing deploys (:mod:`.gang`): ``gpuplan_gated_pods``, the plans' pods still carrying
  the gang gate at the last release round; ``gpuplan_gang_releases_total{reason}``, pods whose
  gate was lifted, ``Released`` with their plan's group or ``Recreated`` alone, and ``TimedOut``
  for each re-plan the safety net asked for; ``gpuplan_gang_wait_seconds``, from a pod's creation
  (its plan's apply) to the release of its gate.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, suppress
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuplan_operator.gang import GangCode
from gpuplan_operator.status import Phase
from planner import (
    CLAIM_TEMPLATE,
    CONFIGMAP,
    DEPLOYMENT,
    NODE,
    POD,
    PRIORITY_CLASS,
    ConflictKind,
    PlanResult,
    Shared,
)


class Trigger(StrEnum):
    """Why a plan is reconciled (the ``reason`` of ``gpuplan_replans_total``)."""

    CREATED = "created"  # the plan is new
    SPEC_CHANGED = "spec_changed"  # its spec changed
    RESUMED = "resumed"  # the operator (re)started and found it
    NODES_CHANGED = "nodes_changed"  # nodes changed in a way that matters to planning
    PLANS_CHANGED = "plans_changed"  # another plan's placement changed (or it was deleted): cards freed
    RETRY = "retry"  # an Infeasible or Error plan, re-planned every resync
    GANG_TIMEOUT = "gang_timeout"  # released pods were not scheduled in time: something took the cards


# kinds of ``gpuplan_writes_total`` / ``gpuplan_apply_errors_total``
PLAN_STATUS = "GpuAllocationPlan/status"
WRITTEN_KINDS = (NODE, PRIORITY_CLASS, CONFIGMAP, CLAIM_TEMPLATE, DEPLOYMENT, PLAN_STATUS)
APPLIED_KINDS = (NODE, PRIORITY_CLASS, CONFIGMAP, CLAIM_TEMPLATE, DEPLOYMENT, POD)

SHARE_EVENTS = ("Preempted", "Shrunk", "Grew")  # reasons of ``gpuplan_share_events_total``
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
WAITS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
GANG_COUNTED = (GangCode.RELEASED, GangCode.RECREATED, GangCode.TIMED_OUT)
BRANCHES = (0, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)


class Metrics:
    """The operator's metrics on one :class:`~prometheus_client.CollectorRegistry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.plans = Gauge("gpuplan_plans", "Plans by status phase.", ["phase"], registry=r)
        self.plan_duration = Histogram(
            "gpuplan_plan_duration_seconds",
            "Time of a whole reconcile: reads, planning, apply and status.",
            buckets=SECONDS,
            registry=r,
        )
        self.planner_seconds = Histogram(
            "gpuplan_planner_seconds", "Time of the planner call of a reconcile.", buckets=SECONDS, registry=r
        )
        self.planner_branches = Histogram(
            "gpuplan_planner_branches",
            "Search branches per GPU type planned, by the method that decided it.",
            ["method"],
            buckets=BRANCHES,
            registry=r,
        )
        self.replans = Counter(
            "gpuplan_replans", "Reconciles of a plan, by what triggered them.", ["reason"], registry=r
        )
        self.apply_errors = Counter(
            "gpuplan_apply_errors",
            "Failed apply or clean-up steps, by the kind of object being written.",
            ["kind"],
            registry=r,
        )
        self.writes = Counter(
            "gpuplan_writes", "Writes the API server accepted, by the kind written.", ["kind"], registry=r
        )
        self.cards_placed = Gauge(
            "gpuplan_cards_placed", "Cards the plan's placement holds.", ["namespace", "plan"], registry=r
        )
        self.cards_requested = Gauge(
            "gpuplan_cards_requested", "Cards the plan's spec requests.", ["namespace", "plan"], registry=r
        )
        self.conflicts = Counter(
            "gpuplan_conflicts", "Conflicts reported by Infeasible reconciles, by kind.", ["kind"], registry=r
        )
        self.cycle_seconds = Histogram(
            "gpuplan_cycle_seconds",
            "Time of one scheduling cycle, by stage "
            "(lock, snapshot, plan, write, release, readiness, sweep).",
            ["stage"],
            buckets=SECONDS,
            registry=r,
        )
        self.cycles = Counter("gpuplan_cycles", "Scheduling cycles run.", registry=r)
        self.cycle_cpu = Counter(
            "gpuplan_cycle_cpu_seconds",
            "CPU seconds the operator's process used while cycles ran (every thread of it): beside "
            "gpuplan_cycle_seconds, how much of a cycle was its own work and how much waiting on the "
            "API server.",
            registry=r,
        )
        self.cycle_plans = Histogram(
            "gpuplan_cycle_plans_planned",
            "Plans planned in one cycle (plans whose spec and inputs did not change are not).",
            buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200),
            registry=r,
        )
        self.cached = Gauge(
            "gpuplan_cache_objects", "Objects held by the watched caches.", ["kind"], registry=r
        )
        self.plan_cards = Gauge(
            "gpuplan_plan_cards",
            "Cards of a plan planned with the others: placed, and its requests' min and max.",
            ["namespace", "plan", "priority", "bound"],
            registry=r,
        )
        self.share_events = Counter(
            "gpuplan_share_events",
            "Plans preempted, elastic plans shrunk and grown, by reason.",
            ["reason"],
            registry=r,
        )
        self.gated_pods = Gauge("gpuplan_gated_pods", "Plans' pods still carrying the gang gate.", registry=r)
        self.gang_releases = Counter(
            "gpuplan_gang_releases",
            "Pods whose gang gate was lifted, by reason (and re-plans after a release timed out).",
            ["reason"],
            registry=r,
        )
        self.gang_wait = Histogram(
            "gpuplan_gang_wait_seconds",
            "Seconds from a gated pod's creation to the release of its gate.",
            buckets=WAITS,
            registry=r,
        )
        # every series that can exist without a plan starts at 0, so rates and alerts see it
        for code in GANG_COUNTED:
            self.gang_releases.labels(code.value)
        for phase in Phase:
            self.plans.labels(phase.value)
        for reason in Trigger:
            self.replans.labels(reason.value)
        for kind in WRITTEN_KINDS:
            self.writes.labels(kind)
        for kind in APPLIED_KINDS:
            self.apply_errors.labels(kind)
        for conflict in ConflictKind:
            self.conflicts.labels(conflict.value)
        for event in SHARE_EVENTS:
            self.share_events.labels(event)
        self._priorities: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._phases: dict[tuple[str, str], str] = {}

    # --- reconciles ---------------------------------------------------------------------------

    def replanning(self, reason: Trigger | str) -> None:
        """A reconcile of an existing plan starts."""
        self.replans.labels(str(reason)).inc()

    def reconcile_timer(self) -> AbstractContextManager[Any]:
        """``with metrics.reconcile_timer(): ...`` observes ``gpuplan_plan_duration_seconds``."""
        return self.plan_duration.time()

    def planned(self, seconds: float, result: PlanResult) -> None:
        """The planner answered after ``seconds``; its per-type search statistics."""
        self.planner_seconds.observe(seconds)
        for stats in result.stats:
            self.planner_branches.labels(stats.method.value).observe(stats.branches)
        for conflict in result.conflicts:
            self.conflicts.labels(conflict.kind.value).inc()

    # --- cycles -------------------------------------------------------------------------------

    def cycle(self, stages: Mapping[str, float], planned: int, cpu: float = 0.0) -> None:
        """One scheduling cycle ended: seconds per stage (and ``total``), plans it planned, the
        process's CPU seconds while it ran."""
        self.cycles.inc()
        self.cycle_cpu.inc(max(cpu, 0.0))
        for stage, seconds in stages.items():
            self.cycle_seconds.labels(stage).observe(seconds)
        self.cycle_seconds.labels("total").observe(sum(stages.values()))
        self.cycle_plans.observe(planned)

    def caches(self, sizes: Mapping[str, int]) -> None:
        for kind, count in sizes.items():
            self.cached.labels(kind).set(count)

    # --- plans --------------------------------------------------------------------------------

    def plan_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """The status a reconcile ended with: the plan's phase and cards."""
        phase = str(status.get("phase") or "")
        with self._lock:
            if phase:
                self._phases[(namespace, name)] = phase
            self._count_phases()
        if "cardsPlaced" in status and "cardsRequested" in status:
            self.cards_placed.labels(namespace, name).set(int(status["cardsPlaced"]))
            self.cards_requested.labels(namespace, name).set(int(status["cardsRequested"]))

    def shared_event(self, reason: str) -> None:
        self.share_events.labels(str(reason)).inc()

    def shared_cards(self, namespace: str, name: str, shared: Shared, placed: int) -> None:
        """A plan's cards after planning together: placed, min and max, under its priority."""
        priority = str(shared.spec.priority)
        with self._lock:
            before = self._priorities.get((namespace, name))
            self._priorities[(namespace, name)] = priority
        if before is not None and before != priority:
            self._drop_cards(namespace, name, before)
        least = sum(r.least for r in shared.spec.requests)
        most = sum(r.cards for r in shared.spec.requests)
        for bound, value in (("placed", placed), ("min", least), ("max", most)):
            self.plan_cards.labels(namespace, name, priority, bound).set(value)

    def _drop_cards(self, namespace: str, name: str, priority: str) -> None:
        for bound in ("placed", "min", "max"):
            with suppress(KeyError):
                self.plan_cards.remove(namespace, name, priority, bound)

    def plan_gone(self, namespace: str, name: str) -> None:
        """The plan was deleted: its series go."""
        with self._lock:
            priority = self._priorities.pop((namespace, name), None)
        if priority is not None:
            self._drop_cards(namespace, name, priority)
        with self._lock:
            self._phases.pop((namespace, name), None)
            self._count_phases()
        for gauge in (self.cards_placed, self.cards_requested):
            with suppress(KeyError):  # never planned (Invalid from the start); older clients raise
                gauge.remove(namespace, name)

    def _count_phases(self) -> None:
        counts = {p.value: 0 for p in Phase}
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, count in counts.items():
            self.plans.labels(phase).set(count)

    # --- writes -------------------------------------------------------------------------------

    def wrote(self, kind: str, count: int = 1) -> None:
        """``count`` writes of ``kind`` were accepted by the API server."""
        if count:
            self.writes.labels(kind).inc(count)

    def apply_failed(self, kind: str) -> None:
        """A step writing ``kind`` failed (API error, or the object belongs to someone else)."""
        self.apply_errors.labels(kind).inc()

    # --- all-or-nothing deploys ---------------------------------------------------------------

    def gang_round(self, gated: int) -> None:
        """A release round ended with ``gated`` pods still gated."""
        self.gated_pods.set(gated)

    def gang_released(self, reason: GangCode, waited: float) -> None:
        """A pod's gate was lifted ``waited`` seconds after the pod was created."""
        self.gang_releases.labels(reason.value).inc()
        self.gang_wait.observe(waited)

    def gang_timed_out(self) -> None:
        self.gang_releases.labels(GangCode.TIMED_OUT.value).inc()
