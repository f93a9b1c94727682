"""Exact search for one resource type with CP-SAT, and the placement polish.

Notes
-----
Per type the question is: pick one split per request so the sum of terms is highest, and place
every instance on a node so no node exceeds its free units and no two instances of a service
request share a node. That is a generalised bin packing; enumerating combinations and checking
each greedily is both exponential and wrong in both directions. CP-SAT proves optimality (or
infeasibility) and, when time runs out, returns its best plan with the proven bound, which is
exactly what ``optimal`` means in the output.

:func:`solve` uses the model over node classes (:mod:`planner.search.classes`), whose size does not
depend on the number of nodes. The model over individual nodes (:class:`TypeModel`, one integer
per request × split × node) remains for two jobs: types whose node classes would need too many
patterns (a CPU type with hundreds of cores and many request sizes), and the polish.

The polish keeps the proven score fixed and improves placement quality: fewest instances moved
from a previous plan first, then machine requests on fewest nodes and single/special requests on
most nodes. It never models the whole cluster: :func:`polish` takes the requests that can improve
and a neighbourhood of nodes (theirs, and the roomiest others), with everything else held fixed,
within a deterministic-time budget that includes building the model.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction

from planner.base.codes import SolveStatus
from planner.model.options import TypeProblem
from planner.search import classes
from planner.search.cpsat import cp_model
from planner.search.outcome import Outcome, Progress
from planner.search.place import NodeCounts, Previous, greedy_place


class TypeModel:
    """The CP-SAT model of one type problem, optionally restricted and with forced splits."""

    def __init__(
        self,
        problem: TypeProblem,
        subset: Sequence[int] | None = None,
        forced: Mapping[int, int] | None = None,
        previous: Previous | None = None,
    ) -> None:
        self.problem = problem
        self.items = [it for it in problem.items if subset is None or it.index in subset]
        self.previous = previous or {}
        self.model = cp_model.CpModel()
        m = self.model
        scores = [s.score for it in self.items for s in it.splits]
        self.scale = math.lcm(*(s.denominator for s in scores)) if scores else 1
        self.y: dict[tuple[int, int], cp_model.IntVar] = {}
        self.x: dict[tuple[int, int, str], cp_model.IntVar] = {}
        load: dict[str, list[cp_model.LinearExprT]] = {n: [] for n, _ in problem.nodes}
        free = dict(problem.nodes)
        for it in self.items:
            ys = []
            for s, split in enumerate(it.splits):
                y = m.new_bool_var(f"y{it.index}_{s}")
                self.y[it.index, s] = y
                ys.append(y)
                if forced is not None and it.index in forced and forced[it.index] != s:
                    m.add(y == 0)
                xs = []
                for node, f in problem.nodes:
                    cap = f // split.units
                    if cap <= 0:
                        continue
                    cap = 1 if it.distinct else min(cap, split.instances)
                    x = m.new_int_var(0, cap, f"x{it.index}_{s}_{node}")
                    self.x[it.index, s, node] = x
                    xs.append(x)
                    load[node].append(split.units * x)
                if xs:
                    m.add(sum(xs) == split.instances * y)
                else:
                    m.add(y == 0)
            m.add_exactly_one(ys)  # an item with no split makes the model infeasible, rightly
        self.load = {n: sum(terms) for n, terms in load.items() if terms}
        for node, expr in self.load.items():
            m.add(expr <= free[node])
        self._break_symmetry()
        self.objective = sum(
            int(split.score * self.scale) * self.y[it.index, s]
            for it in self.items
            for s, split in enumerate(it.splits)
        )

    def _break_symmetry(self) -> None:
        pinned = {n for _, (_, counts) in self.previous.items() for n in counts}
        classes: dict[int, list[str]] = {}
        for node, f in self.problem.nodes:
            if node in self.load and node not in pinned:
                classes.setdefault(f, []).append(node)
        for nodes in classes.values():
            for a, b in itertools.pairwise(nodes):
                self.model.add(self.load[a] >= self.load[b])

    def hint(self, choice: Sequence[int], nodes: Sequence[NodeCounts]) -> None:
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        for it in self.items:
            c = choice[it.index]
            for s in range(len(it.splits)):
                self.model.add_hint(self.y[it.index, s], int(s == c))
                for node, _ in self.problem.nodes:
                    x = self.x.get((it.index, s, node))
                    if x is not None:
                        self.model.add_hint(x, nodes[it.index].get(node, 0) if s == c else 0)

    def read(self, solver: cp_model.CpSolver) -> tuple[list[int], list[NodeCounts]]:
        choice = [-1] * len(self.problem.items)
        nodes: list[NodeCounts] = [{} for _ in self.problem.items]
        for it in self.items:
            for s in range(len(it.splits)):
                if solver.boolean_value(self.y[it.index, s]):
                    choice[it.index] = s
                    for node, _ in self.problem.nodes:
                        x = self.x.get((it.index, s, node))
                        if x is not None and (v := solver.value(x)):
                            nodes[it.index][node] = v
        return choice, nodes

    def secondary(self, choice: Sequence[int], nodes: Sequence[NodeCounts]) -> cp_model.LinearExprT:
        """Placement quality, lower is better: moves dominate, then concentration and spread.

        ``choice``/``nodes`` are the current solution; the new helper variables are hinted from it so the
        solver starts from a complete solution instead of searching for a first one.
        """
        m = self.model
        weight = len(self.problem.nodes) * max(1, len(self.items)) + 1
        terms: list[cp_model.LinearExprT] = []
        for it in self.items:
            concentrate, spread = it.rule.concentrates, it.rule.spreads
            if concentrate or spread:
                for node, _ in self.problem.nodes:
                    xs = [
                        self.x[it.index, s, node]
                        for s in range(len(it.splits))
                        if (it.index, s, node) in self.x
                    ]
                    if not xs:
                        continue
                    used = m.new_bool_var(f"u{it.index}_{node}")
                    m.add_hint(used, int(nodes[it.index].get(node, 0) > 0))
                    if concentrate:
                        for x in xs:
                            m.add(x == 0).only_enforce_if(~used)
                        terms.append(used)
                    else:
                        m.add(sum(xs) >= 1).only_enforce_if(used)
                        terms.append(-used)
            prev_units, prev_nodes = self.previous.get(it.label, (0, {}))
            s_prev = next((s for s, sp in enumerate(it.splits) if sp.units == prev_units), None)
            if s_prev is None:
                continue
            kept = []
            same_size = choice[it.index] == s_prev
            for node, count in prev_nodes.items():
                xp = self.x.get((it.index, s_prev, node))
                if xp is not None and count > 0:
                    k = m.new_int_var(0, count, f"k{it.index}_{node}")
                    m.add(k <= xp)
                    m.add_hint(k, min(count, nodes[it.index].get(node, 0)) if same_size else 0)
                    kept.append(k)
            instances = sum(sp.instances * self.y[it.index, s] for s, sp in enumerate(it.splits))
            terms.append(weight * (instances - sum(kept)))
        return sum(terms)


def _solver(seconds: float, workers: int, linearization: int = 1) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    # Probing in presolve costs more than it saves on these models: the 97%-full 3×120-node bench
    # case solved in 6.8 s instead of 10.6 s with it on the per-node model (same answer).
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.linearization_level = linearization
    return solver


# The class model's distinct-node rows are enforced by a choice of λ; with the LP relaxation of
# those choices (level 2) CP-SAT proves a tight 97%-full 90-node type in 0.03 s that it could not
# decide in 20 s at the default level, and costs nothing measurable on the 5,000-node cases.
CLASS_LINEARIZATION = 2


class _Reporter(cp_model.CpSolverSolutionCallback):
    def __init__(self, problem: TypeProblem, scale: int, progress: Progress | None, start: float) -> None:
        super().__init__()
        self.problem, self.scale, self.progress, self.start = problem, scale, progress, start

    def on_solution_callback(self) -> None:
        if self.progress is not None:
            best = Fraction(int(self.objective_value), self.scale)
            bound = Fraction(math.floor(self.best_objective_bound), self.scale)
            self.progress(
                f"{self.problem.resource.name}: best {float(best):.4g}, "
                f"bound {float(bound):.4g} after {time.monotonic() - self.start:.1f}s"
            )


def _status(status: cp_model.CpSolverStatus, optimize: bool) -> SolveStatus:
    if status == cp_model.INFEASIBLE:
        return SolveStatus.INFEASIBLE
    if status == cp_model.OPTIMAL or (status == cp_model.FEASIBLE and not optimize):
        return SolveStatus.OPTIMAL
    return SolveStatus.FEASIBLE if status == cp_model.FEASIBLE else SolveStatus.UNKNOWN


def _bound(solver: cp_model.CpSolver, scale: int) -> Fraction:
    return Fraction(math.floor(solver.best_objective_bound + 1e-6), scale)


def solve(
    problem: TypeProblem,
    *,
    seconds: float = 30.0,
    workers: int = 1,
    previous: Previous | None = None,
    forced: Mapping[int, int] | None = None,
    subset: Sequence[int] | None = None,
    optimize: bool = True,
    progress: Progress | None = None,
) -> Outcome:
    """Solve one type exactly within ``seconds`` (over node classes when it can).

    With ``subset`` only those items are considered and no placement is returned, only the
    verdict (the conflict search asks "can these fit together?").
    """
    start = time.monotonic()
    cm = classes.build(problem, subset=subset, forced=forced)
    if cm is None:
        return solve_nodes(
            problem, seconds=seconds, workers=workers, previous=previous, forced=forced, subset=subset,
            optimize=optimize, progress=progress, start=start,
        )  # fmt: skip
    if optimize:
        cm.model.maximize(cm.objective)
    solver = _solver(seconds, workers, CLASS_LINEARIZATION)
    status = solver.solve(cm.model, _Reporter(cm.problem, cm.scale, progress, start) if optimize else None)
    out = Outcome(status=_status(status, optimize), branches=solver.num_branches)
    if out.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) and subset is None:
        choice, counts = cm.read(solver, previous)
        out.choice = choice
        out.nodes = greedy_place(problem, choice, previous) or classes.realize(
            cm, choice, counts, previous or {}
        )
        if optimize:
            out.score = Fraction(round(solver.objective_value), cm.scale)
            out.bound = _bound(solver, cm.scale)
    elif optimize and out.status is not SolveStatus.INFEASIBLE:
        out.bound = _bound(solver, cm.scale)
    out.seconds = time.monotonic() - start
    return out


def solve_nodes(
    problem: TypeProblem,
    *,
    seconds: float = 30.0,
    workers: int = 1,
    previous: Previous | None = None,
    forced: Mapping[int, int] | None = None,
    subset: Sequence[int] | None = None,
    optimize: bool = True,
    progress: Progress | None = None,
    start: float | None = None,
) -> Outcome:
    """The per-node model: for types whose node classes would need too many patterns (and tests)."""
    start = time.monotonic() if start is None else start
    tm = TypeModel(problem, subset=subset, forced=forced, previous=previous)
    if optimize:
        tm.model.maximize(tm.objective)
    solver = _solver(seconds, workers)
    status = solver.solve(tm.model, _Reporter(problem, tm.scale, progress, start) if optimize else None)
    out = Outcome(status=_status(status, optimize), branches=solver.num_branches)
    if out.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        out.choice, out.nodes = tm.read(solver)
        if optimize:
            out.score = Fraction(round(solver.objective_value), tm.scale)
            out.bound = _bound(solver, tm.scale)
    elif optimize and out.status is not SolveStatus.INFEASIBLE:
        out.bound = _bound(solver, tm.scale)
    out.seconds = time.monotonic() - start
    return out


NEIGHBOURHOOD = 48  # the roomiest other nodes a polish may move instances onto
POLISH_VARIABLES = 40_000  # a bigger per-node model is not worth its build time


def _neighbourhood(
    problem: TypeProblem, out: Outcome, picked: Sequence[int], previous: Previous
) -> tuple[TypeProblem, dict[str, tuple[int, dict[str, int]]]] | None:
    """The polish's sub-problem: the picked items, their nodes and the roomiest others, rest fixed."""
    assert out.choice is not None and out.nodes is not None
    free = dict(problem.nodes)
    fixed: dict[str, int] = {}
    used: dict[str, int] = {}
    hood: set[str] = set()
    for it in problem.items:
        units = it.splits[out.choice[it.index]].units
        for node, n in out.nodes[it.index].items():
            used[node] = used.get(node, 0) + n * units
            if it.index not in picked:
                fixed[node] = fixed.get(node, 0) + n * units
    for i in picked:
        hood |= set(out.nodes[i])
        hood |= {n for n in previous.get(problem.items[i].label, (0, {}))[1] if n in free}
    others = sorted((n for n in free if n not in hood), key=lambda n: (used.get(n, 0) - free[n], n))
    hood |= set(others[:NEIGHBOURHOOD])
    nodes = tuple((n, free[n] - fixed.get(n, 0)) for n in sorted(hood))
    items = tuple(replace(problem.items[i], index=j, rejected=()) for j, i in enumerate(picked))
    if sum(len(it.splits) for it in items) * len(nodes) > POLISH_VARIABLES:
        return None
    prev = {
        problem.items[i].label: (u, {n: c for n, c in before.items() if n in hood})
        for i in picked
        if (entry := previous.get(problem.items[i].label)) is not None
        for u, before in [entry]
    }
    return TypeProblem(problem.resource, nodes, items, problem.any_node), prev


def polish(
    problem: TypeProblem,
    out: Outcome,
    seconds: float,
    picked: Sequence[int],
    *,
    workers: int = 1,
    previous: Previous | None = None,
) -> None:
    """Keep the score, improve the placement of ``picked`` items in their neighbourhood.

    The old placement stays when no better one is found within the budget (deterministic time,
    not wall time: the same input gives the same placement on a busy machine).
    """
    assert out.choice is not None and out.nodes is not None and out.score is not None
    start = time.monotonic()
    found = _neighbourhood(problem, out, picked, previous or {})
    if found is None:
        out.notes.append("placement not polished (neighbourhood too large)")
        return
    sub, prev = found
    choice = [out.choice[i] for i in picked]
    nodes = [dict(out.nodes[i]) for i in picked]
    tm = TypeModel(sub, previous=prev)
    score = sum((sub.items[j].splits[c].score for j, c in enumerate(choice)), Fraction(0))
    tm.model.add(tm.objective >= int(score * tm.scale))
    tm.hint(choice, nodes)
    tm.model.minimize(tm.secondary(choice, nodes))
    solver = _solver(seconds * 4, workers)
    solver.parameters.max_deterministic_time = seconds
    status = solver.solve(tm.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        new_choice, new_nodes = tm.read(solver)
        for j, i in enumerate(picked):
            out.choice[i], out.nodes[i] = new_choice[j], new_nodes[j]
        out.branches += solver.num_branches
        out.notes.append("placement " + ("optimal" if status == cp_model.OPTIMAL else "improved"))
    out.seconds += time.monotonic() - start
