"""``make bench-operator`` (cache part): what the watched caches hold at 5,000 nodes and 20,000 pods.

Each object is built as the API server sends it to a watch (a node with its conditions, addresses,
nodeInfo, forty images and managed fields; a pod with its spec, status and managed fields), fed
to the operator's own stores (:class:`gpuplan_operator.cache.store.Store`, trimmed as they trim)
one event at a time, and then dropped, as the informer does. Then the informer's periodic
re-list of nodes and pods runs as the operator runs it (:class:`~gpuplan_operator.cache.informer.Informer`
against a listing served in the pages it asks for; ``--page 0``: the whole listing in one answer,
as before pages). Reported, in a process of its own: the growth of the resident set over the
baseline (what the caches cost the operator), the peak and the resident set after the re-list,
the bytes the cached objects hold (:func:`~gpuplan_operator.cache.caches.deep_size`), and the
seconds one cycle's snapshot (:meth:`~gpuplan_operator.cache.caches.ClusterCache.read` and the
planner's snapshot of it) takes.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuplan_operator.cache import informer  # noqa: E402
from gpuplan_operator.cache.caches import ClusterCache, deep_size  # noqa: E402
from ledger import memory_of  # noqa: E402

from planner import snapshot  # noqa: E402

REGISTRY = "registry.example/team"


def rss_mib(field: str = "resident") -> float:
    """This process's resident set now (``peak``: its peak so far), MiB."""
    return memory_of("self")[field]


class Listing:
    """The API server's answer to a listing of nodes or pods, built page by page as asked
    (``continue`` is the offset)."""

    def __init__(self, nodes: int, pods: int) -> None:
        self.nodes = nodes
        self.pods = pods

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        start, limit = int(query.get("continue") or 0), int(query["limit"])
        count, build = (self.nodes, node) if path.endswith("/nodes") else (self.pods, self._pod)
        end = min(count, start + limit)
        more = {"continue": str(end)} if end < count else {}
        return {"items": [build(i) for i in range(start, end)], "metadata": {"resourceVersion": "9", **more}}

    def _pod(self, i: int) -> dict[str, Any]:
        return pod(i, self.nodes)


def node(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{i}",
            "resourceVersion": str(1000 + i),
            "labels": {
                "kubernetes.io/hostname": name,
                "gpuplan.ragnaros.io/gpu-type": "P4",
                "nvidia.com/gpu.product": "Tesla-P4",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "managedFields": [
                {"manager": m, "operation": "Update", "fieldsV1": {"f:status": {"f:conditions": {}}}}
                for m in ("kubelet", "kube-controller-manager", "kubectl")
            ],
        },
        "spec": {"podCIDR": f"10.{i // 250}.{i % 250}.0/24"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
            "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [
                {"type": t, "status": "False" if t != "Ready" else "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12",
                         "kubeletVersion": "v1.34.1", "containerRuntimeVersion": "containerd://1.7.0",
                         "machineID": f"{i:032x}"},
            "images": [{"names": [f"{REGISTRY}/image-{k}@sha256:{k:064x}", f"{REGISTRY}/image-{k}:v1"],
                        "sizeBytes": 100000000 + k} for k in range(40)],
        },
    }  # fmt: skip


def pod(i: int, nodes: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"svc-{i:06d}-7d9f8b7c5d-x2x9z",
            "namespace": f"team-{i % 20}",
            "uid": f"pod-uid-{i}",
            "resourceVersion": str(100000 + i),
            "labels": {"app": f"svc-{i % 500}", "pod-template-hash": "7d9f8b7c5d"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"svc-{i}-7d9f8b7c5d", "uid": f"rs-{i}"}],
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}},
                              {"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "nodeName": f"gpu-node-{i % nodes:05d}",
            "containers": [{"name": "main", "image": f"registry.example/team/image-{i % 40}:v1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"},
                                          "requests": {"cpu": "1", "memory": "4Gi"}},
                            "env": [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(8)],
                            "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}]}],
            "volumes": [{"name": "token",
                         "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "podIP": f"10.1.{i // 250 % 250}.{i % 250}",
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "x",
                                   "imageID": f"sha256:{i:064x}", "containerID": f"containerd://{i:064x}"}],
        },
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument(
        "--page",
        type=int,
        default=informer.PAGE,
        help=f"objects per page of the re-list (default {informer.PAGE}, as the operator; 0: one answer)",
    )
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()

    gc.collect()
    base = rss_mib()
    cache = ClusterCache(api=None, on_change=lambda kind, matters: None)  # type: ignore[arg-type]
    for s in cache.stores:
        s.replace([])
    template_node = node(0)
    started = time.perf_counter()
    for i in range(args.nodes):
        cache.nodes.apply("ADDED", node(i))
    for i in range(args.pods):
        cache.pods.apply("ADDED", pod(i, args.nodes))
    fill_s = time.perf_counter() - started
    gc.collect()
    grown = rss_mib() - base
    held = sum(deep_size(o) for s in cache.stores for o in s.items()) / 2**20
    informer.PAGE = args.page or (args.nodes + args.pods)
    listing = Listing(args.nodes, args.pods)
    before_relist = rss_mib("peak")
    for inf in cache.informers:
        if inf.store in (cache.nodes, cache.pods):
            inf.api = listing  # type: ignore[assignment]
            inf._list()
    gc.collect()
    relist_peak = rss_mib("peak")
    after_relist = rss_mib()
    t0 = time.perf_counter()
    read = cache.read()
    t1 = time.perf_counter()
    snapshot(read.nodes, read.pods)
    t2 = time.perf_counter()
    whole_node = deep_size(template_node) / 1024
    figures = {
        "nodes": args.nodes,
        "pods": args.pods,
        "rss_growth_mib": round(grown, 1),
        "page": args.page,
        "relist_peak_growth_mib": round(relist_peak - base, 1),
        "peak_before_relist_growth_mib": round(before_relist - base, 1),
        "rss_growth_after_relist_mib": round(after_relist - base, 1),
        "cached_bytes_mib": round(held, 1),
        "node_as_sent_kib": round(whole_node, 1),
        "node_as_cached_kib": round(deep_size(cache.nodes.items()[0]) / 1024, 2),
        "fill_s": round(fill_s, 2),
        "read_s": round(t1 - t0, 3),
        "planner_snapshot_s": round(t2 - t1, 2),
    }
    print(json.dumps(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
