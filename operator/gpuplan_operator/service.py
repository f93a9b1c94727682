"""Reconcile one plan: snapshot -> plan -> render -> apply the difference -> status.

Notes
-----
One reconcile runs at a time, whatever plan it is for (``PlanService.lock``). Plans share the
cards: a plan is made against the others' applied reservations, so two plans planning at once
could both take the same free card. Planning is fast (the fast path answers most re-plans without
a solver), so serialising costs little and makes "never double-book" hold by construction.

Each reconcile reads the plan afresh from the API server instead of trusting the body an event
carried: a node-triggered re-plan must see the status the last reconcile wrote, or it would plan
from a stale ``previous`` and move instances for nothing.

Results, not exceptions, leave this module: :class:`Outcome` says what happened and the thin
handlers decide what kopf should do (retry on Error, stop on Invalid). API errors are caught only
to record them in status as ``phase: Error``; they are never swallowed silently.

Metrics (:mod:`.metrics`) are recorded here and in :mod:`.apply`: each reconcile by its
:class:`~.metrics.Trigger`, its duration and the planner's, the status it ends with, every write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpuplan_operator import cluster, reserve
from gpuplan_operator import metrics as m
from gpuplan_operator import status as st
from gpuplan_operator.apply import Changes, Conflict, apply_desired, remove_all
from gpuplan_operator.kube import Kube, api_error_message
from gpuplan_operator.metrics import Metrics, Trigger
from gpuplan_operator.naming import configmap_name, label_key_of
from gpuplan_operator.readiness import readiness
from planner.errors import InvalidInput
from planner.parse import parse_spec, snapshot
from planner.render import Desired, render_desired
from planner.result import PlanResult
from planner.search import plan as make_plan
from planner.search import previous_from_allocations

log = logging.getLogger("gpuplan_operator")

EventFn = Callable[[Mapping[str, Any], str, str, str], None]  # (plan, type, reason, message)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Options:
    """Tunables of planning and of re-planning on cluster changes."""

    plan_seconds: float = 30.0  # time budget of one planning run
    polish_seconds: float = 1.0  # extra solver time to keep instances where they were
    debounce: float = 2.0  # quiet seconds after a node change before re-planning
    max_delay: float = 10.0  # re-plan at the latest this long after the first change of a burst
    resync: float = 60.0  # Infeasible/Error plans re-plan this often; Ready is re-checked too
    ready_poll: float = 2.0  # while pods are pending, check readiness this often


@dataclass(frozen=True)
class Outcome:
    phase: str
    message: str
    moved: bool = False  # the plan's applied placement changed: other plans may re-plan
    ready: bool = False


def _meta(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = plan.get("metadata") or {}
    return meta


class PlanService:
    """The operator's business logic; built once at start-up and kept in kopf's memo."""

    def __init__(
        self,
        kube: Kube,
        options: Options,
        events: EventFn,
        clock: Callable[[], str] = now_iso,
        metrics: Metrics | None = None,
    ) -> None:
        self.kube = kube
        self.options = options
        self.events = events
        self.clock = clock
        self.metrics = metrics if metrics is not None else m.METRICS
        self.lock = threading.Lock()

    # --- status -----------------------------------------------------------------------------

    def _write_status(self, plan: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        old = plan.get("status") or {}
        patch = st.status_patch(old, new)
        if patch is None:
            return False
        meta = _meta(plan)
        cluster.patch_plan_status(self.kube, meta["namespace"], meta["name"], patch)
        self.metrics.wrote(m.PLAN_STATUS)
        return True

    def _finish(
        self, plan: Mapping[str, Any], new: Mapping[str, Any], outcome: Outcome, reason: str, warn: bool
    ) -> Outcome:
        meta = _meta(plan)
        self.metrics.plan_status(meta["namespace"], meta["name"], new)
        if self._write_status(plan, new):
            self.events(plan, "Warning" if warn else "Normal", reason, outcome.message)
            log.info("%s/%s: %s: %s", meta["namespace"], meta["name"], outcome.phase, outcome.message)
        return outcome

    # --- reconcile --------------------------------------------------------------------------

    def _live_plan(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The plan as it is now, or None when it is gone or being deleted (the finalizer's job)."""
        plan = cluster.read_plan(self.kube, namespace, name)
        if plan is None or _meta(plan).get("deletionTimestamp"):
            return None
        return plan

    def reconcile(self, namespace: str, name: str, trigger: Trigger = Trigger.RESUMED) -> Outcome | None:
        """Bring one plan's outputs and status up to date; None when the plan is gone.

        ``trigger`` says why (``gpuplan_replans_total{reason}``); it changes nothing else.
        """
        with self.lock:
            plan = self._live_plan(namespace, name)
            if plan is None:
                self.metrics.plan_gone(namespace, name)
                return None
            self.metrics.replanning(trigger)
            with self.metrics.reconcile_timer():
                try:
                    return self._reconcile(plan)
                except ApiException as e:  # reading the cluster failed: say so in status, then retry
                    return self._api_failure(plan, e)

    def _api_failure(self, plan: dict[str, Any], error: ApiException) -> Outcome:
        meta = _meta(plan)
        fresh = cluster.read_plan(self.kube, meta["namespace"], meta["name"]) or plan
        new = st.error_status(fresh.get("status") or {}, int(meta.get("generation") or 0),
                              api_error_message(error), self.clock())  # fmt: skip
        return self._finish(fresh, new, Outcome(st.ERROR, new["message"]), "ApiError", warn=True)

    def _reconcile(self, plan: dict[str, Any]) -> Outcome:
        meta = _meta(plan)
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        generation = int(meta.get("generation") or 0)
        old = plan.get("status") or {}
        now = self.clock()
        try:
            spec = parse_spec(plan.get("spec") or {}, name=name, namespace=namespace)
        except InvalidInput as e:
            new = st.invalid_status(old, generation, str(e), now)
            return self._finish(plan, new, Outcome(st.INVALID, new["message"]), "Invalid", warn=True)

        if old.get("observedGeneration") != generation and old.get("phase") != st.PLANNING:
            planning = st.planning_status(old, generation)
            if self._write_status(plan, planning):
                plan["status"] = old = planning

        plans = cluster.list_plans(self.kube)
        nodes = cluster.list_nodes(self.kube)
        pods = reserve.foreign_pods(cluster.list_active_pods(self.kube), reserve.plan_keys(plans))
        try:
            snap = snapshot(nodes, pods, reserve.reserved_by_others(plans, uid))
        except InvalidInput as e:  # the cluster, not the spec: e.g. no nodes at all
            new = st.infeasible_status(old, generation, f"cluster snapshot: {e}", now)
            return self._finish(plan, new, Outcome(st.INFEASIBLE, new["message"]), "Infeasible", warn=True)

        started = time.perf_counter()
        result = make_plan(
            spec,
            snap,
            seconds=self.options.plan_seconds,
            previous=self._previous(old),
            polish_seconds=self.options.polish_seconds,
        )
        self.metrics.planned(time.perf_counter() - started, result)
        if not result.feasible:
            conflicts = [c.to_json() for c in result.conflicts]
            new = st.infeasible_status(old, generation, result.reason or "unknown reason", now, conflicts)
            return self._finish(plan, new, Outcome(st.INFEASIBLE, new["message"]), "Infeasible", warn=True)
        try:
            desired = render_desired(spec, result)
        except InvalidInput as e:  # e.g. an operator's JSON patch does not apply
            new = st.invalid_status(old, generation, str(e), now)
            return self._finish(plan, new, Outcome(st.INVALID, new["message"]), "Invalid", warn=True)

        if spec.dry_run:
            new = st.dry_run_status(old, generation, result, now)
            return self._finish(plan, new, Outcome(st.PLANNING, new["message"]), "DryRun", warn=False)
        names = {r.name: r.resource_name for r in spec.resources}
        return self._apply(plan, spec.deploy, result, desired, plans, nodes, names)

    @staticmethod
    def _previous(old: Mapping[str, Any]) -> dict[tuple[str, str], tuple[int, dict[str, int]]] | None:
        allocations = old.get("allocations")
        if not allocations:
            return None
        try:
            return previous_from_allocations(list(allocations))
        except (KeyError, TypeError, ValueError, AssertionError):
            return None  # a hand-edited status: plan from scratch rather than fail

    def _apply(
        self,
        plan: dict[str, Any],
        deploy: bool,
        result: PlanResult,
        desired: Desired,
        plans: list[dict[str, Any]],
        nodes: Mapping[str, Any],
        resource_names: Mapping[str, str],
    ) -> Outcome:
        meta = _meta(plan)
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        generation = int(meta.get("generation") or 0)
        old = plan.get("status") or {}
        now = self.clock()
        try:
            changes = apply_desired(
                self.kube,
                plan,
                desired,
                nodes["items"],
                reserve.priority_classes_in_use(plans, uid),
                metrics=self.metrics,
            )
            pods = self._plan_pods(namespace, name) if deploy else []
        except (ApiException, Conflict) as e:
            text = api_error_message(e) if isinstance(e, ApiException) else str(e)
            new = st.error_status(old, generation, text, now, planned=st.summary(result))
            return self._finish(plan, new, Outcome(st.ERROR, new["message"]), "ApplyFailed", warn=True)

        applied = {
            "units": reserve.applied_units(result.to_json()["allocations"], resource_names),
            "priorityClasses": sorted(pc["metadata"]["name"] for pc in desired.priority_classes),
        }
        ready = readiness(desired.deployments, pods, desired.label_key, deploy)
        new = st.applied_status(old, generation, result, applied, ready, now)
        moved = (old.get("applied") or {}).get("units") != applied["units"]
        outcome = Outcome(st.APPLIED, new["message"], moved=moved, ready=ready.ready)
        if changes:
            self.events(plan, "Normal", "Applied", changes.describe())
            log.info("%s/%s: applied: %s", namespace, name, changes.describe())
        if moved:
            verb = "Replanned" if old.get("applied") else "Planned"
            self.events(plan, "Normal", verb, new["message"])
        self.metrics.plan_status(namespace, name, new)
        if self._write_status(plan, new):
            log.info("%s/%s: %s: %s; %s", namespace, name, st.APPLIED, new["message"], ready.message)
        return outcome

    def _plan_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The plan's pods, for readiness right after an apply (a failure fails the apply)."""
        try:
            return cluster.list_plan_pods(self.kube, namespace, name)
        except ApiException:
            self.metrics.apply_failed(m.POD)
            raise

    # --- readiness --------------------------------------------------------------------------

    def refresh_readiness(self, namespace: str, name: str) -> Outcome | None:
        """Re-check the ``Ready`` condition of an applied plan (its pods get scheduled later)."""
        with self.lock:
            plan = self._live_plan(namespace, name)
            if plan is None:
                return None
            old = plan.get("status") or {}
            if old.get("phase") != st.APPLIED:
                return Outcome(str(old.get("phase") or ""), str(old.get("message") or ""))
            deploy = bool((plan.get("spec") or {}).get("deploy", False))
            deployments = cluster.list_plan_deployments(self.kube, namespace, name) if deploy else []
            pods = cluster.list_plan_pods(self.kube, namespace, name) if deploy else []
            ready = readiness(deployments, pods, label_key_of(namespace, name), deploy)
            generation = int(old.get("observedGeneration") or 0)
            new = st.with_readiness(old, ready, generation, self.clock())
            if self._write_status(plan, new):
                log.info("%s/%s: Ready=%s: %s", namespace, name, ready.ready, ready.message)
                if ready.ready:
                    self.events(plan, "Normal", "Ready", ready.message)
            return Outcome(st.APPLIED, str(old.get("message") or ""), ready=ready.ready)

    # --- deletion ---------------------------------------------------------------------------

    def cleanup(self, plan: Mapping[str, Any]) -> Changes:
        """Remove everything the plan wrote (its finalizer keeps it until this succeeds)."""
        meta = _meta(plan)
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        with self.lock:
            plans = cluster.list_plans(self.kube)
            in_use = reserve.priority_classes_in_use(plans, uid)
            changes = remove_all(
                self.kube,
                plan,
                label_key_of(namespace, name),
                configmap_name(name),
                in_use,
                metrics=self.metrics,
            )
            self.metrics.plan_gone(namespace, name)
        log.info("%s/%s: deleted: %s", namespace, name, changes.describe())
        return changes
