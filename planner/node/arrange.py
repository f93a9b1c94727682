"""Instances inside nodes without a solver: layouts, the two ways to make one, and the bounds that
prove a layout best.

Notes
-----
:mod:`planner.node.topology` ranks plans of equal score by instances straddling domains (fewer is
better), then by free cards left in whole domains (more is better). Both levels have a bound that
holds for every plan at the score:

- **straddling:** an instance larger than every domain's free devices straddles wherever it goes;
- **whole:** the cards that partly used domains cannot hold (an instance needs a domain with room
  for it, a straddler a node with room for it: a small max flow) go into whole ones, and a whole
  domain touched is lost entire, so at most the whole cards minus the smallest set of whole
  domains that covers the rest stay whole. This bound takes every instance that need not straddle
  to sit inside one domain, true of every plan at the straddling bound; past it, the bound is
  taken with every instance free to straddle.

A layout made for the domains (:func:`arrange`: where instances were before, then the largest
first, each into the domain it fills best, partly used domains before whole ones) reaches both
bounds on most clusters; then the plan is proven without building a model, which on a thousand
nodes costs more than the rest of the search. Otherwise the better of it and the ordinary search's
placement packed into domains (:func:`pack`) starts the model's search.

Device names come last (:meth:`Domains.read`). On a re-plan an instance that stays on its node
goes back into the domain(s) of its devices and keeps them, at the same position among the node's
instances (the position names its entry, claim template and pod). Everything here is
deterministic: the same cluster and plan give the same devices, so a re-plan of an unchanged
cluster rewrites nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from planner.base.strategies import Topology
from planner.model.devices import Domain
from planner.model.options import Item, TypeProblem
from planner.search.place import NodeCounts, Previous

DeviceLists = dict[str, list[list[str]]]  # node -> one list of device names per instance
Spot = tuple[str, int]  # (node, index of one of its domains)
Before = Mapping[int, Mapping[str, Sequence[Sequence[str]]]]  # item -> node -> device lists it had


def node_domains(problem: TypeProblem) -> dict[str, tuple[Domain, ...]]:
    """Every usable node's domains; a node without device detail is one anonymous domain."""
    return {name: problem.domains.get(name) or (Domain("", free, ()),) for name, free in problem.nodes}


def may_straddle(item: Item, units: int, domains: Sequence[Domain]) -> bool:
    """Straddling is possible on a node with several domains, and allowed unless ``required``
    forbids it (an instance that fits in one of the node's domains must sit in one)."""
    if units < 2 or len(domains) < 2:
        return False
    return item.topology is not Topology.REQUIRED or units > max(d.total for d in domains)


def admissible(problem: TypeProblem, floor: Fraction | None) -> list[list[int]]:
    """Per item, the splits a plan scoring at least ``floor`` can use: a split whose score, with
    every other item at its best, stays below ``floor`` cannot (when the best split of every item
    fits, only the best-scoring splits are left)."""
    everything = [list(range(len(it.splits))) for it in problem.items]
    if floor is None:
        return everything
    best = [max((s.score for s in it.splits), default=Fraction(0)) for it in problem.items]
    total = sum(best, Fraction(0))
    return [
        [s for s, split in enumerate(it.splits) if total - best[it.index] + split.score >= floor]
        for it in problem.items
    ]


@dataclass
class Layout:
    """Every instance of a plan in its node's domains."""

    choice: list[int]
    contained: dict[tuple[int, str, int], int] = field(default_factory=dict)  # (item, spot) -> instances
    straddling: dict[tuple[int, str], int] = field(default_factory=dict)  # (item, node) -> instances
    # (item, spot) -> devices the item's straddling instances on that node take from the domain
    spans: dict[tuple[int, str, int], int] = field(default_factory=dict)

    def touched(self) -> set[Spot]:
        """The domains some instance takes devices from."""
        return {(node, d) for (_, node, d), n in [*self.contained.items(), *self.spans.items()] if n}


class Domains:
    """The free devices of one type's nodes, domain by domain."""

    def __init__(self, problem: TypeProblem) -> None:
        self.problem = problem
        self.domains = node_domains(problem)
        self.node_free = dict(problem.nodes)
        self.free: dict[Spot, int] = {
            (node, d): len(dom.free) if node in problem.domains else self.node_free[node]
            for node, doms in self.domains.items()
            for d, dom in enumerate(doms)
        }
        # domains nothing uses yet: cards left in them count at level 3
        self.whole: dict[Spot, int] = {
            (node, d): self.free[node, d]
            for node, doms in self.domains.items()
            if node in problem.domains
            for d, dom in enumerate(doms)
            if self.free[node, d] and self.free[node, d] == dom.total
        }

    def contains(self, units: int, spot: Spot) -> bool:
        return self.free[spot] >= units

    def straddles(self, item: Item, units: int, node: str) -> bool:
        return may_straddle(item, units, self.domains[node]) and self.node_free[node] >= units

    # -- the two levels and their bounds

    def straddled(self, layout: Layout) -> int:
        """Level 2: instances straddling domains (of operators whose topology is not ``none``)."""
        items = self.problem.items
        return sum(n for (i, _), n in layout.straddling.items() if items[i].topology is not Topology.NONE)

    def kept_whole(self, layout: Layout) -> int:
        """Level 3: free cards left in domains the plan does not touch."""
        used = layout.touched()
        return sum(free for spot, free in self.whole.items() if spot not in used)

    def rank(self, layout: Layout) -> tuple[int, int]:
        """Lower is better: straddling first, then cards not left whole."""
        return self.straddled(layout), -self.kept_whole(layout)

    def straddle_floor(self, allowed: Sequence[Sequence[int]]) -> int:
        """Instances that straddle in any plan at the score: no domain anywhere holds them."""
        most = max(self.free.values(), default=0)
        return sum(
            min((it.splits[s].instances if it.splits[s].units > most else 0) for s in allowed[it.index])
            for it in self.problem.items
            if it.topology is not Topology.NONE and allowed[it.index]
        )

    def whole_ceiling(self, allowed: Sequence[Sequence[int]], contained: bool = True) -> int:
        """Cards at most left in whole domains (the module's notes say why). With ``contained``,
        the instances that need not straddle are taken to sit inside one domain each (true of
        every plan that reaches :meth:`straddle_floor`)."""
        most = max(self.free.values(), default=0)
        cards: dict[tuple[bool, int], int] = {}  # (may straddle, units) -> cards at least
        for it in self.problem.items:
            splits = [it.splits[s] for s in allowed[it.index]]
            if not splits:
                continue
            spans = not contained or it.topology is Topology.NONE or all(sp.units > most for sp in splits)
            group = (spans, min(sp.units for sp in splits))
            cards[group] = cards.get(group, 0) + min(sp.instances * sp.units for sp in splits)
        partial: dict[tuple[int, int], int] = {}  # (domain's free, node's free) -> free cards
        for spot, free in self.free.items():
            if spot not in self.whole and free:
                key = (free, self.node_free[spot[0]])
                partial[key] = partial.get(key, 0) + free
        # the partly used domains take what they can: an instance inside a domain needs one with
        # room for it, a straddler a node with room for it
        edges = {
            (need, room) for need in cards for room in partial if (room[1] if need[0] else room[0]) >= need[1]
        }
        absorbed = _max_flow(cards, partial, edges)
        sizes = list(self.whole.values())
        need = sum(cards.values()) - absorbed
        if need <= 0:
            return sum(sizes)
        reach = 1  # bit k set: some set of whole domains holds exactly k cards
        for size in sizes:
            reach |= reach << size
        least = next((k for k in range(need, sum(sizes) + 1) if reach >> k & 1), sum(sizes))
        return sum(sizes) - least

    # -- device names

    def parts(self, node: str, devices: Sequence[str]) -> dict[int, int] | None:
        """How many of ``devices`` sit in each domain of ``node``; None if one is not free there."""
        out: dict[int, int] = {}
        for name in devices:
            for d, dom in enumerate(self.domains[node]):
                if name in dom.free:
                    out[d] = out.get(d, 0) + 1
                    break
            else:
                return None
        return out

    def read(
        self, layout: Layout, before: Before | None = None
    ) -> tuple[list[NodeCounts], list[DeviceLists], list[int]]:
        """Node counts, device names per instance, and how many instances straddle, per item.

        An instance keeps the devices it had (``before``: per item, node, the device lists of the
        previous plan) where the layout has a place of the same shape for it and they are free,
        at the same position in its node's list (the position names its entry and claim, so an
        instance that keeps its devices keeps its pod). The others take the free devices left:
        contained instances their domain's in order, straddlers from the domains the layout gave
        them."""
        items = self.problem.items
        nodes: list[NodeCounts] = [{} for _ in items]
        devices: list[DeviceLists] = [{} for _ in items]
        straddling = [0] * len(items)
        contained, spans = dict(layout.contained), dict(layout.spans)
        straddlers = dict(layout.straddling)
        kept: dict[tuple[int, str], dict[int, list[str]]] = {}  # (item, node) -> position -> devices
        used: set[tuple[str, str]] = set()
        for i, by_node in sorted((before or {}).items()):
            g = items[i].splits[layout.choice[i]].units
            for node, lists in sorted(by_node.items()):
                if node not in self.domains:
                    continue
                for pos, devs in enumerate(lists):
                    parts = self.parts(node, devs)
                    if len(devs) != g or parts is None or any((node, n) in used for n in devs):
                        continue
                    if len(parts) == 1:
                        (d,) = parts
                        if contained.get((i, node, d), 0) < 1:
                            continue
                        contained[i, node, d] -= 1
                    else:
                        if straddlers.get((i, node), 0) < 1 or any(
                            spans.get((i, node, d), 0) < k for d, k in parts.items()
                        ):
                            continue
                        straddlers[i, node] -= 1
                        for d, k in parts.items():
                            spans[i, node, d] -= k
                    kept.setdefault((i, node), {})[pos] = list(devs)
                    used.update((node, n) for n in devs)
        free = {
            spot: [n for n in self.domains[spot[0]][spot[1]].free if (spot[0], n) not in used]
            for spot in self.free
        }
        cursor = dict.fromkeys(self.free, 0)

        def take(node: str, d: int, n: int) -> list[str]:
            start = cursor[node, d]
            cursor[node, d] = start + n
            return free[node, d][start : start + n]

        fresh: dict[tuple[int, str], list[list[str]]] = {}
        for (i, node, d), count in sorted(contained.items()):
            g = items[i].splits[layout.choice[i]].units
            for _ in range(count):
                nodes[i][node] = nodes[i].get(node, 0) + 1
                names = take(node, d, g)
                if names:
                    fresh.setdefault((i, node), []).append(names)
        for (i, node), t in sorted(straddlers.items()):
            if not t:
                continue
            g = items[i].splits[layout.choice[i]].units
            nodes[i][node] = nodes[i].get(node, 0) + t
            pool: list[str] = []
            for d in range(len(self.domains[node])):
                pool += take(node, d, spans.get((i, node, d), 0))
            for k in range(t):
                if pool:
                    fresh.setdefault((i, node), []).append(pool[k * g : (k + 1) * g])
        for (i, _), t in layout.straddling.items():
            straddling[i] += t
        for (i, node), at in kept.items():
            nodes[i][node] = nodes[i].get(node, 0) + len(at)
        for i, node in sorted(set(kept) | set(fresh)):
            count = nodes[i][node]
            slots: list[list[str] | None] = [None] * count
            late = []
            for pos, devs in sorted(kept.get((i, node), {}).items()):
                if pos < count:
                    slots[pos] = devs
                else:
                    late.append(devs)
            rest = iter(late + fresh.get((i, node), []))
            devices[i][node] = [devs if devs is not None else next(rest) for devs in slots]
        for i in range(len(items)):
            devices[i] = {node: devices[i][node] for node in sorted(devices[i])}
            nodes[i] = {node: nodes[i][node] for node in sorted(nodes[i])}
        return nodes, devices, straddling


def _max_flow(
    sources: Mapping[tuple[bool, int], int],
    sinks: Mapping[tuple[int, int], int],
    edges: set[tuple[tuple[bool, int], tuple[int, int]]],
) -> int:
    """The most cards that flow from ``sources`` to ``sinks`` along ``edges`` (each side capped
    by its cards; a handful of nodes: shortest augmenting paths)."""
    graph: dict[object, dict[object, int]] = {"s": {}, "t": {}}
    for a, cap in sources.items():
        graph["s"][("a", a)] = cap
        graph.setdefault(("a", a), {})["s"] = 0
    for b, cap in sinks.items():
        graph.setdefault(("b", b), {})["t"] = cap
        graph["t"][("b", b)] = 0
    for a, b in edges:
        graph[("a", a)][("b", b)] = sum(sources.values())
        graph[("b", b)].setdefault(("a", a), 0)
    flow = 0
    while True:
        back: dict[object, object] = {"s": None}
        queue: list[object] = ["s"]
        for here in queue:
            for there, room in graph[here].items():
                if room > 0 and there not in back:
                    back[there] = here
                    queue.append(there)
        if "t" not in back:
            return flow
        path: list[tuple[object, object]] = []
        step: object = "t"
        while back[step] is not None:
            path.append((back[step], step))
            step = back[step]
        push = min(graph[u][w] for u, w in path)
        for u, w in path:
            graph[u][w] -= push
            graph[w][u] += push
        flow += push


class _Builder:
    """A layout being made: what each domain has left, and which domains are still whole."""

    def __init__(self, doms: Domains, choice: Sequence[int]) -> None:
        self.doms = doms
        self.layout = Layout(list(choice))
        self.left = dict(doms.free)
        self.whole = set(doms.whole)

    def units(self, it: Item) -> int:
        return it.splits[self.layout.choice[it.index]].units

    def contain(self, it: Item, node: str, d: int) -> None:
        key = (it.index, node, d)
        self.layout.contained[key] = self.layout.contained.get(key, 0) + 1
        self.left[node, d] -= self.units(it)
        self.whole.discard((node, d))

    def fit(self, it: Item, node: str) -> int | None:
        """The domain of ``node`` an instance fills best (a partly used one first), if any."""
        g = self.units(it)
        fits = [
            d
            for d in range(len(self.doms.domains[node]))
            if self.left[node, d] >= g and self.doms.contains(g, (node, d))
        ]
        return min(fits, key=lambda d: ((node, d) in self.whole, self.left[node, d]), default=None)

    def node_left(self, node: str) -> int:
        return sum(self.left[node, d] for d in range(len(self.doms.domains[node])))

    def straddle(self, it: Item, node: str) -> bool:
        """One instance across ``node``'s domains, partly used ones first; False if it cannot."""
        g = self.units(it)
        if not self.doms.straddles(it, g, node) or self.node_left(node) < g:
            return False
        parts, need = {}, g
        for d in sorted(
            range(len(self.doms.domains[node])), key=lambda d: ((node, d) in self.whole, self.left[node, d])
        ):
            parts[d] = min(need, self.left[node, d])
            need -= parts[d]
        self._span(it, node, parts)
        return True

    def _span(self, it: Item, node: str, parts: Mapping[int, int]) -> None:
        """One instance straddling ``node``, ``parts[d]`` of its devices from domain ``d``."""
        key = (it.index, node)
        self.layout.straddling[key] = self.layout.straddling.get(key, 0) + 1
        for d, count in parts.items():
            if count:
                spot = (it.index, node, d)
                self.layout.spans[spot] = self.layout.spans.get(spot, 0) + count
                self.left[node, d] -= count
                self.whole.discard((node, d))

    def place_like(self, it: Item, node: str, had: list[Sequence[str]]) -> bool:
        """An instance where one of ``had`` (device lists it had on ``node``) was, if one still
        has room (consumed from ``had``); False if none does."""
        g = self.units(it)
        for k, devs in enumerate(had):
            parts = self.doms.parts(node, devs)
            if len(devs) != g or parts is None or any(self.left[node, d] < c for d, c in parts.items()):
                continue
            if len(parts) == 1:
                (d,) = parts
                if not self.doms.contains(g, (node, d)):
                    continue
                self.contain(it, node, d)
            else:
                if not self.doms.straddles(it, g, node):
                    continue
                self._span(it, node, parts)
            del had[k]
            return True
        return False

    def place_on(self, it: Item, node: str) -> bool:
        d = self.fit(it, node)
        if d is not None:
            self.contain(it, node, d)
            return True
        return self.straddle(it, node)


def pack(
    problem: TypeProblem, doms: Domains, choice: Sequence[int], nodes: Sequence[NodeCounts]
) -> Layout | None:
    """The ordinary search's placement, its instances packed into domains node by node (largest
    first, each into the fullest domain it fits, else spread over the node's domains); None when
    some instance fits no domain of its node and may not straddle there."""
    b = _Builder(doms, choice)
    on: dict[str, list[tuple[int, int]]] = {}  # node -> (units, item) of each instance there
    for it in problem.items:
        for node, count in nodes[it.index].items():
            on.setdefault(node, []).extend([(b.units(it), it.index)] * count)
    for node in doms.domains:
        for _, i in sorted(on.get(node, ()), reverse=True):
            it = problem.items[i]
            d = min(
                (
                    d
                    for d in range(len(doms.domains[node]))
                    if b.left[node, d] >= b.units(it) and doms.contains(b.units(it), (node, d))
                ),
                key=lambda d: b.left[node, d],
                default=None,
            )
            if d is not None:
                b.contain(it, node, d)
            elif not b.straddle(it, node):
                return None
    return b.layout


def arrange(
    problem: TypeProblem,
    doms: Domains,
    choice: Sequence[int],
    previous: Previous,
    before_devices: Before | None = None,
) -> Layout | None:
    """A layout made for the domains (see the module's notes); None when it places not everything.
    An instance that stays on its node goes back into the domain(s) of its devices
    (``before_devices``), where they still have room."""
    b = _Builder(doms, choice)
    todo = {it.index: it.splits[choice[it.index]].instances for it in problem.items}
    taken: dict[int, set[str]] = {it.index: set() for it in problem.items}
    for it in problem.items:  # where they were, as far as the domains allow
        units, before = previous.get(it.label, (0, {}))
        if units != b.units(it):
            continue
        for node, n in sorted(before.items()):
            if node not in doms.domains:
                continue
            had = list((before_devices or {}).get(it.index, {}).get(node, ()))
            for _ in range(min(n, todo[it.index], 1 if it.distinct else n)):
                if not (had and b.place_like(it, node, had)) and not b.place_on(it, node):
                    break
                todo[it.index] -= 1
                taken[it.index].add(node)
    # the largest first; of one size, requests that need distinct nodes first, the most instances
    # first (the others then fill what is left)
    order = sorted(problem.items, key=lambda it: (-b.units(it), not it.distinct, -todo[it.index]))
    index = _Index(b)
    for it in order:
        g = b.units(it)
        for _ in range(todo[it.index]):
            avoid = taken[it.index] if it.distinct else set()
            spot = index.best_domain(g, avoid)
            if spot is not None:
                b.contain(it, *spot)
                node = spot[0]
            else:  # no domain holds it: the node where it spoils the fewest whole domains
                found = index.best_node(it, g, avoid)
                if found is None or not b.straddle(it, found):
                    return None
                node = found
            index.changed(node)
            taken[it.index].add(node)
    return b.layout


class _Index:
    """Domains by (whole, cards left) and nodes by (cards left in partly used domains, cards left),
    each in a fixed order: the best place for an instance is found without scanning every node."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.domains: dict[tuple[bool, int], dict[Spot, None]] = {}
        self.domain_key: dict[Spot, tuple[bool, int]] = {}
        self.nodes: dict[tuple[int, int], dict[str, None]] = {}
        self.node_key: dict[str, tuple[int, int]] = {}
        for spot in b.doms.free:
            self._put_domain(spot)
        for node in b.doms.domains:
            self._put_node(node)

    def _put_domain(self, spot: Spot) -> None:
        key = (spot in self.b.whole, self.b.left[spot])
        self.domain_key[spot] = key
        self.domains.setdefault(key, {})[spot] = None

    def _put_node(self, node: str) -> None:
        doms = range(len(self.b.doms.domains[node]))
        partly = sum(self.b.left[node, d] for d in doms if (node, d) not in self.b.whole)
        key = (partly, self.b.node_left(node))
        self.node_key[node] = key
        self.nodes.setdefault(key, {})[node] = None

    def changed(self, node: str) -> None:
        """After an instance was placed on ``node``."""
        for d in range(len(self.b.doms.domains[node])):
            del self.domains[self.domain_key[node, d]][node, d]
            self._put_domain((node, d))
        del self.nodes[self.node_key[node]][node]
        self._put_node(node)

    def best_domain(self, units: int, avoid: set[str]) -> Spot | None:
        """A partly used domain before a whole one, the fullest that fits first."""
        for whole in (False, True):
            for left in sorted(k for w, k in self.domains if w == whole and k >= units):
                for spot in self.domains[whole, left]:
                    if spot[0] not in avoid and self.b.doms.contains(units, spot):
                        return spot
        return None

    def best_node(self, it: Item, units: int, avoid: set[str]) -> str | None:
        """For an instance no domain holds: a node whose partly used domains hold it, else any
        node with room, the one with the fewest cards left first (whole domains spoilt last)."""
        for in_partly_used in (True, False):
            keys = sorted(
                (left, partly)
                for partly, left in self.nodes
                if left >= units and (partly >= units or not in_partly_used)
            )
            for left, partly in keys:
                for node in self.nodes[partly, left]:
                    if node not in avoid and self.b.doms.straddles(it, units, node):
                        return node
        return None
