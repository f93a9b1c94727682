"""The exact search over node classes: a model whose size does not grow with the cluster.

Notes
-----
Nodes of one type that have the same free units are interchangeable, so the exact search need not
know which node is which, only how many nodes of each *class* (free units) there are. Each node
ends up holding a multiset of instance sizes that fits its free units: a *pattern*. The model
chooses one split per request (``y``) and how many nodes of each class take each pattern
(``z``), and asks:

- **capacity:** for every instance size ``g``, the instances of size ``g`` the splits need are at
  most the slots of size ``g`` the patterns offer;
- **distinct nodes:** a request whose instances need one node each (a service) with ``d``
  instances of size ``g`` must find ``d`` different nodes with a slot of that size. Requests of
  one size compete for those nodes: by max-flow/min-cut (Gale–Ryser), an assignment exists if and
  only if for every ``t`` the ``t`` largest such requests need no more than
  ``Σ_nodes min(slots of size g on the node, t)``. The sum of the ``t`` largest equals
  ``min over λ of t·λ + Σ max(0, d_i − λ)``, and the best ``λ`` is one of the demands' own values,
  so the model picks one of those few values (exact, and linear once picked). Only ``t`` below
  the most slots a node offers matter: beyond it the capacity row already says it.

Identical requests (same strategy, same splits) are interchangeable, so the model counts how many
of each group take each split instead of deciding request by request: no symmetric re-proofs, and
a type with a thousand requests of a few dozen shapes is a model of a few dozen counts.

Only *maximal* patterns are needed (a slot nobody uses is harmless), which keeps them few: 22 for
an 8-card node with every size from 1 to 8. The model's size depends on the shapes of the
requests and the free values of the nodes, never on how many nodes there are: a 5,000-node type
is as small as a 50-node one. Scores are exact fractions scaled to integers, as in the per-node
model.

:func:`realize` turns a solution into node names: patterns go to nodes (nodes that held instances
before get patterns that keep them, where possible), service requests take the nodes with the most
slots left (largest requests first, which is the constructive side of the same theorem), and the
rest fill the remaining slots, machine requests concentrated and single ones spread.

When a class's patterns would be too many (a CPU type with hundreds of cores and many request
sizes), :func:`build` returns None and the caller uses the per-node model instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice

from planner.model.options import Item, TypeProblem
from planner.search.cpsat import cp_model
from planner.search.place import FreeUnits, NodeCounts, Previous

MAX_PATTERNS = 5_000  # past this many patterns in all, the per-node model is the better tool

Pattern = tuple[int, ...]  # counts per size, aligned with ClassModel.sizes


def maximal_patterns(capacity: int, sizes: Sequence[int], limit: int) -> list[Pattern] | None:
    """Every way to fill ``capacity`` with ``sizes`` such that no further slot fits; None past ``limit``."""
    out: list[Pattern] = []
    smallest = min(sizes)
    counts = [0] * len(sizes)

    def fill(i: int, left: int) -> bool:
        if i == len(sizes):
            if left < smallest:
                out.append(tuple(counts))
            return len(out) <= limit
        for n in range(left // sizes[i], -1, -1):
            counts[i] = n
            if not fill(i + 1, left - n * sizes[i]):
                return False
        counts[i] = 0
        return True

    return out if fill(0, capacity) else None


@dataclass(frozen=True)
class NodeClass:
    free: int
    nodes: tuple[str, ...]  # in name order


def node_classes(problem: TypeProblem) -> list[NodeClass]:
    by_free: dict[int, list[str]] = {}
    for name, free in problem.nodes:
        if free > 0:
            by_free.setdefault(free, []).append(name)
    return [NodeClass(f, tuple(sorted(names))) for f, names in sorted(by_free.items(), reverse=True)]


@dataclass(frozen=True)
class Group:
    """Requests that are interchangeable: same strategy and the same splits (sizes and scores)."""

    items: tuple[Item, ...]  # in index order

    @property
    def first(self) -> Item:
        return self.items[0]


def groups_of(
    items: Sequence[Item], forced: Mapping[int, int] | None, apart: Mapping[int, object] | None = None
) -> list[Group]:
    """``apart``: item index -> a tag; items with different tags never share a group (plans
    planned together tell priorities, and what each request held, apart this way)."""
    out: dict[tuple[object, ...], list[Item]] = {}
    for it in items:
        key: tuple[object, ...] = (it.strategy, tuple((sp.instances, sp.units, sp.score) for sp in it.splits))
        if apart is not None:
            key = (*key, apart.get(it.index))
        if forced is not None and it.index in forced:
            key = (*key, "forced", it.index)  # a request with its split forced stands alone
        out.setdefault(key, []).append(it)
    return [Group(tuple(v)) for v in out.values()]


@dataclass
class ClassModel:
    """The CP-SAT model of one type over node classes (see the module notes)."""

    problem: TypeProblem
    items: list[Item]
    groups: list[Group]
    sizes: list[int]
    classes: list[NodeClass]
    patterns: list[list[Pattern]]
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    scale: int = 1
    x: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (group, split) -> count
    z: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)  # (class, pattern) -> nodes
    objective: cp_model.LinearExprT = 0

    def read(
        self, solver: cp_model.CpSolver, previous: Previous | None = None
    ) -> tuple[list[int], list[list[int]]]:
        """The chosen split per item (-1 outside the model) and pattern counts per class.

        Inside a group the counts go to items in index order, items whose previous size matches a
        split taking that split first (so a re-plan keeps sizes where it can).
        """
        choice = [-1] * len(self.problem.items)
        for gi, grp in enumerate(self.groups):
            left = {s: int(solver.value(self.x[gi, s])) for s in range(len(grp.first.splits))}
            waiting = list(grp.items)
            for it in grp.items:  # keep each item's previous size where the counts allow
                units = (previous or {}).get(it.label, (0, {}))[0]
                for s, sp in enumerate(it.splits):
                    if sp.units == units and left[s] > 0:
                        choice[it.index], left[s] = s, left[s] - 1
                        waiting.remove(it)
                        break
            for it in waiting:
                s = next(s for s, n in left.items() if n > 0)
                choice[it.index], left[s] = s, left[s] - 1
        counts = [
            [int(solver.value(self.z[c, p])) for p in range(len(pats))]
            for c, pats in enumerate(self.patterns)
        ]
        return choice, counts


def build(
    problem: TypeProblem,
    subset: Sequence[int] | None = None,
    forced: Mapping[int, int] | None = None,
    apart: Mapping[int, object] | None = None,
) -> ClassModel | None:
    """The class model of ``problem`` (only ``subset`` of its items, splits ``forced``, groups kept
    ``apart`` as :func:`groups_of` says); None when too big."""
    items = [it for it in problem.items if subset is None or it.index in subset]
    sizes = sorted({sp.units for it in items for sp in it.splits})
    classes = node_classes(problem)
    patterns: list[list[Pattern]] = []
    if sizes:
        budget = MAX_PATTERNS
        for cls in classes:
            pats = maximal_patterns(cls.free, sizes, budget)
            if pats is None:
                return None
            budget -= len(pats)
            patterns.append(pats)
    else:
        patterns = [[] for _ in classes]
    cm = ClassModel(problem, items, groups_of(items, forced, apart), sizes, classes, patterns)
    m = cm.model
    scores = [sp.score for it in items for sp in it.splits]
    cm.scale = math.lcm(*(s.denominator for s in scores)) if scores else 1

    for gi, grp in enumerate(cm.groups):
        xs = []
        for s, _ in enumerate(grp.first.splits):
            x = m.new_int_var(0, len(grp.items), f"x{gi}_{s}")
            cm.x[gi, s] = x
            xs.append(x)
            if forced is not None and grp.first.index in forced and forced[grp.first.index] != s:
                m.add(x == 0)
        m.add(sum(xs) == len(grp.items))  # a request with no split makes the model infeasible, rightly
    for c, cls in enumerate(classes):
        zs = []
        for p, _ in enumerate(patterns[c]):
            z = m.new_int_var(0, len(cls.nodes), f"z{c}_{p}")
            cm.z[c, p] = z
            zs.append(z)
        if zs:
            m.add(sum(zs) <= len(cls.nodes))
    for gi, g in enumerate(sizes):
        _size_rows(cm, gi, g)
    cm.objective = sum(
        int(split.score * cm.scale) * cm.x[gi, s]
        for gi, grp in enumerate(cm.groups)
        for s, split in enumerate(grp.first.splits)
    )
    return cm


def _size_rows(cm: ClassModel, gi: int, g: int) -> None:
    """Capacity and distinct-node rows for instances of ``g`` units (see the module notes)."""
    m = cm.model
    demand = [  # (group, [(split, instances)]) with a split of this size
        (i, [(s, sp.instances) for s, sp in enumerate(grp.first.splits) if sp.units == g])
        for i, grp in enumerate(cm.groups)
    ]
    demand = [(i, ks) for i, ks in demand if ks]
    slots = [
        (c, p, pat[gi]) for c in range(len(cm.classes)) for p, pat in enumerate(cm.patterns[c]) if pat[gi]
    ]
    m.add(sum(k * cm.x[i, s] for i, ks in demand for s, k in ks) <= sum(n * cm.z[c, p] for c, p, n in slots))
    services = [(i, ks) for i, ks in demand if cm.groups[i].first.distinct]
    requests = sum(len(cm.groups[i].items) for i, _ in services)
    most = max((n for _, _, n in slots), default=0)
    lambdas = sorted({0} | {k for _, ks in services for _, k in ks})
    for t in range(1, min(most - 1, requests) + 1):
        reach = sum(min(n, t) * cm.z[c, p] for c, p, n in slots)
        # the t largest service demands fit in reach: t·λ + Σ max(0, d − λ) ≤ reach for some λ,
        # and the best λ is one of the demands' values, so choosing among those is exact
        picks = []
        for lam in lambdas:
            over = sum((k - lam) * cm.x[i, s] for i, ks in services for s, k in ks if k > lam)
            pick = m.new_bool_var(f"lam{g}_{t}_{lam}")
            m.add(t * lam + over <= reach).only_enforce_if(pick)
            picks.append(pick)
        m.add_exactly_one(picks)


# --- from a solution to node names ----------------------------------------------------------


def _assign_patterns(
    cm: ClassModel, counts: list[list[int]], previous: Previous, choice: Sequence[int]
) -> dict[str, list[int]]:
    """Node -> slots per size. Nodes that held kept instances before get a pattern covering them."""
    wanted: dict[str, list[int]] = {}  # node -> slots per size its previous instances would keep
    for it in cm.items:
        units, nodes = previous.get(it.label, (0, {}))
        if units != it.splits[choice[it.index]].units or units not in cm.sizes:
            continue
        gi = cm.sizes.index(units)
        for node, n in nodes.items():
            wanted.setdefault(node, [0] * len(cm.sizes))[gi] += n
    slots: dict[str, list[int]] = {}
    for c, cls in enumerate(cm.classes):
        avail = list(counts[c])
        pats = cm.patterns[c]
        rest = []
        for node in cls.nodes:  # previous nodes first: the pattern that keeps the most of theirs
            want = wanted.get(node)
            if want is None:
                rest.append(node)
                continue
            open_ = [p for p, n in enumerate(avail) if n > 0]
            if not open_:
                break
            best = max(open_, key=lambda p: (sum(min(a, b) for a, b in zip(pats[p], want, strict=True)), -p))
            avail[best] -= 1
            slots[node] = list(pats[best])
        queue = [p for p, n in enumerate(avail) for _ in range(n)]
        for node, p in zip(rest, queue, strict=False):
            slots[node] = list(pats[p])
    return slots


def realize(
    cm: ClassModel, choice: Sequence[int], counts: list[list[int]], previous: Previous
) -> list[NodeCounts]:
    """Node names for a solution of the class model; raises AssertionError if it cannot (a bug)."""
    slots = _assign_patterns(cm, counts, previous, choice)
    placed: list[NodeCounts] = [{} for _ in cm.problem.items]
    for gi, g in enumerate(cm.sizes):
        here = [
            (it, it.splits[choice[it.index]].instances)
            for it in cm.items
            if it.splits[choice[it.index]].units == g
        ]
        left = FreeUnits([(node, s[gi]) for node, s in slots.items() if s[gi] > 0])
        # distinct requests first, largest first, each on the nodes with the most slots left: the
        # constructive side of the condition the model enforced
        for it, k in sorted(here, key=lambda x: (not x[0].distinct, -x[1], x[0].index)):
            out = placed[it.index]
            if it.distinct:
                chosen = list(islice(left.descending(1), k))
                assert len(chosen) == k, f"{it.label}: {k} distinct nodes with a {g}-slot, {len(chosen)} left"
                for node in chosen:
                    out[node] = 1
                    left.take(node, 1)
                continue
            need = k
            prev_units, prev_nodes = previous.get(it.label, (0, {}))
            for node, n in sorted(prev_nodes.items()) if prev_units == g else ():  # back where it was
                take = min(need, n, left.free.get(node, 0))
                if take > 0:
                    out[node] = take
                    left.take(node, take)
                    need -= take
            while need:
                if it.rule.spreads:
                    fewest = min((out.get(n, 0) for n in left.descending(1)), default=None)
                    assert fewest is not None, f"{it.label}: no {g}-slots left"
                    batch = [n for n in left.descending(1) if out.get(n, 0) == fewest][:need]
                    for node in batch:
                        out[node] = out.get(node, 0) + 1
                        left.take(node, 1)
                    need -= len(batch)
                else:
                    roomiest = left.roomiest()
                    assert roomiest is not None, f"{it.label}: {need} instances of {g} without a slot"
                    take = min(need, left.free[roomiest])
                    out[roomiest] = out.get(roomiest, 0) + take
                    left.take(roomiest, take)
                    need -= take
    return placed
