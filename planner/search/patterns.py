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
3. **The restricted master as an integer program**: CP-SAT chooses how many nodes of each class
   take each generated pattern, every size covered, hinted with the rounding. Any solution it
   finds is a packing.

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

from planner.model.options import TypeProblem
from planner.search.bounds import Bins, LpBound, bins_of, lp_bound, refute_lp
from planner.search.place import NodeCounts

Column = tuple[int, tuple[int, ...]]  # (class, instances per size)


def eligible(problem: TypeProblem) -> bool:
    """A pure packing: every request has one split, and none needs several distinct nodes."""
    return bool(problem.items) and all(
        len(it.splits) == 1 and (not it.distinct or it.splits[0].instances == 1) for it in problem.items
    )


@dataclass
class Packing:
    """What the packing model established: a placement, a refutation, or neither in time."""

    nodes: list[NodeCounts] | None  # per item, node -> instances (a packing was found)
    lp: LpBound | None
    how: str  # "rounding", "diving", "master", "refuted", "" (undecided)
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


def _dive(bins: Bins, lp: LpBound, deadline: float) -> list[Column] | None:
    """Diving: fix the pattern the LP uses most (rounded up), re-solve the LP of what is left.

    Each step fixes at least one node's pattern and re-generates columns for the residual demand,
    so the LP keeps steering the rest; it stops when the residual's LP needs more nodes than are
    left (then this dive failed; nothing is claimed from it).
    """
    fixed: list[Column] = []
    demand = list(bins.demand)
    counts = [n for _, n in bins.classes]
    columns, primal = list(lp.columns), list(lp.primal)
    while any(demand) and time.monotonic() < deadline:
        live = [c for c, n in enumerate(counts) if n > 0]
        if not live:
            return None
        # the residual as its own packing: the same sizes, what is left of each, the nodes left
        classes = tuple((bins.classes[c][0], counts[c]) for c in live)
        rest = Bins(bins.sizes, tuple(demand), classes, bins.items)
        remap = {c: k for k, c in enumerate(live)}
        trimmed = [
            (remap[c], tuple(min(n, d) for n, d in zip(a, demand, strict=True)))
            for c, a in columns
            if c in remap
        ]
        if fixed:
            sub = lp_bound(rest, max(0.05, deadline - time.monotonic()), trimmed)
            if sub.refuted or sub.value > rest.nodes + 1e-6:
                return None
            rounded = _rounding(rest, sub) if sub.primal else None
            if rounded is not None:
                return fixed + [(live[c], a) for c, a in rounded]
            columns = [(live[c], a) for c, a in sub.columns]
            primal = sub.primal
        best = max(
            range(len(columns)), key=lambda i: (primal[i] if i < len(primal) else 0.0, -i), default=None
        )
        if best is None or best >= len(primal) or primal[best] <= 1e-9:
            return None
        c, a = columns[best]
        take = tuple(min(n, d) for n, d in zip(a, demand, strict=True))
        if not any(take) or counts[c] <= 0:
            return None
        for _ in range(max(1, min(int(primal[best] + 1e-6), counts[c]))):
            take = tuple(min(n, d) for n, d in zip(a, demand, strict=True))
            if not any(take) or counts[c] <= 0:
                break
            fixed.append((c, take))
            counts[c] -= 1
            demand = [d - n for d, n in zip(demand, take, strict=True)]
    return fixed if not any(demand) else None


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


def _place(problem: TypeProblem, bins: Bins, chosen: Sequence[Column]) -> list[NodeCounts]:
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


def _undecided(bins: Bins, lp: LpBound) -> str:
    """How far the packing model got, for a type it could neither pack nor refute in time."""
    lp_text = f"{lp.value:.2f}" + ("" if lp.converged else " (not converged)")
    return (
        f"no packing found in time; the LP bound needs {lp_text} nodes of {bins.nodes} usable "
        f"(at least {max(lp.needed, 1)}), so a packing may exist"
    )


def solve(problem: TypeProblem, seconds: float) -> Packing:
    """Pack an :func:`eligible` type: a placement, a refutation, or neither within ``seconds``."""
    start = time.monotonic()
    bins = bins_of(problem, [it.index for it in problem.items])
    lp = lp_bound(bins, seconds * 0.5)
    proof = refute_lp(bins, lp)
    if proof is not None:
        return Packing(None, lp, "refuted", proof.reason, proof.items)
    rounded = _rounding(bins, lp) if lp.primal else None
    if rounded is not None:
        return Packing(_place(problem, bins, rounded), lp, "rounding")
    dived = _dive(bins, lp, start + seconds * 0.8)
    if dived is not None:
        return Packing(_place(problem, bins, dived), lp, "diving")
    left = seconds - (time.monotonic() - start)
    if left <= 0.05:
        return Packing(None, lp, "", _undecided(bins, lp))
    chosen = _master(bins, lp.columns, left, None)
    if chosen is None:
        return Packing(None, lp, "", _undecided(bins, lp))
    return Packing(_place(problem, bins, chosen), lp, "master")
