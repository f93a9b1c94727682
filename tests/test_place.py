"""Greedy placement's free units: buckets walked as they are read give what copies gave."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.search.place import FreeUnits


class Copied(FreeUnits):
    """Each bucket copied whole on reaching its value (what the walk replaced): the reference."""

    def ascending(self, at_least: int) -> Iterator[str]:
        f = max(at_least, 0) - 1
        while (i := bisect_right(self.values, f)) < len(self.values):
            f = self.values[i]
            yield from list(self.buckets[f])

    def descending(self, at_least: int) -> Iterator[str]:
        f = self.values[-1] + 1 if self.values else 0
        while (i := bisect_left(self.values, f) - 1) >= 0 and self.values[i] >= max(at_least, 0):
            f = self.values[i]
            yield from list(self.buckets.get(f, ()))


def _walked(free: FreeUnits, steps: list[tuple[bool, int, int, int]]) -> list[object]:
    """Each step walks one way from ``at_least``, taking ``units`` from every ``every``-th node it
    is given that holds them, as placement does; the nodes given, and the free units after."""
    out: list[object] = []
    for up, at_least, units, every in steps:
        walk = free.ascending(at_least) if up else free.descending(at_least)
        given = []
        for n, node in enumerate(walk):
            given.append(node)
            if n % every == 0 and free.free[node] >= units:
                free.take(node, units)
        out.append((given, sorted(free.free.items()), free.tightest_holding(at_least), free.roomiest()))
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=60),
    st.lists(st.tuples(st.booleans(), st.integers(0, 9), st.integers(1, 4), st.integers(1, 3)), max_size=12),
)
def test_walking_a_bucket_gives_what_a_copy_of_it_gave(
    frees: list[int], steps: list[tuple[bool, int, int, int]]
) -> None:
    nodes = [(f"n{i:03d}", f) for i, f in enumerate(frees)][::-1]
    assert _walked(FreeUnits(nodes), steps) == _walked(Copied(nodes), steps)


def test_a_long_bucket_is_walked_past_its_first_pieces() -> None:
    nodes = [(f"n{i:04d}", 8) for i in range(1000)]
    free = FreeUnits(nodes)
    assert list(free.descending(1)) == [n for n, _ in nodes]
    for node in free.ascending(8):  # every node given is taken: the walk goes on past them
        free.take(node, 8)
    assert free.values == [0] and free.roomiest() is None
