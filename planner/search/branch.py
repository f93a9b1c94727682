"""Branch and bound over the arc-flow LP, each pruning proven in integer arithmetic.

Notes
-----
A few classic instances lack the integer round-up property: the LP bound is just below the node
count, yet no packing exists (Hard28's BPP14 on 61 nodes: LP 60.998). Reduced-cost fixing
(:mod:`planner.search.fixing`) shrinks the arc-flow graph to about a thousand arcs there, but
CP-SAT's search does not close that model in seconds. A branch and bound over the graph's LP
does, the way a MIP solver would: at each point of the tree the LP of the arc-flow model with the
arc bounds chosen so far, an arc of fractional flow branched on (``x ≤ ⌊v⌋`` or ``x ≥ ⌈v⌉``).

The LP minimises the nodes used (the flow leaving each source). Every row (flow conservation
at each vertex, the node count at each source, each size's demand) also has artificial slack
columns of a high cost, so the LP is always feasible whatever bounds the branching set. GLOP
solves it in floating point, so its value is never the proof. The proof that a point of the tree
holds no packing is *weak duality checked in integers*: with row multipliers ``r`` (the LP's
duals scaled to integers, ``≤ 0`` on the ``≤`` rows) and ``ρ = c − r·A`` (``c`` the arcs' costs,
the artificial columns left out: a packing uses none), every flow ``x`` within the bounds
``l ≤ x ≤ u`` that meets every row uses

    ``c·x = r·b + ρ·x ≥ L = r·b + Σ_a min(ρ_a·l_a, ρ_a·u_a)`` nodes,

so ``L`` above the node count prunes the point. Any integers ``r`` give a valid test, so rounding
can only cost a pruning, never make a wrong one. The same ``L`` tightens bounds (reduced-cost
fixing in integers): moving ``x_a`` ``t`` steps from the bound that minimises its term raises the
nodes used by ``t·|ρ_a|``, so ``t ≤ ⌊(nodes − L)/|ρ_a|⌋``.

Branching is on an arc of the largest size whose flow is fractional (the most fractional of
those): on Hard28's BPP14 this closes the tree in about 500 points, where the most fractional
arc overall or the first one had not closed it after 2,000.

A point whose LP flow is integral with no artificial in use is a packing: decoded into paths and
checked like any other. The tree is refuted only when every point was pruned by the check.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planner.search.arcflow import Column, Graph, _paths, packs
from planner.search.bounds import Bins

SCALE = 1 << 30  # LP duals are scaled to integers with this many steps per unit
FRACTIONAL = 1e-6  # an LP value this close to an integer is read as that integer
ARTIFICIAL = 1000.0  # the cost of a row's artificial slack (any use of one is far above the nodes)
CLIP = 4 * ARTIFICIAL  # multipliers are clipped to this (dual feasibility keeps them within ARTIFICIAL)


@dataclass
class Tree:
    """What the branch and bound established: a packing, a refutation, or neither in time."""

    columns: list[Column] | None
    refuted: bool
    points: int  # points of the tree solved
    seconds: float


@dataclass(frozen=True)
class _Matrix:
    """The arcs' columns as numpy arrays: one entry (arc, row, coefficient) per nonzero."""

    arc: Any
    row: Any
    coef: Any
    cost: Any  # per arc: 1 for an arc leaving a source (a node used), else 0
    at_most: Any  # the rows of sense ``≤`` (their multipliers must be ≤ 0)


@dataclass(frozen=True)
class _Arc:
    cls: int
    tail: int
    head: int
    size: int  # size index, -1 for a loss arc


def _rows(
    bins: Bins, gs: Sequence[Graph]
) -> tuple[list[_Arc], list[int], list[list[tuple[int, int]]], list[str]]:
    """The arcs, each row's right-hand side, each arc's (row, coefficient) list, each row's sense.

    Rows: per class, the source's outflow (``≤`` its node count) and conservation at every vertex
    but the source and the sink (``=`` 0); then each size's demand (``=``).
    """
    arcs: list[_Arc] = []
    rhs: list[int] = []
    sense: list[str] = []
    col: list[list[tuple[int, int]]] = []
    index: dict[tuple[int, int], int] = {}
    for c, (gr, (_, n)) in enumerate(zip(gs, bins.classes, strict=True)):
        index[c, gr.source] = len(rhs)
        rhs.append(n)
        sense.append("<=")
        for a in gr.arcs:
            for v in (a[0], a[1]):
                if v not in (gr.source, gr.sink) and (c, v) not in index:
                    index[c, v] = len(rhs)
                    rhs.append(0)
                    sense.append("=")
    demand_row = len(rhs)
    for d in bins.demand:
        rhs.append(d)
        sense.append("=")
    for c, gr in enumerate(gs):
        for t, h, j in gr.arcs:
            arcs.append(_Arc(c, t, h, j))
            entries: list[tuple[int, int]] = []
            if t == gr.source:
                entries.append((index[c, t], 1))
            else:
                entries.append((index[c, t], -1))
            if h != gr.sink:
                entries.append((index[c, h], 1))
            if j >= 0:
                entries.append((demand_row + j, 1))
            col.append(entries)
    return arcs, rhs, col, sense


def _certificate(
    duals: Sequence[float],
    rhs: Sequence[int],
    matrix: _Matrix,
    lo: Sequence[int],
    up: Sequence[int],
) -> tuple[int, list[int]]:
    """``L`` and the integer reduced costs ``ρ`` of the duals (scaled, rounded, signs enforced).

    ``L`` (scaled by :data:`SCALE`) is a lower bound on the nodes any flow within ``lo``..``up``
    meeting every row uses (see the module notes). The multipliers are clipped to
    ``±`` :data:`CLIP` units (any multipliers give a valid bound), so ``ρ`` fits in 64 bits;
    ``L`` itself is summed in Python's exact integers.
    """
    import numpy as np

    r = np.rint(np.clip(np.asarray(duals), -CLIP, CLIP) * SCALE).astype(np.int64)
    r[matrix.at_most] = np.minimum(r[matrix.at_most], 0)
    rho = matrix.cost * SCALE
    np.subtract.at(rho, matrix.arc, r[matrix.row] * matrix.coef)
    total = int(sum(int(v) * b for v, b in zip(r.tolist(), rhs, strict=True) if b))
    rho_list: list[int] = rho.tolist()
    total += sum(p * (a_lo if p >= 0 else a_up) for p, a_lo, a_up in zip(rho_list, lo, up, strict=True))
    return total, rho_list


def tighten(
    rho: Sequence[int], gap: int, lo: Sequence[int], up: Sequence[int]
) -> tuple[list[int], list[int], bool]:
    """Bounds that every ``x`` in ``lo``..``up`` with ``Σ ρ_k·(x_k − b_k) ≤ gap`` keeps, ``b_k`` the
    bound minimising ``ρ_k·x_k`` (``gap ≥ 0``); and whether any bound moved.

    Each term of the sum is ``≥ 0``, so each alone is at most ``gap``: ``x_k`` moves at most
    ``⌊gap/|ρ_k|⌋`` from ``b_k``.
    """
    lo, up = list(lo), list(up)
    moved = False
    for k, p in enumerate(rho):
        if p > 0 and up[k] > lo[k] + gap // p:
            up[k], moved = lo[k] + gap // p, True
        elif p < 0 and lo[k] < up[k] - gap // (-p):
            lo[k], moved = up[k] - gap // (-p), True
    return lo, up, moved


def solve(bins: Bins, gs: Sequence[Graph], deadline: float) -> Tree:
    """Pack ``bins`` on the (reduced) graphs ``gs`` by branch and bound, or refute it, by ``deadline``."""
    from ortools.linear_solver import pywraplp

    start = time.monotonic()
    arcs, rhs, col, sense = _rows(bins, gs)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    # a solution GLOP deems imprecise is still worth its duals (the check below is the proof)
    solver.SetSolverSpecificParametersAsString(
        "change_status_to_imprecise: false use_preprocessing: false use_dual_simplex: true"
    )
    inf = solver.infinity()
    rows = [
        solver.Constraint(-inf if s == "<=" else float(b), float(b), f"r{i}")
        for i, (b, s) in enumerate(zip(rhs, sense, strict=True))
    ]
    objective = solver.Objective()
    objective.SetMinimization()
    for i, (row, s) in enumerate(zip(rows, sense, strict=True)):
        for sign in (1.0, -1.0) if s == "=" else (-1.0,):
            v = solver.NumVar(0.0, inf, f"s{i}_{sign:+.0f}")
            row.SetCoefficient(v, sign)
            objective.SetCoefficient(v, ARTIFICIAL)
    xs = []
    cost = [1 if a.tail == gs[a.cls].source else 0 for a in arcs]
    upper0 = []
    for k, (a, entries) in enumerate(zip(arcs, col, strict=True)):
        n = bins.classes[a.cls][1]
        ub = n if a.size < 0 else min(bins.demand[a.size], n * (bins.classes[a.cls][0] // bins.sizes[a.size]))
        upper0.append(ub)
        x = solver.NumVar(0.0, float(ub), f"x{k}")
        for i, coef in entries:
            rows[i].SetCoefficient(x, float(coef))
        objective.SetCoefficient(x, float(cost[k]))
        xs.append(x)
    import numpy as np

    entries_arc = [k for k, entries in enumerate(col) for _ in entries]
    matrix = _Matrix(
        np.asarray(entries_arc, dtype=np.int64),
        np.asarray([i for entries in col for i, _ in entries], dtype=np.int64),
        np.asarray([c for entries in col for _, c in entries], dtype=np.int64),
        np.asarray(cost, dtype=np.int64),
        np.asarray([s == "<=" for s in sense], dtype=np.bool_),
    )
    set_lo, set_up = [0] * len(arcs), list(upper0)  # the bounds the LP holds now
    most = bins.nodes * SCALE  # no packing uses more nodes than there are
    stack: list[tuple[list[int], list[int]]] = [([0] * len(arcs), upper0)]
    points = 0
    undecided = False
    while stack:
        if time.monotonic() > deadline:
            return Tree(None, False, points, time.monotonic() - start)
        lo, up = stack.pop()
        for k, x in enumerate(xs):
            if lo[k] != set_lo[k] or up[k] != set_up[k]:
                x.SetBounds(float(lo[k]), float(up[k]))
        set_lo, set_up = lo, up
        points += 1
        if solver.Solve() != pywraplp.Solver.OPTIMAL:
            undecided = True
            continue
        duals = [row.dual_value() for row in rows]
        low, rho = _certificate(duals, rhs, matrix, lo, up)
        gap = most - low
        if gap < 0:
            continue  # proven: no flow within these bounds fits on the nodes
        values = [x.solution_value() for x in xs]
        if objective.Value() <= bins.nodes + FRACTIONAL and all(
            abs(v - round(v)) <= FRACTIONAL for v in values
        ):
            columns = _decode(bins, gs, arcs, [round(v) for v in values])
            if columns is not None:
                return Tree(columns, False, points, time.monotonic() - start)
        # reduced-cost fixing in integers: each arc within ``-gap`` of its best bound
        lo, up, tightened = tighten(rho, gap, lo, up)
        # branch on an arc of the largest size whose flow is fractional (most fractional among
        # those): it decides where the large instances go, which the LP is least sure of
        pick, best = -1, (-1, 0.0)
        for k, v in enumerate(values):
            f = abs(v - round(v))
            if f > FRACTIONAL and lo[k] < up[k]:
                key = (bins.sizes[arcs[k].size] if arcs[k].size >= 0 else 0, f)
                if key > best:
                    pick, best = k, key
        if pick < 0:
            if tightened:  # the fixing cut the LP's flow off: solve this point again
                stack.append((lo, up))
            else:  # integral (artificials in use, or no packing decoded) yet not proven empty
                undecided = True
            continue
        v = values[pick]
        down = math.floor(v)
        if lo[pick] <= down:
            low_up = list(up)
            low_up[pick] = min(up[pick], down)
            stack.append((lo, low_up))
        if down + 1 <= up[pick]:
            high_lo = list(lo)
            high_lo[pick] = max(lo[pick], down + 1)
            stack.append((high_lo, up))
    return Tree(None, not undecided, points, time.monotonic() - start)


def _decode(
    bins: Bins, gs: Sequence[Graph], arcs: Sequence[_Arc], flow: Sequence[int]
) -> list[Column] | None:
    """The integral flow as a pattern per node used, or None if it does not check."""
    columns: list[Column] = []
    for c, gr in enumerate(gs):
        here = {(a.tail, a.head, a.size): f for a, f in zip(arcs, flow, strict=True) if a.cls == c}
        columns += [(c, p) for p in _paths(gr, here, len(bins.sizes))]
    return columns if packs(bins, columns) else None
