"""Reduced-cost fixing on the arc-flow graph: drop every arc no packing on these nodes can use.

Notes
-----
The LP bound rounded up is one node short of the optimum on a few instances (they lack the
integer round-up property), so refuting one node fewer takes an integer argument. The arc-flow
model is one, but its graph is tens of thousands of arcs there, too large for CP-SAT within
seconds. The LP's duals shrink it first, the way every branch-and-price code does:

Let ``w_g ≥ 0`` be integer weights per size (the LP's duals, scaled), ``V_c`` the heaviest
source-to-sink path of class ``c``'s graph (every pattern of that class weighs at most ``V_c``),
and ``G = Σ_c n_c·V_c − Σ_g w_g·d_g``. A packing is ``k_c ≤ n_c`` paths per class covering the
demand exactly, so its paths' shortfalls ``V_c − w(P)`` (each ``≥ 0``) add up to
``Σ k_c·V_c − w·d ≤ G``. Hence:

- ``G < 0``: no packing exists (Farley's bound over the graph's own patterns);
- an arc whose heaviest path falls more than ``G`` short of ``V_c`` is on no path a packing
  uses, and is dropped; so is every arc no longer on a source-to-sink path.

With the LP's optimal duals, ``G/V`` is the gap between the node count and the LP optimum: on
an instance whose LP optimum is just below the node count (the very ones the bound cannot
refute) it is a few thousandths, and a 30,000- to 66,000-arc graph keeps a few hundred to a
couple of thousand arcs. The longest paths are integer dynamic programming over the graph (its
labels increase along every arc), so nothing here rests on floating point: the LP only
*suggests* the weights, and any weights give a valid reduction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.search.arcflow import Graph
from planner.search.bounds import Bins, knapsack

UNREACHED = -(1 << 62)


@dataclass(frozen=True)
class Reduced:
    """The graphs with only the arcs a packing can use, or a refutation (``refuted``)."""

    graphs: tuple[Graph, ...]
    refuted: bool
    gap: int  # G: how far below the nodes' worth the demand's weight falls (scaled)
    heaviest: tuple[int, ...]  # V_c per class
    before: int  # arcs before
    after: int  # arcs kept


def _weight(weights: Sequence[int], j: int) -> int:
    return weights[j] if j >= 0 else 0


def longest(gr: Graph, weights: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]:
    """Heaviest path weight from the source to each vertex, and from each vertex to the sink.

    Every arc goes from a lower label to a higher one (an instance arc gains at least its
    size; a loss arc ends at ``capacity + 1``), so ascending labels are a topological order.
    """
    down: dict[int, int] = {gr.source: 0}
    for t, h, j in sorted(gr.arcs):
        if t in down:
            v = down[t] + _weight(weights, j)
            if v > down.get(h, UNREACHED):
                down[h] = v
    up: dict[int, int] = {gr.sink: 0}
    for t, h, j in sorted(gr.arcs, key=lambda a: -a[1]):
        if h in up:
            v = up[h] + _weight(weights, j)
            if v > up.get(t, UNREACHED):
                up[t] = v
    return down, up


def reduce(
    bins: Bins, graphs: Sequence[Graph], weights: Sequence[int], caps: Sequence[int] | None = None
) -> Reduced:
    """Drop the arcs no packing of ``bins`` can use, by the weights ``weights`` (one per size).

    ``graphs`` are :func:`planner.search.arcflow.graphs` of ``bins`` (one per class). Negative
    weights are read as 0 (the argument needs every path's weight at most ``V_c`` and ``V_c ≥ 0``).

    ``caps`` (per class, optional): an upper bound on the weight of any pattern a packing can
    put on a node of that class, such as the exact knapsack with each size's copies bounded by
    its demand. The graph does not bound copies (a path may repeat a size more often than it is
    demanded, which no packing does), so its heaviest path can be worth more than any pattern
    a packing uses; the smaller of the two is ``V_c``. An arc is still dropped only when the
    heaviest graph path through it falls more than ``G`` short of ``V_c``: every pattern through
    it weighs at most that path.
    """
    w = [max(0, int(x)) for x in weights]
    tops: list[int] = []
    paths: list[tuple[dict[int, int], dict[int, int]]] = []
    for c, gr in enumerate(graphs):
        down, up = longest(gr, w)
        paths.append((down, up))
        top = down.get(gr.sink, UNREACHED)
        if caps is not None and top > UNREACHED:
            top = min(top, max(0, caps[c]))
        tops.append(top)
    before = sum(len(g.arcs) for g in graphs)
    need = sum(x * d for x, d in zip(w, bins.demand, strict=True))
    room = sum(n * v for v, (_, n) in zip(tops, bins.classes, strict=True) if v > UNREACHED)
    gap = room - need
    if gap < 0:
        empty = tuple(Graph(g.capacity, (), g.source, g.sink) for g in graphs)
        return Reduced(empty, True, gap, tuple(tops), before, 0)
    out = []
    for gr, top, (down, up) in zip(graphs, tops, paths, strict=True):
        if top == UNREACHED:
            out.append(Graph(gr.capacity, (), gr.source, gr.sink))
            continue
        kept = [
            (t, h, j)
            for t, h, j in gr.arcs
            if t in down and h in up and top - (down[t] + _weight(w, j) + up[h]) <= gap
        ]
        out.append(Graph(gr.capacity, tuple(sorted(kept)), gr.source, gr.sink))
    return Reduced(tuple(out), False, gap, tuple(tops), before, sum(len(g.arcs) for g in out))


def caps(bins: Bins, weights: Sequence[int], seconds: float = 1.0) -> list[int]:
    """Per class, the heaviest pattern a packing of ``bins`` can put on one of its nodes.

    A pattern takes no more copies of a size than are demanded, and wastes no more than the
    units all the nodes leave free together (``slack``), so it fills at least ``free − slack``:
    the exact bounded knapsack with that floor (an upper bound of it where it is cut short).
    """
    slack = sum(f * n for f, n in bins.classes) - sum(
        g * d for g, d in zip(bins.sizes, bins.demand, strict=True)
    )
    w = [max(0, int(x)) for x in weights]
    return [
        knapsack(w, bins.sizes, bins.demand, free, seconds, floor=max(0, free - slack))[0]
        for free, _ in bins.classes
    ]
