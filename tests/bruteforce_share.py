"""An exhaustive reference for several plans planned together, on one type's nodes (tiny cases).

Notes
-----
It applies the order of docs/sharing.md literally and tries everything: plans in order (priority, then
holding a placement, then input order), each admitted when some choice of counts and splits,
each request at least its min, of it and of the plans admitted before it packs (:func:`tests.bruteforce.pack_exact`); then
every choice of count and split for the admitted requests, keeping the one with the best key:
per priority, highest first, the cards requests keep of what they held, then all the cards of
that priority; then the total score. It shares only the split table
(:func:`planner.model.options.build_item`) with the planner.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from planner.model.options import Split, build_item, effective_strategy
from planner.model.result import Previous
from planner.model.spec import PlanSpec
from tests.bruteforce import pack_exact

Option = tuple[int, Split | None, bool]  # (cards, split or None for 0, distinct)


@dataclass(frozen=True)
class Reference:
    admitted: frozenset[int]
    key: tuple[int, ...]  # per priority level: (kept of held, cards); flattened
    score: Fraction


def _options(spec: PlanSpec, p: int, free: Sequence[int], low: int, high: int, r_index: int) -> list[Option]:
    r = spec.requests[r_index]
    strategy = effective_strategy(spec, r)
    out: list[Option] = []
    for c in range(low, high + 1):
        if c == 0:
            out.append((0, None, False))
            continue
        it = build_item(0, replace(r, cards=c, minimum=None), strategy, len(free), max(free), spec.scoring)
        out.extend((c, sp, it.distinct) for sp in it.splits)
    return out


def _at_least_min(spec: PlanSpec, p: int, free: Sequence[int], r_index: int) -> list[Option]:
    """A request's options when admitting: any count from its min up to its max that the strategy
    can split (it gets at least its min; a min no split takes, such as 3 cards for a request spread
    on two nodes, is met by a larger count that one does)."""
    r = spec.requests[r_index]
    return _options(spec, p, free, r.least, r.cards, r_index)


def _packs(free: Sequence[int], picked: Sequence[Option]) -> bool:
    return pack_exact(free, [(sp.instances, sp.units, d) for _, sp, d in picked if sp is not None])


def _held(prev: Previous | None, spec: PlanSpec, i: int) -> int:
    r = spec.requests[i]
    placed = (prev or {}).get((r.operator, r.resource))
    return 0 if placed is None else placed.units * sum(placed.nodes.values())


def reference(
    specs: Sequence[PlanSpec], free: Sequence[int], previous: Sequence[Previous | None]
) -> Reference:
    order = sorted(range(len(specs)), key=lambda p: (-specs[p].priority, previous[p] is None, p))
    admitted: list[int] = []
    for p in order:
        lists = [
            _at_least_min(specs[q], q, free, i) for q in [*admitted, p] for i in range(len(specs[q].requests))
        ]
        if any(_packs(free, combo) for combo in itertools.product(*lists)):
            admitted.append(p)
    reqs = [(q, i) for q in admitted for i in range(len(specs[q].requests))]
    lists = [
        _options(specs[q], q, free, specs[q].requests[i].least, specs[q].requests[i].cards, i)
        for q, i in reqs
    ]
    levels = sorted({s.priority for s in specs}, reverse=True)
    best: tuple[tuple[int, ...], Fraction] | None = None
    for combo in itertools.product(*lists):
        key: list[int] = []
        for level in levels:
            here = [
                (c, _held(previous[q], specs[q], i))
                for (q, i), (c, _, _) in zip(reqs, combo, strict=True)
                if specs[q].priority == level
            ]
            key += [sum(min(c, h) for c, h in here), sum(c for c, _ in here)]
        score = sum((sp.score for _, sp, _ in combo if sp is not None), Fraction(0))
        cand = (tuple(key), score)
        if best is not None and cand <= best:
            continue
        if _packs(free, combo):
            best = cand
    assert best is not None  # the mins of the admitted plans pack
    return Reference(frozenset(admitted), best[0], best[1])
