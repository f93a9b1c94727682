"""Pure: one kind's objects as the watch last showed them, and whether a change matters.

Notes
-----
A :class:`Store` is filled by a listing (:meth:`Store.replace`) and kept by watch events
(:meth:`Store.apply`). Each object is kept trimmed (``trim``) and keyed ``namespace/name``.
Objects are never changed in place: a new version replaces the old one, so a cycle that took
:meth:`Store.items` keeps a consistent picture while the watch goes on (it holds the same dicts,
not copies: taking the picture is one list of references, cheap at 20,000 pods).

``index`` (optional) files each object under one value (pods under their namespace and plan),
so :meth:`Store.indexed` finds a few among many without going through them all, and
:meth:`Store.stamp` says whether any of them changed since an earlier look.

``fingerprint`` reduces an object to what planning reads of it (:mod:`..watch`); an event that
leaves it unchanged is not a change that matters, and :attr:`Store.changes` does not move.
:attr:`Store.version` moves on every event that changed the store at all (readiness wants pods
bound or deleted, which do not change a plan's inputs).

A re-list (the watch expired, or the periodic resync) replaces the store whole and reports what
it found different, as if the missed events had arrived.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

JSON = dict[str, Any]
Fingerprint = Any


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Store:
    """Objects of one kind by ``namespace/name``; safe to read from any thread."""

    def __init__(
        self,
        kind: str,
        trim: Callable[[Mapping[str, Any]], JSON],
        fingerprint: Callable[[Mapping[str, Any]], Fingerprint] | None = None,
        keep: Callable[[Mapping[str, Any]], bool] | None = None,
        index: Callable[[Mapping[str, Any]], Hashable | None] | None = None,
    ) -> None:
        self.kind = kind
        self._trim = trim
        self._fingerprint = fingerprint
        self._keep = keep
        self._index = index
        self._objects: dict[str, JSON] = {}
        self._fingerprints: dict[str, Fingerprint] = {}
        self._indexed: dict[Hashable, dict[str, JSON]] = {}  # index value -> key -> object
        self._stamps: dict[Hashable, int] = {}  # index value -> the store's count at its last change
        self._count = 0  # changes of indexed objects, ever
        self._lock = threading.Lock()
        self.version = 0  # every change
        self.changes = 0  # changes that matter to planning
        self.removed = 0  # objects gone from the store, ever (a pod gone frees what it held)
        self.synced = False  # a first listing has landed
        self.served = True  # False when the cluster does not serve this kind

    def __len__(self) -> int:
        return len(self._objects)

    def items(self) -> list[JSON]:
        """The objects now (a list of references to immutable versions)."""
        with self._lock:
            return list(self._objects.values())

    def counted_items(self) -> tuple[list[JSON], int]:
        """The objects now and :attr:`changes` as of them, taken together: a change that lands
        after the objects were taken is counted after them, so whoever planned from these
        objects and remembers this count sees that change as new."""
        with self._lock:
            return list(self._objects.values()), self.changes

    def get(self, key: str) -> JSON | None:
        return self._objects.get(key)

    def indexed(self, value: Hashable) -> list[JSON]:
        """The objects whose ``index`` is ``value`` now (a list of references, as :meth:`items`)."""
        with self._lock:
            return list((self._indexed.get(value) or {}).values())

    def stamp(self, value: Hashable) -> int:
        """A number that moves whenever an object filed under ``value`` is added, replaced or
        removed (and never comes back to an earlier value): the same stamp, the same objects.
        0 for a value nothing was ever filed under."""
        with self._lock:
            return self._stamps.get(value, 0)

    def _reindex(self, key: str, old: JSON | None, obj: JSON | None) -> None:
        if self._index is None:
            return
        before = self._index(old) if old is not None else None
        after = self._index(obj) if obj is not None else None
        self._count += 1
        for value in (before, after):
            if value is not None:
                self._stamps[value] = self._count
        if before is not None and before != after:
            bucket = self._indexed.get(before)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._indexed[before]
        if after is not None:
            self._indexed.setdefault(after, {})[key] = obj  # type: ignore[assignment]

    def _put(self, key: str, obj: JSON | None) -> bool:
        """Store (or, with None, forget) one object; True when that changed what matters."""
        before = self._fingerprints.get(key) if key in self._objects else _ABSENT
        self._reindex(key, self._objects.get(key), obj)
        if obj is None:
            self._objects.pop(key, None)
            self._fingerprints.pop(key, None)
            after: Any = _ABSENT
        else:
            self._objects[key] = obj
            after = self._fingerprint(obj) if self._fingerprint is not None else _rv(obj)
            self._fingerprints[key] = after
        return bool(before != after)

    def apply(self, event_type: str, raw: Mapping[str, Any]) -> bool:
        """One watch event (ADDED, MODIFIED, DELETED); True when it matters to planning."""
        key = key_of(raw)
        with self._lock:
            old = self._objects.get(key)
            if event_type != "DELETED" and old is not None and _rv(raw) and _rv(raw) < _rv(old):
                return False  # older than what a write already told us (:meth:`assume`)
            gone = event_type == "DELETED" or (self._keep is not None and not self._keep(raw))
            if gone and old is None:
                return False
            matters = self._put(key, None if gone else self._trim(raw))
            self.version += 1
            self.changes += int(matters)
            self.removed += int(gone)
            return matters

    def assume(self, raw: Mapping[str, Any]) -> bool:
        """What a write of ours returned, before its watch event arrives (the next plan of the
        same cycle must see the status this one just wrote); True when it matters to planning
        (it carries a change of someone else's that landed meanwhile, which its own watch event
        will then no longer bring as a change)."""
        return self.apply("MODIFIED", raw)

    def forget(self, key: str) -> None:
        """A delete of ours landed: the object is gone before its watch event says so."""
        with self._lock:
            if key in self._objects:
                self._put(key, None)
                self.version += 1
                self.removed += 1

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> bool:
        """A whole listing; True when it differs from what the store held in a way that matters.

        An object listed at the ``resourceVersion`` the store holds is the one held: kept as it is
        (not trimmed again, its index stamp not moved), so a periodic re-list of thousands of
        unchanged pods allocates nothing that stays and tells no plan its pods changed."""
        fresh = {}
        for raw in objects:
            if self._keep is None or self._keep(raw):
                key = key_of(raw)
                held = self._objects.get(key)
                rv = _rv(raw)
                fresh[key] = held if held is not None and rv and _rv(held) == rv else self._trim(raw)
        with self._lock:
            matters = False
            for key in set(self._objects) - set(fresh):
                matters |= self._put(key, None)
                self.removed += 1
            for key, obj in fresh.items():
                if self._objects.get(key) is not obj:
                    matters |= self._put(key, obj)
            self.version += 1
            self.changes += int(matters and self.synced)
            first, self.synced = not self.synced, True
            return matters and not first


_ABSENT = object()
