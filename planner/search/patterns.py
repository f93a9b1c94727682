"""The packing model: find a placement the greedy misses, or prove there is none.

Notes
-----
A type whose requests each admit exactly one split, none of them needing several distinct nodes
(``special`` requests, CPU requests, ``single`` ones, one-instance services), has a fixed score:
every plan that fits is optimal, and the question is only whether the instances can be packed.
That is bin packing with nodes of a few sizes, and this module answers it the way a cutting-stock
solver does (price and branch over the Gilmore–Gomory pattern model):

1. **The LP and its certificate** (:mod:`planner.search.bounds`): column generation over patterns
   (multisets of instance sizes that fit a node); when its checked certificate says no packing
   exists, the type is refuted at once.
2. **Rounding the LP**: the patterns the LP uses a whole number of times are kept, and the few
   instances left over are packed best-fit decreasing into the nodes left over. On the classic
   families (and on a cluster, where sizes repeat) this finds a packing on the LP bound at once.
3. **The arc-flow model** (:mod:`planner.search.arcflow`), when its compressed graph is small
   (or small once the LP's duals drop the arcs no packing uses, :mod:`planner.search.fixing`):
   every pattern at once, so it packs or refutes exactly (the triplet instances, every node
   exactly full, which defeat rounding and diving). A branch and bound over its LP
   (:mod:`planner.search.branch`) goes first, each pruning proven in integers: it refutes the
   instances whose LP bound is a hair below the node count; CP-SAT's search over the same
   graph has the rest of the time.
4. **Diving**: fix the patterns the LP uses, solve the LP of what is left, back up on a dead end;
   a small residual is packed exactly.
5. **The restricted master as an integer program**: CP-SAT chooses how many nodes of each class
   take each generated pattern, every size covered. Any solution it finds is a packing.

With nodes of one size the LP is the one over the patterns a packing on them can use (each
wastes at most the units the nodes leave free in all; see :func:`planner.search.bounds.lp_bound`),
which is tighter and steers the rounding and the dive towards full nodes.

Instances of one size are interchangeable here (their requests score 0 whatever the split, and
none needs distinct nodes), so a packing of sizes is turned into a placement of requests by
handing out the slots in request order. When nothing is found within the time, the caller goes
on with the exact search it always had.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.model.options import TypeProblem
from planner.search.bounds import Bins, LpBound, bins_of, l2, lp_bound, refute_lp
from planner.search.place import NodeCounts

if TYPE_CHECKING:  # the arc-flow model is imported by the one function that builds it
    from planner.search import arcflow

Column = tuple[int, tuple[int, ...]]  # (class, instances per size)
MAX_BACKTRACKS = 40  # a dive gives up after undoing this many choices
EXACT_INSTANCES = 45  # a residual of at most this many instances is packed exactly (CP-SAT)
EXACT_SECONDS = 1.0  # for at most this long
WASTE = True  # the LP over patterns that waste no more than the nodes leave free
LP_SHARE = 0.4  # the LP bound's share of the time
LP_MORE = 0.8  # ... up to this share while its patterns so far do not fit the nodes
ARCFLOW_ARCS = 5_000  # the arc-flow model is tried when its compressed graph has at most this many arcs
ARCFLOW_SHARE = 0.6  # until this share of the time has passed (the dive then has the rest)
FIXING_ARCS = 100_000  # a larger graph is not built, even to be reduced by the LP's duals
ARCFLOW_LEAST = 0.3  # ... and at least this share, however long the LP took
FIXING_CELLS = 3_000_000  # capacity × sizes past which the graph is not even tried (it would not fit)
SETTLE_SHARE = 0.5  # of the arc-flow's time, what taking the LP to its optimum may use
BRANCH_SHARE = 0.8  # of the arc-flow's time left, what the branch and bound over its LP may use
BRANCH_LATE = 0.85  # ... or until this share of the whole time, on a graph that fixing shrank


@dataclass
class Packing:
    """What the packing model established: a placement, a refutation, or neither in time."""

    nodes: list[NodeCounts] | None  # per item, node -> instances (a packing was found)
    lp: LpBound | None
    how: str  # "rounding", "arc-flow", "diving", "master", "refuted", "" (undecided)
    reason: str = ""  # the refutation, or how far an undecided search got, in words
    items: tuple[int, ...] = ()  # refuted: the requests the proof needs (they cannot fit together)


def _rounding(bins: Bins, lp: LpBound) -> list[Column] | None:
    """Keep the whole part of the LP's patterns; best-fit decreasing for what is left."""
    used: list[Column] = []
    left = list(bins.demand)
    nodes_left = [n for _, n in bins.classes]
    for col, x in sorted(zip(lp.columns, lp.primal, strict=False), key=lambda cx: -cx[1]):
        c, a = col
        k = min(math.floor(x + 1e-6), nodes_left[c])
        for _ in range(k):
            t = tuple(min(n, left[j]) for j, n in enumerate(a))
            if not any(t):
                break
            used.append((c, t))
            nodes_left[c] -= 1
            left = [x - y for x, y in zip(left, t, strict=True)]
    # best-fit decreasing of the rest into the remaining nodes (and room left in the kept ones)
    bins_room: list[tuple[int, int, list[int]]] = []  # (room, class, counts) per node in use or free
    for c, a in used:
        room = bins.classes[c][0] - sum(n * g for n, g in zip(a, bins.sizes, strict=True))
        bins_room.append((room, c, list(a)))
    for c, n in enumerate(nodes_left):
        bins_room += [(bins.classes[c][0], c, [0] * len(bins.sizes)) for _ in range(n)]
    for j, g in enumerate(bins.sizes):
        for _ in range(left[j]):
            fit = min(
                (b for b in range(len(bins_room)) if bins_room[b][0] >= g),
                key=lambda b: bins_room[b][0],
                default=None,
            )
            if fit is None:
                return None
            room, c, counts = bins_room[fit]
            counts[j] += 1
            bins_room[fit] = (room - g, c, counts)
    return [(c, tuple(counts)) for _, c, counts in bins_room if any(counts)]


def _waste(bins: Bins, col: Column) -> int:
    c, a = col
    return bins.classes[c][0] - sum(n * g for n, g in zip(a, bins.sizes, strict=True))


@dataclass
class _Node:
    """One point of the dive: what is fixed, what is left, and the LP of what is left."""

    fixed: list[Column]
    demand: list[int]
    counts: list[int]
    columns: list[Column]
    primal: list[float]
    tabu: set[Column]
    solved: bool = True  # the LP of what is left has been solved (an empty primal: a dead end)
    whole_tried: bool = False  # fixing every whole pattern at once was tried from here
    proven_empty: bool = False  # the exact model showed what is left cannot be packed


def _fix(bins: Bins, node: _Node, picks: Sequence[tuple[Column, int]]) -> _Node:
    """A new point with ``copies`` nodes of each picked pattern fixed (trimmed to what is left)."""
    fixed, demand, counts = list(node.fixed), list(node.demand), list(node.counts)
    for (c, a), copies in picks:
        for _ in range(copies):
            take = tuple(min(n, d) for n, d in zip(a, demand, strict=True))
            if not any(take) or counts[c] <= 0:
                break
            fixed.append((c, take))
            counts[c] -= 1
            demand = [d - n for d, n in zip(demand, take, strict=True)]
    return _Node(fixed, demand, counts, node.columns, [], set(), solved=False)


def _exact(bins: Bins, node: _Node, seconds: float) -> list[Column] | None:
    """A small residual packed exactly: each instance on one of the nodes left (CP-SAT).

    None when CP-SAT shows it cannot be done (``node.proven_empty``: a dead end for the dive) or
    does not finish in ``seconds`` (the dive then goes on from the residual's LP: on a loaded
    machine the moment CP-SAT gets says little about the residual). The dive claims nothing from
    either.
    """
    from planner.search.cpsat import cp_model

    m = cp_model.CpModel()
    slots = [(c, bins.classes[c][0]) for c, n in enumerate(node.counts) for _ in range(n)]
    instances = [j for j, d in enumerate(node.demand) for _ in range(d)]
    x = {
        (i, b): m.new_bool_var(f"x{i}_{b}")
        for i, j in enumerate(instances)
        for b, (_, free) in enumerate(slots)
        if bins.sizes[j] <= free
    }
    for i in range(len(instances)):
        m.add_exactly_one(x[i, b] for b in range(len(slots)) if (i, b) in x)
    loads = []
    for b, (_, free) in enumerate(slots):
        load = sum(bins.sizes[j] * x[i, b] for i, j in enumerate(instances) if (i, b) in x)
        m.add(load <= free)
        loads.append(load)
    for b in range(len(slots) - 1):  # nodes of one class are interchangeable: loads in order
        if slots[b][0] == slots[b + 1][0]:
            m.add(loads[b] >= loads[b + 1])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, seconds)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        node.proven_empty = status == cp_model.INFEASIBLE
        return None
    out: list[Column] = []
    for b, (c, _) in enumerate(slots):
        a = [0] * len(bins.sizes)
        for i, j in enumerate(instances):
            if (i, b) in x and solver.boolean_value(x[i, b]):
                a[j] += 1
        if any(a):
            out.append((c, tuple(a)))
    return node.fixed + out


def _resolve(bins: Bins, node: _Node, deadline: float) -> list[Column] | None:
    """The LP of what is left at ``node`` (columns re-generated); its rounding if that packs.

    Returns the packing when the rounding completes it; sets ``node.primal`` empty when the LP
    shows what is left cannot be packed on the nodes left.
    """
    live = [c for c, n in enumerate(node.counts) if n > 0]
    if not live:
        node.primal = []
        return None
    classes = tuple((bins.classes[c][0], node.counts[c]) for c in live)
    rest = Bins(bins.sizes, tuple(node.demand), classes, bins.items)
    remap = {c: k for k, c in enumerate(live)}
    trimmed = [
        (remap[c], tuple(min(n, d) for n, d in zip(a, node.demand, strict=True)))
        for c, a in node.columns
        if c in remap
    ]
    sub = lp_bound(rest, max(0.05, deadline - time.monotonic()), trimmed, waste=WASTE)
    if sub.refuted or (sub.converged and sub.value > rest.nodes + 1e-6) or not sub.primal:
        node.primal = []
        return None
    rounded = _rounding(rest, sub)
    if rounded is None and sum(node.demand) <= EXACT_INSTANCES:
        done = _exact(bins, node, min(EXACT_SECONDS, deadline - time.monotonic()))
        if done is not None or node.proven_empty:
            if done is None:
                node.primal = []  # the dive backs up: this residual cannot be packed
            return done
        # not decided in time: the dive goes on from the residual's LP, as for a larger one
    node.columns = [(live[c], a) for c, a in sub.columns]
    node.primal = sub.primal
    return None if rounded is None else node.fixed + [(live[c], a) for c, a in rounded]


def _dive(bins: Bins, lp: LpBound, deadline: float) -> list[Column] | None:
    """Diving with backtracking: fix patterns the LP uses, re-solve the LP of what is left.

    Each step fixes every pattern the LP uses a whole number of times, or else the one it uses
    most (least waste among equals) on one node, and re-generates columns for the residual, so
    the LP keeps steering the rest. When the residual's LP shows it cannot be packed, the last
    choice is undone and forbidden there, and the next best is tried (a few times in all). A dive
    that fails claims nothing.
    """
    root = _Node(
        [], list(bins.demand), [n for _, n in bins.classes], list(lp.columns), list(lp.primal), set()
    )
    stack: list[_Node] = []
    node = root
    backtracks = 0
    while time.monotonic() < deadline:
        if not any(node.demand):
            return node.fixed
        if not node.solved:
            node.solved = True
            done = _resolve(bins, node, deadline)
            if done is not None:
                return done
        if not node.primal:  # dead end: back to the last choice, forbid it, try the next
            if not stack or backtracks >= MAX_BACKTRACKS:
                return None
            backtracks += 1
            node = stack.pop()
            continue
        whole = [
            (col, math.floor(x + 1e-6))
            for col, x in zip(node.columns, node.primal, strict=False)
            if x >= 1 - 1e-6 and col not in node.tabu
        ]
        if whole and not node.whole_tried:
            node.whole_tried = True
            stack.append(node)
            node = _fix(bins, node, whole)
            continue
        ranked = sorted(
            (
                (x, -_waste(bins, col), col)
                for col, x in zip(node.columns, node.primal, strict=False)
                if x > 1e-9 and col not in node.tabu
            ),
            reverse=True,
        )
        if not ranked:
            node.primal = []
            continue
        col = ranked[0][2]
        node.tabu.add(col)
        stack.append(node)
        node = _fix(bins, node, [(col, 1)])
    return None


def _master(
    bins: Bins, columns: Sequence[Column], seconds: float, hint: Sequence[Column] | None
) -> list[Column] | None:
    """The integer restricted master over the generated patterns, by CP-SAT."""
    from planner.search.cpsat import cp_model

    cols = sorted(set(columns))
    m = cp_model.CpModel()
    z = [m.new_int_var(0, bins.classes[c][1], f"z{i}") for i, (c, _) in enumerate(cols)]
    for c, (_, n) in enumerate(bins.classes):
        here = [z[i] for i, (cc, _) in enumerate(cols) if cc == c]
        if here:
            m.add(sum(here) <= n)
    for j, d in enumerate(bins.demand):
        m.add(sum(a[j] * z[i] for i, (_, a) in enumerate(cols) if a[j]) >= d)
    if hint is not None:
        counts: dict[Column, int] = {}
        for col in hint:
            counts[col] = counts.get(col, 0) + 1
        for i, col in enumerate(cols):
            m.add_hint(z[i], counts.get(col, 0))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, seconds)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    out: list[Column] = []
    for i, col in enumerate(cols):
        out += [col] * int(solver.value(z[i]))
    return out


def place(problem: TypeProblem, bins: Bins, chosen: Sequence[Column]) -> list[NodeCounts]:
    """Patterns to node names (class by class, nodes in name order), then slots to requests."""
    by_class: dict[int, list[str]] = {}
    for name, f in sorted(problem.nodes):
        if f > 0:
            c = next(c for c, (free, _) in enumerate(bins.classes) if free == f)
            by_class.setdefault(c, []).append(name)
    slots: dict[int, list[str]] = {}  # size index -> one node name per slot
    for c, a in chosen:
        node = by_class[c].pop(0)
        for j, n in enumerate(a):
            slots.setdefault(j, []).extend([node] * n)
    placed: list[NodeCounts] = [{} for _ in problem.items]
    index = {g: j for j, g in enumerate(bins.sizes)}
    for it in problem.items:
        sp = it.splits[0]
        free = slots[index[sp.units]]
        for _ in range(sp.instances):
            node = free.pop()
            placed[it.index][node] = placed[it.index].get(node, 0) + 1
    return placed


def _arcflow(
    bins: Bins, lp: LpBound, deadline: float, late: float | None = None
) -> tuple[arcflow.Flow | None, LpBound]:
    """The exact arc-flow model, when its graph (reduced by the LP's duals) is small enough.

    A graph of more than :data:`ARCFLOW_ARCS` arcs is first reduced (:mod:`fixing`), with the LP
    taken to its optimum for the sharpest duals; the LP so settled is handed back (it may refute,
    and its columns steer the dive). None: the model was not tried.
    """
    # the arc-flow model, its reduction and its branch and bound: imported only here, where a
    # packing is hard enough to reach them (a plan whose type is no pure packing never does:
    # 3.8 ms of every such command, modules compiled)
    from planner.search import arcflow, branch, fixing

    if deadline - time.monotonic() < 0.1 or bins.largest * len(bins.sizes) > FIXING_CELLS:
        return None, lp
    built = arcflow.graphs(bins, FIXING_ARCS)
    if built is None:
        return None, lp
    before = sum(len(g.arcs) for g in built)
    if before > ARCFLOW_ARCS:
        if not lp.converged:
            left = (deadline - time.monotonic()) * SETTLE_SHARE
            lp = lp_bound(bins, max(0.05, left), lp.columns, waste=WASTE, settle=True)
            if lp.refuted:
                return None, lp
        red = fixing.reduce(bins, built, lp.weights, fixing.caps(bins, lp.weights))
        if red.refuted:
            return arcflow.Flow(None, True, before, 0.0), lp
        if red.after > ARCFLOW_ARCS:
            return None, lp
        built = list(red.graphs)
    # branch and bound over the graph's LP first (it refutes what the LP misses by a hair, and
    # its LP steers it to a packing), then CP-SAT's search over the same graph with the rest.
    # A graph that fixing shrank is one whose LP rounding failed by a hair: the branch and bound
    # may then go on until ``late`` (the dive rarely packs those, and CP-SAT did not close them)
    now = time.monotonic()
    stop = now + (deadline - now) * BRANCH_SHARE
    if before > ARCFLOW_ARCS and late is not None:
        stop = max(stop, late)
    tree = branch.solve(bins, built, stop)
    if tree.columns is not None:
        return arcflow.Flow(tree.columns, False, sum(len(g.arcs) for g in built), tree.seconds), lp
    if tree.refuted:
        return arcflow.Flow(None, True, sum(len(g.arcs) for g in built), tree.seconds), lp
    if time.monotonic() >= deadline:
        return arcflow.Flow(None, False, sum(len(g.arcs) for g in built), tree.seconds), lp
    return arcflow.solve(bins, deadline - time.monotonic(), built), lp


def _undecided(bins: Bins, lp: LpBound) -> str:
    """How far the packing model got, for a type it could neither pack nor refute in time."""
    low = max(lp.needed, l2(bins.sizes, bins.demand, bins.largest))
    if lp.converged:
        where = f"the LP bound needs {lp.value:.2f} nodes ({bins.nodes} usable)"
    else:  # the restricted LP's value is only an upper estimate of the bound
        where = f"the LP bound was not settled in time: {low} to {lp.value:.2f} nodes ({bins.nodes} usable)"
    return f"no packing found in time; {where}, so a packing may exist"


def solve(problem: TypeProblem, seconds: float) -> Packing:
    """Pack a type that is a pure packing (:attr:`TypeProblem.pure_packing`): a placement, a
    refutation, or neither within ``seconds``."""
    start = time.monotonic()
    bins = bins_of(problem, [it.index for it in problem.items])
    lp = lp_bound(bins, seconds * LP_SHARE, waste=WASTE)
    if not lp.refuted and not lp.converged and lp.value > bins.nodes + 1e-6:
        # even the patterns found so far need more nodes than there are: the bound may yet
        # refute, and nothing can be packed before it settles, so it gets more of the time
        lp = lp_bound(bins, start + seconds * LP_MORE - time.monotonic(), lp.columns, waste=WASTE)
    proof = refute_lp(bins, lp)
    if proof is not None:
        return Packing(None, lp, "refuted", proof.reason, proof.items)
    rounded = _rounding(bins, lp) if lp.primal else None
    if rounded is not None:
        return Packing(place(problem, bins, rounded), lp, "rounding")
    # the arc-flow model gets its share, and at least ARCFLOW_LEAST of the time even when the LP
    # took long to settle (it is the one that packs or refutes the tight ones)
    now = time.monotonic()
    until = max(start + seconds * ARCFLOW_SHARE, min(start + seconds * 0.9, now + seconds * ARCFLOW_LEAST))
    flow, lp = _arcflow(bins, lp, until, start + seconds * BRANCH_LATE)
    proof = refute_lp(bins, lp)
    if proof is not None:
        return Packing(None, lp, "refuted", proof.reason, proof.items)
    if flow is not None and flow.columns is not None:
        return Packing(place(problem, bins, flow.columns), lp, "arc-flow")
    if flow is not None and flow.refuted:
        reason = f"the arc-flow model over every pattern has no solution on {bins.nodes} nodes"
        return Packing(None, lp, "refuted", reason, bins.items)
    dived = _dive(bins, lp, start + seconds * 0.9)
    if dived is not None:
        return Packing(place(problem, bins, dived), lp, "diving")
    left = seconds - (time.monotonic() - start)
    if left <= 0.05:
        return Packing(None, lp, "", _undecided(bins, lp))
    chosen = _master(bins, lp.columns, left, None)
    if chosen is None:
        return Packing(None, lp, "", _undecided(bins, lp))
    return Packing(place(problem, bins, chosen), lp, "master")
