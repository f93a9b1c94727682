"""The bench's view of its namespace's pods and plans, kept by watches instead of a read per look.

Listing 2,480 pods once a second cost the API server the bench measures a third of a core
(10 MB of JSON each time) and the bench process as much again, on a machine of two cores, in
every phase alike; reading a plan of 1,000 requests (a 250 KB object from etcd) ten times a
second while waiting for it cost 8% of the API server's CPU during a deploy. A watch sends each
change once. The operator's own informer and store do the work (:mod:`gpuplan_operator.cache`),
with a trim of the pods that keeps what the bench's checks read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gpuplan_operator.cache.informer import Informer
from gpuplan_operator.cache.store import Store
from gpuplan_operator.kube import path_for

from e2e.support import PLAN_API, PLURAL, Api


def _trim(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    kept = ("name", "namespace", "labels", "deletionTimestamp", "resourceVersion")
    return {
        "metadata": {k: meta[k] for k in kept if k in meta},
        "spec": {k: spec[k] for k in ("nodeName", "nodeSelector") if k in spec},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def _matches(labels: Mapping[str, str], selector: str | None) -> bool:
    """``key``, ``key=value`` or several of them joined by commas (what the bench asks for)."""
    for term in (selector or "").split(","):
        if not term:
            continue
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


class WatchedApi(Api):
    """:class:`~e2e.support.Api` whose ``pods`` and ``plan`` of one namespace come from watches."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        super().__init__(kubeconfig)
        self.namespace = namespace
        self._pods = Store("pods", _trim)
        self._plans = Store("plans", dict)
        self._informers = [
            Informer(self.kube, path_for(api, plural, namespace=namespace), store, lambda _s, _m: None)
            for api, plural, store in (("v1", "pods", self._pods), (PLAN_API, PLURAL, self._plans))
        ]

    def start(self, timeout: float = 60) -> None:
        for informer in self._informers:
            informer.start()
        deadline = time.monotonic() + timeout
        while any(informer.relists == 0 for informer in self._informers):  # the first listings are in
            if time.monotonic() > deadline:
                raise TimeoutError(f"no listing of the pods and plans of {self.namespace} in {timeout:.0f}s")
            time.sleep(0.05)

    def close(self) -> None:
        for informer in self._informers:
            informer.close()

    def pods(self, ns: str, selector: str | None = None) -> list[dict[str, Any]]:
        if ns != self.namespace:
            return super().pods(ns, selector)
        return [p for p in self._pods.items() if _matches(p["metadata"].get("labels") or {}, selector)]

    def plan(self, ns: str, name: str) -> dict[str, Any] | None:
        if ns != self.namespace:
            return super().plan(ns, name)
        return self._plans.get(f"{ns}/{name}")
