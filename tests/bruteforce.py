"""Two slow planners kept for comparison: an exhaustive reference and the product's original method.

Notes
-----
``exhaustive`` tries every combination of splits and every assignment of instances to nodes. It
is exponential and only for tiny instances, which makes it trustworthy: the property tests hold
the real search to it for both feasibility and optimum.

``seed_method`` re-implements seed 000/001 as written: enumerate the full product of every
request's splits across all types, sort by score, and accept the first combination that a greedy
check places (largest instance into the node with the most cards left). It is what ``make bench``
races against, and the unit tests keep its two known errors on record: it rejects plans that fit
and accepts plans that break the service spreading rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction

from planner.model.options import Split, TypeProblem


def pack_exact(free: Sequence[int], groups: Sequence[tuple[int, int, bool]]) -> bool:
    """Can ``groups`` of (instances, units, distinct) be placed on nodes with ``free`` cards?"""
    instances = sorted(
        ((g, gid, distinct) for gid, (k, g, distinct) in enumerate(groups) for _ in range(k)),
        reverse=True,
    )
    left = list(free)
    used: list[set[int]] = [set() for _ in free]

    def place(i: int, start: int) -> bool:
        if i == len(instances):
            return True
        g, gid, distinct = instances[i]
        # identical consecutive instances go to non-decreasing nodes (no permutations)
        same = i > 0 and instances[i - 1][:2] == (g, gid)
        tried: set[tuple[int, frozenset[int]]] = set()
        for n in range(start if same else 0, len(left)):
            if left[n] < g or (distinct and gid in used[n]):
                continue
            key = (left[n], frozenset(used[n]))  # nodes alike in every respect: try one
            if key in tried:
                continue
            tried.add(key)
            left[n] -= g
            had = gid in used[n]
            used[n].add(gid)
            if place(i + 1, n):
                return True
            left[n] += g
            if not had:
                used[n].discard(gid)
        return False

    return place(0, 0)


def exhaustive(problem: TypeProblem) -> tuple[Fraction, list[int]] | None:
    """The best (score, choice) by trying everything, or None if nothing fits."""
    free = [f for _, f in problem.nodes]
    best: tuple[Fraction, list[int]] | None = None
    for choice in itertools.product(*(range(len(it.splits)) for it in problem.items)):
        score = sum((it.splits[c].score for it, c in zip(problem.items, choice, strict=True)), Fraction(0))
        if best is not None and score <= best[0]:
            continue
        groups = [
            (it.splits[c].instances, it.splits[c].units, it.distinct)
            for it, c in zip(problem.items, choice, strict=True)
        ]
        if pack_exact(free, groups):
            best = (score, list(choice))
    return best


def seed_greedy_check(free: Sequence[int], sizes: Sequence[int]) -> bool:
    """The seed's check: largest instance first, into the node with the most cards left."""
    left = sorted(free, reverse=True)
    for g in sorted(sizes, reverse=True):
        if not left or left[0] < g:
            return False
        left[0] -= g
        left.sort(reverse=True)
    return True


def seed_method(problems: Sequence[TypeProblem]) -> tuple[float, list[list[Split]]] | None:
    """Seed 000/001 as written: full product over all types, sort, greedy check in order.

    Scores are floats here, as in the seed's script: it is the baseline, so it gets no handicap.
    """
    flat = [(p, it) for p in problems for it in p.items]
    scored = [[(float(s.score), s) for s in it.splits] for _, it in flat]
    combos = []
    for picked in itertools.product(*scored):
        combos.append((sum(sc for sc, _ in picked), tuple(s for _, s in picked)))
    combos.sort(key=lambda c: c[0], reverse=True)
    for score, choice in combos:
        ok = True
        for p in problems:
            sizes = [
                s.units for (q, _), s in zip(flat, choice, strict=True) if q is p for _ in range(s.instances)
            ]
            if not seed_greedy_check([f for _, f in p.nodes], sizes):
                ok = False
                break
        if ok:
            per_type = [[s for (q, _), s in zip(flat, choice, strict=True) if q is p] for p in problems]
            return score, per_type
    return None
