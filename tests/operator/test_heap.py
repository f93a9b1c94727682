"""heap.py: what survives a cycle is frozen out of the collector's sight; everything is collected
now and then, between cycles, so a reference cycle that became garbage does not stay."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from gpuplan_operator.heap import Heap


class Node:
    """Something a reference cycle can be made of (and a weak reference can watch)."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test session runs with the collector as it was


def cycle_garbage() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_what_survives_a_cycle_is_frozen_and_a_full_collection_comes_every_so_often() -> None:
    now = [0.0]
    heap = Heap(every=300.0, clock=lambda: now[0])
    kept = [Node() for _ in range(1000)]
    heap.after_cycle()
    assert gc.get_freeze_count() >= len(kept)

    garbage = cycle_garbage()  # made during the next cycle, garbage by its end, frozen after it
    now[0] = 10.0
    heap.after_cycle()
    gc.collect()  # the collector's own runs do not see frozen objects
    assert garbage() is not None

    now[0] = 310.0  # the next cycle after CLEAN_EVERY: everything looked at once
    heap.after_cycle()
    assert garbage() is None
    assert gc.get_freeze_count() >= len(kept)  # what is alive is frozen again


def test_a_dropped_frozen_object_is_still_freed_by_its_count() -> None:
    heap = Heap(every=300.0, clock=lambda: 0.0)
    kept = [Node()]
    ref = weakref.ref(kept[0])
    heap.after_cycle()
    kept.clear()  # no cycle: reference counting frees it, frozen or not
    assert ref() is None
