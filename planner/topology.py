"""Placement inside the node: which GPUs each instance gets, keeping instances inside one domain.

Notes
-----
For a type whose nodes publish their GPUs one by one (ResourceSlices), the plan also chooses the
devices of every instance. The objective is lexicographic, and each level is proven:

1. the score (section "Scores" of the planning docs), exactly as without devices;
2. fewer instances **straddling** domains (only for operators whose ``topology`` is not ``none``);
3. more free cards left in **whole domains** (domains the plan does not touch stay whole).

An operator with ``topology: required`` may not straddle when its instance fits in one of the
node's domains; that can lower the score, so with such operators level 1 is solved by this
module's model too. Otherwise the score comes from the ordinary search (fast path or node
classes) and this model only re-arranges placements of equal score.

Levels 2 and 3 are solved one after the other (each level's optimum is then a constraint), which
CP-SAT proves far faster than one weighted objective, starting from the ordinary search's placement
packed into domains node by node; a stage that runs out of time leaves the best plan so far.

The model is per node and per domain: for every request, split and node, how many instances sit
inside each domain (``c``), and how many straddle (``t``) taking how many devices from each domain
(``sd``). A domain's contained instances and straddler devices fit its free devices; instances
of a service request still take distinct nodes. Device names are given last: contained instances
take a domain's free devices in order, straddlers take theirs from the domains the model chose.

It models every node, so it is meant for the clusters that publish devices (tens to hundreds of
nodes per type); its time budget is the plan's, and a type it does not prove within it is
reported ``feasible`` with the proven bound of the score.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from planner.codes import SolveStatus
from planner.cpsat import cp_model
from planner.devices import Domain
from planner.options import Item, TypeProblem
from planner.outcome import Outcome, Progress
from planner.place import NodeCounts, Previous
from planner.strategies import Topology

DeviceLists = dict[str, list[list[str]]]  # node -> one list of device names per instance
Value = Callable[[cp_model.IntVar], int]  # a solution: a solver's values, or a hint's


@dataclass
class _Vars:
    c: dict[tuple[int, int, str, int], cp_model.IntVar] = field(default_factory=dict)  # contained per domain
    t: dict[tuple[int, int, str], cp_model.IntVar] = field(default_factory=dict)  # straddling
    sd: dict[tuple[int, int, str, int], cp_model.IntVar] = field(default_factory=dict)  # straddler devices
    y: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    u: dict[tuple[str, int], cp_model.IntVar] = field(default_factory=dict)  # domain left whole


def node_domains(problem: TypeProblem) -> dict[str, tuple[Domain, ...]]:
    """Every usable node's domains; a node without device detail is one anonymous domain."""
    return {name: problem.domains.get(name) or (Domain("", free, ()),) for name, free in problem.nodes}


def may_straddle(item: Item, units: int, domains: Sequence[Domain]) -> bool:
    """Straddling is possible on a node with several domains, and allowed unless ``required``
    forbids it (an instance that fits in one of the node's domains must sit in one)."""
    if units < 2 or len(domains) < 2:
        return False
    return item.topology is not Topology.REQUIRED or units > max(d.total for d in domains)


class TopologyModel:
    def __init__(self, problem: TypeProblem, forced: Mapping[int, int] | None = None) -> None:
        self.problem = problem
        self.domains = node_domains(problem)
        node_free = dict(problem.nodes)
        # free devices per (node, domain); a node without device detail is one anonymous domain
        self.free = {
            (node, d): len(dom.free) if node in problem.domains else node_free[node]
            for node, doms in self.domains.items()
            for d, dom in enumerate(doms)
        }
        self.model = cp_model.CpModel()
        self.v = _Vars()
        self.hinted: dict[cp_model.IntVar, int] | None = None  # a whole solution to fall back on
        m, v = self.model, self.v
        scores = [s.score for it in problem.items for s in it.splits]
        self.scale = math.lcm(*(s.denominator for s in scores)) if scores else 1
        use: dict[tuple[str, int], list[cp_model.LinearExprT]] = {}
        straddles: list[cp_model.LinearExprT] = []
        for it in problem.items:
            ys = []
            for s, split in enumerate(it.splits):
                y = m.new_bool_var(f"y{it.index}_{s}")
                v.y[it.index, s] = y
                ys.append(y)
                if forced is not None and it.index in forced and forced[it.index] != s:
                    m.add(y == 0)
                g, placed = split.units, []
                most = 1 if it.distinct else split.instances
                for node, doms in self.domains.items():
                    here = []
                    for d in range(len(doms)):
                        if self.free[node, d] >= g:
                            c = m.new_int_var(
                                0, min(most, self.free[node, d] // g), f"c{it.index}_{s}_{node}_{d}"
                            )
                            v.c[it.index, s, node, d] = c
                            use.setdefault((node, d), []).append(g * c)
                            here.append(c)
                    if may_straddle(it, g, doms) and node_free[node] >= g:
                        cap = min(most, node_free[node] // g)
                        t = m.new_int_var(0, cap, f"t{it.index}_{s}_{node}")
                        v.t[it.index, s, node] = t
                        parts = []
                        for d in range(len(doms)):
                            if self.free[node, d]:
                                sd = m.new_int_var(
                                    0, min(g * cap, self.free[node, d]), f"sd{it.index}_{s}_{node}_{d}"
                                )
                                v.sd[it.index, s, node, d] = sd
                                use.setdefault((node, d), []).append(sd)
                                parts.append(sd)
                        m.add(sum(parts) == g * t)
                        here.append(t)
                        if it.topology is not Topology.NONE:
                            straddles.append(t)
                    if here:
                        if it.distinct:
                            m.add(sum(here) <= 1)
                        placed.extend(here)
                if placed:
                    m.add(sum(placed) == split.instances * y)
                else:
                    m.add(y == 0)
            m.add_exactly_one(ys)
        whole: list[cp_model.LinearExprT] = []
        for (node, d), free in self.free.items():
            terms = use.get((node, d), [])
            if terms:
                m.add(sum(terms) <= free)
            dom = self.domains[node][d]
            if node in problem.domains and free and free == dom.total:  # whole now: may stay whole
                u = m.new_bool_var(f"u_{node}_{d}")
                v.u[node, d] = u
                if terms:
                    m.add(sum(terms) <= free * (1 - u))
                whole.append(free * u)
        self.score = sum(
            int(split.score * self.scale) * v.y[it.index, s]
            for it in problem.items
            for s, split in enumerate(it.splits)
        )
        self.straddles: list[cp_model.LinearExprT] = straddles
        self.whole: list[cp_model.LinearExprT] = whole
        self.whole_max = sum(self.free.values())

    def secondary(self) -> cp_model.LinearExprT:
        """Straddling instances first, then cards not left in whole domains (lower is better)."""
        weight = self.whole_max + 1
        return cp_model.LinearExpr.sum([weight * t for t in self.straddles] + [-1 * w for w in self.whole])

    def keep(self, value: Value) -> None:
        """Start the next stage from the solution the last one found."""
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        v = self.v
        for group in (v.c, v.t, v.sd, v.y, v.u):
            for var in group.values():
                self.model.add_hint(var, value(var))

    def hint(self, choice: Sequence[int], nodes: Sequence[NodeCounts]) -> None:
        """Start from the ordinary search's placement, its instances packed into domains node by
        node (largest first, each into the fullest domain it fits, else spread over the node's
        domains): a whole solution to start from, which a per-node model of hundreds of nodes
        does not find on its own within seconds."""
        v = self.v
        values: dict[cp_model.IntVar, int] = {}
        complete = True
        for it in self.problem.items:
            for s in range(len(it.splits)):
                values[v.y[it.index, s]] = int(s == choice[it.index])
        for group in (v.c, v.t, v.sd):
            for var in group.values():
                values[var] = 0
        for node, doms in self.domains.items():
            left = [self.free[node, d] for d in range(len(doms))]
            here = sorted(
                (
                    (it.splits[choice[it.index]].units, it.index)
                    for it in self.problem.items
                    for _ in range(nodes[it.index].get(node, 0))
                ),
                reverse=True,
            )
            for g, i in here:
                s = choice[i]
                fits = [d for d in range(len(doms)) if left[d] >= g and (i, s, node, d) in v.c]
                if fits:
                    d = min(fits, key=lambda d: left[d])
                    values[v.c[i, s, node, d]] += 1
                    left[d] -= g
                    continue
                if (i, s, node) not in v.t:
                    complete = False  # the model has no place for this instance here
                    continue
                values[v.t[i, s, node]] += 1
                need = g
                for d in sorted(range(len(doms)), key=lambda d: -left[d]):
                    take = min(need, left[d])
                    if take and (i, s, node, d) in v.sd:
                        values[v.sd[i, s, node, d]] += take
                        left[d] -= take
                        need -= take
            for d in range(len(doms)):
                if (node, d) in v.u:
                    values[v.u[node, d]] = int(left[d] == self.free[node, d])
        for var, value in values.items():
            self.model.add_hint(var, value)
        self.hinted = values if complete else None

    def read(self, value: Value) -> tuple[list[int], list[NodeCounts], list[DeviceLists], list[int]]:
        """Choice, node counts, device names per instance, and how many instances straddle per item."""
        v, problem = self.v, self.problem
        choice = [next(s for s in range(len(it.splits)) if value(v.y[it.index, s])) for it in problem.items]
        nodes: list[NodeCounts] = [{} for _ in problem.items]
        devices: list[DeviceLists] = [{} for _ in problem.items]
        straddling = [0] * len(problem.items)
        cursor = {(node, d): 0 for node, doms in self.domains.items() for d in range(len(doms))}

        def take(node: str, d: int, n: int) -> list[str]:
            dom = self.domains[node][d]
            start = cursor[node, d]
            cursor[node, d] = start + n
            return list(dom.free[start : start + n])

        for it in problem.items:  # contained instances first: each takes devices of one domain
            s, g = choice[it.index], it.splits[choice[it.index]].units
            for node, doms in self.domains.items():
                for d in range(len(doms)):
                    n = value(v.c[it.index, s, node, d]) if (it.index, s, node, d) in v.c else 0
                    for _ in range(n):
                        nodes[it.index][node] = nodes[it.index].get(node, 0) + 1
                        names = take(node, d, g)
                        if names:
                            devices[it.index].setdefault(node, []).append(names)
        for it in problem.items:  # then straddlers, from the domains the model gave them
            s, g = choice[it.index], it.splits[choice[it.index]].units
            for node, doms in self.domains.items():
                t = value(v.t[it.index, s, node]) if (it.index, s, node) in v.t else 0
                if not t:
                    continue
                nodes[it.index][node] = nodes[it.index].get(node, 0) + t
                straddling[it.index] += t
                pool: list[str] = []
                for d in range(len(doms)):
                    if (it.index, s, node, d) in v.sd:
                        pool += take(node, d, value(v.sd[it.index, s, node, d]))
                for k in range(t):
                    if pool:
                        devices[it.index].setdefault(node, []).append(pool[k * g : (k + 1) * g])
        return choice, nodes, devices, straddling


def required_anywhere(problem: TypeProblem) -> bool:
    return any(it.topology is Topology.REQUIRED for it in problem.items)


def _solver(seconds: float, workers: int) -> cp_model.CpSolver:
    from planner.solver import _solver as make

    return make(seconds, workers, 2)


def solve(
    problem: TypeProblem,
    *,
    seconds: float,
    workers: int = 1,
    score: Outcome | None = None,
    previous: Previous | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """The best plan with devices: ``score`` is the ordinary search's outcome, when it can be
    trusted for level 1 (no ``required`` operator); else level 1 is solved here too."""
    start = time.monotonic()
    deadline = start + seconds
    tm = TopologyModel(problem)
    floor: Fraction | None = None
    bound: Fraction | None = None
    best: Value | None = None  # the best solution so far (a solver's, or the placement hinted)
    branches = 0
    status = SolveStatus.OPTIMAL
    if score is not None and score.score is not None and not required_anywhere(problem):
        floor, bound = score.score, score.bound
        status = score.status
        if score.choice is not None and score.nodes is not None:
            tm.hint(score.choice, score.nodes)
            if tm.hinted is not None:
                best = tm.hinted.__getitem__
    else:
        tm.model.maximize(tm.score)
        solver = _solver(deadline - time.monotonic(), workers)
        result = solver.solve(tm.model)
        branches += solver.num_branches
        if result == cp_model.INFEASIBLE:
            return Outcome(SolveStatus.INFEASIBLE, seconds=time.monotonic() - start, branches=branches)
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            out = Outcome(SolveStatus.UNKNOWN, seconds=time.monotonic() - start, branches=branches)
            out.bound = Fraction(math.floor(solver.best_objective_bound + 1e-6), tm.scale)
            return out
        floor = Fraction(round(solver.objective_value), tm.scale)
        bound = Fraction(math.floor(solver.best_objective_bound + 1e-6), tm.scale)
        status = SolveStatus.OPTIMAL if result == cp_model.OPTIMAL else SolveStatus.FEASIBLE
        tm.model.clear_objective()  # type: ignore[no-untyped-call]
        best = solver.value
    assert floor is not None
    tm.model.add(tm.score >= int(floor * tm.scale))
    # Levels 2 and 3 one after the other: as one weighted objective CP-SAT found the same plan but
    # could not prove it (a type of 25 NUMA-zoned nodes: a gap of one card after 10 s); in two
    # stages each level was proven within 0.3 s there. Presolve is off for level 2: on 125 nodes
    # it took 8 s of a stage that then searched for 1 s (without it, 1 to 6 s in all).
    # A stage that finds nothing in time leaves the best solution so far, unproven.
    proven = True
    for level, objective in (("straddling", tm.straddles), ("whole", tm.whole)):
        if not objective:
            continue
        if best is not None:
            tm.keep(best)
        total = cp_model.LinearExpr.sum(objective)
        if level == "straddling":
            tm.model.minimize(total)
        else:
            tm.model.maximize(total)
        stage = _solver(
            max(0.1, (deadline - time.monotonic()) / (2 if level == "straddling" else 1)), workers
        )
        stage.parameters.cp_model_presolve = level != "straddling"
        result = stage.solve(tm.model)
        branches += stage.num_branches
        tm.model.clear_objective()  # type: ignore[no-untyped-call]
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            proven = False
            break
        proven = proven and result == cp_model.OPTIMAL
        found = round(stage.objective_value)
        tm.model.add(total <= found if level == "straddling" else total >= found)
        best = stage.value
    if best is None:  # nothing arranged yet (no straddling possible, no whole domain): any placement
        solver = _solver(max(0.1, deadline - time.monotonic()), workers)
        result = solver.solve(tm.model)
        branches += solver.num_branches
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # the ordinary search found the score without devices; the devices could not be placed
            # in time: report it as unknown rather than a plan without device choices
            return Outcome(
                SolveStatus.UNKNOWN, bound=bound, seconds=time.monotonic() - start, branches=branches
            )
        best = solver.value
    choice, nodes, devices, straddling = tm.read(best)
    if not proven:
        status = SolveStatus.FEASIBLE
    out = Outcome(status, choice, nodes, floor, bound, branches=branches)
    out.devices = devices
    out.straddling = straddling
    out.seconds = time.monotonic() - start
    return out
