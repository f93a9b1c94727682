"""One cycle: snapshot the caches once, plan every plan that needs it in admission order, write.

Notes
-----
The cycle holds the service's lock from the snapshot to the last status, so no deletion's
clean-up runs in the middle of it. It writes a plan only once it carries kopf's finalizer (given
first where kopf has not yet) and never after its clean-up ran: whatever it writes, a clean-up
removes.

It reads nothing from the API server to plan: the snapshot is
:meth:`~gpuplan_operator.cache.caches.ClusterCache.read`. Plans are visited in
:func:`~.order.admission_order`; each is planned against what the plans before it were just
given (their status goes into the cache as soon as it is written) and what the plans after it
hold now. A plan whose :class:`~.order.Inputs` did not change is neither planned nor written.

After the plans, the gang gates' release (:mod:`~gpuplan_operator.release`): from the same
snapshot's nodes and the pods cache (bound pods, Terminating ones, gated ones and released ones
on their way), the gated pods of a plan are released as they appear once every planned node has
the cards of all of the plan's pods there. A plan whose released pods were not scheduled in time
is re-planned by the next cycle. While a gang plan's Deployments are written, the gates of the
pods made so far are lifted too, against the placements the cycle is writing
(:meth:`Cycle.release_meanwhile`).

Then the readiness of applied plans whose pods changed (or which were not Ready)
is checked against the pods' cache. A failed plan (``Error``) is tried again after a backoff,
an ``Infeasible`` one every ``resync`` even when nothing it reads changed (what it misses may
be a pod outside every plan finishing).

Last, node labels of served plans that went without their clean-up (:mod:`.sweep`) are removed
once they have been orphaned for ``orphan_grace`` seconds.

Node health is the cycle's too: a node not Ready is planned as healthy within its grace and as
unschedulable after (:func:`~gpuplan_operator.watch.planning_view`); :attr:`Report.wake_in`
says when the next grace runs out, and the loop runs a cycle then.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpuplan_operator import reserve
from gpuplan_operator.apply import in_context
from gpuplan_operator.body import PlanBody
from gpuplan_operator.cache.caches import ClusterCache
from gpuplan_operator.cluster import ClusterRead
from gpuplan_operator.cycle.actions import (
    PARALLEL_PLANS,
    PARALLEL_READS,
    Taking,
    allocate,
    hand_over,
    joint_snapshot,
)
from gpuplan_operator.cycle.order import Inputs, admission_order, held_by_others
from gpuplan_operator.cycle.sweep import RESCAN_EVERY, Sweep, orphans
from gpuplan_operator.follow import backoff
from gpuplan_operator.gang import GangCode, is_gated
from gpuplan_operator.kube import api_error_message
from gpuplan_operator.metrics import Trigger
from gpuplan_operator.service import Outcome, PlanService
from gpuplan_operator.status import Phase
from gpuplan_operator.watch import down_since, is_down, planning_view, utcnow
from planner import InvalidInput

log = logging.getLogger("gpuplan_operator")

ROUND_EVERY = 1.0  # seconds between gate rounds during a cycle's writes, while pods are being made
ROUND_SOON = 0.2  # ... and after a round that left a plan waiting, once a pod has gone since
# a plan not Ready is checked again no sooner than this many times its last check took (at most
# the ready poll): its pods change many times a second while it comes up
CHECK_SPACING = 20.0


_TRIGGERS = {
    "new": Trigger.RESUMED,
    "spec": Trigger.SPEC_CHANGED,
    "cluster": Trigger.NODES_CHANGED,
    "plans": Trigger.PLANS_CHANGED,
    "retry": Trigger.RETRY,
    "gang": Trigger.GANG_TIMEOUT,
}


@dataclass
class Report:
    """What one cycle did, for the loop, the logs and the metrics."""

    planned: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    checked: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    cpu: float = 0.0  # CPU seconds of the whole process (every thread) while the cycle ran
    took: dict[str, float] = field(default_factory=dict)  # seconds of the stages inside planning
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
    pods: int = 0  # the stamp of its pods when readiness last looked (:meth:`Cycle._pods`)
    checked: float = -math.inf  # monotonic time its last readiness check ended ...
    check_took: float = 0.0  # ... and the seconds that check took


def _timed(check: Callable[[PlanBody], Outcome]) -> Callable[[PlanBody], tuple[Outcome, float]]:
    def run(plan: PlanBody) -> tuple[Outcome, float]:
        started = time.perf_counter()
        return check(plan), time.perf_counter() - started

    return run


class Cycle:
    """The operator's scheduling cycle over a :class:`ClusterCache` (one per operator)."""

    def __init__(self, service: PlanService, cache: ClusterCache, namespaces: Sequence[str] = ()) -> None:
        self.service = service
        self.cache = cache
        # with --namespace, only those namespaces' plans are this operator's; the others are
        # planned around (what they hold is reserved), never written
        self.namespaces = frozenset(namespaces)
        self.options = service.options
        self.memory: dict[str, _Memory] = {}
        self.replan: set[str] = set()  # uids the gang release asked to re-plan (timed out)
        service.pods_source = lambda plan: cache.plan_pods(plan.namespace, plan.labels)
        service.deployments_source = cache.namespace_deployments
        service.on_status = cache.assume_plan
        service.on_written = cache.assume_written
        service.meanwhile = self.release_meanwhile
        service.gates.on_lifted = cache.pods.assume
        self._meanwhile = threading.Lock()
        # namespace/name -> status.applied as this cycle is writing it (:meth:`placing`)
        self._placing: dict[str, dict[str, Any]] = {}
        # uid -> its pods' stamp taken with this cycle's snapshot, before any readiness check of
        # the cycle read them (:meth:`_record`)
        self._stamps: dict[str, int] = {}
        # uid -> failed attempts to give the plan its finalizer (:meth:`_guard`)
        self._unguarded: dict[str, int] = {}
        # the last round during the writes: when it ended, how many pods had gone from the
        # cache before it, and whether it left a plan waiting for cards (:meth:`_round_due`)
        self._round_at = -math.inf
        self._round_gone = 0
        self._round_waiting = False
        # node labels of served plans that are gone: when the nodes were last scanned, what was found
        self.sweep = Sweep(service.options.orphan_grace)
        self._scanned: tuple[float, dict[str, list[str]]] = (-math.inf, {})

    def _cluster_inputs(self, read: ClusterRead, report: Report) -> tuple[Any, ...]:
        """The snapshot's counters of changes that matter, which nodes are down past the grace, and
        the pods of plans that are gone (their cards come free as they go)."""
        nodes = read.nodes["items"]
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
        owners = reserve.owners_of_deployed_pods(read.plans)
        left = reserve.orphans(read.pods, owners) if owners is not None else frozenset()
        # the counts taken with the snapshot, not the stores' counts now: a node changing while
        # this cycle runs must look new to the next one
        return (*read.changes, tuple(sorted(down)), left)

    def run(self, called: float | None = None) -> Report:
        """One cycle (blocking: run it in a worker thread). ``called``: the monotonic time of the
        first change that called for it (its log line says how long that change waited)."""
        report = Report()
        waited = time.monotonic() - called if called is not None else None
        started = time.perf_counter()
        cpu = time.process_time()
        self._placing = {}
        with self.service.lock:
            locked = time.perf_counter()
            read = self.cache.read()
            self._stamps = {p.uid: self._pods(p) for p in read.plans}
            at = utcnow()
            snapped = time.perf_counter()
            cluster = self._cluster_inputs(read, report)
            present = {p.uid for p in read.plans}
            for uid in set(self.memory) - present:
                del self.memory[uid]
            for uid in set(self._unguarded) - present:
                del self._unguarded[uid]
            order = [p for p in admission_order(read.plans) if self.serves(p) and self._writable(p)]
            if any(not p.guarded for p in order):
                order = self._guard(order, report)
            due = self._due(order, cluster, read, report)
            taking, alone = self._parse([p for p in order if p.uid in due], report)
            report.took["inputs"] = time.perf_counter() - snapped
            if taking:  # the nodes as planning sees them (health within the grace) only then:
                # a cycle run for pods alone (thousands during a deploy) plans nothing
                viewing = time.perf_counter()
                nodes = [planning_view(n, at, self.options.node_grace) for n in read.nodes["items"]]
                report.took["nodes"] = time.perf_counter() - viewing
                self._allocate(taking, due, read, nodes, report)
            for plan in alone:  # dry runs: planned around everything the others hold, as before
                outcome = self.service.reconcile_with(plan, read, _TRIGGERS[due[plan.uid]])
                self._record(plan, outcome, report)
            self._settle({p.uid: p for p in order if p.uid in due}, cluster)
            planned = time.perf_counter()
            fresh = {p.uid: self.cache.plan(p.namespace, p.name) or p for p in read.plans}
            self._release(read, [p for p in fresh.values() if self.serves(p)], report)
            released = time.perf_counter()
            report.checked = self._readiness(fresh, set(report.planned), report)
            self._coming_up(fresh, report)
            checked = time.perf_counter()
            self._sweep(read, report)
            done = time.perf_counter()
        planner = report.took.get("plan", 0.0)
        report.stages = {
            "lock": locked - started,
            "snapshot": snapped - locked,
            "plan": planner,
            "write": planned - snapped - planner,
            "release": released - planned,
            "readiness": checked - released,
            "sweep": done - checked,
        }
        report.cpu = time.process_time() - cpu
        self.service.metrics.cycle(report.stages, len(report.planned), report.cpu)
        if report.planned:
            took = ", ".join(f"{k} {v:.2f}s" for k, v in report.stages.items())
            inside = ", ".join(f"{k} {v:.2f}s" for k, v in report.took.items() if k != "plan")
            after = f" {waited:.2f}s after the change that called for it" if waited is not None else ""
            log.info(
                "cycle: planned %s%s (%s; the write's: %s; the process used %.2f CPU s meanwhile)",
                ", ".join(report.planned), after, took, inside, report.cpu,
            )  # fmt: skip
        return report

    def _due(
        self, order: list[PlanBody], cluster: tuple[Any, ...], read: ClusterRead, report: Report
    ) -> dict[str, str]:
        """uid -> why, of the plans whose spec or inputs changed (or whose retry is due). When
        one is due, every plan of the cluster is planned with it: one plan's change may move
        cards between all of them (a plan that did not change is not written)."""
        why: dict[str, str] = {}
        for plan in order:
            memory = self.memory.setdefault(plan.uid, _Memory())
            inputs = Inputs(plan.generation, cluster, held_by_others(read.plans, plan.uid))
            changed = inputs.why_changed(memory.inputs)
            if changed is None and plan.uid in self.replan:
                changed = "gang"
            if changed is None and memory.phase in (Phase.ERROR, Phase.INFEASIBLE):
                if time.monotonic() >= memory.retry_at:
                    changed = "retry"
                else:
                    report.soon(memory.retry_at - time.monotonic())
            if changed is not None:
                why[plan.uid] = changed
        self.replan.clear()
        if not why:
            return why
        return {p.uid: why.get(p.uid, "plans") for p in order}

    def _parse(self, plans: list[PlanBody], report: Report) -> tuple[list[Taking], list[PlanBody]]:
        """Plans that take part in the allocation, and dry runs (planned alone); invalid ones get
        their status here and hold what they held."""
        taking, alone = [], []
        for plan in plans:
            spec = self.service.parse(plan)
            if isinstance(spec, Outcome):  # Invalid: planned again when its spec changes
                self._record(plan, spec, report)
                continue
            if spec.dry_run:
                alone.append(plan)
            else:
                taking.append(Taking(plan, spec))
        return taking, alone

    def _allocate(
        self,
        taking: list[Taking],
        due: Mapping[str, str],
        read: ClusterRead,
        nodes: list[dict[str, Any]],
        report: Report,
    ) -> None:
        started = time.perf_counter()
        for t in taking:
            self.service.metrics.replanning(_TRIGGERS[due[t.plan.uid]])
        try:
            snap = joint_snapshot(read, nodes, taking)
        except InvalidInput as e:  # the cluster, not the specs: e.g. no nodes at all
            for t in taking:
                self.service.metrics.plan_duration.observe(time.perf_counter() - started)
                outcome = self.service.infeasible(t.plan, f"cluster snapshot: {e}")
                self._record(t.plan, outcome, report)
            return
        planning = time.perf_counter()
        report.took["planner snapshot"] = planning - started
        answers = allocate(self.service, taking, snap)
        handing = time.perf_counter()
        report.took["plan"] = report.took.get("plan", 0.0) + handing - planning
        stages: dict[str, float] = {}
        try:
            verify = {t.plan.uid for t in taking if due[t.plan.uid] in ("new", "retry")}
            outcomes = hand_over(self.service, taking, answers, nodes, read, verify, stages, self.placing)
            report.took.update(stages)
        except ApiException as e:  # e.g. reading a plan's objects failed: every plan again, later
            outcomes = {t.plan.uid: self.service.errored(t.plan, e) for t in taking}
        finally:
            self._placing = {}  # the statuses say it now (or the next cycle plans again)
        report.took["hand over"] = time.perf_counter() - handing
        took = time.perf_counter() - started
        for t in taking:  # every plan's reconcile took the whole allocation and its writes
            self.service.metrics.plan_duration.observe(took)
            self._record(t.plan, outcomes[t.plan.uid], report)

    def _record(self, plan: PlanBody, outcome: Outcome, report: Report) -> None:
        report.planned.append(plan.ref)
        if outcome.moved:
            report.moved.append(plan.ref)
        memory = self.memory.setdefault(plan.uid, _Memory())
        self._remember(memory, outcome, report)
        # the stamp from before the apply's readiness check read the pods, not from after it: a
        # pod that changed in between (a Ready plan's pod failing) must make the next cycle look
        memory.pods = self._stamps.get(plan.uid, 0)

    def _settle(self, planned: Mapping[str, PlanBody], cluster: tuple[Any, ...]) -> None:
        """What each plan planned in this cycle was planned from: its spec's generation as the
        snapshot had it (an edit whose watch event came during the cycle was planned by no one,
        and its wake-up must find it new), the snapshot's cluster, and what the others hold as
        it stands after the cycle (their statuses, just written). With nothing new, the next
        cycle plans none of them."""
        now = [self.cache.plan(p.namespace, p.name) or p for p in planned.values()]
        everyone = {p.uid: p for p in [*self._all(), *now]}
        for plan in planned.values():
            memory = self.memory.get(plan.uid)
            if memory is None:
                continue
            memory.inputs = Inputs(plan.generation, cluster, held_by_others(everyone.values(), plan.uid))

    def _all(self) -> list[PlanBody]:
        return [PlanBody.from_object(o) for o in self.cache.plans.items()]

    def _remember(self, memory: _Memory, outcome: Outcome, report: Report) -> None:
        memory.phase = outcome.phase
        memory.ready = outcome.ready
        if outcome.phase is Phase.ERROR:
            memory.failures += 1
            memory.retry_at = time.monotonic() + backoff(memory.failures)
            report.soon(memory.retry_at - time.monotonic())
        elif outcome.phase is Phase.INFEASIBLE:
            memory.failures = 0
            memory.retry_at = time.monotonic() + self.options.resync
            report.soon(self.options.resync)
        else:
            memory.failures = 0

    def serves(self, plan: PlanBody) -> bool:
        return self._serves_namespace(plan.namespace)

    def _writable(self, plan: PlanBody) -> bool:
        """May the cycle write the plan? Not once its clean-up has run (this cache may not have
        heard of the deletion yet); it holds what its status says until it is gone."""
        return not self.service.cleaned_up(plan)

    def _guard(self, order: list[PlanBody], report: Report) -> list[PlanBody]:
        """The plans of ``order`` that carry the finalizer, given it where they do not yet: a
        plan deleted without it goes at once, and no clean-up would remove what a cycle wrote
        for it. One that could not be given it is left for a cycle soon after."""
        bare = [p for p in order if not p.guarded]
        with ThreadPoolExecutor(max_workers=PARALLEL_READS, thread_name_prefix="gpuplan-guard") as pool:
            landed = dict(zip([p.uid for p in bare], pool.map(self.service.guard, bare), strict=True))
        out = []
        for plan in order:
            if plan.guarded:
                out.append(plan)
            elif landed[plan.uid]:
                self._unguarded.pop(plan.uid, None)
                out.append(self.cache.plan(plan.namespace, plan.name) or plan)
            else:
                failures = self._unguarded[plan.uid] = self._unguarded.get(plan.uid, 0) + 1
                report.soon(backoff(failures))
        return out

    def _sweep(self, read: ClusterRead, report: Report) -> None:
        """Node labels of served plans that went without their clean-up (:mod:`.sweep`): the
        nodes are scanned in a cycle that planned (a plan went, the operator started) and at most
        every :data:`~.sweep.RESCAN_EVERY` seconds otherwise (a scan of 3,000 nodes takes about
        10 ms, and a deploy runs hundreds of cycles); a key orphaned for the grace is removed."""
        now = time.monotonic()
        at, found = self._scanned
        if report.planned or now - at >= RESCAN_EVERY:
            found = orphans(read.nodes["items"], {p.label_key for p in read.plans}, self._serves_namespace)
            self._scanned = (now, found)
        due, wait = self.sweep.due(found, now)
        if wait is not None:
            report.soon(wait)
        if due and self.service.remove_orphan_labels({k: found[k] for k in due}):
            self._scanned = (-math.inf, {})  # the next cycle sees the nodes as they are now

    def _serves_namespace(self, namespace: str | None) -> bool:
        """``--namespace`` takes names and globs (``team-*``), as kopf's own watches do."""
        return not self.namespaces or any(fnmatchcase(str(namespace), n) for n in self.namespaces)

    def _pods(self, plan: PlanBody) -> int:
        """Where the plan's pods stand in the pods cache (:meth:`ClusterCache.plan_pods_stamp`): the
        same number, none of them changed. A stamp, not a fingerprint of the pods: during a
        deploy every cycle re-checks the plan (it is not Ready), and reading its thousands of
        pods for a fingerprint each time cost more than the check."""
        return self.cache.plan_pods_stamp(plan.namespace, plan.labels) if plan.deploy else 0

    def _gang_pods(self) -> list[dict[str, Any]]:
        """The pods a gang round reads: every pod the pods cache holds, less other namespaces'
        gated ones (with ``--namespace``, their gates are another operator's to lift)."""
        pods = self.cache.gang_pods()
        if self.namespaces:
            mine = self._serves_namespace
            pods = [p for p in pods if not is_gated(p) or mine(p["metadata"].get("namespace"))]
        return pods

    def _release(self, read: ClusterRead, plans: list[PlanBody], report: Report) -> None:
        """The gang gates' release: every plan's gated pods, from the caches the cycle read (the
        pods as they are now: a pod bound since the snapshot holds its cards)."""
        pods = self._gang_pods()
        try:
            slices, claims = (read.slices or {}).get("items") or [], (read.claims or {}).get("items") or []
            # the nodes as they are now: a plan applied in this cycle has just labelled its own
            nodes = self.cache.nodes.items()
            decisions = self.service.release_gates(nodes, pods, plans, slices, claims)
        except ApiException as e:  # the API server is away: the next cycle decides again
            log.warning("releasing gated pods failed (%s); again in a moment", api_error_message(e))
            report.soon(self.options.ready_poll)
            return
        by_ref = {p.ref: p for p in plans}
        for decision in decisions:
            plan = by_ref.get(decision.plan)
            late = decision.code is GangCode.TIMED_OUT or decision.stuck
            timed_out = late and plan is not None and not plan.deleting
            if timed_out and plan is not None and self.service.gang_timed_out(plan, decision):
                self.replan.add(plan.uid)
                report.soon(0.0)
        if self.service.gates.due_in is not None:
            report.soon(self.service.gates.due_in)

    def placing(self, applied: dict[str, dict[str, Any]]) -> None:
        """What this cycle is about to write (``namespace/name`` -> ``status.applied`` as it will
        be), told by the hand-over before the plans' Deployments: the gate rounds during the
        writes decide against it, not against statuses written only after them."""
        self._placing = applied

    def release_meanwhile(self) -> None:
        """While a gang plan writes its Deployments (from an apply thread; the cycle holds the
        lock): lift the gates of the pods made so far, of every plan, each once all of it fits.
        The plans this cycle writes are decided on the placements it gives them
        (:meth:`placing`), the others on their statuses; every pod bound to a node holds its
        cards in the ledger, Terminating ones too, so cards another plan gives up are taken only
        once its leaving pods are gone. One such round at a time (plans written side by side
        take turns: a round decides for all of them); a failure waits for the cycle's own round."""
        if not self._meanwhile.acquire(blocking=False):
            return
        try:
            gone = self.cache.pods.removed
            if self._round_due(gone):
                self._round(gone)
        finally:
            self._meanwhile.release()

    def _round(self, gone: int) -> None:
        try:
            plans = [p for p in self._all() if self.serves(p)]  # as the cycle's own round
            slices, claims = self.cache.slices.items(), self.cache.claims.items()
            nodes = self.cache.nodes.items()
            decisions = self.service.gates.decide_and_release(
                nodes, self._gang_pods(), plans, slices, claims, placing=self._placing
            )
            self._round_gone = gone
            self._round_waiting = any(d.code is GangCode.WAITING for d in decisions)
        except Exception as e:  # the cycle's round after the writes decides again
            log.warning("lifting gates during the writes failed (%s); after them instead", e)
        finally:
            self._round_at = time.monotonic()

    def _round_due(self, gone: int) -> bool:
        """Is a round during the writes due? Every :data:`ROUND_EVERY` seconds while pods are being
        made; and :data:`ROUND_SOON` after the last one when it left a plan waiting for cards and a
        pod has gone from the cache since (a leaving instance of a hand-over: the cards it held
        are free now, and the plan waiting for them starts at once, not up to a second later)."""
        since = time.monotonic() - self._round_at
        if since >= ROUND_EVERY:
            return True
        return self._round_waiting and gone != self._round_gone and since >= ROUND_SOON

    def _readiness(self, plans: Mapping[str, PlanBody], planned: set[str], report: Report) -> int:
        """Re-check ``Ready`` of applied plans whose pods changed, or that were not Ready (a plan
        applied in this cycle had its readiness checked by the apply). The plans' checks go side
        by side: each may write its status, which for a plan of thousands of pods takes the API
        server most of a second at 3,000 nodes, and a cordon arriving meanwhile waits for the
        cycle to end (three plans one after another held one back for 1.9 s)."""
        due: list[tuple[_Memory, PlanBody, int]] = []
        for uid, plan in plans.items():
            memory = self.memory.get(uid)
            if (
                plan.deleting
                or not self._writable(plan)
                or memory is None
                or memory.phase is not Phase.APPLIED
            ):
                continue
            pods = self._pods(plan)
            if plan.ref in planned or (memory.ready and pods == memory.pods):
                if not memory.ready:
                    report.soon(self.options.ready_poll)
                continue
            if not memory.ready and (wait := self._check_wait(memory)) > 0:
                report.soon(wait)  # coming up: checked once its spacing has passed
                continue
            due.append((memory, plan, pods))
        if not due:
            return 0
        check = in_context(_timed(self.service.check_readiness))
        with ThreadPoolExecutor(max_workers=PARALLEL_PLANS, thread_name_prefix="gpuplan-ready") as pool:
            outcomes = list(pool.map(check, [plan for _, plan, _ in due]))
        for (memory, _, pods), (outcome, took) in zip(due, outcomes, strict=True):
            memory.ready = outcome.ready
            memory.pods = pods
            memory.checked, memory.check_took = time.monotonic(), took
            if not outcome.ready:
                report.soon(self.options.ready_poll)
        return len(due)

    def _coming_up(self, plans: Mapping[str, PlanBody], report: Report) -> None:
        """Tell the pods' cache which plans are coming up (applied, not Ready): their pods'
        changes wake no cycle, the checks' own timer (:meth:`_readiness`) comes back for them
        within the ready poll. A plan that leaves the set (found Ready) and whose pods changed
        since it was checked may have had that change told as quiet: the next cycle runs at once."""
        coming: list[PlanBody] = []
        others: list[tuple[_Memory, PlanBody]] = []
        for uid, plan in plans.items():
            memory = self.memory.get(uid)
            if memory is None or memory.phase is not Phase.APPLIED or not plan.deploy:
                continue
            if not memory.ready and not plan.deleting and self._writable(plan):
                coming.append(plan)
            else:
                others.append((memory, plan))
        was, self.cache.coming_up = self.cache.coming_up, frozenset(reserve.plan_owners(coming))
        leaving = [(memory, plan) for memory, plan in others if reserve.plan_owners([plan]) & was]
        if any(self._pods(plan) != memory.pods for memory, plan in leaving):  # after the update
            report.soon(0.0)

    def _check_wait(self, memory: _Memory) -> float:
        """Seconds until a plan that is not Ready may be checked again: :data:`CHECK_SPACING`
        times its last check's cost after that check, at most the ready poll. A plan of 2,480
        pods coming up saw a pod change before nearly every cycle, about two a second, and its
        checks were most of the operator's CPU in the deploy; spaced so, they take at most a
        twentieth of a core, and Ready is told at most that much later."""
        spacing = min(self.options.ready_poll, CHECK_SPACING * memory.check_took)
        return memory.checked + spacing - time.monotonic()
