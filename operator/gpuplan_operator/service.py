"""Reconcile one plan, one way: read the cluster -> plan -> compute the writes -> perform -> status.

Notes
-----
One reconcile runs at a time, whatever plan it is for (``PlanService.lock``). Plans share the
cards: a plan is made against the others' applied reservations, so two plans planning at once
could both take the same free card. Planning is fast (the fast path answers most re-plans without
a solver), so serialising costs little and makes "never double-book" hold by construction. A
readiness check reads a plan's Deployments and pods outside the lock and writes its condition
under it only if nothing wrote the plan meanwhile, so a re-plan never waits for its reads.

Each reconcile reads the plan afresh from the API server instead of trusting the body an event
carried: a node-triggered re-plan must see the status the last reconcile wrote, or it would plan
from a stale ``previous`` and move instances for nothing. The plan becomes a
:class:`~.body.PlanBody` right there and stays one.

Nodes are planned as :func:`~.watch.planning_view` shows them: a node that has not been Ready
for less than ``node_grace`` seconds keeps its instances (a flap moves nothing); after that it is
unschedulable and they move.

The flow does not double back: reads happen first (:mod:`.cluster`), what to write is computed
without I/O (:mod:`.writes`), the writes are performed (:mod:`.apply`), and the status is derived
from what happened (:mod:`.status`). Results, not exceptions, leave this module: an
:class:`Outcome` says what happened and the thin handlers decide what kopf should do (retry on
Error, stop on Invalid). API errors are caught only to record them in status as ``phase: Error``;
they are never swallowed silently.

Metrics (:mod:`.metrics`) are recorded here and in :mod:`.apply`: each reconcile by its
:class:`~.metrics.Trigger`, its duration and the planner's, the status it ends with, every write.

All-or-nothing deploys are one more action of the cycle, :meth:`PlanService.release_gates`: a
round of :class:`~.release.GateKeeper` over the cycle's snapshot of nodes and pods, then an Event
for each plan whose decision changed; the ``Ready`` condition quotes the last decision's reason
while pods are gated.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from kubernetes.client.exceptions import ApiException

from gpuplan_operator import cluster, reserve
from gpuplan_operator import status as st
from gpuplan_operator.apply import Landed, perform
from gpuplan_operator.body import FINALIZER, PlanBody
from gpuplan_operator.gang import GangCode, GangDecision
from gpuplan_operator.kube import KubeApi, api_error_message
from gpuplan_operator.metrics import PLAN_STATUS, Metrics, Trigger
from gpuplan_operator.readiness import Verdicts, gates_waiting, readiness
from gpuplan_operator.release import GANG_TIMEOUT, GateKeeper
from gpuplan_operator.status import Phase, Readiness, Reason
from gpuplan_operator.watch import NODE_GRACE, planning_view, utcnow
from gpuplan_operator.writes import (
    Changes,
    OwnershipConflict,
    Step,
    Write,
    apply_writes,
    cleans_up,
    cleanup_writes,
    frees_or_prepares,
    paired_wave,
    unlabel_writes,
    wave,
)
from planner import (
    POD,
    PRIORITY_BASE,
    Desired,
    Gang,
    InvalidInput,
    PlanResult,
    PlanSpec,
    Previous,
    Shared,
    parse_spec,
    previous_placements,
    read_allocations,
    render_desired,
    render_key,
    snapshot,
)
from planner import plan as make_plan

log = logging.getLogger("gpuplan_operator")
# seconds a cleaned-up plan's uid is kept (:meth:`PlanService.cleaned_up`): far longer than any
# watch lags (the caches re-open theirs every 15 s and drop one silent for 20 s)
CLEANED_KEPT = 600.0

EventFn = Callable[[PlanBody, str, str, str], None]  # (plan, type, reason, message)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Options:
    """Tunables of planning and of re-planning on cluster changes."""

    plan_seconds: float = 30.0  # time budget of one planning run
    polish_seconds: float = 1.0  # extra solver time to keep instances where they were
    debounce: float = 1.0  # quiet seconds after a node change before re-planning (a scheduler's period)
    max_delay: float = 10.0  # re-plan at the latest this long after the first change of a burst
    settle: float = 0.2  # an isolated node change after a quiet spell re-plans this soon (0: debounce)
    resync: float = 60.0  # Infeasible/Error plans re-plan this often; Ready is re-checked too
    ready_poll: float = 2.0  # while pods are pending, check readiness this often
    # a Ready message that only counts progress (same status, same reason) waits this many times
    # as long as the plan's last status write took, at most progress_max seconds: a plan of a
    # thousand requests costs the API server half a CPU second per status write, a small one 13 ms
    progress_spacing: float = 20.0
    progress_max: float = 10.0
    priority_base: int = PRIORITY_BASE  # an N-card PriorityClass has the value base + N·1000
    node_grace: float = NODE_GRACE  # a node not Ready this long is planned as unschedulable
    gang_timeout: float = GANG_TIMEOUT  # released pods not scheduled this long: re-plan around the cause
    orphan_grace: float = 300.0  # a served plan's node label no plan holds this long is removed


@dataclass
class Prepared:
    """One plan's result, rendered, with the writes it needs (computed, not yet performed)."""

    plan: PlanBody
    spec: PlanSpec
    result: PlanResult
    desired: Desired
    writes: list[Write]
    shared: Shared | None = None  # planned together: admission, elastic requests
    done: list[Write] = field(default_factory=list)  # performed already (the hand-over)
    written: bool = False  # every write performed: only the status is left (and ``later``)
    later: list[Write] = field(default_factory=list)  # the clean-up, sent after every plan's status
    took: dict[str, float] = field(default_factory=dict)  # seconds by stage, for the log line
    known_digest: bytes | None = None  # the digest of ``desired``, when it was taken before

    @functools.cached_property
    def units(self) -> dict[str, dict[str, int]]:
        """``status.applied.units`` once the writes have landed (computed once: the hand-over's
        order, the gates lifted during the writes and the status all read it)."""
        names = {r.name: r.resource_name for r in self.spec.resources}
        return reserve.applied_units(self.result.allocations, names, dict(self.result.pod_cpu))

    @functools.cached_property
    def digest(self) -> bytes:
        """A fingerprint of everything the plan writes besides its status (computed once: the
        check that its outputs landed and the status that records them both read it)."""
        return self.known_digest if self.known_digest is not None else _digest(self.desired)


_ENCODE = msgspec.json.Encoder(order="deterministic")


def _one_round(step: Step) -> int:
    """Every step of the hand-over's writes in one round: none depends on another."""
    return 1


def _digest(desired: Desired) -> bytes:
    """A fingerprint of everything a plan writes besides its status."""
    h = hashlib.blake2b(digest_size=16)
    for part in (desired.node_labels, desired.label_key, desired.priority_classes, desired.configmaps,
                 desired.deployments, desired.claim_templates):  # fmt: skip
        h.update(_ENCODE.encode(part))
    return h.digest()


@dataclass(frozen=True)
class _Landed:
    """A plan's outputs as this process's last apply wrote them, every write and its status landed.

    ``key``: the plan's generation and :func:`planner.render_key` of the result they were rendered
    from, with ``desired`` itself; None (and no ``desired`` kept) when the rendering depends on
    the nodes too."""

    digest: bytes
    key: tuple[Any, ...] | None = None
    desired: Desired | None = None


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    message: str
    moved: bool = False  # the plan's applied placement changed: other plans may re-plan
    ready: bool = False
    stale: bool = False  # (readiness checks) status does not describe the current spec yet


class PlanService:
    """The operator's business logic; built once at start-up and kept in kopf's memo."""

    def __init__(
        self,
        kube: KubeApi,
        options: Options,
        events: EventFn,
        clock: Callable[[], str] = now_iso,
        metrics: Metrics | None = None,
    ) -> None:
        self.kube = kube
        self.options = options
        self.events = events
        self.clock = clock
        self.metrics = metrics if metrics is not None else Metrics()
        self.lock = threading.Lock()
        self.gates = GateKeeper(kube, self.metrics, options.gang_timeout)
        self._gang_codes: dict[str, GangCode] = {}  # namespace/name -> the last decision's code (events)
        self._took: dict[str, float] = {}  # seconds per stage of the reconcile in progress, for its log line
        self._lock_wait = 0.0  # seconds the reconcile in progress waited for the lock
        # set by the cycle: where a plan's pods and Deployments come from (its caches; None from
        # the Deployments' source: not cached, list them), and who hears of each status and
        # object written (the caches again, so the next plan of the same cycle plans around it
        # and the next apply compares with what was just written)
        self.pods_source: Callable[[PlanBody], list[dict[str, Any]]] | None = None
        self.deployments_source: Callable[[str], list[dict[str, Any]] | None] | None = None
        self.on_status: Callable[[Mapping[str, Any]], None] | None = None
        self.on_written: Landed | None = None
        # called now and then while a gang plan writes its Deployments: the cycle lifts the
        # gates of the pods made so far (of every plan it is writing)
        self.meanwhile: Callable[[], None] | None = None
        # plan uid -> the outputs its last apply wrote, every write and its status landed since
        # this process started (:meth:`landed_outputs`, :meth:`landed_unrendered`)
        self._landed: dict[str, _Landed] = {}
        # plan uid -> (monotonic time of its last status write, seconds it took): spaces progress
        self._last_status: dict[str, tuple[float, float]] = {}
        # plan uid -> its Deployments' readiness verdicts from its last check (:meth:`check_readiness`)
        self._verdicts: dict[str, Verdicts] = {}
        # plan uid -> (generation, what the last render of it made): the next render of the same
        # spec takes every entry it did not move from it (:meth:`_render`)
        self._rendered: dict[str, tuple[int, Desired]] = {}
        # plan uid -> monotonic time its clean-up ran (:meth:`cleaned_up`)
        self._cleaned: dict[str, float] = {}

    # --- status -----------------------------------------------------------------------------

    def _write_status(self, plan: PlanBody, new: Mapping[str, Any]) -> bool:
        patch = st.status_patch(plan.status, new)
        if patch is None:
            return False
        started = time.monotonic()
        written = cluster.patch_plan_status(self.kube, plan.namespace, plan.name, patch)
        self._last_status[plan.uid] = (started, time.monotonic() - started)
        self.metrics.wrote(PLAN_STATUS)
        if self.on_status is not None and written:
            self.on_status(written)
        return True

    def _finish(self, plan: PlanBody, new: Mapping[str, Any], reason: str, warn: bool) -> Outcome:
        """Write a status that ends a reconcile without an apply; an event when it changed."""
        outcome = Outcome(Phase(new["phase"]), str(new["message"]))
        self.metrics.plan_status(plan.namespace, plan.name, new)
        if self._write_status(plan, new):
            self.events(plan, "Warning" if warn else "Normal", reason, outcome.message)
            log.info("%s: %s: %s", plan.ref, outcome.phase, outcome.message)
        return outcome

    # --- reconcile --------------------------------------------------------------------------

    def _live_plan(self, namespace: str, name: str) -> PlanBody | None:
        """The plan as it is now, or None when it is gone or being deleted (the finalizer's job)."""
        obj = cluster.read_plan(self.kube, namespace, name)
        if obj is None:
            return None
        plan = PlanBody.from_object(obj)
        return None if plan.deleting else plan

    def reconcile(self, namespace: str, name: str, trigger: Trigger = Trigger.RESUMED) -> Outcome | None:
        """Bring one plan's outputs and status up to date; None when the plan is gone.

        ``trigger`` says why (``gpuplan_replans_total{reason}``); it changes nothing else.
        """
        asked = time.perf_counter()
        with self.lock:
            self._lock_wait = time.perf_counter() - asked
            plan = self._live_plan(namespace, name)
            if plan is None:
                self.metrics.plan_gone(namespace, name)
                return None
            try:
                read = cluster.read_cluster(self.kube)
            except ApiException as e:  # reading the cluster failed: say so in status, then retry
                return self._api_failure(plan, e)
            return self.reconcile_with(plan, read, trigger)

    def reconcile_with(self, plan: PlanBody, read: cluster.ClusterRead, trigger: Trigger) -> Outcome:
        """One plan against a cluster already read (the cycle's snapshot); the caller holds the lock."""
        self.metrics.replanning(trigger)
        with self.metrics.reconcile_timer():
            try:
                return self._reconcile(plan, read)
            except ApiException as e:  # writing the cluster failed: say so in status, then retry
                return self._api_failure(plan, e)

    # --- what the cycle asks of one plan ---------------------------------------------------------

    def parse(self, plan: PlanBody) -> PlanSpec | Outcome:
        """The plan's spec, or the ``Invalid`` outcome (status written) when it cannot plan."""
        try:
            return parse_spec(plan.spec, name=plan.name, namespace=plan.namespace)
        except InvalidInput as e:
            new = st.invalid_status(plan.status, plan.generation, str(e), self.clock())
            return self._finish(plan, new, Reason.INVALID, warn=True)

    def infeasible(self, plan: PlanBody, message: str) -> Outcome:
        """Nothing could be planned for a reason outside the plan (e.g. the cluster has no nodes)."""
        new = st.infeasible_status(plan.status, plan.generation, message, self.clock())
        return self._finish(plan, new, Reason.INFEASIBLE, warn=True)

    def not_planned(self, plan: PlanBody, result: PlanResult) -> Outcome:
        """No deployable plan and nothing written: what the plan holds stays applied."""
        reason = result.reason or "unknown reason"
        conflicts = [c.to_json() for c in result.conflicts]
        kind = result.conflicts[0].kind if result.conflicts else Reason.INFEASIBLE
        new = st.infeasible_status(
            plan.status, plan.generation, reason, self.clock(), conflicts, kind, result.warnings
        )
        return self._finish(plan, new, Reason.INFEASIBLE, warn=True)

    def _render(self, plan: PlanBody, spec: PlanSpec, result: PlanResult) -> Desired:
        """:func:`planner.render_desired`, given the plan's last render when it was of the same
        generation (the same spec: a cordon's re-plan renders again only the entries it moved)."""
        last = self._rendered.get(plan.uid)
        like = last[1] if last is not None and last[0] == plan.generation else None
        desired = render_desired(spec, result, self.options.priority_base, like=like)
        self._rendered[plan.uid] = (plan.generation, desired)
        return desired

    def render(self, plan: PlanBody, spec: PlanSpec, result: PlanResult) -> Desired | Outcome:
        try:
            return self._render(plan, spec, result)
        except InvalidInput as e:  # e.g. an operator's JSON patch does not apply
            new = st.invalid_status(plan.status, plan.generation, str(e), self.clock())
            return self._finish(plan, new, Reason.INVALID, warn=True)

    def errored(self, plan: PlanBody, error: ApiException) -> Outcome:
        return self._api_failure(plan, error)

    def _api_failure(self, plan: PlanBody, error: ApiException) -> Outcome:
        """Status says ``Error``; when even that cannot be written, the outcome still does."""
        message = api_error_message(error)
        try:
            obj = cluster.read_plan(self.kube, plan.namespace, plan.name)
            if obj is None or str((obj.get("metadata") or {}).get("uid")) != plan.uid:
                log.info("%s: gone while it was written (%s)", plan.ref, message)
                return Outcome(Phase.ERROR, f"apply failed: {message}")
            fresh = PlanBody.from_object(obj)
            new = st.error_status(fresh.status, plan.generation, message, self.clock())
            return self._finish(fresh, new, Reason.API_ERROR, warn=True)
        except ApiException as again:  # e.g. the API server is down: retried all the same
            log.warning("%s: %s; status not written either: %s", plan.ref, message, api_error_message(again))
            return Outcome(Phase.ERROR, f"apply failed: {message}")

    def _mark_planning(self, plan: PlanBody) -> PlanBody:
        """A new generation shows ``Planning`` while it is planned (the rest of status stays)."""
        if (
            plan.status.get("observedGeneration") == plan.generation
            or plan.status.get("phase") == Phase.PLANNING
        ):
            return plan
        planning = st.planning_status(plan.status, plan.generation)
        return plan.with_status(planning) if self._write_status(plan, planning) else plan

    def _reconcile(self, plan: PlanBody, read: cluster.ClusterRead) -> Outcome:
        now = self.clock()
        try:
            spec = parse_spec(plan.spec, name=plan.name, namespace=plan.namespace)
        except InvalidInput as e:
            return self._finish(plan, st.invalid_status(plan.status, plan.generation, str(e), now),
                                Reason.INVALID, warn=True)  # fmt: skip
        plan = self._mark_planning(plan)

        self._took = {"lock wait": self._lock_wait}
        started = time.perf_counter()
        owners = reserve.owners_of_deployed_pods(read.plans)
        pods = reserve.foreign_pods(read.pods, reserve.plan_keys(read.plans), owners)
        at = utcnow()
        nodes = [planning_view(n, at, self.options.node_grace) for n in read.nodes["items"]]
        try:
            snap = snapshot(
                {**read.nodes, "items": nodes},
                pods,
                reserve.reserved_by_others(read.plans, plan.uid),
                slices_doc=read.slices,
                claims_doc=reserve.foreign_claims(read.claims),
                reserved_devices=reserve.devices_reserved_by_others(read.plans, plan.uid),
                topology_doc=read.topologies,
                own_zones=reserve.own_zones(plan.status),
                reserved_zones=reserve.zones_reserved_by_others(read.plans, plan.uid),
            )
        except InvalidInput as e:  # the cluster, not the spec: e.g. no nodes at all
            new = st.infeasible_status(plan.status, plan.generation, f"cluster snapshot: {e}", now)
            return self._finish(plan, new, Reason.INFEASIBLE, warn=True)

        snapped = time.perf_counter()
        result = self._plan(spec, snap, previous_of(plan.status))
        planned = time.perf_counter()
        self._took |= {"snapshot": snapped - started, "plan": planned - snapped}
        if not result.feasible:
            reason = result.reason or "unknown reason"
            conflicts = [c.to_json() for c in result.conflicts]
            kind = result.conflicts[0].kind if result.conflicts else Reason.INFEASIBLE
            new = st.infeasible_status(
                plan.status, plan.generation, reason, now, conflicts, kind, result.warnings
            )
            return self._finish(plan, new, Reason.INFEASIBLE, warn=True)
        try:
            desired = self._render(plan, spec, result)
            self._took["render"] = time.perf_counter() - planned
        except InvalidInput as e:  # e.g. an operator's JSON patch does not apply
            return self._finish(plan, st.invalid_status(plan.status, plan.generation, str(e), now),
                                Reason.INVALID, warn=True)  # fmt: skip
        if spec.dry_run:
            new = st.dry_run_status(plan.status, plan.generation, result, now)
            return self._finish(plan, new, Reason.DRY_RUN, warn=False)
        in_use = reserve.priority_classes_in_use(read.plans, plan.uid)
        return self._apply(plan, spec, result, desired, nodes, in_use)

    def _plan(self, spec: PlanSpec, snap: Any, previous: Previous | None) -> PlanResult:
        started = time.perf_counter()
        result = make_plan(
            spec,
            snap,
            seconds=self.options.plan_seconds,
            previous=previous,
            polish_seconds=self.options.polish_seconds,
        )
        self.metrics.planned(time.perf_counter() - started, result)
        return result

    def _apply(
        self,
        plan: PlanBody,
        spec: PlanSpec,
        result: PlanResult,
        desired: Desired,
        nodes: list[dict[str, Any]],
        in_use: set[str],
    ) -> Outcome:
        prepared = self.prepare(plan, spec, result, nodes, in_use, desired)
        if isinstance(prepared, Outcome):
            return prepared
        prepared.took = {**self._took, **prepared.took}
        return self.hand_over(prepared) or self.complete(prepared)

    def prepare(
        self,
        plan: PlanBody,
        spec: PlanSpec,
        result: PlanResult,
        nodes: list[dict[str, Any]],
        in_use: set[str],
        desired: Desired | None = None,
        shared: Shared | None = None,
    ) -> Prepared | Outcome:
        """Render the result and compute its writes against what the cluster holds (one read of
        the plan's own objects); an Outcome when that already fails."""
        now = self.clock()
        self._landed.pop(plan.uid, None)  # recorded again once these writes and the status land
        try:
            desired = desired or self._render(plan, spec, result)
        except InvalidInput as e:  # e.g. an operator's JSON patch does not apply
            return self._finish(plan, st.invalid_status(plan.status, plan.generation, str(e), now),
                                Reason.INVALID, warn=True)  # fmt: skip
        started = time.perf_counter()
        try:
            observed = cluster.read_for_apply(self.kube, plan, desired, nodes, self._managed(plan.namespace))
            read = time.perf_counter()
            writes = apply_writes(plan, desired, observed, in_use)
        except OwnershipConflict as e:
            self.metrics.apply_failed(e.kind)
            return self._apply_failed(plan, result, str(e), now)
        except ApiException as e:
            return self._apply_failed(plan, result, api_error_message(e), now)
        prepared = Prepared(plan, spec, result, desired, writes, shared)
        prepared.took["read"] = read - started
        prepared.took["compare"] = time.perf_counter() - read
        return prepared

    def landed_outputs(
        self, plan: PlanBody, spec: PlanSpec, result: PlanResult, desired: Desired, shared: Shared | None
    ) -> Prepared | None:
        """The plan with nothing to write but its status (:meth:`complete`) when this process's
        last apply of it wrote exactly ``desired`` and its status, all of it landed: a re-plan that
        moved nothing (after a cordon elsewhere every plan's score changes, its instances stay)
        then does not read and compare the plan's thousands of objects. None otherwise (a plan not
        applied since the process started, or whose last apply failed, is compared with the
        cluster as always)."""
        prepared = Prepared(plan, spec, result, desired, [], shared, written=True)
        last = self._landed.get(plan.uid)
        return prepared if last is not None and last.digest == prepared.digest else None

    def landed_unrendered(
        self, plan: PlanBody, spec: PlanSpec, result: PlanResult, shared: Shared | None
    ) -> Prepared | None:
        """:meth:`landed_outputs` without rendering ``result``: when it places every instance where
        the plan's last landed apply did, from the same spec (only scores differ), its outputs are
        the ones that apply rendered, kept. After a cordon, every plan of the cluster is re-planned
        and all but the moved ones are this; rendering them again took most of a cordon's cycle at
        3,000 nodes (three plans of 2,480 entries). None when it may differ (then render)."""
        last = self._landed.get(plan.uid)
        if last is None or last.key is None or last.desired is None:
            return None
        if last.key != (plan.generation, render_key(spec, result)):
            return None
        return Prepared(plan, spec, result, last.desired, [], shared, written=True, known_digest=last.digest)

    def hand_over(self, prepared: Prepared) -> Outcome | None:
        """The writes that free cards (Deployments the plan no longer wants): every plan's go
        before any plan's new instances are written, so cards passing from one plan to another
        are released before they are taken. The plan's new priority classes and claim templates
        go with them, in one round (:func:`~.writes.frees_or_prepares`): they take no cards, and
        its Deployments need them. None when they landed."""
        drops = [w for w in prepared.writes if frees_or_prepares(w.step)]
        if not drops:
            return None
        try:
            perform(
                self.kube, drops, self.metrics, landed=self.on_written, took=prepared.took, waves=_one_round
            )
        except ApiException as e:
            return self._apply_failed(prepared.plan, prepared.result, api_error_message(e), self.clock())
        prepared.done.extend(drops)
        return None

    def release(self, prepared: Prepared, units: Mapping[str, Mapping[str, int]]) -> None:
        """Say in status that the plan holds only ``units`` now (between giving some cards up
        and taking others); an API error here only leaves the status a moment behind."""
        old = prepared.plan.status
        applied = dict(old.get("applied") or {})
        if not applied:
            return
        applied["units"] = {n: dict(r) for n, r in units.items()}
        try:
            self._write_status(prepared.plan, {**old, "applied": applied})
        except ApiException as e:
            log.warning("%s: releasing cards in status failed: %s", prepared.plan.ref, api_error_message(e))

    def write_rest(self, prepared: Prepared, clean_up: bool = True) -> Outcome | None:
        """The writes left after the hand-over (labels, classes, outputs, Deployments, clean-up);
        an Outcome when they failed. Plans may do this side by side: what had to go first is gone.
        Without ``clean_up``, the last round (:func:`~.writes.cleans_up`) is left in ``later``
        for :meth:`clean_up`: the cycle sends it once every plan's new instances are written."""
        sent = {id(w) for w in prepared.done}
        rest = [w for w in prepared.writes if id(w) not in sent]
        if not clean_up:
            prepared.later = [w for w in rest if cleans_up(w.step)]
            rest = [w for w in rest if not cleans_up(w.step)]
        # a plan's node labels go out with its Deployments, not a round before (writes.paired_wave):
        # a gang plan's pods wait for their gates, which wait for the labels, and the gates of the
        # pods made so far are lifted while the rest are written (``meanwhile``); a plan without
        # the gate sends each Deployment once the labels it selects have landed
        gated = self.gated(prepared.spec)
        waves = paired_wave if prepared.spec.deploy else wave
        meanwhile = self.meanwhile if gated else None
        try:
            prepared.done.extend(
                perform(
                    self.kube,
                    rest,
                    self.metrics,
                    landed=self.on_written,
                    took=prepared.took,
                    meanwhile=meanwhile,
                    waves=waves,
                    after_labels=not gated,
                )
            )
        except ApiException as e:
            return self._apply_failed(prepared.plan, prepared.result, api_error_message(e), self.clock())
        prepared.written = True
        return None

    def clean_up(self, prepared: Prepared) -> Outcome | None:
        """What :meth:`write_rest` left for after every plan's writes (node labels no pod selects
        any more, classes no pod names); an Outcome when it failed (the plan is tried again, and
        its next apply finds the labels still there)."""
        if not prepared.later:
            return None
        started = time.perf_counter()
        try:
            done = perform(self.kube, prepared.later, self.metrics, landed=self.on_written)
        except ApiException as e:
            return self._apply_failed(prepared.plan, prepared.result, api_error_message(e), self.clock())
        prepared.done.extend(done)
        prepared.later = []
        took = time.perf_counter() - started
        changes = Changes.of(done).describe()
        log.info("%s: cleaned up %d writes (%.2fs): %s", prepared.plan.ref, len(done), took, changes)
        return None

    @staticmethod
    def gated(spec: PlanSpec) -> bool:
        """Are the plan's pods made with the gang gate?"""
        return spec.deploy and spec.gang is Gang.PLAN

    def applied_of(self, prepared: Prepared) -> dict[str, Any]:
        """``status.applied`` once the plan's writes have landed: what it holds, other plans plan
        around and its gang gates count on."""
        spec, result = prepared.spec, prepared.result
        names = {r.name: r.resource_name for r in spec.resources}
        applied: dict[str, Any] = {
            "units": prepared.units,
            "priorityClasses": sorted(pc["metadata"]["name"] for pc in prepared.desired.priority_classes),
        }
        if devices := reserve.applied_devices(result.allocations):
            applied["devices"] = devices
        if zones := reserve.applied_zones(result.allocations, names):
            applied["zones"] = zones
        return applied

    def complete(self, prepared: Prepared) -> Outcome:
        """The rest of the writes (unless :meth:`write_rest` did them), then the status (with what
        planning together said, if it did)."""
        plan, spec, result, desired = prepared.plan, prepared.spec, prepared.result, prepared.desired
        now = self.clock()
        if not prepared.written and (failed := self.write_rest(prepared)) is not None:
            return failed
        changes = Changes.of(prepared.done)
        try:
            pods = self._plan_pods(plan) if spec.deploy else []
        except ApiException as e:
            return self._apply_failed(plan, result, api_error_message(e), now)

        applied = self.applied_of(prepared)
        waiting = self.gates.waiting(plan.namespace, plan.name)
        ready = readiness(desired.deployments, pods, desired.label_key, spec.deploy, waiting)
        new = st.applied_status(plan.status, plan.generation, result, applied, ready, now)
        if prepared.shared is not None:
            new = st.shared_status(plan.status, new, prepared.shared, now)
        phase = Phase(new["phase"])
        moved = (plan.status.get("applied") or {}).get("units") != applied["units"]
        if changes:
            self.events(plan, "Normal", Reason.APPLIED, changes.describe())
        for type_, reason, message in st.share_events(plan.status, new):
            self.events(plan, type_, reason, message)
            self.metrics.shared_event(reason)
        if prepared.shared is not None:
            self.metrics.shared_cards(plan.namespace, plan.name, prepared.shared, result.cards_placed)
        if moved and phase is Phase.APPLIED:
            verb = Reason.REPLANNED if plan.status.get("applied") else Reason.PLANNED
            self.events(plan, "Normal", verb, new["message"])
        self.metrics.plan_status(plan.namespace, plan.name, new)
        started = time.perf_counter()
        if self._write_status(plan, new):
            prepared.took["status"] = time.perf_counter() - started
            log.info("%s: %s: %s; %s", plan.ref, phase, new["message"], ready.message)
        if phase is Phase.APPLIED:
            key = render_key(spec, result)
            if key is None:
                self._landed[plan.uid] = _Landed(prepared.digest)
            else:
                self._landed[plan.uid] = _Landed(prepared.digest, (plan.generation, key), desired)
        if changes:
            took = ", ".join(f"{k} {v:.2f}s" for k, v in prepared.took.items())
            log.info(
                "%s: applied %d writes (%s): %s", plan.ref, len(prepared.writes), took, changes.describe()
            )
        return Outcome(phase, new["message"], moved=moved, ready=ready.ready)

    def _apply_failed(self, plan: PlanBody, result: PlanResult, error: str, now: str) -> Outcome:
        self._landed.pop(plan.uid, None)
        new = st.error_status(plan.status, plan.generation, error, now, planned=st.summary(result))
        return self._finish(plan, new, Reason.APPLY_FAILED, warn=True)

    def _managed(self, namespace: str) -> list[dict[str, Any]] | None:
        """The operator's Deployments of ``namespace`` from the cycle's cache (None: not cached;
        a listing of a plan's 800 took 3 s on a loaded 1,000-node control plane)."""
        return self.deployments_source(namespace) if self.deployments_source else None

    def _plan_pods(self, plan: PlanBody) -> list[dict[str, Any]]:
        """The plan's pods, for readiness right after an apply (a failure fails the apply)."""
        if self.pods_source is not None:
            return self.pods_source(plan)
        try:
            return cluster.list_plan_pods(self.kube, plan.namespace, plan.name)
        except ApiException:
            self.metrics.apply_failed(POD)
            raise

    # --- readiness --------------------------------------------------------------------------

    def refresh_readiness(self, namespace: str, name: str) -> Outcome | None:
        """Re-check the ``Ready`` condition of an applied plan (its pods get scheduled later).

        The plan's Deployments and pods are read without the lock (at a thousand nodes that takes
        seconds, which a re-plan after a cordon would wait out); the condition is written under
        it only if nothing wrote the plan meanwhile. Otherwise a reconcile ran, and this reports
        not ready, so the plan's daemon checks again at its next poll.
        """
        plan = self._live_plan(namespace, name)
        if plan is None:
            return None
        old = plan.status
        stale = old.get("observedGeneration") != plan.generation
        if old.get("phase") != Phase.APPLIED:
            phase = old.get("phase") or Phase.PLANNING.value
            return Outcome(Phase(phase), str(old.get("message") or ""), stale=stale)
        deployments = cluster.list_plan_deployments(self.kube, namespace, name) if plan.deploy else []
        pods = cluster.list_plan_pods(self.kube, namespace, name) if plan.deploy else []
        ready = readiness(deployments, pods, plan.label_key, plan.deploy, self.gates.waiting(namespace, name))
        with self.lock:
            current = self._live_plan(namespace, name)
            if current is None:
                return None
            if current.resource_version != plan.resource_version:
                phase = current.status.get("phase") or Phase.PLANNING.value
                return Outcome(Phase(phase), str(current.status.get("message") or ""), stale=stale)
            generation = int(old.get("observedGeneration") or 0)
            new = st.with_readiness(old, ready, generation, self.clock())
            if self._write_status(plan, new):
                log.info("%s: Ready=%s: %s", plan.ref, ready.ready, ready.message)
                if ready.ready:
                    self.events(plan, "Normal", Reason.READY, ready.message)
            return Outcome(Phase.APPLIED, str(old.get("message") or ""), ready=ready.ready, stale=stale)

    def check_readiness(self, plan: PlanBody) -> Outcome:
        """The cycle's readiness check of an applied plan read from its cache (lock held)."""
        old = plan.status
        stale = old.get("observedGeneration") != plan.generation
        if old.get("phase") != Phase.APPLIED:
            phase = old.get("phase") or Phase.PLANNING.value
            return Outcome(Phase(phase), str(old.get("message") or ""), stale=stale)
        waiting = self.gates.waiting(plan.namespace, plan.name)
        pods = self._plan_pods(plan) if plan.deploy else []
        ready = gates_waiting(pods, waiting) if plan.deploy else None
        if ready is None:  # the Deployments only once no pod waits for its gate (a deploy's tail)
            managed = self._managed(plan.namespace)
            deployments = (
                cluster.plan_deployments(self.kube, plan.namespace, plan.name, managed) if plan.deploy else []
            )
            kept = self._verdicts.setdefault(plan.uid, Verdicts())
            ready = readiness(deployments, pods, plan.label_key, plan.deploy, waiting, kept)
        generation = int(old.get("observedGeneration") or 0)
        new = st.with_readiness(old, ready, generation, self.clock())
        if self._progress_waits(plan, new):
            return Outcome(Phase.APPLIED, str(old.get("message") or ""), ready=ready.ready, stale=stale)
        if self._write_status(plan, new):
            log.info("%s: Ready=%s: %s", plan.ref, ready.ready, ready.message)
            if ready.ready:
                self.events(plan, "Normal", Reason.READY, ready.message)
        return Outcome(Phase.APPLIED, str(old.get("message") or ""), ready=ready.ready, stale=stale)

    def _progress_waits(self, plan: PlanBody, new: Mapping[str, Any]) -> bool:
        """Whether ``new`` only moves the progress the Ready message counts (the condition keeps
        its status and reason) sooner after the plan's last status write than that write's cost
        allows (:attr:`Options.progress_spacing`). The next readiness check writes it."""
        if not st.progress_only(plan.status, new):
            return False
        at, took = self._last_status.get(plan.uid, (0.0, 0.0))
        spacing = min(self.options.progress_max, self.options.progress_spacing * took)
        return time.monotonic() - at < spacing

    # --- all-or-nothing deploys ---------------------------------------------------------------

    def release_gates(
        self,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        plans: Sequence[PlanBody],
        slices: Sequence[Mapping[str, Any]] = (),
        claims: Sequence[Mapping[str, Any]] = (),
    ) -> list[GangDecision]:
        """The cycle's release action (lock held): one round of the gang gates over the cycle's
        snapshot, and an Event where a plan's decision changed. The cycle re-plans the plans for
        which :meth:`gang_timed_out` says so."""
        decisions = self.gates.decide_and_release(nodes, pods, plans, slices, claims)
        seen = {d.plan for d in decisions}
        for key in [k for k in self._gang_codes if k not in seen]:
            del self._gang_codes[key]
        live = {p.ref: p for p in plans if not p.deleting}
        for decision in decisions:
            before = self._gang_codes.get(decision.plan)
            self._gang_codes[decision.plan] = decision.code
            if decision.code is GangCode.IDLE or (decision.code is before and not decision.releases):
                continue
            plan = live.get(decision.plan)
            if plan is None:  # pods of no plan that is still there
                continue
            warn = decision.code in (GangCode.WAITING, GangCode.TIMED_OUT)
            self.events(plan, "Warning" if warn else "Normal", decision.code.value, decision.message)
        return decisions

    def gang_timed_out(self, plan: PlanBody, decision: GangDecision) -> bool:
        """Released pods were not scheduled in time, or a gated group waited longer than the
        timeout: ``Ready`` says so (lock held); True when the plan should be re-planned now (once
        per timeout)."""
        if not self.gates.should_replan(decision):
            return False
        generation = int(plan.status.get("observedGeneration") or 0)
        reason = Reason.GANG_TIMED_OUT if decision.code is GangCode.TIMED_OUT else Reason.WAITING
        ready = Readiness(False, reason, decision.message)
        self._write_status(plan, st.with_readiness(plan.status, ready, generation, self.clock()))
        log.warning("%s: %s", decision.plan, decision.message)
        return True

    # --- deletion ---------------------------------------------------------------------------

    def guard(self, plan: PlanBody) -> bool:
        """Give the plan the finalizer, as kopf does when it first handles it, before anything is
        written for it (kopf adds it only as it handles an event of the plan, and after a failed
        attempt waits for the next one: the plan's first status was that event). True when it
        landed (the caches hear of it), False when the plan is gone, being deleted, changed
        again or the API server refused (then the cycle tries again).

        A new plan's patch usually meets kopf's, which adds the same finalizer as it handles the
        plan's creation: the plan changed since the cache read it. Then the plan is read once
        more, and carries the finalizer already, or is given it on that copy: a cycle that left
        the new plan out waited for the next one, about half a second of a 1,000-node hand-over."""
        try:
            written = cluster.add_finalizer(self.kube, plan.raw, FINALIZER)
            if written is None and (fresh := cluster.read_plan(self.kube, plan.namespace, plan.name)):
                again = PlanBody.from_object(fresh)
                if again.uid != plan.uid or again.deleting:
                    written = None
                elif again.guarded:
                    written = fresh
                else:
                    written = cluster.add_finalizer(self.kube, fresh, FINALIZER)
        except ApiException as e:
            log.warning("%s: adding the finalizer failed: %s", plan.ref, api_error_message(e))
            return False
        if written is not None and self.on_status is not None:
            self.on_status(written)
        return written is not None

    def cleaned_up(self, plan: PlanBody) -> bool:
        """Has the plan's clean-up run? Then nothing is written for it again, whatever a cache
        fed by a watch other than kopf's still says of it (not yet being deleted)."""
        return plan.uid in self._cleaned

    def cleanup(self, obj: Mapping[str, Any]) -> Changes:
        """Remove everything the plan wrote (its finalizer keeps it until this succeeds)."""
        plan = PlanBody.from_object(obj)
        with self.lock:
            self._landed.pop(plan.uid, None)
            self._last_status.pop(plan.uid, None)
            self._verdicts.pop(plan.uid, None)
            self._rendered.pop(plan.uid, None)
            now = time.monotonic()
            self._cleaned = {u: t for u, t in self._cleaned.items() if now - t < CLEANED_KEPT}
            self._cleaned[plan.uid] = now
            in_use = reserve.priority_classes_in_use(cluster.list_plans(self.kube), plan.uid)
            observed = cluster.read_for_cleanup(self.kube, plan)
            writes = cleanup_writes(plan, observed, in_use)
            changes = Changes.of(perform(self.kube, writes, self.metrics, landed=self.on_written))
            self.metrics.plan_gone(plan.namespace, plan.name)
        log.info("%s: deleted: %s", plan.ref, changes.describe())
        return changes

    def remove_orphan_labels(self, found: Mapping[str, Sequence[str]]) -> list[str]:
        """Remove node label keys no plan holds (``found``: key -> nodes; a plan gone without its
        clean-up left them, :mod:`.cycle.sweep`), once a listing of the plans confirms that no plan
        holds them (a cache may lag). The keys removed; an API error leaves the rest for later."""
        try:
            held = {p.label_key for p in cluster.list_plans(self.kube)}
        except ApiException as e:
            log.warning("listing the plans before removing orphaned node labels: %s", api_error_message(e))
            return []
        removed = []
        for key, nodes in sorted(found.items()):
            if key in held:
                continue
            try:
                perform(self.kube, unlabel_writes(key, nodes), self.metrics, landed=self.on_written)
            except ApiException as e:
                log.warning("removing orphaned node label %s: %s", key, api_error_message(e))
                continue
            log.info(
                "removed node label %s from %d node(s): no plan holds it (its plan went without clean-up)",
                key, len(nodes),
            )  # fmt: skip
            removed.append(key)
        return removed


def previous_of(status: Mapping[str, Any]) -> Previous | None:
    """Where the plan's instances are now, from its own status (a hand-edited one: start afresh)."""
    allocations = status.get("allocations")
    if not allocations:
        return None
    try:
        return previous_placements(read_allocations(allocations, "status.allocations"))
    except InvalidInput as e:
        log.warning("status.allocations unreadable, planning from scratch: %s", e)
        return None
