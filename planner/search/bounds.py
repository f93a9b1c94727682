"""Lower bounds that refute a packing at once: Martello–Toth L2 and the Gilmore–Gomory LP bound.

Notes
-----
A type whose requests each admit one split is a pure packing question: instances of fixed sizes
into nodes of given free units. Requests with several splits are left out, which relaxes the
question, so a refutation of the rest still refutes the type. Instances of one service request
need distinct nodes; leaving that rule out relaxes it too.

**L2** (Martello & Toth, 1990) counts, for a threshold ``K``, the instances that need a node of
their own and the room the middle-sized ones leave for the small ones. It is exact arithmetic on
integers and costs nothing; with nodes of several sizes it is applied as if every node were as
large as the largest, which only weakens it.

**The LP bound** is the linear relaxation of the pattern model (Gilmore & Gomory): how many nodes
of each class take each *pattern* (a multiset of instance sizes that fits the node), with every
size's demand covered. It is solved by column generation (GLOP for the master, a bounded knapsack
for pricing). Rounded up it equals the optimum on almost every instance of the classic families.

Column generation is stabilised (Wentges smoothing): each pricing is done at a point between
the duals with the best Lagrangian bound so far (starting from the sizes themselves, the
continuous bound's duals) and the master's, and a pricing there that finds nothing for the
master is repeated at the master's own duals. Without it the duals swing from round to round:
on nodes of 100,000 units with 200 sizes (Scholl's HARD0) the bound did not settle in 30 s;
with it, it settles in about 200 rounds.
When at most four instances fit a node of a large capacity, pricing pairs two *halves* of at most
two instances each (exact, with a small branching where the best two share an instance; about
2 ms a round on HARD0's 200 sizes against OR-Tools' 9 ms, which cut its LP's CPU by two thirds);
up to eight, OR-Tools' exact knapsack in C++; otherwise a vectorised DP, which also hands back a
few other good patterns per round.

The LP is solved in floating point, so its value is not the proof. The proof is a *certificate*
read off its duals: weights ``π_g ≥ 0`` per size, scaled to integers. A node of class ``c`` holds
at most ``V_c`` = the exact best knapsack of those weights in its free units, so if
``Σ_g π_g·d_g > Σ_c n_c·V_c`` no packing exists (every demanded instance must sit somewhere).
The check is integer arithmetic with exactly solved knapsacks (or an LP upper bound of one, which
is still an upper bound), so a refutation never rests on a rounding error. The same weights also
name the requests that take part (sizes with ``π_g > 0``): a smaller set that still cannot fit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.model.options import TypeProblem

SCALE = 1 << 20  # dual weights are scaled to integers with this many steps per unit
QUICK_CELLS = 2_000_000  # a pricing past this many cells first tries a coarser, quicker one
UNREACHABLE = -(1 << 62)  # a weight no pattern has exactly
MORE_COLUMNS = 4  # other patterns a pricing by DP offers besides the best
SMOOTHING = 0.8  # Wentges smoothing: the weight of the best duals so far in the pricing point
FEW_PER_NODE = 8  # at most this many instances fit a node (on a large one): priced in C++
HALVES_TRIES = 64  # pairs of halves of the best value checked for one that shares no instance
HALVES_KEPT = 2  # halves of so many (sizes, copies, capacity) kept for the next rounds (≤ 10 MB each)
HALVES_NODES = 64  # branches of the halves' search before the pricing falls back to OR-Tools'
HALVES_INSTANCES = 600  # halves of more instances than this (180,000 pairs) are not worth building
HALVES_OUT = 1 << 50  # the value that keeps an instance out of every best half
DP_CELLS = 30_000_000  # a knapsack with fewer (parts × capacity) cells is solved by dynamic programming


@dataclass(frozen=True)
class Bins:
    """A packing view of one type: instance sizes with their demand, node classes with counts."""

    sizes: tuple[int, ...]  # distinct instance sizes, largest first
    demand: tuple[int, ...]  # instances of each size
    classes: tuple[tuple[int, int], ...]  # (free units, nodes), largest first, free > 0
    items: tuple[int, ...]  # the requests (indices into the problem's items) taking part
    units: tuple[int, ...] = ()  # the instance size of each of those requests

    @property
    def nodes(self) -> int:
        return sum(n for _, n in self.classes)

    @property
    def largest(self) -> int:
        return self.classes[0][0] if self.classes else 0


def one_split(problem: TypeProblem, subset: Sequence[int] | None = None) -> list[int]:
    """The requests (of ``subset``) with exactly one admissible split: the packing part of a type."""
    return [
        it.index for it in problem.items if len(it.splits) == 1 and (subset is None or it.index in subset)
    ]


def bins_of(problem: TypeProblem, items: Sequence[int]) -> Bins:
    """The packing view of ``items`` (each with one split) on the type's nodes."""
    demand: dict[int, int] = {}
    for i in items:
        sp = problem.items[i].splits[0]
        demand[sp.units] = demand.get(sp.units, 0) + sp.instances
    counts: dict[int, int] = {}
    for _, f in problem.nodes:
        if f > 0:
            counts[f] = counts.get(f, 0) + 1
    sizes = tuple(sorted(demand, reverse=True))
    ordered = tuple(sorted(items))
    return Bins(
        sizes,
        tuple(demand[g] for g in sizes),
        tuple(sorted(counts.items(), reverse=True)),
        ordered,
        tuple(problem.items[i].splits[0].units for i in ordered),
    )


def l2(sizes: Sequence[int], demand: Sequence[int], capacity: int) -> int:
    """Martello–Toth L2: a lower bound on the bins of ``capacity`` these instances need.

    For each threshold ``K ≤ C/2``: instances larger than ``C − K`` (J1) and those in
    ``(C/2, C − K]`` (J2) each need a bin of their own, and the instances in ``[K, C/2]`` (J3) fill
    what J2 leaves before they open bins of their own.
    """
    if not sizes or capacity <= 0:
        return 0
    c = capacity
    pairs = sorted(zip(sizes, demand, strict=True), reverse=True)
    best = 0
    ks = sorted({0} | {g for g, _ in pairs if 2 * g <= c})
    for k in ks:
        j1 = j2 = 0
        j2_sum = j3_sum = 0
        for g, d in pairs:
            if g > c - k:
                j1 += d
            elif 2 * g > c:
                j2 += d
                j2_sum += g * d
            elif g >= k:
                j3_sum += g * d
        room = j2 * c - j2_sum
        extra = max(0, -(-(j3_sum - room) // c))
        best = max(best, j1 + j2 + extra)
    return best


def knapsack(
    values: Sequence[int],
    sizes: Sequence[int],
    copies: Sequence[int],
    capacity: int,
    seconds: float = 1.0,
    exact: bool = True,
    more: list[list[int]] | None = None,
    floor: int = 0,
) -> tuple[int, list[int], bool]:
    """max Σ v·a with Σ g·a ≤ capacity, 0 ≤ a ≤ copies, integers: (value, a, proven optimal).

    ``exact=False`` allows a quick answer on a large capacity (a good pattern, not the best).
    ``floor``: only patterns of at least this many units count (by DP, where it is used; the
    other ways ignore it, which can only raise the value: still an upper bound).

    Copies are split in powers of two (1, 2, 4, ..., rest), so the bounded knapsack is a 0/1 one
    of a few items per size, solved exactly by OR-Tools' branch and bound. If that is cut short,
    the value returned is the (fractional) Dantzig bound instead: still an upper bound.
    """
    from ortools.algorithms.python import knapsack_solver

    parts: list[tuple[int, int]] = []  # (size index, copies in this part)
    for j, (v, g, u) in enumerate(zip(values, sizes, copies, strict=True)):
        u = min(u, capacity // g) if g > 0 else 0
        if (v <= 0 and floor <= 0) or u <= 0:  # with a floor, worthless instances still fill
            continue
        step = 1
        while u > 0:
            take = min(step, u)
            parts.append((j, take))
            u -= take
            step *= 2
    counts = [0] * len(sizes)
    if not parts:
        return 0, counts, True
    per_node = capacity // min(g for g in sizes if g > 0)
    few = per_node <= FEW_PER_NODE and capacity > 10_000
    instances = sum(min(u, capacity // g, 4) for g, u in zip(sizes, copies, strict=True) if g > 0)
    if few and per_node <= 4 and floor <= 0 and instances <= HALVES_INSTANCES:
        # at most four instances a node: two halves of at most two each (exact; None: it gave up)
        found = _halves(sizes, copies, capacity).best(values)
        if found is not None:
            return found[0], found[1], True
    if not exact and not few and len(parts) * (capacity + 1) > QUICK_CELLS:
        # a quick pricing: sizes rounded up and the capacity down to a coarser unit, so every
        # pattern found fits (its value is exact for it; the best may be missed)
        unit = -(-len(parts) * (capacity + 1) // QUICK_CELLS)
        coarse = [-(-g // unit) for g in sizes]
        value, counts, _ = _dp(values, coarse, parts, capacity // unit, counts)
        return value, counts, False
    dp = len(parts) * (capacity + 1) <= DP_CELLS
    if dp and not few:
        return _dp(values, sizes, parts, capacity, counts, more, floor)
    # a few instances per node on a large capacity: OR-Tools' divide-and-conquer DP (exact, in
    # C++) is several times quicker than the vectorised one; else branch and bound
    kind = "KNAPSACK_DIVIDE_AND_CONQUER_SOLVER" if dp else "KNAPSACK_MULTIDIMENSION_BRANCH_AND_BOUND_SOLVER"
    solver = knapsack_solver.KnapsackSolver(getattr(knapsack_solver.SolverType, kind), "pricing")
    solver.set_time_limit(seconds)
    solver.init([values[j] * n for j, n in parts], [[sizes[j] * n for j, n in parts]], [capacity])
    best = int(solver.solve())
    for p, (j, n) in enumerate(parts):
        if solver.best_solution_contains(p):
            counts[j] += n
    if solver.is_solution_optimal():
        return best, counts, True
    return _dantzig(values, sizes, copies, capacity), counts, False


class _Halves:
    """The best pattern when at most four instances fit a node: two halves of at most two.

    The instances are numbered one by one (a size with ``k`` copies gives ``k``); a *half* is no
    instance, one, or two distinct ones. Every pattern of at most four instances is the union of
    two disjoint halves, so the best half plus the best half in the room it leaves is an upper
    bound on the best pattern, and it *is* the best when the two share no instance. When the best
    pair shares an instance ``x``, the search branches: patterns without ``x``, and ``x`` plus the
    best of the rest in the room ``x`` leaves; a branch whose upper bound is no better than a
    pattern found is dropped. The halves and their order by size depend only on the sizes, so
    they are built once for all the rounds of a column generation, and a pricing is a few passes
    over them.
    """

    def __init__(self, sizes: Sequence[int], copies: Sequence[int], capacity: int) -> None:
        import numpy as np

        unit_size = []
        self.size_of: list[int] = []  # the size index of each numbered instance
        for j, (g, c) in enumerate(zip(sizes, copies, strict=True)):
            for _ in range(min(c, capacity // g, 4) if g > 0 else 0):
                self.size_of.append(j)
                unit_size.append(g)
        n = len(self.size_of)
        self.unit_size = unit_size
        ug = np.array([*unit_size, 0], dtype=np.int64)  # the last one stands for no instance
        a, b = np.triu_indices(n, 1)
        first = np.concatenate([[n], np.arange(n), a])
        second = np.concatenate([[n], np.full(n, n), b])
        weight = ug[first] + ug[second]
        keep = weight <= capacity
        self.first, self.second, self.weight = first[keep], second[keep], weight[keep]
        self.order = np.argsort(self.weight, kind="stable")
        self.sorted_weight = self.weight[self.order]
        self.capacity = capacity
        # the last half in size order that fits beside each half (the empty one always does)
        self.room = self._room(capacity)
        self.n = n
        self.positions = np.arange(len(self.order))

    def _room(self, capacity: int) -> Any:
        import numpy as np

        return np.searchsorted(self.sorted_weight, capacity - self.weight, side="right") - 1

    def best(self, values: Sequence[int]) -> tuple[int, list[int]] | None:
        """The best pattern's value and instances per size; None past :data:`HALVES_NODES`."""
        import numpy as np

        base = np.array([*(values[j] for j in self.size_of), 0], dtype=np.int64)
        best_value, best_units = -1, []
        todo: list[tuple[tuple[int, ...], tuple[int, ...], int]] = [((), (), self.capacity)]
        seen = 0
        while todo:
            forced, avoided, room = todo.pop()
            seen += 1
            if seen > HALVES_NODES:
                return None
            fixed = sum(int(base[u]) for u in forced)
            uv = base.copy()
            uv[[*forced, *avoided]] = -HALVES_OUT
            hv = uv[self.first] + uv[self.second]
            sv = hv[self.order]
            run = np.maximum.accumulate(sv)
            # the position of a half holding the running maximum, for every prefix of the order
            at = np.maximum.accumulate(np.where(sv == run, self.positions, 0))
            fits = self.weight <= room
            beside = self.room if room == self.capacity else self._room(room)
            partner = self.order[at[np.where(fits, beside, 0)]]
            total = np.where(fits, hv + hv[partner], -HALVES_OUT)
            top = int(total.max())
            if fixed + top <= best_value:
                continue
            shared = -1
            for h in np.flatnonzero(total == top)[:HALVES_TRIES]:
                p = int(partner[h])
                units = [int(u) for u in (self.first[h], self.second[h], self.first[p], self.second[p])]
                units = [u for u in units if u < self.n]
                if len(set(units)) == len(units):
                    best_value, best_units = fixed + top, [*forced, *units]
                    break
                if shared < 0:
                    shared = next(u for u in units if units.count(u) > 1)
            else:
                # no pair of the best value is disjoint: without the shared instance, or with it
                todo.append(((*forced,), (*avoided, shared), room))
                if self.unit_size[shared] <= room:
                    todo.append(((*forced, shared), avoided, room - self.unit_size[shared]))
        counts = [0] * len(values)
        for u in best_units:
            counts[self.size_of[u]] += 1
        return best_value, counts


_HALVES: dict[tuple[tuple[int, ...], tuple[int, ...], int], _Halves] = {}


def _halves(sizes: Sequence[int], copies: Sequence[int], capacity: int) -> _Halves:
    key = (tuple(sizes), tuple(copies), capacity)
    found = _HALVES.get(key)
    if found is None:
        if len(_HALVES) >= HALVES_KEPT:
            _HALVES.clear()
        found = _HALVES[key] = _Halves(sizes, copies, capacity)
    return found


def _dp(
    values: Sequence[int],
    sizes: Sequence[int],
    parts: Sequence[tuple[int, int]],
    capacity: int,
    counts: list[int],
    more: list[list[int]] | None = None,
    floor: int = 0,
) -> tuple[int, list[int], bool]:
    """The 0/1 knapsack of ``parts`` by dynamic programming over the capacity (exact, vectorised).

    ``more``, when given, receives a few other good patterns read off the same table (the best
    fillings of smaller capacities): column generation then adds several columns per round.
    With a ``floor``, the table holds the best value of *exactly* each weight, and only weights
    from the floor up count (no such pattern: value 0, no instance).
    """
    import numpy as np

    best = np.zeros(capacity + 1, dtype=np.int64)
    if floor > 0:
        best[1:] = UNREACHABLE
    taken = np.zeros((len(parts), capacity + 1), dtype=np.bool_)
    for p, (j, n) in enumerate(parts):
        w, v = sizes[j] * n, values[j] * n
        if w > capacity:
            continue
        cand = best[:-w] + v if w else best + v
        better = cand > best[w:]
        taken[p, w:] = better
        best[w:] = np.where(better, cand, best[w:])
    top = floor + int(np.argmax(best[floor:]))
    value = int(best[top])
    if value < 0:  # nothing weighs from the floor up
        return 0, counts, True

    def read(c: int, counts: list[int]) -> list[int]:
        for p in range(len(parts) - 1, -1, -1):
            if taken[p, c]:
                j, n = parts[p]
                counts[j] += n
                c -= sizes[j] * n
        return counts

    read(top, counts)
    if more is not None:
        order = floor + np.argsort(-best[floor:], kind="stable")[: MORE_COLUMNS * 4]
        seen = {tuple(counts)}
        for c in order[1:]:
            if best[c] < 0:
                break
            alt = tuple(read(int(c), [0] * len(counts)))
            if alt not in seen:
                seen.add(alt)
                more.append(list(alt))
                if len(more) >= MORE_COLUMNS:
                    break
    return value, counts, True


def _dantzig(values: Sequence[int], sizes: Sequence[int], copies: Sequence[int], capacity: int) -> int:
    """The LP bound of a bounded knapsack, rounded up: an upper bound on its integer optimum."""
    order = sorted(range(len(sizes)), key=lambda j: -values[j] / sizes[j])
    left, total = capacity, 0
    for j in order:
        if values[j] <= 0:
            break
        n = min(copies[j], left // sizes[j])
        total += n * values[j]
        left -= n * sizes[j]
        if n < copies[j] and left > 0:
            return total + math.ceil(values[j] * left / sizes[j])
    return total


@dataclass
class LpBound:
    """What column generation established for one :class:`Bins`."""

    value: float  # the LP optimum (nodes, fractional), or the best bound met when cut short
    converged: bool  # no improving pattern left: ``value`` is the LP optimum
    refuted: bool  # a checked certificate shows that no packing exists
    needed: int  # nodes needed at least (with one class of nodes; else the count that would do)
    weights: list[int] = field(default_factory=list)  # the certificate's integer weights per size
    columns: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)  # (class, counts per size)
    primal: list[float] = field(default_factory=list)  # the LP's value of each column
    seconds: float = 0.0


def certificate(bins: Bins, weights: Sequence[int], seconds: float = 1.0, floor: int = 0) -> tuple[bool, int]:
    """Is ``Σ π·d > Σ n_c·V_c``? And the nodes needed at least on the largest class's capacity.

    ``floor`` (one class only): ``V`` over the patterns of at least ``floor`` units, the only
    ones a packing on these nodes can use when at most ``capacity − floor`` units may be wasted
    in all. The count of nodes needed is then not known (0).
    """
    need = sum(w * d for w, d in zip(weights, bins.demand, strict=True))
    if need <= 0:
        return False, 0
    room = 0
    top = 0
    for free, n in bins.classes:
        v, _, _ = knapsack(weights, bins.sizes, bins.demand, free, seconds, floor=floor)
        room += n * v
        top = max(top, v)
    if floor > 0:
        return need > room, 0
    return need > room, -(-need // top) if top > 0 else 0


def _start_columns(bins: Bins) -> list[tuple[int, tuple[int, ...]]]:
    """First-fit decreasing patterns on every class, and one single-size pattern per size and class."""
    cols: set[tuple[int, tuple[int, ...]]] = set()
    for c, (free, _) in enumerate(bins.classes):
        for j, g in enumerate(bins.sizes):
            if g <= free:
                a = [0] * len(bins.sizes)
                a[j] = min(bins.demand[j], free // g)
                cols.add((c, tuple(a)))
        left = list(bins.demand)
        while any(left):
            a, room = [0] * len(bins.sizes), free
            for j, g in enumerate(bins.sizes):
                n = min(left[j], room // g)
                a[j], room = n, room - n * g
                left[j] -= n
            if not any(a):
                break
            cols.add((c, tuple(a)))
    return sorted(cols)


def lp_bound(
    bins: Bins,
    seconds: float,
    columns: Sequence[tuple[int, tuple[int, ...]]] = (),
    waste: bool = False,
    settle: bool = False,
) -> LpBound:
    """The Gilmore–Gomory bound of ``bins`` by column generation, with its checked certificate.

    The master minimises the nodes used, every size's demand covered, each class but the largest
    capped at its count (the largest is left open so the LP is always feasible; its optimum above
    the node count is then a refutation, and the certificate is what proves it).

    ``waste`` (nodes of one size): the nodes there are leave ``slack`` units free in all, so a
    packing on them uses only patterns that waste at most ``slack``; the LP over those patterns
    alone is stronger, and it is the one whose rounding packs. Its certificate weighs the
    patterns of at least ``capacity − slack`` units only. Where no such pattern covers a size
    yet, an artificial column (cost 2) keeps the master feasible.

    ``settle``: go on until the LP optimum is reached (or the time is up) even when its rounding
    is already known; reduced-cost fixing needs the optimal duals, not just the rounded bound.
    """
    from ortools.linear_solver import pywraplp

    start = time.monotonic()
    deadline = start + seconds
    m = len(bins.sizes)
    if not m or not bins.classes:
        return LpBound(0.0, True, False, 0)
    if bins.sizes[0] > bins.largest:  # an instance no node holds (the caller says so already)
        return LpBound(math.inf, True, True, bins.nodes + 1)
    slack = sum(f * n for f, n in bins.classes) - sum(
        g * d for g, d in zip(bins.sizes, bins.demand, strict=True)
    )
    floor = max(0, bins.largest - slack) if waste and len(bins.classes) == 1 and slack >= 0 else 0
    if 2 * floor < bins.largest:
        floor = 0  # excludes little, and would cost the dual-optimal inequalities below
    solver = pywraplp.Solver.CreateSolver("GLOP")
    cover = [solver.Constraint(float(d), solver.infinity(), f"cover{j}") for j, d in enumerate(bins.demand)]
    cap = [
        solver.Constraint(0.0, float(n) if c else solver.infinity(), f"cap{c}")
        for c, (_, n) in enumerate(bins.classes)
    ]
    objective = solver.Objective()
    objective.SetMinimization()
    cols: list[tuple[int, tuple[int, ...]]] = []
    variables = []
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def add(col: tuple[int, tuple[int, ...]]) -> None:
        if col in seen:
            return
        seen.add(col)
        c, a = col
        var = solver.NumVar(0.0, solver.infinity(), f"z{len(cols)}")
        objective.SetCoefficient(var, 1.0)
        cap[c].SetCoefficient(var, 1.0)
        for j, n in enumerate(a):
            if n:
                cover[j].SetCoefficient(var, float(n))
        cols.append(col)
        variables.append(var)

    for col in [*_start_columns(bins), *columns]:
        if floor <= 0 or sum(n * g for n, g in zip(col[1], bins.sizes, strict=True)) >= floor:
            add(col)
    for j in range(m if floor > 0 else 0):
        artificial = solver.NumVar(0.0, solver.infinity(), f"a{j}")
        objective.SetCoefficient(artificial, 2.0)
        cover[j].SetCoefficient(artificial, 1.0)
    # dual-optimal inequalities: a slot of one size may hold an instance of the next smaller size,
    # so the duals come out ordered by size; the LP optimum is the same, reached in fewer rounds
    # (not with a floor: a smaller instance may leave a pattern below it)
    for j in range(m - 1 if floor <= 0 else 0):
        swap = solver.NumVar(0.0, solver.infinity(), f"e{j}")
        cover[j].SetCoefficient(swap, -1.0)
        cover[j + 1].SetCoefficient(swap, 1.0)
    converged = False
    weights = [0] * m
    value = 0.0
    primal: list[float] = []
    lower = 0.0
    quick_failed = False
    single = len(bins.classes) == 1
    # the duals with the best Lagrangian (Farley) bound so far; smoothing starts from the sizes
    # themselves (the continuous bound's duals), which halves the rounds on 100,000-unit nodes
    center: list[float] | None = [g / bins.largest for g in bins.sizes] if single else None
    best = weights  # their integer weights: what the certificate is checked with
    mispriced = False
    synced = False  # the master's solution is that of its present columns
    while time.monotonic() < deadline:
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            break
        value = solver.Objective().Value()
        duals = [max(0.0, cv.dual_value()) for cv in cover]
        sigmas = [min(0.0, cv.dual_value()) for cv in cap]  # read before columns change the model
        synced = True
        if (
            single
            and lower > 0
            and (
                lower > bins.nodes + 1e-9
                or (not settle and math.ceil(lower - 1e-9) >= math.ceil(value - 1e-9))
            )
        ):
            break  # refuted, or the rounded-up bound is settled: more rounds change nothing
        # Wentges smoothing: price at a point between the best duals so far and the master's, so
        # the duals do not swing from one extreme to the other (the slow tail of plain column
        # generation); a column that does not price out at the master's duals is a mispricing,
        # and the next round prices at the master's duals themselves
        point = duals
        if single and center is not None and not mispriced:
            point = [SMOOTHING * c + (1 - SMOOTHING) * d for c, d in zip(center, duals, strict=True)]
        smooth = point is not duals
        weights = [int(p * SCALE) for p in point]
        added, top, exact = 0, 0, True
        for c, ((free, _), sigma) in enumerate(zip(bins.classes, sigmas, strict=True)):
            others: list[list[int]] = []
            v, a, optimal = knapsack(
                weights,
                bins.sizes,
                bins.demand,
                free,
                max(0.01, deadline - time.monotonic()),
                quick_failed,
                others,
                floor,
            )
            exact = exact and optimal
            top = max(top, v)
            for pattern in [a, *others]:
                gain = sum(p * n for p, n in zip(duals, pattern, strict=True))
                if gain > (1.0 - sigma) * (1 + 1e-9) + 1e-9 and (c, tuple(pattern)) not in seen:
                    add((c, tuple(pattern)))
                    added += 1
                    synced = False
        if exact and single and top > 0:
            # Farley's bound: no node holds more than ``top`` of these weights
            farley = sum(w * d for w, d in zip(weights, bins.demand, strict=True)) / top
            if farley > lower:
                lower, center, best = farley, point, weights
        quick_failed = not added and not exact  # the quick pricing found nothing: price exactly
        if added or quick_failed:
            mispriced = False
            continue
        if smooth:
            mispriced = True  # nothing priced out at the smoothed point: try the master's duals
            continue
        if exact:
            converged = True
            break
    # the primal values are read once, at the end (reading them every round costs more than the
    # pricing on a few hundred columns); columns added since the last solve need one more
    if not synced and cols and solver.Solve() == pywraplp.Solver.OPTIMAL:
        value, synced = min(value, solver.Objective().Value()) if value else solver.Objective().Value(), True
    primal = [v.solution_value() for v in variables] if synced else []
    # the exact check costs a knapsack over the whole capacity per class: only where it can
    # succeed (Farley's bound, or the converged LP, above the nodes there are)
    hopeful = lower > bins.nodes + 1e-9 or (
        value > bins.nodes + 1e-6 and (converged or len(bins.classes) > 1)
    )
    refuted, needed = False, math.ceil(lower - 1e-9)
    if hopeful:
        refuted, needed = certificate(
            bins, best if single else weights, max(0.05, deadline - time.monotonic()), floor
        )
        needed = bins.nodes + 1 if refuted and floor > 0 else needed
    if floor > 0 and not refuted:
        needed = 0  # the restricted LP says nothing of fewer or more nodes
    elif not refuted and len(bins.classes) == 1 and converged:
        needed = max(needed, math.ceil(value - 1e-6))
    return LpBound(
        value, converged, refuted, needed, best if single else weights, cols, primal, time.monotonic() - start
    )


@dataclass(frozen=True)
class Refutation:
    """Why these requests cannot be placed together, and which of them the proof needs."""

    items: tuple[int, ...]  # requests the proof uses (a subset still cannot fit)
    reason: str
    needed: int  # nodes needed at least (on nodes as large as the largest)


def refute_l2(problem: TypeProblem, subset: Sequence[int] | None = None) -> Refutation | None:
    """L2's proof that the type's one-split requests (of ``subset``) cannot be placed, or None.

    Integer arithmetic only (no solver is loaded): cheap enough to ask before any search.
    """
    items = one_split(problem, subset)
    bins = bins_of(problem, items)
    if not items or not bins.classes:
        return None
    bound = l2(bins.sizes, bins.demand, bins.largest)
    if bound <= bins.nodes:
        return None
    what = "nodes" if len(bins.classes) == 1 else f"nodes of {bins.largest} free"
    reason = f"the Martello–Toth bound L2 needs {bound} {what}, {bins.nodes} usable"
    return Refutation(bins.items, reason, bound)


def refute_lp(bins: Bins, lp: LpBound) -> Refutation | None:
    """The requests and the words of an LP refutation (``lp.refuted``), else None.

    Only the sizes with a positive weight take part in the certificate, so the requests of the
    other sizes can be left out and the rest still cannot fit.
    """
    if not lp.refuted:
        return None
    weighted = {g for g, w in zip(bins.sizes, lp.weights, strict=True) if w > 0}
    keep = tuple(i for i, g in zip(bins.items, bins.units, strict=True) if g in weighted)
    reason = (
        f"the LP bound (Gilmore–Gomory) needs {lp.needed} nodes, {bins.nodes} usable"
        if len(bins.classes) == 1
        else "the LP bound (Gilmore–Gomory) shows the free units of these nodes cannot hold them"
    )
    return Refutation(keep, reason, lp.needed)


def refute(problem: TypeProblem, seconds: float, subset: Sequence[int] | None = None) -> Refutation | None:
    """A proof that the type's one-split requests (of ``subset``) cannot be placed, or None.

    L2 first (no solver), then the LP bound within ``seconds``.
    """
    cheap = refute_l2(problem, subset)
    if cheap is not None:
        return cheap
    items = one_split(problem, subset)
    bins = bins_of(problem, items)
    if not items or not bins.classes:
        return None
    return refute_lp(bins, lp_bound(bins, seconds))
