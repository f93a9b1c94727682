"""Plan several plans on one cluster: the entry, :func:`plan_together`.

Notes
-----
What counts, in order (section 6): admission by priority, growth by priority, total score, then
the single plan's tie-breaks and fewest moves. :mod:`planner.share.admission` decides who runs;
per pool, :mod:`planner.share.growth` chooses every admitted request's count and split and places
them; each plan's :class:`~planner.model.result.PlanResult` is then built from that placement, or,
for a plan whose instances need more than counting (GPUs known one by one, NUMA zones, CPU sized
per pod), by the single-plan planner on the cluster with the other plans' cards taken, keeping
the counts and nodes the joint search chose.

A single plan with fixed counts is the case of one and is planned exactly as
:func:`planner.planning.plan` plans it. ``optimal`` is true for a plan only when admission, every
stage of growth and its own placement were proven.

Nothing is taken without a reason: a plan that is not admitted keeps the instances it runs on
cards that no admitted plan is planned on (``kept``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from planner.base.codes import ConflictKind, Method, SolveStatus
from planner.model.options import Item, TypeProblem, build_item
from planner.model.result import Allocation, Placement, PlanResult, TypeStats
from planner.model.result import Previous as PlanPrevious
from planner.model.spec import PlanSpec, Request, ResourceKind, Snapshot
from planner.node.pods import concerned, cpu_by_node, cpu_warnings, layout
from planner.planning import allocations_of, plan
from planner.search.outcome import Outcome, Progress
from planner.search.place import NodeCounts, greedy_place
from planner.share.admission import Verdict, admit, fits
from planner.share.growth import Grown, grow
from planner.share.outcome import Admission, BelowMax, Grant, Shared, plan_name
from planner.share.pools import Entry, Pools, build_pools, reservations

GRANT_SECONDS = 0.2  # at most this long to tell "held by other plans" from "no room", per request


def order_of(specs: Sequence[PlanSpec], previous: Sequence[PlanPrevious | None]) -> list[int]:
    """Admission order: higher priority, then holding an applied placement, then input order."""
    return sorted(range(len(specs)), key=lambda p: (-specs[p].priority, previous[p] is None, p))


def plan_together(
    specs: Sequence[PlanSpec],
    snap: Snapshot,
    previous: Sequence[PlanPrevious | None] | None = None,
    *,
    seconds: float = 60.0,
    workers: int = 1,
    polish_seconds: float = 0.5,
    progress: Progress | None = None,
) -> list[Shared]:
    """One answer per plan, in input order.

    ``specs``: the plans, oldest first. ``snap``: the cluster's free cards with no plan's
    instances counted. ``previous``: per plan, the placement it holds (None: it holds none).
    """
    prev = list(previous) if previous is not None else [None] * len(specs)
    if len(prev) != len(specs):
        raise ValueError("one previous placement (or None) per plan")
    if len(specs) == 1 and not any(r.elastic for r in specs[0].requests):
        result = plan(
            specs[0], snap, seconds=seconds, workers=workers, previous=prev[0],
            polish_seconds=polish_seconds, progress=progress,
        )  # fmt: skip
        return [_alone(specs[0], result)]
    deadline = time.monotonic() + seconds
    priorities = sorted({s.priority for s in specs}, reverse=True)
    levels = [priorities.index(s.priority) for s in specs]
    order = order_of(specs, prev)
    pools = build_pools(specs, snap, prev, levels)
    if pools.entangled:
        return _one_by_one(specs, snap, prev, order, deadline, workers)
    everyone = {p: Verdict(Admission.ADMITTED) for p in range(len(specs))}
    grown = _grow_all(pools, set(everyone), deadline, workers, fast_only=True)
    if grown is None:
        verdicts = admit(pools, order, (deadline - time.monotonic()) / 3, workers)
        admitted = {p for p, v in verdicts.items() if v.reason is Admission.ADMITTED}
        grown = _grow_all(pools, admitted, deadline, workers, fast_only=False)
        assert grown is not None
    else:
        verdicts = everyone
    return _answers(specs, snap, prev, order, pools, verdicts, grown, deadline, workers)


def _alone(spec: PlanSpec, result: PlanResult) -> Shared:
    if result.feasible:
        return Shared(spec, True, Admission.ADMITTED, result)
    timed_out = any(c.kind is ConflictKind.TIMEOUT for c in result.conflicts)
    return Shared(spec, False, Admission.TIMED_OUT if timed_out else Admission.NO_ROOM, result)


@dataclass
class PoolPlan:
    """One pool's admitted entries, their problem (items in entry order) and its growth."""

    problem: TypeProblem
    entries: list[Entry]
    grown: Grown

    def placed(self) -> dict[str, tuple[int, int, NodeCounts]]:
        """label -> (cards, units per instance, node -> instances) of every placed entry."""
        g = self.grown
        if g.choice is None or g.nodes is None:
            return {}
        out = {}
        for it, e in zip(self.problem.items, self.entries, strict=True):
            sp = it.splits[g.choice[it.index]]
            out[e.label] = (sp.instances * sp.units, sp.units, g.nodes[it.index])
        return out


def _grow_all(
    pools: Pools, admitted: set[int], deadline: float, workers: int, fast_only: bool
) -> list[PoolPlan] | None:
    """Every pool's growth for the admitted plans (``fast_only``: None unless every pool's fast
    path places every request at its max)."""
    out: list[PoolPlan] = []
    for pi, pool in enumerate(pools.pools):
        entries = [e for e in pool.entries if e.plan in admitted]
        problem = pool.problem([(e, pool.counts(e)) for e in entries])
        before = pool.previous(entries)
        if fast_only:
            placed = greedy_place(problem, [0] * len(entries), before)
            if placed is None:
                return None
            got = Grown([0] * len(entries), placed, True, Method.FAST_PATH)
        else:
            left = max(0.1, (deadline - time.monotonic()) / (len(pools.pools) - pi))
            got = grow(
                problem, [e.level for e in entries], [e.held for e in entries], before,
                seconds=left, workers=workers,
            )  # fmt: skip
        out.append(PoolPlan(problem, entries, got))
    return out


def _answers(
    specs: Sequence[PlanSpec],
    snap: Snapshot,
    prev: Sequence[PlanPrevious | None],
    order: Sequence[int],
    pools: Pools,
    verdicts: Mapping[int, Verdict],
    joint: Sequence[PoolPlan],
    deadline: float,
    workers: int,
) -> list[Shared]:
    placed: dict[str, tuple[int, int, NodeCounts]] = {}
    for pp in joint:
        placed |= pp.placed()
    failed = {
        e.plan for pp in joint if pp.grown.choice is None for e in pp.entries
    }  # a pool without a plan (time ran out): its plans are not placed
    proven_joint = all(pp.grown.proven for pp in joint) and all(v.proven for v in verdicts.values())
    out: dict[int, Shared] = {}
    for p in order:
        spec, verdict = specs[p], verdicts[p]
        if verdict.reason is Admission.ADMITTED and p not in failed:
            result = _placed_result(
                spec, p, snap, prev[p], pools, joint, placed, proven_joint, deadline, workers
            )
            out[p] = Shared(
                spec, True, Admission.ADMITTED, result, grants=_grants(p, specs, pools, placed, order)
            )
        elif verdict.reason is Admission.ADMITTED:
            out[p] = Shared(
                spec,
                False,
                Admission.TIMED_OUT,
                _not_placed(
                    spec, pools, p, "no plan found within the time budget (not proven impossible)", False
                ),
            )
        else:
            out[p] = _refused(spec, p, snap, verdict, specs, pools, deadline)
    kept = _kept(specs, prev, order, pools, placed, {p for p, s in out.items() if not s.admitted})
    return [replace(out[p], kept=kept.get(p, ())) for p in range(len(specs))]


def _counts(
    p: int, pools: Pools, placed: Mapping[str, tuple[int, int, NodeCounts]]
) -> dict[tuple[str, str], int]:
    """(operator, resource) -> the cards plan ``p``'s requests got."""
    return {
        (e.request.operator, e.request.resource): placed[e.label][0]
        for pi in pools.of_plan[p]
        for e in pools.pools[pi].entries
        if e.plan == p and e.label in placed
    }


def _fixed(spec: PlanSpec, counts: Mapping[tuple[str, str], int]) -> PlanSpec:
    """The spec with every request at the count it got (requests at 0 left out)."""
    requests = tuple(
        Request(r.operator, r.resource, counts[r.operator, r.resource], r.machines)
        for r in spec.requests
        if counts.get((r.operator, r.resource), 0) > 0
    )
    return replace(spec, requests=requests)


def moved_from(allocations: Sequence[Allocation], before: PlanPrevious) -> int:
    """Instances of requests that existed before and are not where they were (resized: all)."""
    out = 0
    for a in allocations:
        was = before.get((a.operator, a.resource))
        if was is None:
            continue
        here = dict(a.nodes)
        stayed = (
            sum(min(n, was.nodes.get(node, 0)) for node, n in here.items()) if was.units == a.units else 0
        )
        out += a.instances - stayed
    return out


def _placed_result(
    spec: PlanSpec,
    p: int,
    snap: Snapshot,
    before: PlanPrevious | None,
    pools: Pools,
    joint: Sequence[PoolPlan],
    placed: Mapping[str, tuple[int, int, NodeCounts]],
    proven: bool,
    deadline: float,
    workers: int,
) -> PlanResult:
    counts = _counts(p, pools, placed)
    fixed = _fixed(spec, counts)
    mine = {
        (e.request.operator, e.request.resource): placed[e.label]
        for pi in pools.of_plan[p]
        for e in pools.pools[pi].entries
        if e.plan == p and e.label in placed
    }
    if pools.special[p]:
        others = reservations(pools.pools, {k: (u, n) for k, (_, u, n) in placed.items()}, skip=p)
        where: PlanPrevious = {k: Placement(u, dict(n)) for k, (c, u, n) in mine.items() if c}
        left = max(0.5, deadline - time.monotonic())
        result = plan(fixed, snap.using(others), seconds=left, workers=workers, previous=where)
    else:
        result = _from_joint(fixed, pools.problems[p], mine, joint, p)
    if before is not None and result.feasible:
        result = replace(result, moved=moved_from(result.allocations, before))
    elif before is None:
        result = replace(result, moved=None)
    return replace(result, optimal=result.optimal and proven)


def _from_joint(
    spec: PlanSpec,
    problems: Sequence[TypeProblem],
    mine: Mapping[tuple[str, str], tuple[int, int, NodeCounts]],
    joint: Sequence[PoolPlan],
    p: int,
) -> PlanResult:
    """The plan's result read off the joint placement: per type, its requests at their counts."""
    allocations: list[Allocation] = []
    kept_problems: list[TypeProblem] = []
    stats: list[TypeStats] = []
    score = Fraction(0)
    method = {e.request.resource: pp.grown for pp in joint for e in pp.entries if e.plan == p}
    for pr in problems:
        items: list[Item] = []
        choice: list[int] = []
        nodes: list[NodeCounts] = []
        for it in pr.items:
            cards, units, where = mine.get((it.request.operator, it.request.resource), (0, 0, {}))
            if cards == 0:
                continue
            one = build_item(
                len(items), Request(it.request.operator, it.request.resource, cards, it.request.machines),
                it.strategy, len(pr.nodes), pr.largest, spec.scoring, it.topology,
            )  # fmt: skip
            s = next(s for s, sp in enumerate(one.splits) if sp.units == units)
            items.append(one)
            choice.append(s)
            nodes.append(dict(where))
            score += one.splits[s].score
        problem = replace(pr, items=tuple(items))
        grown = method.get(pr.resource.name)
        out = Outcome(SolveStatus.OPTIMAL, choice, nodes)
        allocations.extend(allocations_of(problem, out))
        kept_problems.append(problem)
        stats.append(
            TypeStats(
                pr.resource.name, len(pr.nodes), len(items),
                grown.method if grown else Method.FAST_PATH,
                SolveStatus.OPTIMAL if grown is None or grown.proven else SolveStatus.FEASIBLE,
                0.0, 0, problem.upper_bound,
            )
        )  # fmt: skip
    groups = layout(spec, allocations) if concerned(spec, allocations) else []
    warnings = (*(n for pr in kept_problems for n in pr.zone_notes), *cpu_warnings(kept_problems, groups))
    return PlanResult(
        feasible=True,
        optimal=True,
        score=score,
        bound=score,
        allocations=tuple(allocations),
        stats=tuple(stats),
        problems=tuple(kept_problems),
        moved=0,
        warnings=warnings,
        pod_cpu=tuple(sorted(cpu_by_node(kept_problems, groups).items())),
    )


def _grants(
    p: int,
    specs: Sequence[PlanSpec],
    pools: Pools,
    placed: Mapping[str, tuple[int, int, NodeCounts]],
    order: Sequence[int],
) -> tuple[Grant, ...]:
    """Each elastic request's cards and, below its max, why: other plans hold the cards it could
    use (it would get more with its own plan alone on the pool), or there is no room."""
    out = []
    for r in specs[p].requests:
        if not r.elastic:
            continue
        pool = pools.pool_of(p, r.resource)
        entry = next(e for e in pool.entries if e.plan == p and e.request == r)
        got = placed.get(entry.label, (0, 0, {}))[0]
        if got >= r.cards:
            out.append(Grant(r.operator, r.resource, got, r.least, r.cards))
            continue
        others = sorted(
            {e.plan for e in pool.entries if e.plan != p and placed.get(e.label, (0,))[0] > 0},
            key=order.index,
        )
        more = pool.counts(entry, got + 1, r.cards)
        mine = [(e, [placed.get(e.label, (0,))[0]]) for e in pool.entries if e.plan == p and e is not entry]
        roomy = bool(others) and fits(pool.problem([*mine, (entry, more)]), GRANT_SECONDS) is True
        why = BelowMax.HELD if roomy else BelowMax.NO_ROOM
        names = tuple(plan_name(specs[o]) for o in others) if roomy else ()
        out.append(Grant(r.operator, r.resource, got, r.least, r.cards, why, names))
    return tuple(out)


def preempted_text(holders: Sequence[str]) -> str:
    return (
        f"Preempted: its requests fit the cluster's free cards, but plans before it "
        f"({', '.join(holders)}) are planned on the cards it needs"
    )


def _not_placed(spec: PlanSpec, pools: Pools, p: int, reason: str, proven: bool) -> PlanResult:
    return PlanResult(
        feasible=False,
        optimal=proven,
        score=None,
        bound=None,
        allocations=(),
        reason=reason,
        problems=tuple(pools.problems[p]),
    )


def _at_min(spec: PlanSpec) -> PlanSpec:
    return replace(
        spec,
        requests=tuple(
            Request(r.operator, r.resource, r.least, r.machines) for r in spec.requests if r.least
        ),
    )


def _refused(
    spec: PlanSpec,
    p: int,
    snap: Snapshot,
    verdict: Verdict,
    specs: Sequence[PlanSpec],
    pools: Pools,
    deadline: float,
) -> Shared:
    """A plan not admitted: who holds the cards it needs, or why its mins fit nowhere."""
    if verdict.reason is Admission.PREEMPTED:
        names = tuple(plan_name(specs[h]) for h in verdict.holders)
        result = _not_placed(spec, pools, p, preempted_text(names), verdict.proven)
        return Shared(spec, False, Admission.PREEMPTED, result, holders=names)
    if verdict.reason is Admission.NO_ROOM:
        alone = plan(_at_min(spec), snap, seconds=max(0.2, min(5.0, deadline - time.monotonic())))
        if not alone.feasible:
            why = "its requests (at their min) do not fit the cluster: " + (alone.reason or "")
            result = replace(alone, reason=why, optimal=alone.optimal and verdict.proven, partial=())
            return Shared(spec, False, Admission.NO_ROOM, result)
        result = _not_placed(spec, pools, p, "its requests (at their min) do not fit the cluster", False)
        return Shared(spec, False, Admission.NO_ROOM, result)
    reason = "admission not decided within the time budget (not proven impossible)"
    return Shared(spec, False, Admission.TIMED_OUT, _not_placed(spec, pools, p, reason, False))


def _kept(
    specs: Sequence[PlanSpec],
    prev: Sequence[PlanPrevious | None],
    order: Sequence[int],
    pools: Pools,
    placed: Mapping[str, tuple[int, int, NodeCounts]],
    refused: set[int],
) -> dict[int, tuple[Allocation, ...]]:
    """What each plan not admitted keeps of what it ran: its instances on cards that no admitted
    plan is planned on, plans earlier in the order first."""
    out: dict[int, tuple[Allocation, ...]] = {}
    for pool in pools.pools:
        left = dict(pool.nodes)
        for e in pool.entries:
            if e.label in placed:
                _, units, nodes = placed[e.label]
                for node, k in nodes.items():
                    left[node] = left.get(node, 0) - k * units
        for p in order:
            if p not in refused or prev[p] is None:
                continue
            for e in pool.entries:
                if e.plan != p or e.previous is None:
                    continue
                units, had = e.previous
                here: dict[str, int] = {}
                for node, k in sorted(had.items()):
                    fit = min(k, max(0, left.get(node, 0)) // units) if units else 0
                    if fit:
                        here[node] = fit
                        left[node] -= fit * units
                if here:
                    a = Allocation(
                        e.request.operator, e.request.resource, e.strategy, sum(here.values()), units,
                        tuple(sorted(here.items())),
                    )  # fmt: skip
                    out[p] = (*out.get(p, ()), a)
    return out


def _one_by_one(
    specs: Sequence[PlanSpec],
    snap: Snapshot,
    prev: Sequence[PlanPrevious | None],
    order: Sequence[int],
    deadline: float,
    workers: int,
) -> list[Shared]:
    """Plans whose types overlap without being equal: each plan alone, in order, on what the plans
    before it left. A plan, never a proof of the whole order (``optimal`` is false)."""
    taken: dict[str, dict[str, int]] = {}
    out: dict[int, Shared] = {}
    for step, p in enumerate(order):
        spec = specs[p]
        left = max(0.2, (deadline - time.monotonic()) / (len(order) - step))
        (got,) = plan_together([spec], snap.using(taken), [prev[p]], seconds=left, workers=workers)
        if not got.admitted and got.reason is Admission.NO_ROOM:
            (free,) = plan_together([_at_min(spec)], snap, [None], seconds=left, workers=workers)
            if free.admitted:
                before = tuple(plan_name(specs[q]) for q in order[:step] if out[q].admitted)
                result = replace(got.result, reason=preempted_text(before))
                got = Shared(spec, False, Admission.PREEMPTED, result, holders=before)
        if got.admitted:
            for a in got.result.allocations:
                rt = spec.resource(a.resource)
                per = 1000 if rt.kind is ResourceKind.CPU else 1
                for node, k in a.nodes:
                    slot = taken.setdefault(node, {})
                    slot[rt.resource_name] = slot.get(rt.resource_name, 0) + k * a.units * per
        out[p] = replace(got, result=replace(got.result, optimal=False))
    return [out[p] for p in range(len(specs))]
