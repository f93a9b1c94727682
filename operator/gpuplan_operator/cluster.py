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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan_operator.body import PlanBody
from gpuplan_operator.kube import JSON, KubeApi, path_for
from gpuplan_operator.writes import Observed
from planner.render import Desired
from planner.vocab import (
    API_VERSION,
    CONFIGMAP,
    DEPLOYMENT,
    FIELD_MANAGER,
    KIND,
    MANAGED_BY,
    PLURAL,
    PRIORITY_CLASS,
    plan_labels,
)

PLAN_API = API_VERSION
PC_API = "scheduling.k8s.io/v1"
_APIS = {  # kind -> (apiVersion, plural) of what the operator writes whole
    CONFIGMAP: ("v1", "configmaps"),
    DEPLOYMENT: ("apps/v1", "deployments"),
    PRIORITY_CLASS: (PC_API, "priorityclasses"),
}


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


# --- reads ---------------------------------------------------------------------------------


def read_plan(kube: KubeApi, namespace: str, name: str) -> JSON | None:
    return kube.get_or_none(path_for(PLAN_API, PLURAL, name, namespace))


def _items(doc: JSON, api_version: str, kind: str) -> list[JSON]:
    """A list's items, with the apiVersion and kind that list items come without."""
    items: list[JSON] = list(doc.get("items") or [])
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items


def list_plans(kube: KubeApi) -> list[PlanBody]:
    return [PlanBody.from_object(p) for p in _items(kube.get(path_for(PLAN_API, PLURAL)), PLAN_API, KIND)]


def list_nodes(kube: KubeApi) -> JSON:
    items = _items(kube.get(path_for("v1", "nodes")), "v1", "Node")
    return {"apiVersion": "v1", "kind": "List", "items": items}


def list_active_pods(kube: KubeApi) -> JSON:
    """Pods bound to a node and not finished: the ones whose requests hold cards."""
    doc = kube.get(
        path_for("v1", "pods"),
        fieldSelector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
    )
    return {"apiVersion": "v1", "kind": "List", "items": _items(doc, "v1", "Pod")}


def list_plan_pods(kube: KubeApi, namespace: str, name: str) -> list[JSON]:
    doc = kube.get(path_for("v1", "pods", namespace=namespace), labelSelector=_selector(plan_labels(name)))
    return _items(doc, "v1", "Pod")


def list_operator_pods(kube: KubeApi) -> list[JSON]:
    """Every pod a plan deployed, in every namespace (one request for the readiness sweep).

    ``resourceVersion=0`` lets the API server answer from its watch cache, as an informer's
    re-list does: polled every few seconds, it must not reach etcd each time.
    """
    doc = kube.get(path_for("v1", "pods"), labelSelector=_selector(MANAGED_BY), resourceVersion="0")
    return _items(doc, "v1", "Pod")


def list_plan_deployments(kube: KubeApi, namespace: str, name: str) -> list[JSON]:
    doc = kube.get(
        path_for("apps/v1", "deployments", namespace=namespace), labelSelector=_selector(plan_labels(name))
    )
    return _items(doc, "apps/v1", "Deployment")


def read_deployment(kube: KubeApi, namespace: str, name: str) -> JSON | None:
    return kube.get_or_none(path_for("apps/v1", "deployments", name, namespace))


def read_configmap(kube: KubeApi, namespace: str, name: str) -> JSON | None:
    return kube.get_or_none(path_for("v1", "configmaps", name, namespace))


def list_priority_classes(kube: KubeApi) -> list[JSON]:
    return _items(kube.get(path_for(PC_API, "priorityclasses")), PC_API, "PriorityClass")


def list_managed_priority_classes(kube: KubeApi) -> list[JSON]:
    doc = kube.get(path_for(PC_API, "priorityclasses"), labelSelector=_selector(MANAGED_BY))
    return _items(doc, PC_API, "PriorityClass")


def list_labelled_nodes(kube: KubeApi, key: str) -> list[JSON]:
    return _items(kube.get(path_for("v1", "nodes"), labelSelector=key), "v1", "Node")


def _by_name(items: list[JSON]) -> dict[str, JSON]:
    return {str(i["metadata"]["name"]): i for i in items}


def read_for_apply(kube: KubeApi, plan: PlanBody, desired: Desired, nodes: list[JSON]) -> Observed:
    """What the plan's apply compares against; ``nodes`` is the list the plan was made from."""
    deployments = _by_name(list_plan_deployments(kube, plan.namespace, plan.name))
    for dep in desired.deployments:  # a wanted name someone else may hold without our labels
        name = dep["metadata"]["name"]
        if name not in deployments and (found := read_deployment(kube, plan.namespace, name)) is not None:
            deployments[name] = found
    return Observed(
        nodes=nodes,
        deployments=deployments,
        configmap=read_configmap(kube, plan.namespace, plan.configmap),
        priority_classes=_by_name(list_priority_classes(kube)),
    )


def read_for_cleanup(kube: KubeApi, plan: PlanBody) -> Observed:
    """What a deleted plan may have left: its labelled nodes, Deployments, ConfigMap, classes."""
    return Observed(
        nodes=list_labelled_nodes(kube, plan.label_key),
        deployments=_by_name(list_plan_deployments(kube, plan.namespace, plan.name)),
        configmap=read_configmap(kube, plan.namespace, plan.configmap),
        priority_classes=_by_name(list_managed_priority_classes(kube)),
    )


@dataclass(frozen=True)
class ClusterRead:
    """What planning reads: every plan, every node, the pods that hold resources."""

    plans: list[PlanBody]
    nodes: JSON  # a List of Nodes
    pods: JSON  # a List of bound, unfinished Pods


def read_cluster(kube: KubeApi) -> ClusterRead:
    return ClusterRead(list_plans(kube), list_nodes(kube), list_active_pods(kube))


# --- writes --------------------------------------------------------------------------------


def patch_node_labels(kube: KubeApi, node: str, labels: Mapping[str, str | None]) -> None:
    """Set (or, with ``None``, remove) exactly these label keys on one node."""
    kube.merge_patch(path_for("v1", "nodes", node), {"metadata": {"labels": dict(labels)}}, FIELD_MANAGER)


def apply_object(kube: KubeApi, manifest: Mapping[str, Any]) -> JSON:
    """Server-side apply a rendered manifest (namespaced or not) as ``gpuplan-operator``."""
    meta = manifest["metadata"]
    api_version, plural = _APIS[manifest["kind"]]
    path = path_for(api_version, plural, meta["name"], meta.get("namespace"))
    return kube.apply(path, manifest, FIELD_MANAGER)


def delete_object(kube: KubeApi, kind: str, name: str, namespace: str | None = None) -> bool:
    """Delete one object the operator owns; False when it was already gone."""
    api_version, plural = _APIS[kind]
    return kube.delete(path_for(api_version, plural, name, namespace))


def patch_plan_status(kube: KubeApi, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
    return kube.merge_patch(
        path_for(PLAN_API, PLURAL, name, namespace) + "/status", {"status": dict(patch)}, FIELD_MANAGER
    )
