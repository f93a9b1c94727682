"""Every read and write the operator does, by name: ``read_*``/``list_*`` read, the rest write.

Notes
-----
Writes go through two mechanisms, each where it is safe:

- Objects the operator owns whole (PriorityClasses, the flamewakers ConfigMap, Deployments) are
  server-side applied with field manager ``gpuplan-operator`` and ``force``: GitOps tools that
  own the plan's spec and this operator that owns its status and outputs never fight over a field.
- Node labels are JSON merge patches that name only the plan's own key (``null`` removes it).
  Server-side apply would be wrong here: every plan's keys would belong to the same field
  manager, and applying one plan's labels would drop the others'.

Nothing here swallows an :class:`~kubernetes.client.exceptions.ApiException` except a 404 on
delete (already gone): the service turns errors into ``phase: Error`` and kopf retries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan_operator import FIELD_MANAGER, GROUP, PLURAL, VERSION
from gpuplan_operator.kube import JSON, Kube, path_for
from gpuplan_operator.naming import plan_selector
from planner.render import MANAGED_BY

PLAN_API = f"{GROUP}/{VERSION}"
PC_API = "scheduling.k8s.io/v1"


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


# --- reads ---------------------------------------------------------------------------------


def read_plan(kube: Kube, namespace: str, name: str) -> JSON | None:
    return kube.get_or_none(path_for(PLAN_API, PLURAL, name, namespace))


def _items(doc: JSON, api_version: str, kind: str) -> list[JSON]:
    """A list's items, with the apiVersion and kind that list items come without."""
    items: list[JSON] = list(doc.get("items") or [])
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items


def list_plans(kube: Kube) -> list[JSON]:
    return _items(kube.get(path_for(PLAN_API, PLURAL)), PLAN_API, "GpuAllocationPlan")


def list_nodes(kube: Kube) -> JSON:
    items = _items(kube.get(path_for("v1", "nodes")), "v1", "Node")
    return {"apiVersion": "v1", "kind": "List", "items": items}


def list_active_pods(kube: Kube) -> JSON:
    """Pods bound to a node and not finished: the ones whose requests hold cards."""
    doc = kube.get(
        path_for("v1", "pods"),
        fieldSelector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
    )
    return {"apiVersion": "v1", "kind": "List", "items": _items(doc, "v1", "Pod")}


def list_plan_pods(kube: Kube, namespace: str, name: str) -> list[JSON]:
    doc = kube.get(
        path_for("v1", "pods", namespace=namespace), labelSelector=_selector(plan_selector(namespace, name))
    )
    return _items(doc, "v1", "Pod")


def list_plan_deployments(kube: Kube, namespace: str, name: str) -> list[JSON]:
    doc = kube.get(
        path_for("apps/v1", "deployments", namespace=namespace),
        labelSelector=_selector(plan_selector(namespace, name)),
    )
    return _items(doc, "apps/v1", "Deployment")


def read_deployment(kube: Kube, namespace: str, name: str) -> JSON | None:
    return kube.get_or_none(path_for("apps/v1", "deployments", name, namespace))


def read_configmap(kube: Kube, namespace: str, name: str) -> JSON | None:
    return kube.get_or_none(path_for("v1", "configmaps", name, namespace))


def read_priority_class(kube: Kube, name: str) -> JSON | None:
    return kube.get_or_none(path_for(PC_API, "priorityclasses", name))


def list_managed_priority_classes(kube: Kube) -> list[JSON]:
    doc = kube.get(path_for(PC_API, "priorityclasses"), labelSelector=_selector(MANAGED_BY))
    return _items(doc, PC_API, "PriorityClass")


def list_labelled_nodes(kube: Kube, key: str) -> list[JSON]:
    return _items(kube.get(path_for("v1", "nodes"), labelSelector=key), "v1", "Node")


# --- writes --------------------------------------------------------------------------------


def patch_node_labels(kube: Kube, node: str, labels: Mapping[str, str | None]) -> None:
    """Set (or, with ``None``, remove) exactly these label keys on one node."""
    kube.merge_patch(path_for("v1", "nodes", node), {"metadata": {"labels": dict(labels)}}, FIELD_MANAGER)


def apply_object(kube: Kube, manifest: Mapping[str, Any]) -> JSON:
    """Server-side apply a rendered manifest (namespaced or not) as ``gpuplan-operator``."""
    meta = manifest["metadata"]
    plural = {"ConfigMap": "configmaps", "Deployment": "deployments", "PriorityClass": "priorityclasses"}[
        manifest["kind"]
    ]
    path = path_for(manifest["apiVersion"], plural, meta["name"], meta.get("namespace"))
    return kube.apply(path, manifest, FIELD_MANAGER)


def delete_deployment(kube: Kube, namespace: str, name: str) -> bool:
    return kube.delete(path_for("apps/v1", "deployments", name, namespace))


def delete_configmap(kube: Kube, namespace: str, name: str) -> bool:
    return kube.delete(path_for("v1", "configmaps", name, namespace))


def delete_priority_classes(kube: Kube, names: Iterable[str]) -> list[str]:
    return [n for n in sorted(names) if kube.delete(path_for(PC_API, "priorityclasses", n))]


def patch_plan_status(kube: Kube, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
    return kube.merge_patch(
        path_for(PLAN_API, PLURAL, name, namespace) + "/status", {"status": dict(patch)}, FIELD_MANAGER
    )
