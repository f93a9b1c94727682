"""Read a live cluster for the command line, read only: what the operator would plan against.

Notes
-----
``gpuplan plan PLAN.yaml`` without ``--nodes`` reads the nodes, the bound pods and the other
plans (and where served, ResourceSlices, ResourceClaims and NodeResourceTopology objects) of the
cluster that ``--kubeconfig``/``--context`` (or ``$KUBECONFIG``, or ``~/.kube/config``) name,
with the operator's own read functions, and subtracts what the operator
subtracts: pods a plan already accounts for are not counted twice, and every *other* plan's
applied cards are reserved. The plan in the file, if the cluster already has it, is planned
against its own placement (``--previous`` is filled from its status unless given). Only GET and
LIST requests are sent; nothing is ever written.

The Kubernetes client is imported here, when a cluster is actually read, so the rest of the
command line starts without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner import InvalidInput


class ClusterUnreachable(Exception):
    """The cluster could not be read (no kubeconfig, no such context, the API server failed)."""


@dataclass(frozen=True)
class LiveSnapshot:
    nodes: dict[str, Any]  # a NodeList
    pods: dict[str, Any]  # the pods no plan accounts for
    reserved: dict[str, dict[str, int]]  # node -> resource -> units other plans hold
    own_status: dict[str, Any] | None  # the plan's status when the cluster has it
    server: str
    slices: dict[str, Any] | None = None  # with DRA: the nodes' GPUs one by one
    claims: dict[str, Any] | None = None  # with DRA: the claims no plan accounts for
    reserved_devices: frozenset[tuple[str, str]] = frozenset()  # (node, device) other plans hold
    topology: dict[str, Any] | None = None  # NodeResourceTopology objects: the nodes' NUMA zones
    own_zones: dict[str, dict[str, dict[str, int]]] | None = None  # cards the plan placed per zone
    reserved_zones: dict[str, dict[str, dict[str, int]]] | None = None  # ... and the other plans
    skipped: tuple[str, ...] = ()  # optional inputs the reader may not list, in words


def _client(kubeconfig: str | None, context: str | None) -> Any:
    try:
        from gpuplan_operator.kube import Kube, load_api_client
    except ImportError as e:  # pragma: no cover - the operator extra is a base dependency
        raise ClusterUnreachable(f"reading a cluster needs the Kubernetes client: {e}") from None
    try:
        return Kube(load_api_client(kubeconfig=kubeconfig, context=context))
    except Exception as e:  # the client raises ConfigException, FileNotFoundError, ...
        raise ClusterUnreachable(f"no usable kubeconfig: {e}") from None


def read(kubeconfig: str | None, context: str | None, namespace: str, name: str) -> LiveSnapshot:
    """The snapshot the operator would plan the plan ``namespace/name`` against."""
    from gpuplan_operator import cluster, reserve
    from gpuplan_operator.kube import api_error_message
    from kubernetes.client.exceptions import ApiException

    kube = _client(kubeconfig, context)
    try:
        nodes = cluster.list_nodes(kube)
        pods = cluster.list_active_pods(kube)
        skipped: list[str] = []
        slices = _optional(cluster.list_resource_slices, kube, "ResourceSlices", skipped)
        claims = _optional(cluster.list_resource_claims, kube, "ResourceClaims", skipped) if slices else None
        topology = _optional(cluster.list_node_topologies, kube, "NodeResourceTopology", skipped)
        try:
            plans = cluster.list_plans(kube)
        except ApiException as e:
            if e.status != 404:  # no CRD: a cluster without gpuplan has no plans to reserve for
                raise
            plans = []
    except ApiException as e:
        raise ClusterUnreachable(f"reading the cluster failed: {api_error_message(e)}") from None
    except OSError as e:
        raise ClusterUnreachable(f"cannot reach the API server: {e}") from None
    mine = next((p for p in plans if p.namespace == namespace and p.name == name), None)
    if not nodes.get("items"):
        raise InvalidInput("nodes", "the cluster has no nodes")
    return LiveSnapshot(
        nodes=nodes,
        pods=reserve.foreign_pods(pods, reserve.plan_keys(plans)),
        reserved=reserve.reserved_by_others(plans, mine.uid if mine else ""),
        own_status=dict(mine.status) if mine else None,
        server=str(kube.api.configuration.host),
        slices=slices,
        claims=reserve.foreign_claims(claims),
        reserved_devices=frozenset(reserve.devices_reserved_by_others(plans, mine.uid if mine else "")),
        topology=topology,
        own_zones=reserve.own_zones(mine.status) if mine else None,
        reserved_zones=reserve.zones_reserved_by_others(plans, mine.uid if mine else ""),
        skipped=tuple(skipped),
    )


def _optional(read: Any, kube: Any, what: str, skipped: list[str]) -> dict[str, Any] | None:
    """What only some clusters serve (DRA, node-feature-discovery): a reader who may not list it
    plans without it, and is told so (``skipped``), rather than not planning at all."""
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] | None = read(kube)
    except ApiException as e:
        if e.status != 403:
            raise
        skipped.append(f"may not list {what} (403 Forbidden): planned without them")
        return None
    return found


def list_plans(kubeconfig: str | None, context: str | None) -> list[Any]:
    """Every GpuAllocationPlan the cluster has (as PlanBody values)."""
    from gpuplan_operator import cluster
    from gpuplan_operator.kube import api_error_message
    from kubernetes.client.exceptions import ApiException

    kube = _client(kubeconfig, context)
    try:
        return cluster.list_plans(kube)
    except ApiException as e:
        if e.status == 404:
            raise ClusterUnreachable(
                "the cluster has no GpuAllocationPlan resource (CRD not installed)"
            ) from None
        raise ClusterUnreachable(f"reading the plans failed: {api_error_message(e)}") from None
    except OSError as e:
        raise ClusterUnreachable(f"cannot reach the API server: {e}") from None


def read_for_view(kubeconfig: str | None, context: str | None) -> Any:
    """What ``status --html`` draws (a :class:`gpuplan_operator.view.ClusterRead`), read only."""
    from gpuplan_operator.kube import api_error_message
    from gpuplan_operator.view import read_cluster
    from kubernetes.client.exceptions import ApiException

    kube = _client(kubeconfig, context)
    try:
        return read_cluster(kube)
    except ApiException as e:
        if e.status == 404:
            raise ClusterUnreachable(
                "the cluster has no GpuAllocationPlan resource (CRD not installed)"
            ) from None
        raise ClusterUnreachable(f"reading the cluster failed: {api_error_message(e)}") from None
    except OSError as e:
        raise ClusterUnreachable(f"cannot reach the API server: {e}") from None
