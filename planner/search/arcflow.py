"""An exact arc-flow model of a pure packing (Valério de Carvalho), compressed, solved by CP-SAT.

Notes
-----
A node of capacity ``C`` filled with instances is a path in a graph over positions ``0..C``: an
arc ``p → p + g`` places an instance of size ``g``, and a *loss* arc ends the node. A packing is
a flow: as many paths as nodes used, each size's arcs carrying its demand. Unlike the pattern
model, the graph holds *every* pattern at once, so the integer model over it is complete: CP-SAT
finding it infeasible is a refutation, and any flow it finds is a packing (decoded into paths and
checked). It pays off when the graph is small: few distinct sizes, or a modest capacity.

Three reductions keep the graph small without losing a packing:

- **Order**: a node's instances are placed largest first, so an arc of size ``g`` leaves position
  ``p`` only if some path reaches ``p`` with its last instance no smaller than ``g``.
- **Waste**: with ``n`` nodes there are only ``slack = n·C − Σ demand·size`` units to waste in all,
  so a node ends (loss arc) only at a position ``≥ C − slack``. On instances that fill every node
  exactly (the triplets) only exactly full patterns remain.
- **Compression** (Brandão & Pedroso): each position is relabelled with the highest label its
  continuations allow (``φ(p) = min over arcs p→q of φ(q) − g``, and ``C`` at the end); positions
  with one label merge. Every arc keeps ``φ(q) − φ(p) ≥ g``, so every path of the compressed
  graph still fits in ``C``, and every path of the original graph is still there.

Nodes of several free sizes get one graph per size, each with its own count of paths.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass

from planner.search.bounds import Bins

Column = tuple[int, tuple[int, ...]]  # (class, instances per size)
MAX_ARCS = 150_000  # a larger graph is not worth building (the pattern model stays in charge)
WORK_PER_ARC = 10  # positions × sizes visited while building, per arc allowed, before giving up


@dataclass(frozen=True)
class Graph:
    """One class's compressed graph: arcs (tail, head, size index or -1 for a loss arc)."""

    capacity: int
    arcs: tuple[tuple[int, int, int], ...]
    source: int
    sink: int


def graph(sizes: Sequence[int], capacity: int, slack: int, limit: int = MAX_ARCS) -> Graph | None:
    """The compressed graph of one node capacity (``sizes`` largest first), or None if too large."""
    m = len(sizes)
    first: dict[int, int] = {0: 0}  # the first size index a path reaching p may still place
    out: dict[int, list[tuple[int, int]]] = {}
    work = 0
    frontier = [0]
    seen = {0}
    while frontier:
        p = heapq.heappop(frontier)
        arcs = out.setdefault(p, [])
        for j in range(first[p], m):
            q = p + sizes[j]
            if q > capacity:
                continue
            arcs.append((q, j))
            if q not in seen:
                seen.add(q)
                first[q] = j
                heapq.heappush(frontier, q)
            elif j < first[q]:
                first[q] = j
        work += m - first[p]
        if work > limit * WORK_PER_ARC:
            return None
    # relabel from the end: phi(p) is the highest position p can stand for; a node that can
    # neither end (waste over the slack) nor reach one that can is dropped
    end = capacity - slack
    phi: dict[int, int] = {}
    for p in sorted(out, reverse=True):
        best = capacity if p >= end else None
        for q, j in out[p]:
            if q in phi:
                v = phi[q] - sizes[j]
                best = v if best is None else min(best, v)
        if best is not None:
            phi[p] = best
    if 0 not in phi:
        return Graph(capacity, (), 0, 0)
    sink = capacity + 1
    arcs_set: set[tuple[int, int, int]] = set()
    for p, lab in phi.items():
        for q, j in out[p]:
            if q in phi:
                arcs_set.add((lab, phi[q], j))
        if p >= end:
            arcs_set.add((lab, sink, -1))
        if len(arcs_set) > limit:
            return None
    # only what the source reaches
    reach = {phi[0]}
    kept = []
    for a in sorted(arcs_set):
        if a[0] in reach:
            reach.add(a[1])
            kept.append(a)
    return Graph(capacity, tuple(kept), phi[0], sink)


@dataclass
class Flow:
    """What the arc-flow model established: a packing, a refutation, or neither in time."""

    columns: list[Column] | None  # the packing (a pattern per node used)
    refuted: bool  # CP-SAT proved no flow exists: no packing exists
    arcs: int  # the model's size, for the record
    seconds: float


def graphs(bins: Bins, limit: int = MAX_ARCS) -> list[Graph] | None:
    """One compressed graph per class of nodes, or None when any is too large."""
    slack = sum(f * n for f, n in bins.classes) - sum(
        g * d for g, d in zip(bins.sizes, bins.demand, strict=True)
    )
    if slack < 0:
        return None
    out = []
    total = 0
    for free, _ in bins.classes:
        g = graph(bins.sizes, free, slack, limit - total)
        if g is None:
            return None
        total += len(g.arcs)
        if total > limit:
            return None
        out.append(g)
    return out


def solve(bins: Bins, seconds: float, built: list[Graph] | None = None) -> Flow:
    """Pack ``bins`` by the arc-flow model within ``seconds`` (None graphs: the model is too large)."""
    from planner.search.cpsat import cp_model

    start = time.monotonic()
    if sum(g * d for g, d in zip(bins.sizes, bins.demand, strict=True)) > sum(f * n for f, n in bins.classes):
        return Flow(None, True, 0, time.monotonic() - start)  # more units than the nodes have
    gs = built if built is not None else graphs(bins)
    if gs is None:
        return Flow(None, False, 0, time.monotonic() - start)
    model = cp_model.CpModel()
    flows: list[list[tuple[tuple[int, int, int], cp_model.IntVar]]] = []
    per_size: list[list[cp_model.IntVar]] = [[] for _ in bins.sizes]
    for c, (gr, (_, n)) in enumerate(zip(gs, bins.classes, strict=True)):
        here = []
        balance: dict[int, list[cp_model.LinearExprT]] = {}
        for a in gr.arcs:
            tail, head, j = a
            ub = n if j < 0 else min(n * (gr.capacity // bins.sizes[j]), bins.demand[j])
            x = model.new_int_var(0, ub, f"f{c}_{tail}_{head}_{j}")
            here.append((a, x))
            balance.setdefault(tail, []).append(-x)
            balance.setdefault(head, []).append(x)
            if j >= 0:
                per_size[j].append(x)
        for node, terms in balance.items():
            if node == gr.source:
                model.add(-sum(terms) <= n)
            elif node != gr.sink:
                model.add(sum(terms) == 0)
        flows.append(here)
    for j, d in enumerate(bins.demand):
        if not per_size[j]:
            return Flow(None, True, sum(len(g.arcs) for g in gs), time.monotonic() - start)
        model.add(sum(per_size[j]) == d)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, seconds - (time.monotonic() - start))
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.linearization_level = 2
    status = solver.solve(model)
    arcs = sum(len(g.arcs) for g in gs)
    if status == cp_model.INFEASIBLE:
        return Flow(None, True, arcs, time.monotonic() - start)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Flow(None, False, arcs, time.monotonic() - start)
    columns: list[Column] = []
    for c, (gr, here) in enumerate(zip(gs, flows, strict=True)):
        columns += [(c, a) for a in _paths(gr, {a: solver.value(x) for a, x in here}, len(bins.sizes))]
    if not packs(bins, columns):  # never claim a packing that does not check
        return Flow(None, False, arcs, time.monotonic() - start)
    return Flow(columns, False, arcs, time.monotonic() - start)


def _paths(gr: Graph, flow: dict[tuple[int, int, int], int], m: int) -> list[tuple[int, ...]]:
    """The flow decomposed into source-to-sink paths, each a node's instances per size."""
    leaving: dict[int, list[tuple[int, int, int]]] = {}
    for a, v in flow.items():
        if v > 0:
            leaving.setdefault(a[0], []).append(a)
    out: list[tuple[int, ...]] = []
    while True:
        node, counts = gr.source, [0] * m
        path = []
        while node != gr.sink:
            arcs = [a for a in leaving.get(node, ()) if flow[a] > 0]
            if not arcs:
                break
            a = arcs[0]
            path.append(a)
            if a[2] >= 0:
                counts[a[2]] += 1
            node = a[1]
        if node != gr.sink or not path:
            return out
        for a in path:
            flow[a] -= 1
        if any(counts):
            out.append(tuple(counts))


def packs(bins: Bins, columns: Sequence[Column]) -> bool:
    """Every node within its free units and its class's count, every size's demand met."""
    used = [0] * len(bins.classes)
    got = [0] * len(bins.sizes)
    for c, a in columns:
        used[c] += 1
        if sum(n * g for n, g in zip(a, bins.sizes, strict=True)) > bins.classes[c][0]:
            return False
        got = [x + n for x, n in zip(got, a, strict=True)]
    return got == list(bins.demand) and all(u <= n for u, (_, n) in zip(used, bins.classes, strict=True))
