"""Which plans run: in order, each admitted when its mins fit beside the mins of those before it.

Notes
-----
The order is the one of section 6: higher priority first; at equal priority a plan that holds an
applied placement before one that does not, then the input order (oldest first; the command line:
the order of its files). Admission is greedy *by definition*: a plan's fate depends only on the
plans before it, so a later plan never unseats an earlier one and planning again with nothing
changed admits the same plans (the admitted ones now hold their cards and come no later).

A plan's mins fit when, in every pool it has requests in, its requests at their mins and those of
the plans admitted before it can all be split and placed: the counting bound and the greedy
placement decide most cases, the exact search (:func:`planner.search.solver.solve`, feasibility
only) the rest. A plan that does not fit is ``Preempted`` when its mins alone fit the free cards
(the plans before it in those pools are named), else there is ``NoRoom``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from planner.base.codes import SolveStatus
from planner.model.options import TypeProblem
from planner.search.place import greedy_place
from planner.share.outcome import Admission
from planner.share.pools import Entry, Pool, Pools


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
    if greedy_place(problem, [0] * len(problem.items)) is not None:
        return True
    from planner.search.solver import solve

    out = solve(problem, seconds=seconds, workers=workers, subset=range(len(problem.items)), optimize=False)
    return {SolveStatus.INFEASIBLE: False, SolveStatus.UNKNOWN: None}.get(out.status, True)


def at_min(pool: Pool, entries: Sequence[Entry]) -> TypeProblem:
    """The pool's problem with each entry at its min (entries whose min is 0 ask for nothing)."""
    return pool.problem([(e, [e.request.least]) for e in entries if e.request.least > 0])


def admit(pools: Pools, order: Sequence[int], seconds: float, workers: int = 1) -> dict[int, Verdict]:
    """The admission verdict of every plan, deciding them in ``order``."""
    deadline = time.monotonic() + seconds
    admitted: list[int] = []
    out: dict[int, Verdict] = {}
    for step, p in enumerate(order):
        left = max(0.05, (deadline - time.monotonic()) / max(1, len(order) - step))
        blocked: list[Pool] = []
        undecided = False
        for pi in pools.of_plan[p]:
            pool = pools.pools[pi]
            mine = [e for e in pool.entries if e.plan == p]
            before = [e for e in pool.entries if e.plan in admitted]
            verdict = fits(at_min(pool, [*before, *mine]), left, workers)
            if verdict is None:
                undecided = True
            elif not verdict:
                blocked.append(pool)
        if not blocked and not undecided:
            admitted.append(p)
            out[p] = Verdict(Admission.ADMITTED)
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
