"""Pure: each watched object cut down to what the operator reads of it.

Notes
-----
A node as the API server sends it carries its images, addresses, nodeInfo and managed fields:
most of its bytes, none of which planning reads. Caching whole objects would hold every one of
them for every node and pod of the cluster; these functions keep only the fields the planner's
readers (:func:`planner.snapshot`), the writes (node labels) and readiness look at, so the
caches stay small at thousands of nodes and tens of thousands of pods. What is kept is exactly
what those readers ask for: a field added to a reader must be added here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from planner import GANG_GATE, MANAGED_BY, RELEASED_ANNOTATION

JSON = dict[str, Any]
Trim = Callable[[Mapping[str, Any]], JSON]


def _meta(obj: Mapping[str, Any], *, labels: bool = True, annotations: bool = False) -> JSON:
    meta = obj.get("metadata") or {}
    out: JSON = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    if labels and meta.get("labels"):
        out["labels"] = dict(meta["labels"])
    if annotations and meta.get("annotations"):
        out["annotations"] = dict(meta["annotations"])
    for key in ("deletionTimestamp", "generation", "creationTimestamp", "ownerReferences"):
        if key in meta:
            out[key] = meta[key]
    return out


def node(obj: Mapping[str, Any]) -> JSON:
    """Labels, taints, unschedulable, allocatable and the Ready condition (the node grace)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ready = [
        {k: c[k] for k in ("type", "status", "lastTransitionTime") if k in c}
        for c in status.get("conditions") or []
        if c.get("type") == "Ready"
    ]
    out_spec = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
    out_status: JSON = {"allocatable": dict(status.get("allocatable") or {})}
    if ready:
        out_status["conditions"] = ready
    meta = _meta(obj)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": out_spec, "status": out_status}


def _container(c: Mapping[str, Any]) -> JSON:
    res = c.get("resources") or {}
    kept = {k: dict(res[k]) for k in ("requests", "limits") if res.get(k)}
    return {"name": c.get("name", ""), "resources": kept}


def managed(obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in MANAGED_BY.items())


def pod(obj: Mapping[str, Any]) -> JSON:
    """Where the pod runs, what it asks for, its node selector, phase and PodScheduled; for a pod
    not bound yet also its scheduling gates and annotations (the gang release reads the gate and
    when it was lifted, and patches the pod as it was read: it must see every annotation)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    out_spec: JSON = {
        "containers": [_container(c) for c in spec.get("containers") or []],
    }
    if spec.get("initContainers"):
        out_spec["initContainers"] = [_container(c) for c in spec["initContainers"]]
    for key in ("nodeName", "nodeSelector", "resourceClaims"):  # claims: the gang release's device check
        if spec.get(key):
            out_spec[key] = spec[key]
    unbound = not spec.get("nodeName")
    if unbound and spec.get("schedulingGates"):
        out_spec["schedulingGates"] = [dict(g) for g in spec["schedulingGates"]]
    out_status: JSON = {k: status[k] for k in ("phase",) if k in status}
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    if scheduled:
        out_status["conditions"] = scheduled
    meta = _meta(obj, annotations=unbound)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": out_spec, "status": out_status}


def gang_pending(obj: Mapping[str, Any]) -> bool:
    """Not bound and either carrying the gang gate or released by the operator (pods Ragnaros
    creates from a plan's values.yaml are not labelled as the operator's, and still count)."""
    spec = obj.get("spec") or {}
    if spec.get("nodeName"):
        return False
    if any(g.get("name") == GANG_GATE for g in spec.get("schedulingGates") or []):
        return True
    return RELEASED_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})


def pod_kept(obj: Mapping[str, Any]) -> bool:
    """Pods worth a place in the cache: every unfinished pod a plan deployed (readiness wants the
    pending ones too), every other pod bound to a node and unfinished (it holds cards, Terminating
    or not), and every pod the gang release looks after (:func:`gang_pending`)."""
    phase = (obj.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return False
    return managed(obj) or bool((obj.get("spec") or {}).get("nodeName")) or gang_pending(obj)


def whole(obj: Mapping[str, Any]) -> JSON:
    """Objects read whole (slices, claims, topologies, plans), without their managed fields."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out


def deployment(obj: Mapping[str, Any]) -> JSON:
    """A plan's Deployment as the apply compares it (metadata and spec; not its status, which
    moves with every pod and which nothing the operator decides reads)."""
    out = whole(obj)
    out.pop("status", None)
    out.setdefault("apiVersion", "apps/v1")
    out.setdefault("kind", "Deployment")
    return out


def crd(obj: Mapping[str, Any]) -> JSON:
    """A CRD as its watch needs it: its name, version and conditions (Established)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "resourceVersion", "uid") if k in meta},
        "status": {"conditions": status.get("conditions") or []},
    }
