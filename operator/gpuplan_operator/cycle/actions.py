"""The cycle's actions: allocate every plan together, then hand cards over in a safe order.

Notes
-----
*Allocate* (kube-batch's ``allocate`` and ``preempt`` in one proven step) builds one snapshot of
the cluster with no participating plan's cards counted, and asks :func:`planner.plan_together`
for every plan at once: admission by priority, growth of elastic requests by priority, score,
fewest moves. Plans that do not take part keep what they hold: a plan whose spec is invalid, a
dry run, a plan being deleted. Their applied cards are reserved in the snapshot.

*Hand over*: each plan's result is rendered and its writes computed (pure, :mod:`..writes`)
first. Then every plan's Deployments that leave go, for all plans, before any plan writes the
rest: cards passing from one plan to another are released before the instances that take them
are created, so no node is asked for more cards than it has. Then, plan by plan in admission
order, labels, classes, the ConfigMap, claim templates and Deployments, and the status.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuplan_operator import reserve
from gpuplan_operator.body import PlanBody
from gpuplan_operator.cluster import ClusterRead
from gpuplan_operator.cycle.order import created
from gpuplan_operator.service import Outcome, PlanService, Prepared, previous_of
from planner import PlanSpec, Shared, Snapshot, plan_together, snapshot


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
    return snapshot(
        {**read.nodes, "items": list(nodes)},
        reserve.foreign_pods(read.pods, reserve.plan_keys(read.plans), reserve.plan_owners(read.plans)),
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
) -> dict[str, Outcome]:
    """Render, compute every plan's writes, perform the ones that free cards for all plans first,
    then the rest plan by plan, those that only give cards up first; each plan's outcome by uid."""
    outcomes: dict[str, Outcome] = {}
    rendered = []
    for t, answer in zip(taking, answers, strict=True):
        result = applied_result(answer)
        desired = service.render(t.plan, t.spec, result)
        if isinstance(desired, Outcome):
            outcomes[t.plan.uid] = desired
            continue
        rendered.append((t, answer, result, desired))
    wanted = {pc["metadata"]["name"] for *_, d in rendered for pc in d.priority_classes}
    inside = {t.plan.uid for t in taking}
    in_use = wanted | reserve.priority_classes_in_use([p for p in read.plans if p.uid not in inside], "")
    prepared: list[Prepared] = []
    for t, answer, result, desired in rendered:
        got = service.prepare(t.plan, t.spec, result, nodes, in_use, desired, shared=answer)
        if isinstance(got, Outcome):
            outcomes[t.plan.uid] = got
        else:
            prepared.append(got)
    for p in prepared:
        if (failed := service.hand_over(p)) is not None:
            outcomes[p.plan.uid] = failed
    for p in sorted(prepared, key=gained):  # plans that give cards up say so before others take them
        if p.plan.uid not in outcomes:
            outcomes[p.plan.uid] = service.complete(p)
    return outcomes


def gained(prepared: Prepared) -> int:
    """Units the plan takes on nodes where it held fewer (0 for a plan that only gives up).

    Statuses are written in this order, so that at every moment the plans' ``applied`` units,
    read together, fit the nodes: the cards a plan takes are released in the status of the plan
    that held them first (what the Deployments' order does for the pods)."""
    names = {r.name: r.resource_name for r in prepared.spec.resources}
    new = reserve.applied_units(prepared.result.allocations, names, dict(prepared.result.pod_cpu))
    old = (prepared.plan.status.get("applied") or {}).get("units") or {}
    return sum(
        max(0, n - int((old.get(node) or {}).get(r, 0))) for node, rs in new.items() for r, n in rs.items()
    )
