"""Read a live cluster for the command line, read only: what the operator would plan against.

Notes
-----
``gpuplan plan PLAN.yaml`` without ``--nodes`` reads the nodes, the bound pods and the plans
(and where served, ResourceSlices, ResourceClaims and NodeResourceTopology objects) of the
cluster that ``--kubeconfig``/``--context`` (or ``$KUBECONFIG``, or ``~/.kube/config``) name,
with the operator's own read functions. Pods a plan accounts for are left out (their cards are
the plans' to share), and the plan files are planned *together* with every plan of the cluster,
as the operator plans them: by priority, a plan that holds an applied placement before one that
does not, then the oldest first (the files' plans, if new, last). A file whose plan the cluster
already has replaces its spec and keeps its placement (``--previous`` unless given). Only GET
and LIST requests are sent; nothing is ever written.

The Kubernetes client is imported here, when a cluster is actually read, so the rest of the
command line starts without it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner import InvalidInput, parse_spec

if TYPE_CHECKING:
    from planner import PlanSpec


class ClusterUnreachable(Exception):
    """The cluster could not be read (no kubeconfig, no such context, the API server failed)."""


@dataclass(frozen=True)
class ClusterPlan:
    """One of the cluster's GpuAllocationPlans, as the planner takes it."""

    namespace: str
    name: str
    spec: PlanSpec | None  # None: its spec is invalid (``invalid`` says why)
    status: Mapping[str, Any]
    applied: bool  # it holds an applied placement (phase Applied, with allocations)
    invalid: str | None = None


@dataclass(frozen=True)
class LiveCluster:
    """What the operator plans every plan of the cluster against, read once."""

    nodes: dict[str, Any]  # a NodeList
    pods: dict[str, Any]  # the pods no plan accounts for
    plans: tuple[ClusterPlan, ...]  # oldest first (creation time, then namespace/name)
    server: str
    slices: dict[str, Any] | None = None  # with DRA: the nodes' GPUs one by one
    claims: dict[str, Any] | None = None  # with DRA: the claims no plan accounts for
    topology: dict[str, Any] | None = None  # NodeResourceTopology objects: the nodes' NUMA zones
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


def _plan_of(body: Any) -> ClusterPlan:
    status = dict(body.status or {})
    applied = status.get("phase") == "Applied" and bool(status.get("allocations"))
    try:
        spec = parse_spec(dict(body.spec or {}), name=body.name, namespace=body.namespace)
    except InvalidInput as e:
        return ClusterPlan(body.namespace, body.name, None, status, False, str(e))
    return ClusterPlan(body.namespace, body.name, spec, status, applied)


def read_cluster(kubeconfig: str | None, context: str | None) -> LiveCluster:
    """Nodes, the pods and claims no plan accounts for, and every plan, oldest first."""
    from gpuplan_operator import cluster, reserve
    from kubernetes.client.exceptions import ApiException

    kube = _client(kubeconfig, context)
    with _reading("the cluster"):
        nodes = cluster.list_nodes(kube)
        pods = cluster.list_active_pods(kube)
        skipped: list[str] = []
        slices = _optional(cluster.list_resource_slices, kube, "ResourceSlices", skipped)
        claims = _optional(cluster.list_resource_claims, kube, "ResourceClaims", skipped) if slices else None
        topology = _optional(cluster.list_node_topologies, kube, "NodeResourceTopology", skipped)
        try:
            plans = cluster.list_plans(kube)
        except ApiException as e:
            if e.status != 404:  # no CRD: a cluster without gpuplan has no plans
                raise
            plans = []
    if not nodes.get("items"):
        raise InvalidInput("nodes", "the cluster has no nodes")
    live = [p for p in plans if not p.deleting]
    live.sort(key=lambda p: (str((p.raw.get("metadata") or {}).get("creationTimestamp") or ""), p.ref))
    return LiveCluster(
        nodes=nodes,
        pods=reserve.foreign_pods(pods, reserve.plan_keys(plans)),
        plans=tuple(_plan_of(p) for p in live),
        server=str(kube.api.configuration.host),
        slices=slices,
        claims=reserve.foreign_claims(claims),
        topology=topology,
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

    kube = _client(kubeconfig, context)
    with _reading("the plans", plans_needed=True):
        return cluster.list_plans(kube)


def read_for_view(kubeconfig: str | None, context: str | None) -> Any:
    """What ``status --html`` draws (a :class:`gpuplan_operator.view.ClusterRead`), read only."""
    from gpuplan_operator.view import read_cluster

    kube = _client(kubeconfig, context)
    with _reading("the cluster", plans_needed=True):
        return read_cluster(kube)


@contextmanager
def _reading(what: str, plans_needed: bool = False) -> Iterator[None]:
    """An API error or an unreachable server as one line naming what was being read; with
    ``plans_needed``, a missing GpuAllocationPlan resource says the CRD is not installed."""
    from gpuplan_operator.kube import api_error_message
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as e:
        if plans_needed and e.status == 404:
            raise ClusterUnreachable(
                "the cluster has no GpuAllocationPlan resource (CRD not installed)"
            ) from None
        raise ClusterUnreachable(f"reading {what} failed: {api_error_message(e)}") from None
    except OSError as e:
        raise ClusterUnreachable(f"cannot reach the API server: {e}") from None
