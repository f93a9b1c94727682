"""Plans planned together against the exhaustive reference, and the no-oscillation properties.

The reference (:mod:`tests.bruteforce_share`) decides admission and the best key (cards kept and
cards per priority, then score) by trying everything; the planner must agree and say
``optimal``. Then, with no outside change, planning again changes nothing; a newcomer never
takes cards that a plan of equal or higher priority holds unless its own min needs them; and a
request that shrank grows back only on cards the plans before it do not keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.model.catalog import BUILTIN_OPERATORS, default_resources
from planner.model.result import Previous, previous_placements
from planner.model.spec import PlanSpec, Request, Snapshot
from planner.read.parse import snapshot
from planner.share.outcome import Shared
from planner.share.together import plan_together
from tests.bruteforce_share import reference
from tests.helpers import node_list

OPERATORS = ("face_1vn", "face_feature_extract", "security_pass")  # machine, service, single


@st.composite
def requests(draw: st.DrawFn, fixed: bool = False) -> tuple[Request, ...]:
    ops = draw(st.lists(st.sampled_from(OPERATORS), min_size=1, max_size=2, unique=True))
    out = []
    for op in ops:
        high = draw(st.integers(1, 4))
        low = high if fixed else draw(st.integers(0, high))
        out.append(Request(op, "P4", high, None, None if low == high else low))
    return tuple(out)


def spec(name: str, reqs: tuple[Request, ...], priority: int, scoring: str = "v1") -> PlanSpec:
    return PlanSpec(
        name=name,
        namespace="t",
        resources=default_resources(),
        operators=BUILTIN_OPERATORS,
        requests=reqs,
        priority=priority,
        scoring=scoring,
    )


@st.composite
def cases(draw: st.DrawFn, most: int = 3) -> tuple[list[int], list[PlanSpec]]:
    free = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    count = draw(st.integers(1, most))
    specs = []
    total = 0
    for p in range(count):
        reqs = draw(requests())
        reqs = reqs[: max(1, 4 - total)]  # at most four requests in all: the reference is exhaustive
        total += len(reqs)
        specs.append(spec(f"p{p}", reqs, draw(st.sampled_from([0, 0, 5, 10]))))
    return free, specs


def snap_of(free: Sequence[int]) -> Snapshot:
    return snapshot(node_list([(f"n{i}", "P4", f) for i, f in enumerate(free)]))


def cards(s: Shared) -> dict[tuple[str, str], int]:
    return {(a.operator, a.resource): a.units_total for a in s.result.allocations}


def key_of(
    specs: Sequence[PlanSpec], out: Sequence[Shared], previous: Sequence[Previous | None]
) -> tuple[int, ...]:
    key: list[int] = []
    for level in sorted({s.priority for s in specs}, reverse=True):
        kept = total = 0
        for sp, got, prev in zip(specs, out, previous, strict=True):
            if sp.priority != level or not got.admitted:
                continue
            for (op, res), c in cards(got).items():
                was = (prev or {}).get((op, res))
                held = 0 if was is None else was.units * sum(was.nodes.values())
                kept += min(c, held)
                total += c
        key += [kept, total]
    return tuple(key)


def load_ok(free: Sequence[int], out: Sequence[Shared]) -> None:
    """No node over-committed; no two instances of a service request on one node."""
    load = [0] * len(free)
    for s in out:
        for a in (*s.result.allocations, *s.kept):
            for node, k in a.nodes:
                load[int(node[1:])] += k * a.units
                if a.strategy is not None and a.strategy.value == "service":
                    assert k == 1, (s.name, a)
    assert all(used <= f for used, f in zip(load, free, strict=True)), (load, free)


def holdings(out: Sequence[Shared]) -> list[Previous | None]:
    return [previous_placements(s.result.allocations) if s.admitted else None for s in out]


@settings(max_examples=150, deadline=None)
@given(cases())
def test_together_matches_the_exhaustive_reference(case) -> None:  # type: ignore[no-untyped-def]
    free, specs = case
    previous: list[Previous | None] = [None] * len(specs)
    out = plan_together(specs, snap_of(free), previous, seconds=20)
    ref = reference(specs, free, previous)
    assert frozenset(p for p, s in enumerate(out) if s.admitted) == ref.admitted
    assert key_of(specs, out, previous) == ref.key
    assert sum((s.result.score or Fraction(0) for s in out if s.admitted), Fraction(0)) == ref.score
    assert all(s.result.optimal for s in out)
    load_ok(free, out)
    for s in out:  # each elastic request's grant agrees with its allocation
        for g in s.grants:
            assert g.cards == cards(s).get((g.operator, g.resource), 0)
            assert (g.why is None) == (g.cards == g.maximum)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_planning_again_changes_nothing(case) -> None:  # type: ignore[no-untyped-def]
    free, specs = case
    snap = snap_of(free)
    first = plan_together(specs, snap, seconds=20)
    held = holdings(first)
    again = plan_together(specs, snap, held, seconds=20)
    assert [s.admitted for s in again] == [s.admitted for s in first]
    assert [s.result.allocations for s in again] == [s.result.allocations for s in first]
    assert all(s.result.moved in (0, None) for s in again)
    # and with the holdings it had, the reference agrees
    assert key_of(specs, again, held) == reference(specs, free, held).key


@settings(max_examples=100, deadline=None)
@given(cases(most=2), st.sampled_from([0, 5, 10]), requests())
def test_a_newcomer_takes_nothing_an_equal_or_higher_plan_holds(case, priority, reqs) -> None:  # type: ignore[no-untyped-def]
    free, specs = case
    snap = snap_of(free)
    first = plan_together(specs, snap, seconds=20)
    held = holdings(first)
    # the newcomer asks only above a min of 0: it may grow, never displace a min
    newcomer = spec("new", tuple(replace(r, minimum=0) for r in reqs), priority)
    out = plan_together([*specs, newcomer], snap, [*held, None], seconds=20)
    load_ok(free, out)
    for before, after, sp in zip(first, out[:-1], specs, strict=True):
        if not before.admitted or sp.priority < priority:
            continue
        assert after.admitted, after.name
        got = cards(after)
        for key, c in cards(before).items():
            assert got.get(key, 0) >= c, (after.name, key, c, got)


@settings(max_examples=100, deadline=None)
@given(cases(most=2), st.sampled_from([0, 5, 10]), requests(fixed=True))
def test_a_shrunk_request_grows_back_only_on_cards_no_plan_before_it_keeps(case, priority, reqs) -> None:  # type: ignore[no-untyped-def]
    free, specs = case
    snap = snap_of(free)
    intruder = spec("intruder", reqs, priority)
    first = plan_together([intruder, *specs], snap, seconds=20)
    held = holdings(first)[1:]
    out = plan_together(specs, snap, held, seconds=20)  # the intruder is gone
    load_ok(free, out)
    order = sorted(range(len(specs)), key=lambda p: (-specs[p].priority, held[p] is None, p))
    for rank, p in enumerate(order):
        if not first[p + 1].admitted:
            continue
        grew = any(c > cards(first[p + 1]).get(k, 0) for k, c in cards(out[p]).items())
        if not grew:
            continue
        for q in order[:rank]:  # every plan before it keeps what it held
            got = cards(out[q])
            for k, c in cards(first[q + 1]).items():
                assert got.get(k, 0) >= c, (specs[q].name, k)


@settings(max_examples=60, deadline=None)
@given(cases())
def test_growing_one_by_one_also_changes_nothing_when_planned_again(case) -> None:  # type: ignore[no-untyped-def]
    """The plan for pools too large for the staged model (forced here on tiny ones)."""
    from unittest.mock import patch

    from planner.share import growth

    free, specs = case
    snap = snap_of(free)
    with patch.object(growth, "MODEL_SPLITS", 0):
        first = plan_together(specs, snap, seconds=20)
        load_ok(free, first)
        again = plan_together(specs, snap, holdings(first), seconds=20)
    assert [s.admitted for s in again] == [s.admitted for s in first]
    assert [s.result.allocations for s in again] == [s.result.allocations for s in first]
