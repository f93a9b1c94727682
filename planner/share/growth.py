"""Cards above the mins, by priority, then score, then staying put: one pool, proven in stages.

Notes
-----
Once the admitted plans are known, their requests in a pool choose a count (within their range)
and a split. What counts is lexicographic, so it is solved as a sequence of objectives on one
node-class model (:mod:`planner.search.classes`), each optimum fixed as a constraint before the
next:

1. per priority, highest first: the cards the requests of that priority *held* and still get
   (``Σ min(c, held)``), then all the cards of that priority. Holding comes first so that a plan
   never takes cards from one of equal or higher priority that holds them, and an elastic
   request that shrank grows back only on cards no plan before it keeps (no oscillation);
2. the total score (each request's term of the split table at its chosen count);
3. the requests that keep their previous count and split (so planning again with nothing changed
   changes nothing); the placement then puts instances back where they were.

The fast path comes first: when every request's max, at its best split, places greedily, every
objective is at its bound and nothing needs a solver. ``proven`` is true only when every stage
was solved to optimality.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.base.codes import Method
from planner.model.options import TypeProblem
from planner.search.place import FreeUnits, NodeCounts, Previous, greedy_place, place_one, release
from planner.share.pools import Entry, fewest

# past this many splits in a pool the staged model is too large to prove within a re-plan's time:
# the requests are grown one by one (a plan, not a proof)
MODEL_SPLITS = 3_000

if TYPE_CHECKING:  # OR-Tools is loaded only when the fast path does not decide
    from planner.search import classes
    from planner.search.cpsat import cp_model


@dataclass
class Grown:
    """One pool's answer: a split per item and where each item's instances go (None: no plan)."""

    choice: list[int] | None
    nodes: list[NodeCounts] | None
    proven: bool
    method: Method
    infeasible: bool = False


def _solver(seconds: float, workers: int) -> cp_model.CpSolver:
    """The single-plan search's settings for the class model, whose LP of the distinct-node
    choices pays here too (OR-Tools is loaded only when a stage is solved)."""
    from planner.search.solver import CLASS_LINEARIZATION
    from planner.search.solver import _solver as make

    return make(seconds, workers, CLASS_LINEARIZATION)


def grow(
    problem: TypeProblem,
    levels: Sequence[int],
    held: Sequence[int],
    previous: Previous,
    *,
    seconds: float,
    workers: int = 1,
    fast: bool = True,
) -> Grown:
    """Counts and splits for every item of ``problem`` (``levels``/``held`` per item), placed.
    ``fast``: try the fast path (the caller may know it already failed on these items)."""
    n = len(problem.items)
    if any(not it.splits for it in problem.items):
        return Grown(None, None, True, Method.NONE, infeasible=True)
    placed = greedy_place(problem, [0] * n, previous) if fast else None
    if placed is not None:
        return Grown([0] * n, placed, True, Method.FAST_PATH)
    filled = waterfill(problem, levels, held, previous)
    if sum(len(it.splits) for it in problem.items) > MODEL_SPLITS:
        return _one_by_one(problem, filled)
    from planner.search import classes
    from planner.search.cpsat import cp_model

    keep = [_previous_split(problem, i, previous) for i in range(n)]
    apart = {i: (levels[i], held[i], keep[i]) for i in range(n)}
    cm = classes.build(problem, apart=apart)
    if cm is None:
        return _one_by_one(problem, filled)
    if filled is not None:  # a feasible start for the first stage
        for gi, grp in enumerate(cm.groups):
            for s in range(len(grp.first.splits)):
                cm.model.add_hint(cm.x[gi, s], sum(1 for it in grp.items if filled[0][it.index] == s))
    stages = _stages(cm, levels, held, keep)
    deadline = time.monotonic() + seconds
    solver: cp_model.CpSolver | None = None
    proven = True
    for k, expr in enumerate(stages):
        cm.model.maximize(expr)
        left = max(0.05, (deadline - time.monotonic()) / (len(stages) - k))
        fresh = _solver(left, workers)
        status = fresh.solve(cm.model)
        if status == cp_model.INFEASIBLE:
            return Grown(None, None, True, Method.CP_SAT, infeasible=True)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if solver is None:
                if filled is None:
                    return Grown(None, None, False, Method.CP_SAT)
                return Grown(filled[0], filled[1], False, Method.GREEDY)
            proven = False
            break  # keep the last stage's solution
        solver = fresh
        value = round(solver.objective_value)
        if status == cp_model.OPTIMAL:
            cm.model.add(expr == value)
        else:
            proven = False
            cm.model.add(expr >= value)
        cm.model.clear_hints()  # type: ignore[no-untyped-call]
        for var in (*cm.x.values(), *cm.z.values()):
            cm.model.add_hint(var, solver.value(var))
    assert solver is not None
    choice = _read(cm, solver, keep)
    counts = [[int(solver.value(cm.z[c, p])) for p in range(len(pats))] for c, pats in enumerate(cm.patterns)]
    nodes = greedy_place(problem, choice, previous) or classes.realize(cm, choice, counts, dict(previous))
    return Grown(choice, nodes, proven, Method.CP_SAT)


def _one_by_one(problem: TypeProblem, filled: tuple[list[int], list[NodeCounts]] | None) -> Grown:
    """The answer where the staged model is not built: the waterfill's plan, unless the greedy
    fast path, guided by that plan, fits every request at its best. The fast path depends on the
    order it meets the nodes in, and planning again starts from this answer: taking the better
    one now is what keeps planning again from changing it."""
    if filled is None:
        return Grown(None, None, False, Method.CP_SAT)
    guide = {it.label: (it.splits[s].units, here) for it, s, here in zip(problem.items, *filled, strict=True)}
    placed = greedy_place(problem, [0] * len(problem.items), guide)
    if placed is not None:
        return Grown([0] * len(problem.items), placed, True, Method.FAST_PATH)
    return Grown(filled[0], filled[1], False, Method.GREEDY)


def _previous_split(problem: TypeProblem, i: int, previous: Previous) -> int | None:
    """The split index of item ``i`` that is the count and split it had before, if any."""
    it = problem.items[i]
    if it.label not in previous:
        return None
    units, nodes = previous[it.label]
    instances = sum(nodes.values())
    return next(
        (s for s, sp in enumerate(it.splits) if sp.units == units and sp.instances == instances), None
    )


def _stages(
    cm: classes.ClassModel, levels: Sequence[int], held: Sequence[int], keep: Sequence[int | None]
) -> list[cp_model.LinearExprT]:
    """The objectives in order (module notes); a stage that cannot vary is left out."""
    out: list[cp_model.LinearExprT] = []

    def cards_of(level: int, cap: bool) -> list[tuple[int, int, int]]:
        terms = []
        for gi, grp in enumerate(cm.groups):
            i = grp.first.index
            if levels[i] != level:
                continue
            for s, sp in enumerate(grp.first.splits):
                c = sp.instances * sp.units
                weight = min(c, held[i]) if cap else c
                if weight:
                    terms.append((gi, s, weight))
        return terms

    for level in sorted(set(levels)):
        for cap in (True, False):
            terms = cards_of(level, cap)
            if len({w for _, _, w in terms}) > 1 or (terms and _varies(cm, terms)):
                out.append(sum(w * cm.x[gi, s] for gi, s, w in terms))
    out.append(cm.objective)
    kept = [(gi, keep[grp.first.index]) for gi, grp in enumerate(cm.groups)]
    kept_terms = [cm.x[gi, s] for gi, s in kept if s is not None]
    if kept_terms:
        out.append(sum(kept_terms))
    return out


def _varies(cm: classes.ClassModel, terms: Sequence[tuple[int, int, int]]) -> bool:
    """Whether some group of ``terms`` has a split outside them (so the stage is a real choice)."""
    covered: dict[int, set[int]] = {}
    for gi, s, _ in terms:
        covered.setdefault(gi, set()).add(s)
    return any(len(covered[gi]) < len(cm.groups[gi].first.splits) for gi in covered)


def _read(cm: classes.ClassModel, solver: cp_model.CpSolver, keep: Sequence[int | None]) -> list[int]:
    """A split per item: inside a group the counts go in index order, the previous split first."""
    choice = [-1] * len(cm.problem.items)
    for gi, grp in enumerate(cm.groups):
        left = {s: int(solver.value(cm.x[gi, s])) for s in range(len(grp.first.splits))}
        prev = keep[grp.first.index]
        order = ([prev] if prev is not None else []) + [s for s in left if s != prev]
        queue = [s for s in order for _ in range(left[s])]
        for it, s in zip(grp.items, queue, strict=True):
            choice[it.index] = s
    return choice


def waterfill(
    problem: TypeProblem, levels: Sequence[int], held: Sequence[int], previous: Previous
) -> tuple[list[int], list[NodeCounts]] | None:
    """Every request at what it ran (if all of that still places, else at its min), then grown
    one at a time in the order of growth: per priority, highest first, each request back to what
    it held, then each to its max (input order inside), to the most cards that still place, best
    split first. Planning again with nothing changed puts every request back where it was, so it
    changes nothing. None when the mins do not place greedily."""
    items = problem.items
    if not all(it.splits for it in items):
        return None
    # each at its fewest cards: its min, or the least count above it with a split
    start = [fewest(it) for it in items]
    # what each request ran, where that is still one of its choices: with nothing changed it all
    # goes back, and growth goes on from there (a request never starts below what it held)
    was = [_previous_split(problem, i, previous) for i in range(len(items))]
    placed = None
    if any(s is not None for s in was):
        resumed = [s if s is not None else least for s, least in zip(was, start, strict=True)]
        placed = greedy_place(problem, resumed, previous)
        if placed is not None:
            start = resumed
    if placed is None:
        placed = greedy_place(problem, start, previous)
    if placed is None:
        return None
    free = FreeUnits(problem.nodes)
    for it, here in zip(items, placed, strict=True):
        for node, k in here.items():
            free.take(node, k * it.splits[start[it.index]].units)
    room = [sum(free.free.values())]
    choice = list(start)
    for level in sorted(set(levels)):
        at = [i for i in range(len(items)) if levels[i] == level]
        for i in at:  # back to what it held
            if held[i]:
                _grow_one(
                    problem, i, min(held[i], items[i].request.cards), choice, placed, free, room, previous
                )
        for i in at:  # then to its max
            _grow_one(problem, i, items[i].request.cards, choice, placed, free, room, previous)
    return choice, placed


def _grow_one(
    problem: TypeProblem,
    i: int,
    cap: int,
    choice: list[int],
    placed: list[NodeCounts],
    free: FreeUnits,
    room: list[int],
    previous: Previous,
) -> None:
    """Item ``i`` to the most cards up to ``cap`` that place on what is free (never fewer)."""
    it, now = problem.items[i], problem.items[i].splits[choice[i]]
    had = now.instances * now.units
    if had >= cap:
        return
    release(free, placed[i], now.units)
    room[0] += had
    units, nodes = previous.get(it.label, (0, {}))
    got = None
    for s, sp in enumerate(it.splits):  # most cards first, then best score
        cards = sp.instances * sp.units
        if cards < had:
            break
        if cards > min(cap, room[0]):
            continue
        got = place_one(it, sp, free, nodes if units == sp.units else None)
        if got is not None:
            choice[i], placed[i] = s, got
            break
    if got is None:  # nothing better fits: back where it was
        for node, k in placed[i].items():
            free.take(node, k * now.units)
    room[0] -= it.splits[choice[i]].instances * it.splits[choice[i]].units


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
