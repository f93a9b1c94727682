"""Pure: is every pod the plan owns scheduled? (the ``Ready`` condition)

Notes
-----
"Scheduled" is what the plan controls: kube-scheduler bound the pod (``spec.nodeName``), and to
the node the plan chose (the Deployment's node selector names the plan's label value, which is
that node's token). Running is the kubelet's business and not the plan's. Pods being deleted
(an old placement going away) are ignored, and so are pods of an older template (a resized
instance whose old pod is still there); a missing pod (not created yet) counts as pending.

A plan whose pods still carry the gang gate (``gang: plan``) is ``Waiting``, not ``Pending``: its
pods are held back on purpose until every planned node has their cards, and the message says
which node waits for which cards (the release decision's words, :mod:`.gang`, when known).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan_operator.status import Readiness, Reason
from planner import GANG_GATE


class _PodIndex:
    """Pods by the values of a selector's label keys: each Deployment finds its pods in one lookup
    (a 2,500-pod plan would otherwise compare every pod with every Deployment)."""

    def __init__(self, pods: Sequence[Mapping[str, Any]]) -> None:
        self.pods = pods
        self._by_keys: dict[tuple[str, ...], dict[tuple[str | None, ...], list[Mapping[str, Any]]]] = {}

    def matching(self, selector: Mapping[str, str]) -> list[Mapping[str, Any]]:
        keys = tuple(sorted(selector))
        index = self._by_keys.get(keys)
        if index is None:
            index = self._by_keys[keys] = {}
            for pod in self.pods:
                labels = (pod.get("metadata") or {}).get("labels") or {}
                index.setdefault(tuple(labels.get(k) for k in keys), []).append(pod)
        return index.get(tuple(selector[k] for k in keys), [])


def _limits(pod_spec: Mapping[str, Any]) -> list[dict[str, str]]:
    return [
        {k: str(v) for k, v in ((c.get("resources") or {}).get("limits") or {}).items()}
        for c in pod_spec.get("containers") or []
    ]


def _current(pod: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    """Is the pod of the Deployment's current template (cards, node selector), not a leftover?

    Limits are compared one way: admission (a LimitRange) may add limits the template lacks.
    """
    spec = pod.get("spec") or {}
    have, want = _limits(spec), _limits(template)
    if len(have) != len(want) or any(w.items() - h.items() for h, w in zip(have, want, strict=True)):
        return False
    return (spec.get("nodeSelector") or {}) == (template.get("nodeSelector") or {})


def _why_pending(pod: Mapping[str, Any]) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "not scheduled")
    return "not scheduled yet"


def _gated(pod: Mapping[str, Any]) -> bool:
    """Held back by the gang gate (a bound pod is past any gate, whatever its spec says)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(g.get("name") == GANG_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def gates_waiting(pods: Sequence[Mapping[str, Any]], waiting: str | None = None) -> Readiness | None:
    """Not Ready because some of the plan's pods still wait for their gang gate (what
    :func:`readiness` says first), else None. Read from the pods alone: while a deploy's gates
    are being lifted a caller need not gather the plan's Deployments at all."""
    return _gates_waiting(_live(pods), waiting)


def _live(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods not being deleted."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _gates_waiting(live: Sequence[Mapping[str, Any]], waiting: str | None) -> Readiness | None:
    if gated := sum(1 for p in live if _gated(p)):
        why = waiting or f"{gated} pod(s) gated until every planned node has the cards for them"
        return Readiness(False, Reason.WAITING, why)
    return None


@dataclass(frozen=True)
class _Verdict:
    """What one Deployment adds to its plan's readiness."""

    want: int
    scheduled: int
    pending: tuple[str, ...]
    misplaced: tuple[str, ...]


@dataclass(frozen=True)
class _Kept:
    deployment: Mapping[str, Any]
    pods: tuple[Mapping[str, Any], ...]
    verdict: _Verdict


class Verdicts:
    """One plan's Deployment verdicts kept from one check to the next.

    A Deployment whose object and whose pods' objects are the very ones the last check looked at
    gets the same verdict without being compared again: the caches replace an object that changes
    and never edit one in place, and what is kept holds the objects it was decided on, so an
    identity stays theirs. A deploy of 2,480 pods checks its plan about twice a second, each
    check comparing every pod with its Deployment's template (54 ms a check) while a few dozen
    of them changed since the last."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}
        self.hits = 0  # verdicts reused, for tests

    def of(self, dep: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], label_key: str) -> _Verdict:
        name = str((dep.get("metadata") or {}).get("name"))
        kept = self._kept.get(name)
        if (
            kept is not None
            and kept.deployment is dep
            and len(kept.pods) == len(pods)
            and all(a is b for a, b in zip(kept.pods, pods, strict=True))
        ):
            self.hits += 1
            return kept.verdict
        verdict = _verdict(dep, pods, label_key)
        self._kept[name] = _Kept(dep, tuple(pods), verdict)
        return verdict

    def keep_only(self, names: set[str]) -> None:
        """Forget the Deployments that are no longer the plan's."""
        for name in [n for n in self._kept if n not in names]:
            del self._kept[name]


def _verdict(dep: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]], label_key: str) -> _Verdict:
    """One Deployment's share: ``candidates`` are the live pods its selector matches."""
    spec = dep.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    template = (spec.get("template") or {}).get("spec") or {}
    token = (template.get("nodeSelector") or {}).get(label_key)
    mine = [p for p in candidates if _current(p, template)]
    bound = [p for p in mine if (p.get("spec") or {}).get("nodeName")]
    misplaced = []
    for p in bound:
        node = p["spec"]["nodeName"]
        if token is not None and token != node and not token.startswith("node-"):
            misplaced.append(f"{p['metadata']['name']} on {node}, planned {token}")
    pending = [
        f"{p['metadata']['name']} ({_why_pending(p)})"
        for p in mine
        if not (p.get("spec") or {}).get("nodeName")
    ]
    missing = replicas - len(mine)
    if missing > 0:
        pending.append(f"{dep['metadata']['name']}: {missing} pod(s) not created yet")
    return _Verdict(replicas, min(len(bound), replicas), tuple(pending), tuple(misplaced))


def readiness(
    deployments: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    label_key: str,
    deploy: bool,
    waiting: str | None = None,
    kept: Verdicts | None = None,
) -> Readiness:
    """``waiting``: why the plan's gated pods wait (the last release decision), if known;
    ``kept``: the plan's verdicts from its last check (:class:`Verdicts`), reused and updated."""
    if not deploy:
        return Readiness(True, Reason.NO_PODS, "deploy is false: the flamewakers ConfigMap is the output")
    current = _live(pods)
    if (gates := _gates_waiting(current, waiting)) is not None:
        return gates
    live = _PodIndex(current)
    verdicts = kept if kept is not None else Verdicts()
    want = scheduled = 0
    pending: list[str] = []
    misplaced: list[str] = []
    for dep in deployments:
        selector = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        verdict = verdicts.of(dep, live.matching(selector), label_key)
        want += verdict.want
        scheduled += verdict.scheduled
        pending += verdict.pending
        misplaced += verdict.misplaced
    if kept is not None:
        kept.keep_only({str((d.get("metadata") or {}).get("name")) for d in deployments})
    if misplaced:
        return Readiness(
            False, Reason.MISPLACED, f"pods not on their planned node: {'; '.join(misplaced[:5])}"
        )
    if scheduled >= want:
        return Readiness(
            True, Reason.ALL_SCHEDULED, f"{scheduled}/{want} pods scheduled on their planned nodes"
        )
    detail = "; ".join(pending[:5]) + (f"; and {len(pending) - 5} more" if len(pending) > 5 else "")
    return Readiness(False, Reason.PENDING, f"{scheduled}/{want} pods scheduled; pending: {detail}")
