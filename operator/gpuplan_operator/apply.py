"""Make the cluster hold what the renderer produced for one plan, writing only the difference.

Notes
-----
Order matters, for the cards and for crashes:

1. Deployments the plan no longer wants go first, so their pods free the cards the new
   placement may need (kube-scheduler retries pending pods when pods are deleted).
2. Node labels the new placement needs, then PriorityClasses, the ConfigMap and Deployments:
   a pod is never created before the label and class it refers to exist.
3. Labels the plan no longer needs are removed last; then PriorityClasses no plan uses any more.

Every step compares first and writes only what differs, so a crash anywhere is repaired by the
next reconcile (resume after restart) with no duplicates and nothing stale. A Deployment or
ConfigMap of the same name that another controller owns is never taken over:
:class:`Conflict` ends the apply with phase Error and a message naming the owner.

Each write the API server accepts is counted in ``gpuplan_writes_total{kind}``, and a step that
fails (an API error or a :class:`Conflict`) in ``gpuplan_apply_errors_total{kind}``, ``kind``
being the kind of object that step writes (see :mod:`.metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuplan_operator import cluster
from gpuplan_operator import metrics as m
from gpuplan_operator.diff import covers, foreign_owner, node_label_changes, owner_reference, with_owner
from gpuplan_operator.kube import Kube
from planner.render import MANAGED_BY, Desired


class Conflict(Exception):
    """An object the plan would write belongs to someone else."""


@dataclass
class Changes:
    """What one apply wrote, for Events and logs."""

    labelled: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)
    priority_classes: list[str] = field(default_factory=list)
    priority_classes_deleted: list[str] = field(default_factory=list)
    configmap: bool = False
    configmap_deleted: bool = False
    deployments: list[str] = field(default_factory=list)
    deployments_deleted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(vars(self).values())

    def describe(self) -> str:
        parts = []
        for label, items in (
            ("labelled nodes", self.labelled),
            ("unlabelled nodes", self.unlabelled),
            ("applied priority classes", self.priority_classes),
            ("deleted priority classes", self.priority_classes_deleted),
            ("applied deployments", self.deployments),
            ("deleted deployments", self.deployments_deleted),
        ):
            if items:
                parts.append(f"{label}: {', '.join(items)}")
        if self.configmap:
            parts.append("applied the flamewakers ConfigMap")
        if self.configmap_deleted:
            parts.append("deleted the flamewakers ConfigMap")
        return "; ".join(parts) or "no changes"


@contextmanager
def _step(metrics: m.Metrics, kind: str) -> Iterator[None]:
    """Count an exception raised while writing ``kind`` as an apply error, and let it go on."""
    try:
        yield
    except Exception:
        metrics.apply_failed(kind)
        raise


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in (obj.get("metadata") or {}).get("ownerReferences") or [])


def apply_desired(
    kube: Kube,
    plan: Mapping[str, Any],
    desired: Desired,
    nodes: list[Mapping[str, Any]],
    in_use_elsewhere: Iterable[str],
    metrics: m.Metrics = m.METRICS,
) -> Changes:
    """Apply ``desired`` for ``plan``; ``nodes`` is the NodeList items the plan was made from."""
    meta = plan["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    owner = owner_reference(plan)
    changes = Changes()

    wanted = {d["metadata"]["name"]: with_owner(d, owner) for d in desired.deployments}
    with _step(metrics, m.DEPLOYMENT):
        existing = {d["metadata"]["name"]: d for d in cluster.list_plan_deployments(kube, namespace, name)}
        for dname, dep in sorted(existing.items()):
            if dname not in wanted and _owned_by(dep, uid):
                if cluster.delete_deployment(kube, namespace, dname):
                    metrics.wrote(m.DEPLOYMENT)
                changes.deployments_deleted.append(dname)

    labels = node_label_changes(nodes, desired.node_labels, desired.label_key)
    with _step(metrics, m.NODE):
        for node, value in sorted(labels.set.items()):
            cluster.patch_node_labels(kube, node, {desired.label_key: value})
            metrics.wrote(m.NODE)
            changes.labelled.append(node)

    with _step(metrics, m.PRIORITY_CLASS):
        for pc in desired.priority_classes:
            actual = cluster.read_priority_class(kube, pc["metadata"]["name"])
            if actual is None or not covers(actual, pc):
                cluster.apply_object(kube, pc)
                metrics.wrote(m.PRIORITY_CLASS)
                changes.priority_classes.append(pc["metadata"]["name"])

    cm = with_owner(desired.configmap, owner)
    with _step(metrics, m.CONFIGMAP):
        actual_cm = cluster.read_configmap(kube, namespace, cm["metadata"]["name"])
        other = foreign_owner(actual_cm, uid)
        if other:
            raise Conflict(f"ConfigMap {namespace}/{cm['metadata']['name']} belongs to {other}")
        if actual_cm is None or not covers(actual_cm, cm):
            cluster.apply_object(kube, cm)
            metrics.wrote(m.CONFIGMAP)
            changes.configmap = True

    with _step(metrics, m.DEPLOYMENT):
        for dname, dep in wanted.items():
            actual = existing.get(dname) or cluster.read_deployment(kube, namespace, dname)
            other = foreign_owner(actual, uid)
            if other:
                raise Conflict(f"Deployment {namespace}/{dname} belongs to {other}")
            if actual is None or not covers(actual, dep):
                cluster.apply_object(kube, dep)
                metrics.wrote(m.DEPLOYMENT)
                changes.deployments.append(dname)

    with _step(metrics, m.NODE):
        for node in labels.remove:
            cluster.patch_node_labels(kube, node, {desired.label_key: None})
            metrics.wrote(m.NODE)
            changes.unlabelled.append(node)

    keep = set(in_use_elsewhere) | {pc["metadata"]["name"] for pc in desired.priority_classes}
    changes.priority_classes_deleted = prune_priority_classes(kube, keep, metrics)
    return changes


def prune_priority_classes(kube: Kube, keep: Iterable[str], metrics: m.Metrics = m.METRICS) -> list[str]:
    """Delete the PriorityClasses gpuplan created that no plan uses any more."""
    keep = set(keep)
    with _step(metrics, m.PRIORITY_CLASS):
        unused = [
            pc["metadata"]["name"]
            for pc in cluster.list_managed_priority_classes(kube)
            if pc["metadata"]["name"] not in keep
            and all(
                ((pc.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in MANAGED_BY.items()
            )
        ]
        deleted = []
        for pc_name in sorted(unused):  # one by one: each accepted delete is counted
            if cluster.delete_priority_classes(kube, [pc_name]):
                metrics.wrote(m.PRIORITY_CLASS)
                deleted.append(pc_name)
    return deleted


def remove_all(
    kube: Kube,
    plan: Mapping[str, Any],
    label_key: str,
    configmap: str,
    in_use_elsewhere: Iterable[str],
    metrics: m.Metrics = m.METRICS,
) -> Changes:
    """Everything the plan wrote, gone: labels, Deployments, the ConfigMap, unused classes."""
    meta = plan["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    changes = Changes()
    with _step(metrics, m.DEPLOYMENT):
        for dep in cluster.list_plan_deployments(kube, namespace, name):
            if _owned_by(dep, uid):
                dname = dep["metadata"]["name"]
                if cluster.delete_deployment(kube, namespace, dname):
                    metrics.wrote(m.DEPLOYMENT)
                changes.deployments_deleted.append(dname)
    with _step(metrics, m.CONFIGMAP):
        cm = cluster.read_configmap(kube, namespace, configmap)
        if cm is not None and _owned_by(cm, uid):
            changes.configmap_deleted = cluster.delete_configmap(kube, namespace, configmap)
            metrics.wrote(m.CONFIGMAP, int(changes.configmap_deleted))
    with _step(metrics, m.NODE):
        for node in cluster.list_labelled_nodes(kube, label_key):
            cluster.patch_node_labels(kube, node["metadata"]["name"], {label_key: None})
            metrics.wrote(m.NODE)
            changes.unlabelled.append(node["metadata"]["name"])
    changes.priority_classes_deleted = prune_priority_classes(kube, in_use_elsewhere, metrics)
    return changes
