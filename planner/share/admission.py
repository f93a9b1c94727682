"""Which plans run: in order, each admitted when its mins fit beside the mins of those before it.

Notes
-----
The order is the one users are promised (docs/sharing.md): higher priority first; at equal
priority a plan that holds an applied placement before one that does not, then the input order
(oldest first; the command line: the order of its files). Admission is greedy *by definition*:
a plan's fate depends only on the plans before it, so a later plan never unseats an earlier one
and planning again with nothing changed admits the same plans (the admitted ones now hold their
cards and come no later).

A plan's mins fit when, in every pool it has requests in, its requests and those of the plans
admitted before it can all be split and placed, each with at least its min cards (any count from
its min to its max: a min the strategy has no split for, such as 3 cards one instance per node on
two nodes, is met by a larger count that has one, 2 x 2): the counting bound and the greedy
placement at each request's fewest cards decide most cases, the exact search
(:func:`planner.search.solver.solve`, feasibility only, over every count) the rest. A plan that
does not fit is ``Preempted`` when its mins alone fit the free cards (the plans before it in those
pools are named), else there is ``NoRoom``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from planner.base.codes import SolveStatus
from planner.model.options import TypeProblem
from planner.search.place import FreeUnits, NodeCounts, greedy_place, place_one, release
from planner.share.outcome import Admission
from planner.share.pools import Entry, Pool, Pools, fewest


@dataclass(frozen=True)
class Verdict:
    reason: Admission
    holders: tuple[int, ...] = ()  # PREEMPTED: the plans before it in the pools where it fails
    proven: bool = True


def fits(problem: TypeProblem, seconds: float, workers: int = 1) -> bool | None:
    """Can every item take one of its splits at once? None: not decided within ``seconds``."""
    if not problem.items:
        return True
    if any(not it.splits for it in problem.items):
        return False
    if sum(it.request.least for it in problem.items) > sum(f for _, f in problem.nodes):
        return False
    if greedy_place(problem, [fewest(it) for it in problem.items]) is not None:
        return True
    from planner.search.solver import solve

    out = solve(problem, seconds=seconds, workers=workers, subset=range(len(problem.items)), optimize=False)
    return {SolveStatus.INFEASIBLE: False, SolveStatus.UNKNOWN: None}.get(out.status, True)


def at_min(pool: Pool, entries: Sequence[Entry]) -> TypeProblem:
    """The pool's problem with each entry at least at its min: any count up to its max (entries
    whose min is 0 ask for nothing). The greedy checks take each item's fewest cards
    (:func:`~planner.share.pools.fewest`); the exact one may take any count."""
    return pool.problem([(e, pool.counts(e)) for e in entries if e.request.least > 0])


class Packed:
    """One pool's admitted mins (each request's fewest cards), placed: a newcomer whose mins place
    on what is left is admitted without re-packing everyone (the common case); otherwise
    :func:`fits` decides from scratch."""

    def __init__(self, pool: Pool) -> None:
        self.free: FreeUnits | None = FreeUnits(pool.nodes)

    def add(self, problem: TypeProblem) -> list[tuple[NodeCounts, int]] | None:
        """Place every item (largest instances first) on what is left; None (nothing taken) if
        one does not place."""
        if self.free is None or any(not it.splits for it in problem.items):
            return None
        done: list[tuple[NodeCounts, int]] = []
        least = [fewest(it) for it in problem.items]
        for it in sorted(
            problem.items, key=lambda it: (-it.splits[least[it.index]].units, not it.distinct, it.index)
        ):
            got = next(
                (
                    (g, sp.units)
                    for sp in it.splits[least[it.index] :]  # the fewest cards' splits, best first
                    if (g := place_one(it, sp, self.free)) is not None
                ),
                None,
            )
            if got is None:
                self.undo(done)
                return None
            done.append(got)
        return done

    def undo(self, done: Sequence[tuple[NodeCounts, int]]) -> None:
        assert self.free is not None
        for nodes, units in done:
            release(self.free, nodes, units)

    def reset(self, pool: Pool, problem: TypeProblem) -> None:
        """Everyone's mins packed afresh (greedily, else unknown: later plans are checked from
        scratch)."""
        least = [fewest(it) for it in problem.items]
        placed = greedy_place(problem, least)
        if placed is None:
            self.free = None
            return
        self.free = FreeUnits(pool.nodes)
        for it, s, nodes in zip(problem.items, least, placed, strict=True):
            for node, k in nodes.items():
                self.free.take(node, k * it.splits[s].units)


def _prefix(pools: Pools, order: Sequence[int], packed: list[Packed]) -> int:
    """How many plans at the start of ``order`` have mins that place together greedily (by
    bisection; each success is a proof, so each of those plans is admitted: its mins fit beside
    those before it). Their pools are left packed with those mins."""

    def problems(k: int) -> list[TypeProblem]:
        chosen = set(order[:k])
        return [at_min(pool, [e for e in pool.entries if e.plan in chosen]) for pool in pools.pools]

    def placed(k: int) -> bool:
        return all(
            not pr.items
            or (all(it.splits for it in pr.items) and greedy_place(pr, [fewest(it) for it in pr.items]))
            for pr in problems(k)
        )

    lo, hi = 0, len(order)
    if placed(hi):
        lo = hi
    else:
        while lo + 1 < hi:  # placed(lo) holds (0 plans always place), placed(hi) does not
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if placed(mid) else (lo, mid)
    if lo:
        for pool, pack, pr in zip(pools.pools, packed, problems(lo), strict=True):
            pack.reset(pool, pr)
    return lo


def admit(pools: Pools, order: Sequence[int], seconds: float, workers: int = 1) -> dict[int, Verdict]:
    """The admission verdict of every plan, deciding them in ``order``."""
    deadline = time.monotonic() + seconds
    admitted: list[int] = []
    packed = [Packed(pool) for pool in pools.pools]
    out: dict[int, Verdict] = {}
    first = _prefix(pools, order, packed)  # the longest start of the order whose mins place at once
    for p in order[:first]:
        admitted.append(p)
        out[p] = Verdict(Admission.ADMITTED)
    for step, p in enumerate(order):
        if step < first:
            continue
        left = max(0.05, (deadline - time.monotonic()) / max(1, len(order) - step))
        quick = []
        for pi in pools.of_plan[p]:
            pool = pools.pools[pi]
            done = packed[pi].add(at_min(pool, [e for e in pool.entries if e.plan == p]))
            if done is None:
                break
            quick.append((pi, done))
        else:
            admitted.append(p)
            out[p] = Verdict(Admission.ADMITTED)
            continue
        for pi, done in quick:
            packed[pi].undo(done)
        blocked: list[Pool] = []
        undecided = False
        fresh = []
        for pi in pools.of_plan[p]:
            pool = pools.pools[pi]
            mine = [e for e in pool.entries if e.plan == p]
            before = [e for e in pool.entries if e.plan in admitted]
            problem = at_min(pool, [*before, *mine])
            verdict = fits(problem, left, workers)
            fresh.append((pi, problem))
            if verdict is None:
                undecided = True
            elif not verdict:
                blocked.append(pool)
        if not blocked and not undecided:
            admitted.append(p)
            out[p] = Verdict(Admission.ADMITTED)
            for pi, problem in fresh:
                packed[pi].reset(pools.pools[pi], problem)
            continue
        if not blocked:
            out[p] = Verdict(Admission.TIMED_OUT, proven=False)
            continue
        alone = [
            fits(at_min(pool, [e for e in pool.entries if e.plan == p]), left, workers) for pool in blocked
        ]
        if all(alone):
            holders = sorted(
                {e.plan for pool in blocked for e in pool.entries if e.plan in admitted and e.request.least},
                key=order.index,
            )
            out[p] = Verdict(Admission.PREEMPTED, tuple(holders), proven=None not in alone)
        else:
            out[p] = Verdict(Admission.NO_ROOM, proven=None not in alone)
    return out
