"""Every kind planning reads, each in a watched store: one :class:`ClusterCache` per operator.

Notes
-----
``read()`` is the cycle's snapshot: the same :class:`~gpuplan_operator.cluster.ClusterRead` that
listing everything used to give, taken from the stores in one pass with no request. What the
cycle writes itself (a plan's status) is put into the plans' store at once
(:meth:`ClusterCache.assume_plan`), so the next plan of the same cycle plans around it.

The plans' Deployments are cached too (only those labelled as the operator's, in the namespaces
it serves): an apply compares what it wants with them instead of listing a plan's Deployments
each time (3.4 s for a plan of 800 on a loaded 1,000-node control plane). What the operator
writes is put in at once (:meth:`ClusterCache.assume_written`); a version the watch shows later
replaces it, an older one never does.

``on_change(kind, matters)`` is called from the informers' threads on every change; the caller
hands it to the event loop. A pod of a plan coming up (:attr:`ClusterCache.coming_up`, the
cycle's to set) made or bound is told as not mattering: the cycle checks that plan on a timer.
:meth:`ClusterCache.health` says which watch has been quiet longer than it may (a silent
stream is re-opened by its informer; this is the check that it was).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuplan_operator.body import FINALIZER, PlanBody
from gpuplan_operator.cache import trim
from gpuplan_operator.cache.informer import RESYNC, SILENCE, WATCH_SECONDS, Informer, Watcher
from gpuplan_operator.cache.store import Store, key_of
from gpuplan_operator.cluster import DRA_API, NRT_API, PLAN_API, ClusterRead
from gpuplan_operator.kube import path_for
from gpuplan_operator.watch import node_fingerprint, slice_fingerprint, topology_fingerprint
from gpuplan_operator.writes import Verb, Write
from planner import DEPLOYMENT, MANAGED_BY, PLAN_LABEL, PLURAL

NODES, PODS, SLICES, CLAIMS, TOPOLOGIES, PLANS, DEPLOYMENTS = (
    "nodes",
    "pods",
    "resourceslices",
    "resourceclaims",
    "noderesourcetopologies",
    "plans",
    "deployments",
)
PLANNING_KINDS = frozenset({NODES, SLICES, TOPOLOGIES})  # a change that matters re-plans
QUIET_KINDS = frozenset({CLAIMS, DEPLOYMENTS})  # read by the cycle, never a reason to run one
CRDS = "customresourcedefinitions"  # only the NodeResourceTopology one: its arrival wakes that watch
TOPOLOGY_CRD = "noderesourcetopologies.topology.node.k8s.io"


def _pod_fingerprint(pod: Mapping[str, Any]) -> Any:
    """What readiness, the cards held and the gang release look at: node, being deleted, gated.
    Not the phase: a pod that finishes leaves the cache (:func:`~.trim.pod_kept`), and one that
    starts running changes nothing the cycle decides (a deploy's 2,480 such changes each woke a
    cycle)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    gated = bool(spec.get("schedulingGates"))
    return (spec.get("nodeName"), bool(meta.get("deletionTimestamp")), gated)


def _pod_plan(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The pods' index: namespace and plan label, for the pods a plan deployed (None: others)."""
    meta = pod.get("metadata") or {}
    plan = (meta.get("labels") or {}).get(PLAN_LABEL)
    return (str(meta.get("namespace")), str(plan)) if plan is not None else None


def _plan_fingerprint(plan: Mapping[str, Any]) -> Any:
    """A plan matters to the cycle when its spec (generation) changes, it goes, it is deleted, or
    it gains the finalizer (the cycle writes no plan before that)."""
    meta = plan.get("metadata") or {}
    guarded = FINALIZER in (meta.get("finalizers") or ())
    return (meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp")), guarded)


def _plan(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A plan without managed fields and kopf's copy of its last spec (the largest annotation)."""
    out = trim.whole(obj)
    notes = dict(out["metadata"].get("annotations") or {})
    for k in [k for k in notes if k.endswith("last-handled-configuration")]:
        del notes[k]
    out["metadata"] = {**out["metadata"], "annotations": notes}
    out.setdefault("apiVersion", PLAN_API)
    return out


def _node_fp(node: Mapping[str, Any]) -> Any:
    return node_fingerprint(node, grace=float("inf"))  # health is the cycle's business, at its time


class ClusterCache:
    """Nodes, pods, DRA slices and claims, NUMA topologies and plans, each kept by a watch."""

    def __init__(
        self,
        api: Watcher,
        on_change: Callable[[str, bool], None],
        resync: float = RESYNC,
        silence: float = SILENCE,
        namespaces: Iterable[str] = (),
    ) -> None:
        """``namespaces``: where the operator writes (all when empty): its Deployments are
        watched there only, with the rights it has there (a glob's namespaces are not known in
        advance: their Deployments are listed when needed)."""
        self.nodes = Store(NODES, trim.node, _node_fp)
        self.pods = Store(PODS, trim.pod, _pod_fingerprint, keep=trim.pod_kept, index=_pod_plan)
        self.slices = Store(SLICES, trim.whole, slice_fingerprint)
        self.claims = Store(CLAIMS, trim.whole)
        self.topologies = Store(TOPOLOGIES, trim.whole, topology_fingerprint)
        self.plans = Store(PLANS, _plan, _plan_fingerprint)
        paths = {
            NODES: path_for("v1", "nodes"),
            PODS: path_for("v1", "pods"),
            SLICES: path_for(DRA_API, "resourceslices"),
            CLAIMS: path_for(DRA_API, "resourceclaims"),
            TOPOLOGIES: path_for(NRT_API, "noderesourcetopologies"),
            PLANS: path_for(PLAN_API, PLURAL),
        }

        def told(store: Store, matters: bool) -> None:
            on_change(store.kind, matters)

        self._told = told

        # (namespace, plan label) of the plans coming up, set by the cycle (:meth:`_quiet_pod`)
        self.coming_up: frozenset[tuple[str, str]] = frozenset()
        quiet = {PODS: self._quiet_pod}
        self.informers = [
            Informer(api, paths[s.kind], s, told, resync, silence, quiet=quiet.get(s.kind))
            for s in (self.nodes, self.pods, self.slices, self.claims, self.topologies, self.plans)
        ]
        managed = {"labelSelector": ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())}
        self.deployments: dict[str | None, Store] = {}
        given = set(namespaces)
        watched: list[str | None] = [n for n in sorted(given) if not any(c in n for c in "*?[!")]
        for ns in watched if given else [None]:
            store = self.deployments[ns] = Store(DEPLOYMENTS, trim.deployment)
            path = path_for("apps/v1", "deployments", namespace=ns)
            self.informers.append(Informer(api, path, store, told, resync, silence, query=managed))
        topologies = next(i for i in self.informers if i.store is self.topologies)

        def crd_changed(store: Store, matters: bool) -> None:
            topologies.wake()  # installed (or established) after the operator started

        self.crds = Store(CRDS, trim.crd)
        self.informers.append(
            Informer(
                api,
                path_for("apiextensions.k8s.io/v1", "customresourcedefinitions"),
                self.crds,
                crd_changed,
                resync,
                silence,
                query={"fieldSelector": f"metadata.name={TOPOLOGY_CRD}"},
            )
        )

    def _quiet_pod(self, event: str, pod: Mapping[str, Any]) -> bool:
        """Is this a change only readiness reads, of a pod of a plan coming up (:attr:`coming_up`)?
        The cycle checks such a plan on a timer of its own, so the change wakes no cycle: a
        deploy's pods are made and bound thousands of times, and each woke one that had nothing
        else to do. Not so a pod that goes, finishes or is being deleted (its cards come free), nor
        a gated one (its gate is the gang release's to lift at once)."""
        up = self.coming_up
        if not up or event == "DELETED" or _pod_plan(pod) not in up:
            return False
        meta = pod.get("metadata") or {}
        gated = bool((pod.get("spec") or {}).get("schedulingGates"))
        return not gated and not meta.get("deletionTimestamp") and trim.pod_kept(pod)

    @property
    def stores(self) -> list[Store]:
        return [i.store for i in self.informers]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def close(self) -> None:
        for informer in self.informers:
            informer.close()

    def synced(self) -> bool:
        """Has every kind been listed once (the first cycle waits for this)?"""
        return all(s.synced for s in self.stores if s is not self.crds)  # only a wake-up call

    def health(self, limit: float = SILENCE + WATCH_SECONDS) -> dict[str, float]:
        """Kinds whose watch has said nothing for longer than ``limit`` seconds, and how long."""
        return {
            i.store.kind: round(i.silent_for(), 1)
            for i in self.informers
            if i.store.served and i.silent_for() > limit
        }

    def assume_plan(self, obj: Mapping[str, Any]) -> None:
        """A plan as our status write returned it. When it carries a spec changed meanwhile (a
        new generation), that is told as the change it is: its watch event, arriving after,
        finds nothing new, and the spec would otherwise wait for the next resync (a chaos run
        saw a plan's second generation left unplanned for 90 s)."""
        if self.plans.assume(obj):
            self._told(self.plans, True)

    def _deployments_of(self, namespace: str | None) -> Store | None:
        everywhere = self.deployments.get(None)
        return everywhere if everywhere is not None else self.deployments.get(namespace)

    def assume_written(self, write: Write, obj: Mapping[str, Any] | None) -> None:
        """A write of ours landed: a Deployment applied (the object the API server returned) or
        deleted is in the cache before its watch event comes."""
        if write.kind != DEPLOYMENT or (store := self._deployments_of(write.namespace)) is None:
            return
        if write.verb is Verb.DELETE:
            store.forget(f"{write.namespace}/{write.name}")
        elif obj is not None:
            store.assume(obj)

    def namespace_deployments(self, namespace: str) -> list[dict[str, Any]] | None:
        """The operator's Deployments in ``namespace`` (every plan's); None when the namespace is
        not watched (the caller lists them)."""
        store = self._deployments_of(namespace)
        if store is None or not store.synced:
            return None
        return [d for d in store.items() if key_of(d).startswith(f"{namespace}/")]

    def plan(self, namespace: str, name: str) -> PlanBody | None:
        obj = self.plans.get(f"{namespace}/{name}")
        return PlanBody.from_object(obj) if obj is not None else None

    def read(self) -> ClusterRead:
        """Everything planning reads, as it is now, without a request."""

        def doc(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "List", "items": list(items)}

        bound = [p for p in self.pods.items() if (p.get("spec") or {}).get("nodeName")]
        nodes, node_changes = self.nodes.counted_items()
        slices, slice_changes = self.slices.counted_items()
        topologies, topology_changes = self.topologies.counted_items()
        return ClusterRead(
            plans=[PlanBody.from_object(p) for p in self.plans.items()],
            nodes=doc(nodes),
            pods=doc(bound),
            slices=doc(slices) if self.slices.served else None,
            claims=doc(self.claims.items()) if self.slices.served and self.claims.served else None,
            topologies=doc(topologies) if self.topologies.served else None,
            changes=(node_changes, slice_changes, topology_changes),
        )

    def gang_pods(self) -> list[dict[str, Any]]:
        """Every pod the gang release reads: bound ones (Terminating too: they hold their cards
        until they are gone) and those not bound yet (gated, or released and on their way)."""
        return self.pods.items()

    def plan_pods(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The pods in ``namespace`` carrying every one of ``labels`` (a plan's, for readiness),
        found by the pods' index of namespace and plan label."""
        out = []
        for pod in self.pods.indexed((namespace, labels.get(PLAN_LABEL))):
            have = (pod.get("metadata") or {}).get("labels") or {}
            if all(have.get(k) == v for k, v in labels.items()):
                out.append(pod)
        return out

    def plan_pods_stamp(self, namespace: str, labels: Mapping[str, str]) -> int:
        """Moves whenever a pod :meth:`plan_pods` may return changes (:meth:`Store.stamp`)."""
        return self.pods.stamp((namespace, labels.get(PLAN_LABEL)))

    def sizes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for store in self.stores:  # the Deployments may be one store per namespace
            out[store.kind] = out.get(store.kind, 0) + len(store)
        return out


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by a cached object graph (dicts, lists and their strings), each counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        size += sum(deep_size(v, seen) for v in obj)
    return size
