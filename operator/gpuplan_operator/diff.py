"""Pure comparisons of desired against actual objects: what needs writing, and what not.

Notes
-----
A re-plan that changes nothing must write nothing: no resourceVersion bumps on nodes,
ConfigMaps or Deployments, so watchers (GitOps tools, Ragnaros, our own node watch) see no churn.
The API server fills defaults into what we apply (``imagePullPolicy``, ``revisionHistoryLimit``,
requests copied from limits for extended resources, quantities as strings), so equality is
"actual covers desired": every field we set has our value; extra fields the server added are
fine, and so is a zero value we set that the server omits (``omitempty``). Two exceptions keep
removals visible: maps listed in :data:`EXACT_MAPS` must match
key for key (a node selector that lost a key is a change), and keys in :data:`OURS_WHEN_ABSENT`
that we stopped setting must be gone from the actual object too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EXACT_MAPS = frozenset({"nodeSelector", "data", "limits", "matchLabels"})
OURS_WHEN_ABSENT = frozenset({"tolerations", "priorityClassName", "affinity", "schedulingGates"})
MERGE_LISTS = {"ownerReferences": "uid"}  # lists the server merges by key: ours must be present


def _scalar_equal(actual: Any, desired: Any) -> bool:
    if isinstance(desired, bool) or isinstance(actual, bool):
        return actual is desired
    if isinstance(desired, int | float) and isinstance(actual, str):
        return str(desired) == actual  # quantities come back as strings: 2 -> "2"
    return bool(actual == desired)


def _empty(value: Any) -> bool:
    """Zero values the API server omits (``omitempty``): ``globalDefault: false`` reads back absent."""
    return value is None or value is False or value == 0 or value == "" or value == {} or value == []


def covers(actual: Any, desired: Any, key: str = "") -> bool:
    """Does ``actual`` (as the server returns it) already hold everything ``desired`` sets?"""
    if isinstance(desired, Mapping):
        if not isinstance(actual, Mapping):
            return False
        if key in EXACT_MAPS and set(actual) != set(desired):
            return False
        if any(k in actual and k not in desired for k in OURS_WHEN_ABSENT):
            return False
        return all(covers(actual[k], v, k) if k in actual else _empty(v) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(actual, list):
            return False
        merge_key = MERGE_LISTS.get(key)
        if merge_key:
            present = {a.get(merge_key): a for a in actual if isinstance(a, Mapping)}
            return all(isinstance(d, Mapping) and covers(present.get(d.get(merge_key)), d) for d in desired)
        return len(actual) == len(desired) and all(
            covers(a, d, key) for a, d in zip(actual, desired, strict=True)
        )
    return _scalar_equal(actual, desired)


@dataclass(frozen=True)
class LabelChanges:
    """Node label writes for one plan key: set (node -> value) and remove (node names)."""

    set: dict[str, str] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.set or self.remove)


def node_label_changes(
    nodes: list[Mapping[str, Any]], desired: Mapping[str, Mapping[str, str]], key: str
) -> LabelChanges:
    """Compare the plan's one label key on every node with what the plan wants there.

    Only ``key`` is looked at, so labels of other plans and of anyone else are never touched.
    """
    want = {node: labels[key] for node, labels in desired.items() if key in labels}
    changes = LabelChanges()
    seen = set()
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        seen.add(name)
        current = (meta.get("labels") or {}).get(key)
        if name in want and current != want[name]:
            changes.set[name] = want[name]
        elif name not in want and current is not None:
            changes.remove.append(name)
    for name, value in want.items():
        if name not in seen:  # planned on a node the list did not show: let the patch fail loudly
            changes.set[name] = value
    changes.remove.sort()
    return changes


def with_owner(manifest: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a rendered manifest that the plan owns (garbage-collected with it)."""
    out = dict(manifest)
    out["metadata"] = dict(manifest["metadata"]) | {"ownerReferences": [dict(owner)]}
    return out


def foreign_owner(obj: Mapping[str, Any] | None, uid: str) -> str | None:
    """The kind/name of another controller owning ``obj``; None when it is free or ours."""
    if obj is None:
        return None
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid") != uid:
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None
