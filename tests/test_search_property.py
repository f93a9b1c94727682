"""The search against a tiny exhaustive reference: same feasibility, same optimum, valid placement."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.planning import solve_type
from tests.bruteforce import exhaustive
from tests.helpers import check_placement, problem


@st.composite
def problems(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    free = draw(st.lists(st.integers(0, 8), min_size=1, max_size=4))
    reqs = []
    for _ in range(draw(st.integers(1, 4))):
        strategy = draw(st.sampled_from(["machine", "service", "single", "special"]))
        cards = draw(st.integers(1, 12))
        machines = None
        if strategy == "special":
            machines = draw(st.sampled_from([k for k in range(1, cards + 1) if cards % k == 0]))
        reqs.append((strategy if strategy != "special" else "machine", cards, machines))
    scoring = draw(st.sampled_from(["v1", "v2"]))
    return problem(free, reqs, scoring)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_search_matches_exhaustive_reference(prob) -> None:  # type: ignore[no-untyped-def]
    ref = exhaustive(prob) if all(it.splits for it in prob.items) else None
    out, _ = solve_type(prob, 20.0)
    if ref is None:
        assert out.status == "infeasible", out
        return
    assert out.status == "optimal", out
    assert out.score == ref[0]
    assert out.choice is not None and out.nodes is not None
    assert check_placement(prob, out.choice, out.nodes) == []
    got = sum((it.splits[c].score for it, c in zip(prob.items, out.choice, strict=True)), 0)
    assert got == out.score
