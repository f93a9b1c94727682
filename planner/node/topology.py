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

Each level has a bound that holds for every plan at the score (:mod:`planner.node.arrange`), and a
layout made for the domains without a solver usually reaches both: then the plan is proven and no
model is built. Otherwise levels 2 and 3 are solved one after the other (each level's optimum is
then a constraint), which CP-SAT proves far faster than one weighted objective, starting from the
better of that layout and the ordinary search's placement packed into domains; a level its layout
already reaches is proven by the bound, and a stage that runs out of time leaves the best plan so
far. Only the splits that can reach the score are modelled.

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
from dataclasses import dataclass, field
from fractions import Fraction

from planner.base.codes import SolveStatus
from planner.base.strategies import Topology
from planner.model.options import TypeProblem
from planner.node.arrange import Before, Domains, Layout, admissible, arrange, pack
from planner.search.cpsat import cp_model
from planner.search.outcome import Outcome, Progress
from planner.search.place import Previous, PreviousDevices


@dataclass
class _Vars:
    c: dict[tuple[int, int, str, int], cp_model.IntVar] = field(default_factory=dict)  # contained per domain
    t: dict[tuple[int, int, str], cp_model.IntVar] = field(default_factory=dict)  # straddling
    sd: dict[tuple[int, int, str, int], cp_model.IntVar] = field(default_factory=dict)  # straddler devices
    y: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    u: dict[tuple[str, int], cp_model.IntVar] = field(default_factory=dict)  # domain left whole

    def all(self) -> list[cp_model.IntVar]:
        return [*self.c.values(), *self.t.values(), *self.sd.values(), *self.y.values(), *self.u.values()]


class TopologyModel:
    """Per request, split, node and domain: how many instances sit inside the domain (``c``), how
    many straddle the node (``t``) taking how many devices from each domain (``sd``)."""

    def __init__(self, problem: TypeProblem, doms: Domains, floor: Fraction | None = None) -> None:
        self.problem = problem
        self.doms = doms
        self.model = cp_model.CpModel()
        self.v = _Vars()
        m, v = self.model, self.v
        scores = [s.score for it in problem.items for s in it.splits]
        self.scale = math.lcm(*(s.denominator for s in scores)) if scores else 1
        use: dict[tuple[str, int], list[cp_model.LinearExprT]] = {}
        straddles: list[cp_model.IntVar] = []
        allowed = admissible(problem, floor)
        for it in problem.items:
            ys = []
            for s in allowed[it.index]:
                split = it.splits[s]
                y = m.new_bool_var(f"y{it.index}_{s}")
                v.y[it.index, s] = y
                ys.append(y)
                g, placed = split.units, []
                most = 1 if it.distinct else split.instances
                for node, domains in doms.domains.items():
                    here = []
                    for d in range(len(domains)):
                        if doms.contains(g, (node, d)):
                            c = m.new_int_var(
                                0, min(most, doms.free[node, d] // g), f"c{it.index}_{s}_{node}_{d}"
                            )
                            v.c[it.index, s, node, d] = c
                            use.setdefault((node, d), []).append(g * c)
                            here.append(c)
                    if doms.straddles(it, g, node):
                        cap = min(most, doms.node_free[node] // g)
                        t = m.new_int_var(0, cap, f"t{it.index}_{s}_{node}")
                        v.t[it.index, s, node] = t
                        parts = []
                        for d in range(len(domains)):
                            if doms.free[node, d]:
                                sd = m.new_int_var(
                                    0, min(g * cap, doms.free[node, d]), f"sd{it.index}_{s}_{node}_{d}"
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
        for spot, free in doms.free.items():
            terms = use.get(spot, [])
            if terms:
                m.add(sum(terms) <= free)
            if spot in doms.whole:  # whole now: may stay whole
                u = m.new_bool_var(f"u_{spot[0]}_{spot[1]}")
                v.u[spot] = u
                if terms:
                    m.add(sum(terms) <= free * (1 - u))
                whole.append(free * u)
        self.score = sum(int(problem.items[i].splits[s].score * self.scale) * y for (i, s), y in v.y.items())
        self.straddles = straddles
        self.whole = whole

    def hint(self, layout: Layout) -> None:
        """Start the next search from ``layout``."""
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        v = self.v
        values = dict.fromkeys(v.all(), 0)
        for (i, s), y in v.y.items():
            values[y] = int(s == layout.choice[i])
        for (i, node, d), n in layout.contained.items():
            values[v.c[i, layout.choice[i], node, d]] += n
        for (i, node), n in layout.straddling.items():
            values[v.t[i, layout.choice[i], node]] += n
        for (i, node, d), n in layout.spans.items():
            values[v.sd[i, layout.choice[i], node, d]] += n
        used = layout.touched()
        for spot, u in v.u.items():
            values[u] = int(spot not in used)
        for var, value in values.items():
            self.model.add_hint(var, value)

    def layout(self, solver: cp_model.CpSolver) -> Layout:
        """The layout of a solution."""
        v = self.v
        choice = [0] * len(self.problem.items)
        for (i, s), y in v.y.items():
            if solver.value(y):
                choice[i] = s
        out = Layout(choice)
        for (i, s, node, d), c in v.c.items():
            if s == choice[i] and (n := solver.value(c)):
                out.contained[i, node, d] = n
        for (i, s, node), t in v.t.items():
            if s == choice[i] and (n := solver.value(t)):
                out.straddling[i, node] = n
        for (i, s, node, d), sd in v.sd.items():
            if s == choice[i] and (n := solver.value(sd)):
                out.spans[i, node, d] = n
        return out


def required_anywhere(problem: TypeProblem) -> bool:
    return any(it.topology is Topology.REQUIRED for it in problem.items)


def _solver(seconds: float, workers: int) -> cp_model.CpSolver:
    from planner.search.solver import _solver as make

    return make(seconds, workers, 2)


def _outcome(
    doms: Domains,
    layout: Layout,
    status: SolveStatus,
    floor: Fraction,
    bound: Fraction | None,
    before: Before,
) -> Outcome:
    nodes, devices, straddling = doms.read(layout, before)
    out = Outcome(status, layout.choice, nodes, floor, bound)
    out.devices = devices
    out.straddling = straddling
    return out


def solve(
    problem: TypeProblem,
    *,
    seconds: float,
    workers: int = 1,
    score: Outcome | None = None,
    previous: Previous | None = None,
    previous_devices: PreviousDevices | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """The best plan with devices: ``score`` is the ordinary search's outcome, when it can be
    trusted for level 1 (no ``required`` operator); else level 1 is solved here too."""
    start = time.monotonic()
    deadline = start + seconds
    doms = Domains(problem)
    had = previous_devices or {}
    before = {it.index: had[it.label] for it in problem.items if it.label in had}
    branches = 0
    layouts: list[Layout] = []
    if score is not None and score.score is not None and not required_anywhere(problem):
        floor, bound, status = score.score, score.bound, score.status
        if score.choice is not None:
            if score.nodes is not None and (packed := pack(problem, doms, score.choice, score.nodes)):
                layouts.append(packed)
            if arranged := arrange(problem, doms, score.choice, previous or {}, before):
                layouts.append(arranged)
    else:
        first = TopologyModel(problem, doms)
        first.model.maximize(first.score)
        solver = _solver(deadline - time.monotonic(), workers)
        result = solver.solve(first.model)
        branches += solver.num_branches
        if result == cp_model.INFEASIBLE:
            return Outcome(SolveStatus.INFEASIBLE, seconds=time.monotonic() - start, branches=branches)
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            out = Outcome(SolveStatus.UNKNOWN, seconds=time.monotonic() - start, branches=branches)
            out.bound = Fraction(math.floor(solver.best_objective_bound + 1e-6), first.scale)
            return out
        floor = Fraction(round(solver.objective_value), first.scale)
        bound = Fraction(math.floor(solver.best_objective_bound + 1e-6), first.scale)
        status = SolveStatus.OPTIMAL if result == cp_model.OPTIMAL else SolveStatus.FEASIBLE
        layouts.append(first.layout(solver))
        if arranged := arrange(problem, doms, layouts[0].choice, previous or {}, before):
            layouts.append(arranged)
    allowed = admissible(problem, floor)
    floor2, ceiling3 = doms.straddle_floor(allowed), doms.whole_ceiling(allowed)
    # the first layout wins a tie: the ordinary search's placement, which places each strategy's
    # instances its way; on a re-plan that knows the devices, the layout that puts instances back
    # into the domains of their devices, so that they can keep them (and their pods)
    if before:
        layouts.reverse()
    best = min(layouts, key=doms.rank, default=None)
    if best is not None and doms.rank(best) == (floor2, -ceiling3):
        out = _outcome(doms, best, status, floor, bound, before)  # both levels proven by their bounds
        out.branches, out.seconds = branches, time.monotonic() - start
        return out
    tm = TopologyModel(problem, doms, floor)
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
        total = cp_model.LinearExpr.sum(objective)
        if best is not None and level == "straddling" and doms.straddled(best) == floor2:
            tm.model.add(total <= floor2)  # proven by the bound
            continue
        if best is not None and level == "whole":
            # the ceiling takes every instance that need not straddle to be inside a domain,
            # true only while level 2 holds at its floor
            if doms.straddled(best) > floor2:
                ceiling3 = doms.whole_ceiling(allowed, contained=False)
            if doms.kept_whole(best) == ceiling3:
                tm.model.add(total >= ceiling3)  # proven by the bound
                continue
        if best is not None:
            tm.hint(best)
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
        best = tm.layout(stage)
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
        best = tm.layout(solver)
    out = _outcome(doms, best, status if proven else SolveStatus.FEASIBLE, floor, bound, before)
    out.branches, out.seconds = branches, time.monotonic() - start
    return out
