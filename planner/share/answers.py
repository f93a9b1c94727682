"""Each plan's answer once the pools are grown: its result, its elastic grants, or why it was not
admitted and what it keeps.

Notes
-----
A plan's :class:`~planner.model.result.PlanResult` is read off the joint placement: per type, its
requests at the counts they got, on the nodes the joint search chose, with the problem each type
had on what the other plans leave (so its explanation reasons on the right free cards). A plan
whose instances need more than counting (GPUs known one by one, NUMA zones, CPU sized per pod)
is handed to the single-plan planner instead, on the cluster with the other plans' cards taken,
its counts fixed and the joint placement as its previous plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from fractions import Fraction
from typing import Any

from planner.base.codes import Method, SolveStatus
from planner.model.options import Item, TypeProblem, build_item, total
from planner.model.result import Allocation, Placement, PlanResult, TypeStats
from planner.model.result import Previous as PlanPrevious
from planner.model.spec import PlanSpec, Request, ResourceKind, Snapshot
from planner.node.pods import concerned, cpu_by_node, cpu_warnings, layout
from planner.planning import allocations_of, plan
from planner.search.outcome import Outcome
from planner.search.place import NodeCounts
from planner.share.admission import Verdict, fits
from planner.share.growth import PoolPlan
from planner.share.outcome import Admission, BelowMax, Grant, Shared, plan_name
from planner.share.pools import Entry, Pool, Pools, held_in, reservations, without
from planner.share.pools import label as label_of

Placed = Mapping[str, tuple[int, NodeCounts]]  # label -> (units, node -> instances)
GRANT_SECONDS = 0.2  # at most this long to tell "held by other plans" from "no room", per request


def counts_of(
    p: int, pools: Pools, placed: Mapping[str, tuple[int, int, NodeCounts]]
) -> dict[tuple[str, str], int]:
    """(operator, resource) -> the cards plan ``p``'s requests got (its own entries only: walking
    every plan's, 2,000 a pool, for each of 50 plans took 11 ms at 65,000 nodes)."""
    return {
        (e.request.operator, e.request.resource): placed[e.label][0]
        for pi in pools.of_plan[p]
        for e in pools.pools[pi].of(p)
        if e.label in placed
    }


def fixed_counts(spec: PlanSpec, counts: Mapping[tuple[str, str], int]) -> PlanSpec:
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


def placed_result(
    spec: PlanSpec,
    p: int,
    snap: Snapshot,
    before: PlanPrevious | None,
    pools: Pools,
    joint: Sequence[PoolPlan],
    placed: Mapping[str, tuple[int, int, NodeCounts]],
    used: Mapping[str, Mapping[str, int]],
    residual: Residual,
    proven: bool,
    deadline: float,
    workers: int,
    given: DevicesGiven | None = None,
) -> PlanResult:
    """Plan ``p``'s answer on the counts the joint search placed. A plan that places devices
    (or zones, or CPU) is planned here on what the others hold; ``given`` tracks the devices plans
    before it were given, so that two plans never get the same device (plans after it hold theirs
    by count until their turn)."""
    counts = counts_of(p, pools, placed)
    fixed = fixed_counts(spec, counts)
    mine = {
        (e.request.operator, e.request.resource): placed[e.label]
        for pi in pools.of_plan[p]
        for e in pools.pools[pi].of(p)
        if e.label in placed
    }
    units = {
        e.label: placed[e.label][1:]
        for pi in pools.of_plan[p]
        for e in pools.pools[pi].of(p)
        if e.label in placed
    }
    if pools.special[p]:
        own = reservations(pools.pools, units, p)
        given = given if given is not None else DevicesGiven()
        others = without(without(used, own), given.units)
        was = before or {}
        where: PlanPrevious = {
            k: Placement(u, dict(n), was[k].devices if k in was and was[k].units == u else {})
            for k, (c, u, n) in mine.items()
            if c
        }
        left = max(0.5, deadline - time.monotonic())
        view = snap.taking(given.devices).using(others, devices_of(before), given.theirs(p))
        result = plan(fixed, view, seconds=left, workers=workers, previous=where)
        given.add(result, own, p)
    else:
        # each type's view adds back only the plan's cards in that type's pool
        problems = [residual.of(pr, pools.pool_of(p, pr.resource.name), units, p) for pr in pools.problems[p]]
        result = _from_joint(
            fixed, problems, mine, {pools.pools[pi].resource.name: joint[pi] for pi in pools.of_plan[p]}
        )
    if before is not None and result.feasible:
        result = replace(result, moved=moved_from(result.allocations, before))
    elif before is None:
        result = replace(result, moved=None)
    return replace(result, optimal=result.optimal and proven)


def devices_of(before: PlanPrevious | None) -> dict[str, set[str]]:
    """node -> the devices a plan's instances ran on before."""
    out: dict[str, set[str]] = {}
    for placement in (before or {}).values():
        for node, lists in placement.devices.items():
            out.setdefault(node, set()).update(d for devs in lists for d in devs)
    return out


class DevicesGiven:
    """The devices plans planned one after another have been given (node -> device names), and
    the units those plans hold (taken out of what the later plans see held by count).

    ``before`` (plan index -> the devices it ran on) tells which free devices to hold back for the
    plans not given theirs yet: the ones they ran on, so that no plan moves another's pods when a
    device nobody runs on would do."""

    def __init__(self, before: Mapping[int, Mapping[str, set[str]]] | None = None) -> None:
        self.devices: dict[str, set[str]] = {}
        self.units: dict[str, dict[str, int]] = {}
        self.before = dict(before or {})

    def theirs(self, p: int) -> dict[str, set[str]]:
        """node -> the devices the plans still waiting for theirs (not ``p``) ran on."""
        out: dict[str, set[str]] = {}
        for q, devices in self.before.items():
            if q != p:
                for node, names in devices.items():
                    out.setdefault(node, set()).update(names)
        return out

    def add(self, result: PlanResult, units: Mapping[str, Mapping[str, int]], p: int | None = None) -> None:
        if p is not None:
            self.before.pop(p, None)
        if not result.feasible:
            return
        for a in result.allocations:
            for node, lists in a.devices:
                self.devices.setdefault(node, set()).update(d for devs in lists for d in devs)
        for node, per in units.items():
            slot = self.units.setdefault(node, {})
            for rn, k in per.items():
                slot[rn] = slot.get(rn, 0) + k


class Residual:
    """Each type's nodes with what every plan holds taken, worked out once per node list; a plan's
    own view adds its own cards back (what its explanation reasons on)."""

    def __init__(self, used: Mapping[str, Mapping[str, int]]) -> None:
        self.used = used
        self.free: dict[int, tuple[dict[str, int], int]] = {}
        self.base: dict[int, tuple[list[tuple[str, int]], dict[str, int], int]] = {}

    def of(self, problem: TypeProblem, pool: Pool, placed: Placed, plan: int) -> Left:
        """``problem`` on what the plans hold, with what ``plan``'s entries ``placed`` in ``pool``
        hold given back (see :func:`planner.share.pools.held_in`)."""
        key = id(problem.nodes)
        if key not in self.free:
            free = dict(problem.nodes)
            self.free[key] = (free, max(free.values(), default=0))
        free, top = self.free[key]
        taken = self.taken(problem)
        most = _most(free, taken, top, pool, placed, plan)
        if most is None or most < top:  # no node back at its most: every node's leftovers count
            largest = self.left(problem)[2]
            most = largest if most is None else max(most, largest)
        return Left.make(problem, (self, problem, (pool, placed, plan)), most)

    def taken(self, problem: TypeProblem) -> Callable[[str], int]:
        """node -> the units of ``problem``'s type every plan holds there (CPU in cores)."""
        rn = problem.resource.resource_name
        per = 1000 if problem.resource.kind is ResourceKind.CPU else 1
        used = self.used
        return lambda n: used[n].get(rn, 0) // per if n in used else 0

    def left(self, problem: TypeProblem) -> tuple[list[tuple[str, int]], dict[str, int], int]:
        """``problem``'s nodes with what every plan holds taken, their index by name, and the most
        free units of one of them: worked out once per node list, when first asked."""
        key = id(problem.nodes)
        if key not in self.base:
            taken = self.taken(problem)
            nodes = [(n, f - taken(n)) for n, f in problem.nodes]
            largest = max((f for _, f in nodes), default=0)
            self.base[key] = (nodes, {n: i for i, (n, _) in enumerate(nodes)}, largest)
        return self.base[key]


def _most(
    free: Mapping[str, int],
    taken: Callable[[str], int],
    top: int,
    pool: Pool,
    placed: Placed,
    plan: int,
) -> int | None:
    """The most free units of one of ``plan``'s nodes (None: it holds none) with what every plan
    holds there taken and its own given back, summed node by node as
    :func:`planner.share.pools.held_in` sums them.

    A node with its own given back has at most its free units with no plan's counted (``top``
    at most): the plan's placements are read only until a node reaches that, which most plans'
    first nodes do, and then no other node needs a look. Summing them whole first (777 nodes a
    plan and type, 50 plans of 4 types at 65,000 nodes), answering took 23 ms longer
    (placed_result 187 ms against 164, load 5); working out every type's leftovers node by
    node for it (4 types of 16,250 nodes), Residual.of took 51 ms against 25 (3 runs, load 5)."""
    held: dict[str, int] = {}
    most = None
    for e in pool.of(plan):
        got = placed.get(e.label)
        if got is None:
            continue
        units = got[0]
        for node, k in got[1].items():
            if not k:
                continue
            held[node] = mine = held.get(node, 0) + k * units
            f = free.get(node)
            if f is not None and (most is None or f - taken(node) + mine > most):
                most = f - taken(node) + mine
                if most >= top:
                    return most
    return most


class Left(TypeProblem):
    """A type's problem on what the other plans leave one plan, whose nodes are worked out when
    first read.

    A plan's answer needs of them only their count and the most free units of one node (its
    splits); its explanation reads them all, a JSON answer none. Made up front, for every plan
    and type (50 plans of 4 types of 16,250 nodes at 65,000 nodes), they and the largest read
    off them took 133 ms of answering (load 6); 25 ms so, the largest read as below (load 5).
    """

    @classmethod
    def make(
        cls,
        problem: TypeProblem,
        pending: tuple[Residual, TypeProblem, tuple[Pool, Placed, int]],
        largest: int,
        items: tuple[Item, ...] | None = None,
    ) -> Left:
        """``problem`` (with ``items``, if given) on ``pending``: every plan's leftovers of the
        type's nodes, and the pool, placements and plan whose own units are given back
        (:func:`planner.share.pools.held_in`)."""
        given = {f.name: getattr(problem, f.name) for f in fields(problem) if f.init and f.name != "nodes"}
        out = cls(nodes=(), **(given if items is None else given | {"items": items}))
        del vars(out)["nodes"]  # read through __getattr__, made on first read
        vars(out).update(pending=pending, largest=largest)
        return out

    def with_items(self, items: tuple[Item, ...]) -> TypeProblem:
        """The same nodes (worked out or not) with other items."""
        pending = vars(self).get("pending")
        if pending is None:  # made by dataclasses.replace: its nodes are worked out
            return replace(self, items=items)
        return Left.make(self, pending, self.largest, items)

    @property
    def size(self) -> int:
        """How many nodes, without working them out."""
        pending = vars(self).get("pending")
        return len(pending[1].nodes if pending is not None else self.nodes)

    def __getattr__(self, name: str) -> Any:
        """``nodes``, on first read: the plan's own units added back to every plan's leftovers."""
        pending = vars(self).get("pending")
        if name != "nodes" or pending is None:
            raise AttributeError(name)
        residual, source, (pool, placed, plan) = pending
        base, index, _ = residual.left(source)
        mine = list(base)
        for node, units in held_in(pool, placed, plan).items():
            i = index.get(node)
            if i is not None:
                mine[i] = (node, mine[i][1] + units)
        nodes = vars(self)["nodes"] = tuple(mine)
        return nodes


def _from_joint(
    spec: PlanSpec,
    problems: Sequence[Left],
    mine: Mapping[tuple[str, str], tuple[int, int, NodeCounts]],
    joint: Mapping[str, PoolPlan],
) -> PlanResult:
    """The plan's result read off the joint placement: per type, its requests at their counts."""
    allocations: list[Allocation] = []
    kept_problems: list[TypeProblem] = []
    stats: list[TypeStats] = []
    scores: list[Fraction] = []
    for pr in problems:
        largest = pr.largest
        items: list[Item] = []
        choice: list[int] = []
        nodes: list[NodeCounts] = []
        for it in pr.items:
            cards, units, where = mine.get((it.request.operator, it.request.resource), (0, 0, {}))
            if cards == 0:
                continue
            one = build_item(
                len(items), Request(it.request.operator, it.request.resource, cards, it.request.machines),
                it.strategy, pr.size, largest, spec.scoring, it.topology,
            )  # fmt: skip
            s = next(s for s, sp in enumerate(one.splits) if sp.units == units)
            items.append(one)
            choice.append(s)
            nodes.append(dict(where))
            scores.append(one.splits[s].score)
        problem = pr.with_items(tuple(items))
        pp = joint.get(pr.resource.name)
        grown = pp.grown if pp is not None else None
        out = Outcome(SolveStatus.OPTIMAL, choice, nodes)
        allocations.extend(allocations_of(problem, out))
        kept_problems.append(problem)
        stats.append(
            TypeStats(
                pr.resource.name, pr.size, len(items),
                grown.method if grown else Method.FAST_PATH,
                SolveStatus.OPTIMAL if grown is None or grown.proven else SolveStatus.FEASIBLE,
                0.0, 0, problem.upper_bound,
            )
        )  # fmt: skip
    score = total(scores)
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


def grants(
    p: int,
    specs: Sequence[PlanSpec],
    pools: Pools,
    placed: Mapping[str, tuple[int, int, NodeCounts]],
    order: Sequence[int],
    holding: dict[int, set[int]] | None = None,
) -> tuple[Grant, ...]:
    """Each elastic request's cards and, below its max, why: other plans hold the cards it could
    use (its next count fits with its own plan alone on the pool), or there is no room. The
    requests of one pool are asked together first; one by one only if that does not fit.
    ``holding``: pool -> the plans placed in it, filled as pools are first asked (a cache shared
    by every plan's call)."""
    holding = {} if holding is None else holding
    got = {e.label: placed.get(e.label, (0,))[0] for pi in pools.of_plan[p] for e in pools.pools[pi].of(p)}
    why: dict[str, tuple[BelowMax, tuple[str, ...]]] = {}
    for pi in pools.of_plan[p]:
        pool = pools.pools[pi]
        mine = pool.of(p)
        short: dict[str, int] = {}
        for e in mine:
            if got[e.label] < e.request.cards:
                c = _next_count(pool, e, got[e.label])
                if c is not None:
                    short[e.label] = c
        if not short:
            continue
        if pi not in holding:
            holding[pi] = {e.plan for e in pool.entries if placed.get(e.label, (0,))[0] > 0}
        holders = sorted(holding[pi] - {p}, key=order.index)
        names = tuple(plan_name(specs[o]) for o in holders)
        if not holders:
            continue
        ask = [(e, [short.get(e.label, got[e.label])]) for e in mine if short.get(e.label, got[e.label])]
        if fits(pool.problem(ask), GRANT_SECONDS) is True:
            why |= {label: (BelowMax.HELD, names) for label in short}
            continue
        for label, c in short.items():
            one = [(e, [c if e.label == label else got[e.label]]) for e in mine]
            if fits(pool.problem([(e, n) for e, n in one if n[0]]), GRANT_SECONDS) is True:
                why[label] = (BelowMax.HELD, names)
    out = []
    for r in specs[p].requests:
        if not r.elastic:
            continue
        key = label_of(p, r)  # its entry's (looked for among the plan's, 2,650 times: 15 ms)
        cards = got[key]
        if cards >= r.cards:
            out.append(Grant(r.operator, r.resource, cards, r.least, r.cards))
            continue
        reason, names = why.get(key, (BelowMax.NO_ROOM, ()))
        out.append(Grant(r.operator, r.resource, cards, r.least, r.cards, reason, names))
    return tuple(out)


def _next_count(pool: Pool, entry: Entry, now: int) -> int | None:
    """The least count above ``now`` the request has a split for (None: none up to its max)."""
    for c in range(now + 1, entry.request.cards + 1):
        if c > pool.free:
            return None
        if pool.item(0, entry, [c]).splits:
            return c
    return None


def preempted_text(holders: Sequence[str]) -> str:
    return (
        f"Preempted: its requests fit the cluster's free cards, but plans before it "
        f"({', '.join(holders)}) are planned on the cards it needs"
    )


def not_placed(spec: PlanSpec, pools: Pools, p: int, reason: str, proven: bool) -> PlanResult:
    return PlanResult(
        feasible=False,
        optimal=proven,
        score=None,
        bound=None,
        allocations=(),
        reason=reason,
        problems=tuple(pools.problems[p]),
    )


def at_min_spec(spec: PlanSpec) -> PlanSpec:
    return replace(
        spec,
        requests=tuple(
            Request(r.operator, r.resource, r.least, r.machines) for r in spec.requests if r.least
        ),
    )


def refused(
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
        result = not_placed(spec, pools, p, preempted_text(names), verdict.proven)
        return Shared(spec, False, Admission.PREEMPTED, result, holders=names)
    if verdict.reason is Admission.NO_ROOM:
        alone = plan(at_min_spec(spec), snap, seconds=max(0.2, min(5.0, deadline - time.monotonic())))
        if not alone.feasible:
            why = "its requests (at their min) do not fit the cluster: " + (alone.reason or "")
            result = replace(alone, reason=why, optimal=alone.optimal and verdict.proven, partial=())
            return Shared(spec, False, Admission.NO_ROOM, result)
        result = not_placed(spec, pools, p, "its requests (at their min) do not fit the cluster", False)
        return Shared(spec, False, Admission.NO_ROOM, result)
    reason = "admission not decided within the time budget (not proven impossible)"
    return Shared(spec, False, Admission.TIMED_OUT, not_placed(spec, pools, p, reason, False))


def kept_instances(
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
    if not any(prev[p] is not None for p in refused):
        return out  # no plan to keep anything for: every pool's cards need not be counted
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
