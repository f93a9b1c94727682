"""Greedy placement of chosen splits: the fast path and the solver's first hint.

Notes
-----
When every request's best split fits, the plan's score equals the upper bound (the sum of the
best terms), so a greedy placement that succeeds is a *proof* of optimality and no solver runs.
It is only ever trusted in that direction: a greedy failure proves nothing (the seed's mistake:
largest-first into the emptiest node rejects 3,3,2,2,2 on two 6-card nodes) and hands the type to
the exact search.

Two passes are tried. The first serves placement quality: instances stay where a previous plan
put them, machine requests concentrate on as few nodes as possible, single and special requests
spread. The second is plain best-fit decreasing, which packs more often.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from planner.options import Item, Split, TypeProblem

NodeCounts = dict[str, int]
Previous = Mapping[str, tuple[int, Mapping[str, int]]]  # operator -> (units, node -> count)


def _order(chosen: Sequence[tuple[Item, Split]]) -> list[tuple[Item, Split]]:
    # largest instances first; among equals the constrained ones (distinct nodes, many of them)
    return sorted(chosen, key=lambda c: (-c[1].units, not c[0].distinct, -c[1].instances))


def _place_one(
    item: Item,
    split: Split,
    free: dict[str, int],
    prev: Mapping[str, int],
    quality: bool,
) -> NodeCounts | None:
    g, k = split.units, split.instances
    out: NodeCounts = {}
    if item.distinct:
        fits = [n for n, f in free.items() if f >= g]
        if len(fits) < k:
            return None
        # previous nodes first, then best fit (leave the big holes for later, larger items)
        fits.sort(key=lambda n: (-min(prev.get(n, 0), 1) if quality else 0, free[n], n))
        for n in fits[:k]:
            out[n] = 1
            free[n] -= g
        return out
    spread = quality and item.rule.spreads
    left = k
    while left:
        fits = [n for n, f in free.items() if f >= g]
        if not fits:
            for n, c in out.items():  # undo
                free[n] += c * g
            return None
        best = min(fits, key=lambda n: _rank(n, free, out, prev, g, left, quality, spread))
        room = min(left, free[best] // g)
        kept = min(prev.get(best, 0) - out.get(best, 0), room) if quality else 0
        if not quality:
            take = 1  # plain best fit, one instance at a time
        elif spread:
            take = max(kept, 1)  # back onto a previous node, else one per node
        else:
            take = room  # concentrate: as many as the node holds
        out[best] = out.get(best, 0) + take
        free[best] -= take * g
        left -= take
    return out


def _rank(
    n: str,
    free: Mapping[str, int],
    out: Mapping[str, int],
    prev: Mapping[str, int],
    g: int,
    left: int,
    quality: bool,
    spread: bool,
) -> tuple[int, int, int, str]:
    """Smaller is better: previous nodes first, then spread or concentrate, then best fit."""
    if not quality:
        return (0, 0, free[n], n)
    room = min(left, free[n] // g)
    kept = max(min(prev.get(n, 0) - out.get(n, 0), room), 0)
    if spread:
        return (-kept, out.get(n, 0), -free[n], n)
    return (-kept, -room, free[n] - room * g, n)


def greedy_place(
    problem: TypeProblem,
    choice: Sequence[int],
    previous: Previous | None = None,
) -> list[NodeCounts] | None:
    """Place the chosen split of every item, or return None if the greedy passes both fail."""
    chosen = [(it, it.splits[c]) for it, c in zip(problem.items, choice, strict=True)]
    for quality in (True, False):
        free = dict(problem.nodes)
        placed: dict[int, NodeCounts] = {}
        for item, split in _order(chosen):
            prev_units, prev_nodes = (previous or {}).get(item.label, (0, {}))
            prev = prev_nodes if prev_units == split.units else {}
            got = _place_one(item, split, free, prev, quality)
            if got is None:
                break
            placed[item.index] = got
        else:
            return [placed[it.index] for it in problem.items]
    return None
