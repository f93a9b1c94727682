"""Pure: node labels of plans that are gone, and when to remove them.

Notes
-----
A plan's clean-up (its finalizer) removes the node labels it wrote; its Deployments, ConfigMaps
and claim templates go with their owner (``ownerReferences``), unused PriorityClasses at the
next apply. A plan that went without its clean-up (its finalizer removed by hand while the
operator was not running, or the plan force-deleted) leaves its label key
(``gpuplan.ragnaros.io/<namespace>.<name>``) on the nodes, and nothing else would ever remove it.

:func:`orphans` finds such keys: plan label keys (:func:`planner.plan_label_namespace`) of a served
namespace that no plan the cycle knows holds. :class:`Sweep` says when one has been an orphan
long enough (``grace`` seconds, every scan in between seeing it so) to be removed; the cycle
then confirms against a listing of the plans, not its cache, before removing it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from planner import plan_label_namespace

RESCAN_EVERY = 60.0  # seconds: the nodes' labels are scanned at most this often when nothing was planned


def orphans(
    nodes: Iterable[Mapping[str, Any]], held: Collection[str], serves: Callable[[str], bool]
) -> dict[str, list[str]]:
    """Plan label key -> the nodes carrying it, for every key of a served namespace that is not in
    ``held`` (the label keys of the plans known, deleting ones included)."""
    out: dict[str, list[str]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        for key in meta.get("labels") or {}:
            if key in held:
                continue
            namespace = plan_label_namespace(key)
            if namespace is not None and serves(namespace):
                out.setdefault(key, []).append(str(meta.get("name")))
    return out


class Sweep:
    """Since when each orphan key has been seen (:meth:`due`); forgets one that is no longer one."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.since: dict[str, float] = {}

    def due(self, found: Collection[str], now: float) -> tuple[list[str], float | None]:
        """The keys orphaned for ``grace`` seconds by ``now``, and the seconds until the next one
        will be (None: no other). A key returned is forgotten: if it is still found later (its
        removal failed), its grace starts again."""
        for key in [k for k in self.since if k not in found]:
            del self.since[key]
        for key in found:
            self.since.setdefault(key, now)
        ready = sorted(k for k, t in self.since.items() if now - t >= self.grace)
        for key in ready:
            del self.since[key]
        waiting = [self.grace - (now - t) for t in self.since.values()]
        return ready, (min(waiting) if waiting else None)
