"""Pure: a memo of at most so many entries, forgotten whole when full.

The operator's hot paths remember what they read off cached objects that never change in place
(a pod version read for the gang rounds, a node's allocatable parsed, a Deployment compared with
its manifest), keyed by what identifies that version. Forgetting everything at once when full
costs nothing per lookup (an LRU order would be kept on every hit, thousands a round) and is
right for what they hold: the next round reads again only what it still sees.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """``get`` and ``put`` of at most ``kept`` entries; ``put`` on a full memo forgets all first."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._entries: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> V:
        if len(self._entries) >= self.kept and key not in self._entries:
            self._entries.clear()
        self._entries[key] = value
        return value

    def clear(self) -> None:
        self._entries.clear()
