"""Pure: what a plan's daemon knows about its plan, and when it looks at the cluster again.

Notes
-----
Every reconcile, whoever ran it (the create/update/resume handlers or the plan's own daemon),
ends in an outcome: a phase and whether the plan's pods are all scheduled. The daemon decides
from that outcome how soon to look again, so it must see every outcome, not only its own: a spec
change reconciled by the update handler leaves the plan not Ready, and the daemon has to poll
readiness every ``ready_poll`` seconds from then on, not after its next ``resync`` (issue 11:
``Ready`` lagged a spec change by a minute). :class:`PlanState` is that shared knowledge, one per
plan in a :class:`Plans` registry kept in kopf's memo, with an :class:`asyncio.Event` that wakes
the daemon whenever it changes.

Pods change without the plan changing (one deleted by hand, a replacement scheduled). The
operator may list pods but not watch them, so one sweep lists the operator's pods (every plan's,
one request) every ``ready_poll`` seconds and compares a :func:`pod_fingerprints` per plan; only
the plans whose pods changed re-check readiness. That keeps ``Ready`` within seconds of the pods
at one request per sweep, however many plans there are.

Failures back off exponentially (:func:`backoff`), with jitter so many plans failing together do
not retry in lockstep, and capped well inside the 30 s in which a plan must converge again after
an API fault clears.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuplan_operator.status import Phase
from planner import PLAN_LABEL

RETRY_FIRST = 1.0  # seconds before the first retry of a failed reconcile or read
RETRY_MAX = 10.0  # the longest wait between retries

PodFingerprint = frozenset[tuple[str, str, bool]]  # (pod name, node, being deleted)


def backoff(failures: int, jitter: Callable[[], float] = random.random) -> float:
    """Seconds before retry number ``failures`` (1, 2, 4, 8, 10, 10, ...), each ±20%."""
    if failures <= 0:
        return 0.0
    base = min(RETRY_MAX, RETRY_FIRST * 2.0 ** min(failures - 1, 30))
    return base * (0.8 + 0.4 * jitter())


class PlanState:
    """The last outcome of a plan's reconcile, from whoever ran it, and the daemon's wake-up."""

    def __init__(self) -> None:
        self.phase: Phase | None = None  # None: no reconcile ended yet; check soon
        self.ready = False
        self.failures = 0  # failed attempts in a row (a reconcile in Error, or a read that raised)
        self.recheck = False  # the plan's pods changed since readiness was last checked
        self.stale = False  # a check found a status that does not describe the current spec
        self.wake = asyncio.Event()

    def record(self, phase: Phase, ready: bool) -> None:
        """A reconcile ended (in a handler or in the daemon): wake the daemon to re-plan its waits."""
        self.phase, self.ready, self.stale = phase, ready, False
        self.failures = self.failures + 1 if phase is Phase.ERROR else 0
        self.wake.set()

    def checked(self, phase: Phase, ready: bool, stale: bool = False) -> None:
        """A readiness check ended (the phase is what status says; only ``ready`` is new).

        ``stale``: the status does not describe the current spec. Unless a reconcile records an
        outcome before the next look, the daemon reconciles the plan itself: kopf drops a
        create or update whose own patch (finalizer, progress) the API server refused, until
        some later event about the plan comes.
        """
        self.phase, self.ready, self.failures, self.stale = phase, ready, 0, stale

    def failed(self) -> None:
        """An attempt raised before it could record anything (e.g. the API server is down)."""
        self.failures += 1

    def pods_changed(self) -> None:
        self.recheck = True
        self.wake.set()

    def take_recheck(self) -> bool:
        recheck, self.recheck = self.recheck, False
        return recheck

    def retrying(self) -> bool:
        """Did the last attempt fail? The daemon retries it, whoever made it.

        kopf retries a handler's ``TemporaryError`` only if it can record that it must: when its
        own patch of the plan fails too (the API server refusing writes), the retry is lost until
        the next event. The daemon's retry does not depend on it; a retry that finds the work
        done writes nothing.
        """
        return self.failures > 0

    def must_reconcile(self) -> bool:
        """At the end of a wait: should the daemon reconcile rather than check readiness?"""
        return self.retrying() or self.stale or self.phase in (Phase.INFEASIBLE, Phase.ERROR)

    def next_wait(
        self, ready_poll: float, resync: float, jitter: Callable[[], float] = random.random
    ) -> float:
        """How long the daemon may sleep before it must look at the cluster again."""
        if self.retrying():
            return backoff(self.failures, jitter)
        if self.phase is None or self.stale or (self.phase is Phase.APPLIED and not self.ready):
            return ready_poll
        return resync


class Plans:
    """Every plan's :class:`PlanState`, by ``namespace/name`` (kept in kopf's memo)."""

    def __init__(self) -> None:
        self.states: dict[str, PlanState] = {}
        self._pods: dict[str, PodFingerprint] = {}

    def state(self, key: str) -> PlanState:
        return self.states.setdefault(key, PlanState())

    def drop(self, key: str) -> None:
        self.states.pop(key, None)
        self._pods.pop(key, None)

    def sweep(self, pods: Iterable[Mapping[str, Any]], label_of: Callable[[str], str]) -> list[str]:
        """Compare the operator's pods with the last sweep; wake and name the plans they changed.

        ``label_of(name)`` is the value of the plan label a plan's pods carry (names longer than a
        label value are shortened). The first sweep of a plan only learns its pods.
        """
        by_plan = pod_fingerprints(pods)
        changed = []
        for key, state in self.states.items():
            namespace, _, name = key.partition("/")
            now = by_plan.get((namespace, label_of(name)), frozenset())
            before = self._pods.get(key)
            self._pods[key] = now
            if before is not None and before != now:
                state.pods_changed()
                changed.append(key)
        for gone in set(self._pods) - set(self.states):
            del self._pods[gone]
        return changed


def pod_fingerprints(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], PodFingerprint]:
    """(namespace, plan label value) -> what readiness depends on of each of the plan's pods.

    A pod's template (cards, node selector) never changes under its name, so its name, the node
    it is bound to and whether it is being deleted are enough to tell that readiness may differ.
    """
    out: dict[tuple[str, str], set[tuple[str, str, bool]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        plan = (meta.get("labels") or {}).get(PLAN_LABEL)
        if not plan:
            continue
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        entry = (str(meta.get("name")), node, bool(meta.get("deletionTimestamp")))
        out.setdefault((str(meta.get("namespace") or ""), str(plan)), set()).add(entry)
    return {k: frozenset(v) for k, v in out.items()}
