"""The cycle's actions: allocate every plan together, then hand cards over in a safe order.

Notes
-----
*Allocate* (kube-batch's ``allocate`` and ``preempt`` in one proven step) builds one snapshot of
the cluster with no participating plan's cards counted, and asks :func:`planner.plan_together`
for every plan at once: admission by priority, growth of elastic requests by priority, score,
fewest moves. Plans that do not take part keep what they hold: a plan whose spec is invalid, a
dry run, a plan being deleted. Their applied cards are reserved in the snapshot. The pods of a
plan that is gone hold their cards while some plan deploys without the gang gate (``gang:
none``): its pods would be created onto cards still taken. Otherwise they are planned onto: the
new pods stay gated until the leaving ones are gone (:mod:`..release`), and start moments after
(:func:`~gpuplan_operator.reserve.leaving_pods_hold`).

*Hand over*: each plan's result is rendered and its writes computed (pure, :mod:`..writes`)
first; a plan whose status already says its answer is left alone, and one whose outputs are
in the cluster as this process last wrote them (only its score or message changed: a cordon
elsewhere changes every plan's score) has only its status written. When it places every
instance where that apply did, from the same spec, it is not even rendered again: what the apply
rendered is kept (:meth:`~gpuplan_operator.service.PlanService.landed_unrendered`). Then every plan's
Deployments that leave go, for all plans side by side, before any plan writes the rest: cards
passing from one plan to another are released before the instances that take them are created,
so no node is asked for more cards than it has (the new priority classes and claim templates go
with them: they take no cards). Then labels, the ConfigMap and Deployments, plans side by side
(a plan whose drops failed writes nothing more), and the statuses in :func:`release_rounds` (side by side
where no plan waits on another). A node passing from one plan to another is patched once: the
taker's label patch removes the giver's key too (:func:`~gpuplan_operator.writes.carry_unlabels`);
the giver's other removals go last, after every status.

Before those writes the cycle is told every plan's placement as it will be (``placing``), and
while a gang plan's Deployments are written, and then the statuses, the cycle lifts the gates of
the pods made so far (:mod:`..apply`'s ``meanwhile``), against those placements rather than the
statuses not yet written: creating a plan's pods and scheduling them overlap instead of one
waiting for the other. The gates still open only once the whole plan fits, and the ledger they are decided on
counts every pod bound to a node, Terminating ones too: cards another plan gives up are taken
only once its leaving pods are gone, whichever status lands first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from gpuplan_operator import reserve
from gpuplan_operator.apply import Meanwhile, in_context
from gpuplan_operator.body import PlanBody
from gpuplan_operator.cluster import ClusterRead
from gpuplan_operator.cycle.order import created
from gpuplan_operator.service import Outcome, PlanService, Prepared, previous_of
from gpuplan_operator.status import Phase
from gpuplan_operator.writes import carry_unlabels
from planner import Desired, PlanSpec, Shared, Snapshot, plan_together, snapshot

_T = TypeVar("_T")
_R = TypeVar("_R")

PARALLEL_READS = 8  # plans whose objects are read at once (the connection pool's size)
PARALLEL_PLANS = 3  # plans written at once (each sends up to 8 writes at a time itself)


@dataclass(frozen=True)
class Taking:
    """One plan taking part in the allocation."""

    plan: PlanBody
    spec: PlanSpec


def joint_snapshot(
    read: ClusterRead, nodes: Sequence[Mapping[str, Any]], taking: Sequence[Taking]
) -> Snapshot:
    """The cluster's free cards with no participating plan's instances counted; what the plans
    that do not take part hold is reserved. Raises ``InvalidInput`` (e.g. no nodes at all)."""
    inside = {t.plan.uid for t in taking}
    outside = [p for p in read.plans if p.uid not in inside]
    owners = reserve.owners_of_deployed_pods(read.plans)
    return snapshot(
        {**read.nodes, "items": list(nodes)},
        reserve.foreign_pods(read.pods, reserve.plan_keys(read.plans), owners),
        reserve.reserved_by_others(outside, ""),
        slices_doc=read.slices,
        claims_doc=reserve.foreign_claims(read.claims),
        reserved_devices=reserve.devices_reserved_by_others(outside, ""),
        topology_doc=read.topologies,
        own_zones=reserve.zones_reserved_by_others([t.plan for t in taking], ""),
        reserved_zones=reserve.zones_reserved_by_others(outside, ""),
    )


def allocate(service: PlanService, taking: Sequence[Taking], snap: Snapshot) -> list[Shared]:
    """Every taking plan's answer, in the order of ``taking``."""
    oldest = sorted(range(len(taking)), key=lambda i: (created(taking[i].plan), taking[i].plan.ref))
    started = time.perf_counter()
    answers = plan_together(
        [taking[i].spec for i in oldest],
        snap,
        [previous_of(taking[i].plan.status) for i in oldest],
        seconds=service.options.plan_seconds,
        polish_seconds=service.options.polish_seconds,
    )
    took = time.perf_counter() - started
    out: list[Shared | None] = [None] * len(taking)
    for i, answer in zip(oldest, answers, strict=True):
        out[i] = answer
        service.metrics.planned(took / max(1, len(taking)), answer.result)
    return [a for a in out if a is not None]


def unchanged(plan: PlanBody, answer: Shared) -> bool:
    """Does the plan's status already say exactly this answer, for its current spec? Then the
    cluster holds it (the apply that wrote that status wrote the rest first) and nothing is read
    or written for it. A plan the operator has not applied since it started is always checked
    against the cluster (``verify``): a crash may have come between its writes and its status."""
    status = plan.status
    if status.get("observedGeneration") != plan.generation or status.get("admission") != answer.reason.value:
        return False
    if status.get("phase") != (Phase.APPLIED if answer.admitted else Phase.INFEASIBLE):
        return False
    doc = applied_result(answer).to_json()
    same = all(status.get(k) == doc[k] for k in ("allocations", "score", "optimal"))
    return same and (status.get("elastic") or []) == [g.to_json() for g in answer.grants]


def applied_result(answer: Shared) -> Any:
    """What is written for a plan: its placement when admitted, else the instances it keeps."""
    if answer.admitted:
        return answer.result
    return replace(answer.result, feasible=True, allocations=answer.kept, conflicts=(), partial=())


def hand_over(
    service: PlanService,
    taking: Sequence[Taking],
    answers: Sequence[Shared],
    nodes: list[dict[str, Any]],
    read: ClusterRead,
    verify: Collection[str] = (),
    stages: dict[str, float] | None = None,
    placing: Callable[[dict[str, dict[str, Any]]], None] | None = None,
) -> dict[str, Outcome]:
    """Render, compute every plan's writes, perform the ones that free cards for all plans first,
    then the rest of every plan's (side by side), then the statuses in :func:`release_rounds`;
    each plan's outcome by uid. ``stages`` gets the seconds of each step, for the cycle's log;
    ``placing`` hears, before the rest of the writes, ``status.applied`` as it will be for every
    plan written (``namespace/name`` -> applied)."""
    stages = {} if stages is None else stages
    begun = time.perf_counter()
    outcomes: dict[str, Outcome] = {}
    took: dict[str, float] = {}  # seconds each plan's rendering took, by uid (for its log line)
    rendered = []
    landed: list[Prepared] = []  # outputs as they are in the cluster: only the status changes
    for t, answer in zip(taking, answers, strict=True):
        if not answer.admitted and len(taking) == 1:  # alone: nobody needs its cards, it keeps all
            outcomes[t.plan.uid] = service.not_planned(t.plan, answer.result)
            continue
        if t.plan.uid not in verify and unchanged(t.plan, answer):
            outcomes[t.plan.uid] = Outcome(Phase(t.plan.status["phase"]), str(t.plan.status.get("message")))
            continue
        result = applied_result(answer)
        if t.plan.uid not in verify and (kept := service.landed_unrendered(t.plan, t.spec, result, answer)):
            landed.append(kept)  # placed as its last apply placed it: rendered then, not again
            continue
        started = time.perf_counter()
        desired = service.render(t.plan, t.spec, result)
        took[t.plan.uid] = time.perf_counter() - started
        if isinstance(desired, Outcome):
            outcomes[t.plan.uid] = desired
            continue
        if t.plan.uid in verify:  # not written by this process yet: compared with the cluster
            same = None
        else:
            same = service.landed_outputs(t.plan, t.spec, result, desired, answer)
        if same is not None:
            landed.append(same)
            continue
        rendered.append((t, answer, result, desired))
    stages["render"] = time.perf_counter() - begun
    wanted = {pc["metadata"]["name"] for *_, d in rendered for pc in d.priority_classes}
    written = {t.plan.uid for t, *_ in rendered}  # the others keep the classes their status lists
    in_use = wanted | reserve.priority_classes_in_use([p for p in read.plans if p.uid not in written], "")
    prepared: list[Prepared] = []

    def prepare(item: tuple[Taking, Shared, Any, Desired]) -> Prepared | Outcome:
        t, answer, result, desired = item
        return service.prepare(t.plan, t.spec, result, nodes, in_use, desired, shared=answer)

    prepare_one = alone(service, lambda item: item[0].plan, prepare)
    with ThreadPoolExecutor(max_workers=PARALLEL_READS, thread_name_prefix="gpuplan-read") as pool:
        for (t, *_), got in zip(rendered, pool.map(in_context(prepare_one), rendered), strict=True):
            if isinstance(got, Outcome):
                outcomes[t.plan.uid] = got
            else:
                got.took = {"render": took[t.plan.uid], **got.took}
                prepared.append(got)
    prepared.extend(landed)
    stages["read and compare"] = time.perf_counter() - begun - stages["render"]
    writing = time.perf_counter()
    _side_by_side(alone(service, _plan_of, service.hand_over), prepared, outcomes, "gpuplan-drop")
    going = [p for p in prepared if p.plan.uid not in outcomes]  # a plan whose drops failed stops
    if placing is not None:
        placing({p.plan.ref: service.applied_of(p) for p in going})
    folded, carried = carry_unlabels([p.writes for p in going])
    for p, writes in zip(going, folded, strict=True):
        p.writes = writes
    write_rest = alone(service, _plan_of, lambda p: service.write_rest(p, clean_up=False))
    _side_by_side(write_rest, going, outcomes, "gpuplan-apply")
    for c in carried:  # the giver's removal landed with the taker's label, or is sent with its clean-up
        giver, taker = going[c.giver], going[c.taker]
        (giver.done if any(w is c.label for w in taker.done) else giver.later).append(c.unlabel)
    unfinished = set(outcomes)  # their writes did not all land: no clean-up after them

    def finish(item: tuple[Step, Prepared]) -> Outcome | None:
        step, p = item
        if step is Step.RELEASE:
            service.release(p, released(p))
            return None
        return service.complete(p)

    finish_one = alone(service, lambda item: item[1].plan, finish)
    stages["writes"] = time.perf_counter() - writing
    statuses = time.perf_counter()
    # the gates of pods made late in the writes (or waiting for cards a leaving pod frees
    # meanwhile) are lifted while the statuses are written too, not once they all landed: a
    # large plan's status patch takes the API server a second or two under a deploy's load
    gated = any(p.written and service.gated(p.spec) for p in prepared)
    awaiting = Meanwhile(service.meanwhile if gated else None)
    with ThreadPoolExecutor(max_workers=PARALLEL_PLANS, thread_name_prefix="gpuplan-status") as pool:
        for group in release_rounds(prepared):
            group = [(step, p) for step, p in group if p.plan.uid not in outcomes]
            for (_, p), outcome in zip(group, awaiting.map(pool, in_context(finish_one), group), strict=True):
                if outcome is not None:
                    outcomes[p.plan.uid] = outcome
    stages["statuses"] = time.perf_counter() - statuses
    # last, what no pod refers to any more (the node labels of a plan's leaving instances that no
    # taker's patch carried): sent beside another plan's new Deployments, these only slowed them
    cleaning = [p for p in prepared if p.later and p.plan.uid not in unfinished]
    if cleaning:
        started = time.perf_counter()
        _side_by_side(alone(service, _plan_of, service.clean_up), cleaning, outcomes, "gpuplan-clean")
        stages["clean-up"] = time.perf_counter() - started
    return outcomes


def _side_by_side(
    step: Callable[[Prepared], Outcome | None],
    prepared: Sequence[Prepared],
    outcomes: dict[str, Outcome],
    name: str,
) -> None:
    """``step`` for every plan, :data:`PARALLEL_PLANS` at a time; a plan's failure is its outcome."""
    with ThreadPoolExecutor(max_workers=PARALLEL_PLANS, thread_name_prefix=name) as pool:
        for p, failure in zip(prepared, pool.map(in_context(step), prepared), strict=True):
            if failure is not None:
                outcomes[p.plan.uid] = failure


def _plan_of(prepared: Prepared) -> PlanBody:
    return prepared.plan


def alone(
    service: PlanService, plan_of: Callable[[_T], PlanBody], step: Callable[[_T], _R]
) -> Callable[[_T], _R | Outcome]:
    """``step`` for one plan, whose API errors are that plan's outcome (``Error``, retried after a
    backoff), not the cycle's: a plan deleted while it was written answers 404 to its status,
    and every plan written beside it was once reported failed with that plan's error."""

    def run(item: _T) -> _R | Outcome:
        try:
            return step(item)
        except ApiException as e:
            return service.errored(plan_of(item), e)

    return run


def _delta(prepared: Prepared) -> dict[tuple[str, str], int]:
    """(node, resource) -> units the plan takes (> 0) or gives up (< 0) there."""
    new = prepared.units
    old = (prepared.plan.status.get("applied") or {}).get("units") or {}
    out: dict[tuple[str, str], int] = {}
    for node in set(new) | set(old):
        for r in set(new.get(node) or {}) | set(old.get(node) or {}):
            d = int((new.get(node) or {}).get(r, 0)) - int((old.get(node) or {}).get(r, 0))
            if d:
                out[(node, r)] = d
    return out


class Step(Enum):
    RELEASE = "release"  # write that the plan holds only what it keeps (min of before and after)
    COMPLETE = "complete"  # the plan's remaining writes and its status


def released(prepared: Prepared) -> dict[str, dict[str, int]]:
    """Per node, the units the plan holds between giving some up and taking others: the least of
    before and after (its leaving instances are gone, its new ones not written yet)."""
    new = prepared.units
    old = (prepared.plan.status.get("applied") or {}).get("units") or {}
    out: dict[str, dict[str, int]] = {}
    for node in sorted(set(new) & set(old)):
        kept = {
            r: min(int(n), int((new.get(node) or {}).get(r, 0)))
            for r, n in sorted((old.get(node) or {}).items())
            if r in (new.get(node) or {})
        }
        if any(kept.values()):
            out[node] = {r: n for r, n in kept.items() if n}
    return out


def release_rounds(prepared: Sequence[Prepared]) -> list[list[tuple[Step, Prepared]]]:
    """The order statuses are written in, as rounds whose statuses go side by side: a plan that
    gives units up on a node says so before any plan that takes units there, so that at every
    moment the plans' ``applied`` units, read together, fit the nodes (what the Deployments'
    order does for the pods). The plans of one round take nothing another plan still to write
    gives up, so they may land in any order (a cordon's re-plan: every moved plan in one round,
    their status patches at once, not one after another). Plans that wait on each other in a
    ring (two plans swapping nodes) are broken open: one of them first writes only what it keeps
    (:data:`Step.RELEASE`, a round of its own), which is true once its leaving Deployments are
    gone, and its whole status after the others. Plans whose units did not change (only a score
    or a message: after a cordon, every plan but the ones that moved) neither free nor take
    anything: they join the last round, where they share the API server with the fewest patches
    that say where cards went, and cost the cycle no round of their own (at 3,000 nodes a round
    of their own was half a second of the cordon's 3.5 s cycle)."""
    deltas = [_delta(p) for p in prepared]
    frees: list[set[tuple[str, str]]] = [{k for k, d in di.items() if d < 0} for di in deltas]
    takes: list[set[tuple[str, str]]] = [{k for k, d in di.items() if d > 0} for di in deltas]
    out: list[list[tuple[Step, Prepared]]] = []
    still = [j for j, di in enumerate(deltas) if not di]
    done: set[int] = set(still)
    freed: set[int] = set(still)  # plans whose releases are written (done, or released)
    while len(done) < len(prepared):
        waiting = [j for j in range(len(prepared)) if j not in done]
        ready = [
            j for j in waiting if not any(i not in freed and i != j and frees[i] & takes[j] for i in waiting)
        ]
        if ready:
            done.update(ready)
            freed.update(ready)
            out.append([(Step.COMPLETE, prepared[j]) for j in ready])
            continue
        j = next(j for j in waiting if j not in freed)
        freed.add(j)
        out.append([(Step.RELEASE, prepared[j])])
    if still and out:
        out[-1].extend((Step.COMPLETE, prepared[j]) for j in still)
    elif still:
        out.append([(Step.COMPLETE, prepared[j]) for j in still])
    return out
