"""Several plans planned jointly: admission, then growth per pool, then each plan's answer.

Notes
-----
What counts, in order (docs/sharing.md): admission by priority, growth by priority, total score,
then the single plan's tie-breaks and fewest moves. :mod:`planner.share.admission` decides who
runs; per pool, :mod:`planner.share.growth` chooses every admitted request's count and split and
places them; :mod:`planner.share.answers` reads each plan's result off that placement.
``optimal`` is true for a plan only when admission, every stage of growth and its own placement
were proven. Types that overlap without being equal are planned one plan after another.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction

from planner.base.codes import Method
from planner.model.options import TypeProblem
from planner.model.result import Previous as PlanPrevious
from planner.model.spec import PlanSpec, ResourceKind, Snapshot
from planner.search.place import NodeCounts, greedy_place
from planner.share.admission import Verdict, admit
from planner.share.answers import (
    DevicesGiven,
    Residual,
    at_min_spec,
    devices_of,
    grants,
    kept_instances,
    not_placed,
    placed_result,
    preempted_text,
    refused,
)
from planner.share.growth import Grown, PoolPlan, grow
from planner.share.outcome import Admission, Shared, plan_name
from planner.share.pools import Pools, build_pools, reservations


def order_of(specs: Sequence[PlanSpec], previous: Sequence[PlanPrevious | None]) -> list[int]:
    """Admission order: higher priority, then holding an applied placement, then input order."""
    return sorted(range(len(specs)), key=lambda p: (-specs[p].priority, previous[p] is None, p))


def plan_jointly(
    specs: Sequence[PlanSpec],
    snap: Snapshot,
    prev: Sequence[PlanPrevious | None],
    seconds: float,
    workers: int,
) -> list[Shared]:
    """One answer per plan, in input order (see :func:`planner.share.together.plan_together`)."""
    deadline = time.monotonic() + seconds
    priorities = sorted({s.priority for s in specs}, reverse=True)
    levels = [priorities.index(s.priority) for s in specs]
    order = order_of(specs, prev)
    pools = build_pools(specs, snap, prev, levels)
    if pools.entangled:
        return _one_by_one(specs, snap, prev, order, deadline, workers, pools)
    fast = _fast(pools)
    if all(f is not None for f in fast):  # every max placed: everyone admitted, the order proven
        verdicts = {p: Verdict(Admission.ADMITTED) for p in range(len(specs))}
    else:
        verdicts = admit(pools, order, (deadline - time.monotonic()) / 3, workers)
    admitted = {p for p, v in verdicts.items() if v.reason is Admission.ADMITTED}
    grown = _grow_all(pools, admitted, fast, deadline, workers)
    return _answers(specs, snap, prev, order, pools, verdicts, grown, deadline, workers)


def _fast(pools: Pools) -> list[PoolPlan | None]:
    """Per pool, every request of every plan at its max, best split, placed greedily (None where
    that fails): where it places, every objective is at its bound."""
    out: list[PoolPlan | None] = []
    for pool in pools.pools:
        problem = pool.problem([(e, pool.counts(e)) for e in pool.entries])
        placed = None
        if all(it.splits for it in problem.items):
            placed = greedy_place(problem, [0] * len(problem.items), pool.previous(pool.entries))
        got = Grown([0] * len(problem.items), placed, True, Method.FAST_PATH) if placed is not None else None
        out.append(PoolPlan(problem, list(pool.entries), got) if got is not None else None)
    return out


def _grow_all(
    pools: Pools, admitted: set[int], fast: Sequence[PoolPlan | None], deadline: float, workers: int
) -> list[PoolPlan]:
    """Every pool's growth for the admitted plans (a pool whose fast path placed every plan, with
    every plan admitted, keeps that answer; one whose fast path failed on the same plans does not
    try it again)."""
    out: list[PoolPlan] = []
    for pi, pool in enumerate(pools.pools):
        entries = [e for e in pool.entries if e.plan in admitted]
        everyone = len(entries) == len(pool.entries)
        done = fast[pi]
        if everyone and done is not None:
            out.append(done)
            continue
        problem = pool.problem([(e, pool.counts(e)) for e in entries])
        left = max(0.1, (deadline - time.monotonic()) / (len(pools.pools) - pi))
        levels, held = [e.level for e in entries], [e.held for e in entries]
        before = pool.previous(entries)
        running = [e.previous for e in pool.entries if e.plan not in admitted and e.previous]
        share = left / 2 if running else left
        got = grow(problem, levels, held, before, seconds=share, workers=workers, fast=not everyone)
        if running and got.choice is not None:
            # the plans not admitted keep what they run where they can: the same answer that
            # leaves their cards alone, if there is one, is the one taken
            spared = _spare(problem, running)
            other = grow(spared, levels, held, before, seconds=left / 2, workers=workers)
            if other.choice is not None and _key(spared, other, levels, held) == _key(
                problem, got, levels, held
            ):
                got = replace(other, proven=got.proven)
        out.append(PoolPlan(problem, entries, got))
    return out


def _spare(problem: TypeProblem, running: Sequence[tuple[int, Mapping[str, int]]]) -> TypeProblem:
    """The problem with the cards that plans not admitted run on taken out."""
    taken: dict[str, int] = {}
    for units, nodes in running:
        for node, k in nodes.items():
            taken[node] = taken.get(node, 0) + k * units
    return replace(problem, nodes=tuple((n, max(0, f - taken.get(n, 0))) for n, f in problem.nodes))


def _key(
    problem: TypeProblem, grown: Grown, levels: Sequence[int], held: Sequence[int]
) -> tuple[Fraction, ...]:
    """What growth and score established: per priority, highest first, the cards kept of what was
    held and all the cards; then the score."""
    assert grown.choice is not None
    chosen = [it.splits[c] for it, c in zip(problem.items, grown.choice, strict=True)]
    cards = [Fraction(0)] * (2 * (max(levels, default=0) + 1))
    for sp, level, had in zip(chosen, levels, held, strict=True):
        cards[2 * level] += min(sp.instances * sp.units, had)
        cards[2 * level + 1] += sp.instances * sp.units
    return (*cards, sum((sp.score for sp in chosen), Fraction(0)))


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
    used = reservations(pools.pools, {k: (u, n) for k, (_, u, n) in placed.items()})
    residual = Residual(used)
    given = DevicesGiven({p: devices_of(prev[p]) for p in order})
    out: dict[int, Shared] = {}
    holding: dict[int, set[int]] = {}
    for p in order:
        spec, verdict = specs[p], verdicts[p]
        if verdict.reason is Admission.ADMITTED and p not in failed:
            result = placed_result(
                spec,
                p,
                snap,
                prev[p],
                pools,
                joint,
                placed,
                used,
                residual,
                proven_joint,
                deadline,
                workers,
                given,
            )
            out[p] = Shared(
                spec, True, Admission.ADMITTED, result, grants=grants(p, specs, pools, placed, order, holding)
            )
        elif verdict.reason is Admission.ADMITTED:
            out[p] = Shared(
                spec,
                False,
                Admission.TIMED_OUT,
                not_placed(
                    spec, pools, p, "no plan found within the time budget (not proven impossible)", False
                ),
            )
        else:
            out[p] = refused(spec, p, snap, verdict, specs, pools, deadline)
    kept = kept_instances(specs, prev, order, pools, placed, {p for p, s in out.items() if not s.admitted})
    return [replace(out[p], kept=kept.get(p, ())) for p in range(len(specs))]


def _one_by_one(
    specs: Sequence[PlanSpec],
    snap: Snapshot,
    prev: Sequence[PlanPrevious | None],
    order: Sequence[int],
    deadline: float,
    workers: int,
    pools: Pools,
) -> list[Shared]:
    """Plans whose types overlap without being equal: each plan alone, in order, on what the plans
    before it left.

    No joint model, so a proof only where the answer reaches every objective's bound: every plan
    admitted, every request at its max, and each plan's score that of its best splits on the
    whole cluster (no plan's cards counted), which no joint answer can beat. Then, and only then,
    ``optimal`` is each plan's own; else it is false. (Plans that place devices, zones or CPU are
    never proven so: their placement is planned on what the others hold.)"""
    from planner.share.together import plan_together

    taken: dict[str, dict[str, int]] = {}
    given = DevicesGiven()  # devices are taken by name, not held back by count
    out: dict[int, Shared] = {}
    for step, p in enumerate(order):
        spec = specs[p]
        left = max(0.2, (deadline - time.monotonic()) / (len(order) - step))
        (got,) = plan_together(
            [spec], snap.taking(given.devices).using(_counted(snap, taken)), [prev[p]], seconds=left,
            workers=workers,
        )  # fmt: skip
        if not got.admitted and got.reason is Admission.NO_ROOM:
            (free,) = plan_together([at_min_spec(spec)], snap, [None], seconds=left, workers=workers)
            if free.admitted:
                before = tuple(plan_name(specs[q]) for q in order[:step] if out[q].admitted)
                result = replace(got.result, reason=preempted_text(before))
                got = Shared(spec, False, Admission.PREEMPTED, result, holders=before)
        if got.admitted:
            given.add(got.result, {})
            for a in got.result.allocations:
                rt = spec.resource(a.resource)
                per = 1000 if rt.kind is ResourceKind.CPU else 1
                for node, k in a.nodes:
                    slot = taken.setdefault(node, {})
                    slot[rt.resource_name] = slot.get(rt.resource_name, 0) + k * a.units * per
        out[p] = got
    proven = all(_at_its_bound(p, out[p], pools) for p in order)
    return [
        replace(out[p], result=replace(out[p].result, optimal=out[p].result.optimal and proven))
        for p in range(len(specs))
    ]


def _at_its_bound(p: int, got: Shared, pools: Pools) -> bool:
    """Admitted, every request at its max, and the score of its best splits on the whole cluster
    (its problems in ``pools`` are built with no plan's cards counted)."""
    if not got.admitted or not got.result.feasible or pools.special[p] or got.result.score is None:
        return False
    cards = {(a.operator, a.resource): a.instances * a.units for a in got.result.allocations}
    if any(cards.get((r.operator, r.resource), 0) != r.cards for r in got.spec.requests):
        return False
    return got.result.score == sum((pr.upper_bound for pr in pools.problems[p]), Fraction(0))


def _counted(snap: Snapshot, taken: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``taken`` without the cards of nodes whose devices are known (those go by name)."""
    devices = {n.name for n in snap.nodes if n.devices}
    return {
        node: {rn: k for rn, k in per.items() if node not in devices or rn == "cpu"}
        for node, per in taken.items()
    }
