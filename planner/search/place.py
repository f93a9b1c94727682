"""Greedy placement of chosen splits: the fast path, and the placer of the exact search's choice.

Notes
-----
When every request's best split fits, the plan's score equals the upper bound (the sum of the
best terms), so a greedy placement that succeeds is a *proof* of optimality and no solver runs.
It is only ever trusted in that direction: a greedy failure proves nothing (largest-first into
the emptiest node rejects 3,3,2,2,2 on two 6-card nodes) and hands the type to the exact search.

Up to four passes are tried, the first that places everything wins:

1. With a previous placement: every instance that can stay where it was is put back first, then
   the rest are placed. A re-plan after one node is cordoned moves only what that node held.
   When that fails (new instances need room the kept ones fill), the new instances go first,
   onto the nodes the previous placement held least of, and the others back around them.
2. Placement quality: previous nodes preferred, machine requests concentrated on as few nodes as
   possible, single and special requests spread, service instances best-fit on distinct nodes.
3. Plain best-fit decreasing, which packs more often.

Free units are kept in buckets by value (a node with 3 free is in bucket 3), so finding the
tightest or roomiest node costs the number of distinct free values, not the number of nodes: a
5,000-node type places a thousand requests in a fraction of a second.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Mapping, Sequence

from planner.model.options import Item, Split, TypeProblem

NodeCounts = dict[str, int]
Previous = Mapping[str, tuple[int, Mapping[str, int]]]  # operator -> (units, node -> count)
# with GPUs chosen one by one: operator -> node -> the device names of each instance there
PreviousDevices = Mapping[str, Mapping[str, Sequence[Sequence[str]]]]


class FreeUnits:
    """Free units per node, bucketed by value; names inside a bucket stay sorted.

    Only the values some node has are kept (in order, in ``values``): a scan costs the number of
    distinct free values, not the largest one, which matters for a type of 100,000 units a node.
    """

    def __init__(self, nodes: Sequence[tuple[str, int]]) -> None:
        self.free = dict(nodes)
        self.buckets: dict[int, list[str]] = {}
        for name, f in sorted(nodes):
            self.buckets.setdefault(f, []).append(name)
        self.values = sorted(self.buckets)

    def take(self, node: str, units: int) -> None:
        f = self.free[node]
        bucket = self.buckets[f]
        del bucket[bisect_left(bucket, node)]
        if not bucket:
            del self.buckets[f]
            del self.values[bisect_left(self.values, f)]
        self.free[node] = f - units
        if f - units not in self.buckets:
            self.buckets[f - units] = []
            insort(self.values, f - units)
        insort(self.buckets[f - units], node)

    def _walk(self, f: int) -> Iterator[str]:
        """The nodes at value ``f``, by name, read from their bucket as they are given: a few at
        a time, then twice as many. A bucket holds thousands of nodes at 65,000 nodes, where a
        request wants a few: copied whole on reaching ``f``, the fast path of 50 plans took
        265 ms, 247 ms so (median of 9, load 5).

        The nodes a copy made on reaching ``f`` would give, as long as no node moves into the
        bucket, or out of it before it is given, while it is walked: every caller takes only
        nodes it was given, and a take moves a node to another value."""
        last, step = "", 8
        first = True
        while bucket := self.buckets.get(f):
            i = 0 if first else bisect_right(bucket, last)
            chunk = bucket[i : i + step]
            if not chunk:
                return
            yield from chunk
            last, step, first = chunk[-1], step * 2, False

    def ascending(self, at_least: int) -> Iterator[str]:
        """Nodes with at least ``at_least`` free, tightest first (then by name).

        Take from it freely the nodes it gives: it does not see its own changes.
        """
        f = max(at_least, 0) - 1
        while (i := bisect_right(self.values, f)) < len(self.values):
            f = self.values[i]
            yield from self._walk(f)

    def descending(self, at_least: int) -> Iterator[str]:
        """Nodes with at least ``at_least`` free, roomiest first (then by name); as ascending."""
        f = self.values[-1] + 1 if self.values else 0
        while (i := bisect_left(self.values, f) - 1) >= 0 and self.values[i] >= max(at_least, 0):
            f = self.values[i]
            yield from self._walk(f)

    def tightest_holding(self, units: int) -> str | None:
        """The node with the least free that still holds ``units`` (by name among equals)."""
        i = bisect_left(self.values, max(units, 0))
        return self.buckets[self.values[i]][0] if i < len(self.values) else None

    def roomiest(self) -> str | None:
        top = self.values[-1] if self.values else 0
        return self.buckets[top][0] if top > 0 else None


def _order(chosen: Sequence[tuple[Item, Split]]) -> list[tuple[Item, Split]]:
    # largest instances first; among equals the constrained ones (distinct nodes, many of them)
    return sorted(chosen, key=lambda c: (-c[1].units, not c[0].distinct, -c[1].instances, c[0].index))


def _kept(prev: Mapping[str, int], split: Split, free: FreeUnits) -> list[tuple[str, int]]:
    """Previous nodes still usable by this split, and how many of its instances each held."""
    return [(n, c) for n, c in sorted(prev.items()) if n in free.free and c > 0]


def _place_distinct(item: Item, split: Split, free: FreeUnits, prev: Mapping[str, int]) -> NodeCounts | None:
    g, k = split.units, split.instances
    out: NodeCounts = {}
    for node, _ in _kept(prev, split, free):  # previous nodes first
        if len(out) < k and free.free[node] >= g:
            out[node] = 1
    for node in free.ascending(g):  # then best fit: leave the big holes for later, larger items
        if len(out) >= k:
            break
        out.setdefault(node, 1)
    if len(out) < k:
        return None
    for node in out:
        free.take(node, g)
    return out


def _place_shared(
    item: Item, split: Split, free: FreeUnits, prev: Mapping[str, int], quality: bool
) -> NodeCounts | None:
    g, left = split.units, split.instances
    out: NodeCounts = {}

    def put(node: str, count: int) -> None:
        nonlocal left
        out[node] = out.get(node, 0) + count
        free.take(node, count * g)
        left -= count

    if quality:
        for node, count in _kept(prev, split, free):  # back onto previous nodes first
            room = min(left, count, free.free[node] // g)
            if room > 0:
                put(node, room)
    if quality and item.rule.spreads:
        rounds = 0
        while left:  # one per node per round, roomiest first, nodes with fewest of ours first
            placed, seen = 0, set()
            for node in free.descending(g):
                if not left:
                    break
                if node not in seen and out.get(node, 0) <= rounds:
                    seen.add(node)
                    put(node, 1)
                    placed += 1
            if not placed and rounds >= max(out.values(), default=0):
                break
            rounds += 1
    elif quality:
        while left:  # concentrate: the node holding the most instances, tightest among those
            target = free.tightest_holding(left * g)
            if target is None:
                roomiest = free.roomiest()
                if roomiest is None or free.free[roomiest] < g:
                    break
                target = free.tightest_holding((free.free[roomiest] // g) * g)
                assert target is not None
            put(target, min(left, free.free[target] // g))
    else:
        while left:  # plain best fit, one instance at a time
            fit = free.tightest_holding(g)
            if fit is None:
                break
            put(fit, 1)
    if left:
        _undo(free, out, g)
        return None
    return out


def _undo(free: FreeUnits, placed: NodeCounts, units: int) -> None:
    for node, count in placed.items():
        free.take(node, -count * units)


def place_one(
    item: Item, split: Split, free: FreeUnits, prev: Mapping[str, int] | None = None
) -> NodeCounts | None:
    """One item's split on ``free`` (its units taken), or None with ``free`` unchanged: previous
    nodes first and with quality, then (shared nodes) plain best fit. Planning several plans
    together grows one request at a time this way."""
    before = prev or {}
    if item.distinct:
        return _place_distinct(item, split, free, before)
    return _place_shared(item, split, free, before, True) or _place_shared(item, split, free, {}, False)


def release(free: FreeUnits, placed: NodeCounts, units: int) -> None:
    """Give back what :func:`place_one` took."""
    _undo(free, placed, units)


def _place(
    chosen: Sequence[tuple[Item, Split]], free: FreeUnits, previous: Previous, quality: bool
) -> dict[int, NodeCounts] | None:
    placed: dict[int, NodeCounts] = {}
    for item, split in _order(chosen):
        units, nodes = previous.get(item.label, (0, {}))
        prev = nodes if quality and units == split.units else {}
        if item.distinct:
            got = _place_distinct(item, split, free, prev)
        else:
            got = _place_shared(item, split, free, prev, quality)
        if got is None:
            return None
        placed[item.index] = got
    return placed


def _keep_first(
    chosen: Sequence[tuple[Item, Split]], free: FreeUnits, previous: Previous
) -> dict[int, NodeCounts] | None:
    """Put back every instance that can stay, then place the rest with quality."""
    kept: dict[int, NodeCounts] = {}
    rest: list[tuple[Item, Split]] = []
    for item, split in chosen:
        units, nodes = previous.get(item.label, (0, {}))
        here: NodeCounts = {}
        if units == split.units:
            left = split.instances
            for node, count in _kept(nodes, split, free):
                n = min(left, 1 if item.distinct else count, free.free[node] // split.units)
                if n > 0:
                    here[node] = n
                    free.take(node, n * split.units)
                    left -= n
        kept[item.index] = here
        if sum(here.values()) < split.instances:
            rest.append((item, Split(split.instances - sum(here.values()), split.units, split.score)))
    # the remainder of a distinct request must avoid the nodes it kept
    for item, split in _order(rest):
        taken = kept[item.index]
        if item.distinct:
            got = _place_distinct_avoiding(split, free, taken)
        else:
            got = _place_shared(item, split, free, {}, True)
        if got is None:
            return None
        for node, count in got.items():
            taken[node] = taken.get(node, 0) + count
    return kept


def _make_room(
    chosen: Sequence[tuple[Item, Split]], free: FreeUnits, previous: Previous
) -> dict[int, NodeCounts] | None:
    """When not everything fits around what stays: the new instances go first, onto the nodes
    the previous placement holds least of, and the others after them, back where they were
    wherever that is still free. A higher-priority plan that needs whole nodes takes the ones
    other plans held least of, instead of the first ones by name with everything else moved."""
    held: dict[str, int] = {}
    new, old = [], []
    for item, split in chosen:
        units, nodes = previous.get(item.label, (0, {}))
        if units == split.units and nodes:
            old.append((item, split))
            for node, count in nodes.items():
                held[node] = held.get(node, 0) + count * units
        else:
            new.append((item, split))
    if not new or not old:
        return None  # nothing to make room for (or no one to make it from): the other passes
    order = sorted(free.free, key=lambda n: (held.get(n, 0), -free.free[n], n))
    placed: dict[int, NodeCounts] = {}
    for item, split in _order(new):
        got = _fill_in_order(item, split, free, order)
        if got is None:
            return None
        placed[item.index] = got
    rest = _place(old, free, previous, True)
    if rest is None:
        return None
    return placed | rest


def _fill_in_order(item: Item, split: Split, free: FreeUnits, order: Sequence[str]) -> NodeCounts | None:
    """The split's instances on the nodes in ``order``, as many a node as it takes (one for a
    request whose instances go to distinct nodes or spread); None with ``free`` unchanged."""
    one = item.distinct or item.rule.spreads
    out: NodeCounts = {}
    left = split.instances
    for node in order:
        if not left:
            break
        n = min(left, 1 if one else free.free[node] // split.units)
        if n > 0 and free.free[node] >= split.units:
            out[node] = n
            free.take(node, n * split.units)
            left -= n
    if left:
        _undo(free, out, split.units)
        return None
    return out


def _place_distinct_avoiding(split: Split, free: FreeUnits, taken: Mapping[str, int]) -> NodeCounts | None:
    out: NodeCounts = {}
    for node in free.ascending(split.units):
        if len(out) >= split.instances:
            break
        if node not in taken:
            out[node] = 1
    if len(out) < split.instances:
        return None
    for node in out:
        free.take(node, split.units)
    return out


def greedy_place(
    problem: TypeProblem,
    choice: Sequence[int],
    previous: Previous | None = None,
) -> list[NodeCounts] | None:
    """Place the chosen split of every item, or return None if every greedy pass fails."""
    chosen = [(it, it.splits[c]) for it, c in zip(problem.items, choice, strict=True)]
    before: Previous = previous or {}
    passes: list[Callable[[FreeUnits], dict[int, NodeCounts] | None]] = []
    if before:
        passes.append(lambda free: _keep_first(chosen, free, before))
        passes.append(lambda free: _make_room(chosen, free, before))
    passes.append(lambda free: _place(chosen, free, before, True))
    passes.append(lambda free: _place(chosen, free, before, False))
    for attempt in passes:
        placed = attempt(FreeUnits(problem.nodes))
        if placed is not None:
            return [placed[it.index] for it in problem.items]
    return None


def moved(
    problem: TypeProblem, choice: Sequence[int], nodes: Sequence[NodeCounts], previous: Previous
) -> int:
    """Instances of requests that existed before and are not where they were (resized counts)."""
    out = 0
    for it, c in zip(problem.items, choice, strict=True):
        if it.label not in previous:
            continue
        units, before = previous[it.label]
        split = it.splits[c]
        stayed = (
            0
            if units != split.units
            else sum(min(n, before.get(node, 0)) for node, n in nodes[it.index].items())
        )
        out += split.instances - stayed
    return out


def improvable(
    problem: TypeProblem, choice: Sequence[int], nodes: Sequence[NodeCounts], previous: Previous
) -> list[int]:
    """Items whose placement could get better at the same score: the polish works on these only.

    A machine request on more nodes than it needs, a spread request doubled up on a node while
    other nodes could take it, a request with instances away from where they were.
    """
    largest = problem.largest
    usable = dict(problem.nodes)
    roomy: dict[int, int] = {}
    out = []
    for it, c in zip(problem.items, choice, strict=True):
        sp, here = it.splits[c], nodes[it.index]
        if sp.instances > 1 and it.rule.concentrates:
            per_node = max(1, largest // sp.units)
            if len(here) > -(-sp.instances // per_node):
                out.append(it.index)
                continue
        if sp.instances > 1 and it.rule.spreads and max(here.values(), default=0) > 1:
            if sp.units not in roomy:
                roomy[sp.units] = sum(1 for _, f in problem.nodes if f >= sp.units)
            if len(here) < min(sp.instances, roomy[sp.units]):
                out.append(it.index)
                continue
        units, before = previous.get(it.label, (0, {}))
        if units == sp.units and any(here.get(n, 0) < m for n, m in before.items() if n in usable):
            out.append(it.index)
    return out
