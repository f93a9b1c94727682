"""A plan of DRA claims on real kubelets: each container sees exactly its claim's devices.

Each real node runs a DRA kubelet plugin of its own (``hack/k8s/fakedra``) that publishes its fake
cards as a ResourceSlice, in PCIe roots (``resource.kubernetes.io/pcieRoot``), as a GPU driver
does. The operator plans on those devices and writes a ResourceClaimTemplate per instance;
kube-scheduler allocates the claims; the kubelet asks the plugin to prepare each claim, the plugin
writes a CDI spec for it, and containerd (1.7, with CDI on) applies the spec to the container: an
environment variable naming the devices and one file per device. So what a container reads is
what the runtime was told for its claim, and a device in two containers would be a card handed
out twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from e2e.dra import (
    PCIE_ROOT,
    RESOURCE_API,
    claims,
    ensure_device_class,
    gpus_of,
    pod_claim_names,
    pod_devices,
)
from e2e.kubelet.conftest import TOLERATION, RealNodes
from e2e.support import (
    Api,
    Kubectl,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    to_json,
    wait_for,
)

PLAN_LABEL = "gpuplan.ragnaros.io/plan"


def seen(kubectl: Kubectl, ns: str, pod: str) -> tuple[list[str], str, list[list[str]], str]:
    """In the container: the devices the variable names, the claim it names, each device file's
    ``name uuid pcieRoot`` line, and the device plugin's variable (empty: no card from it)."""
    out = kubectl.run(
        "exec", "-n", ns, pod, "--", "sh", "-c",
        'echo "$GPUPLAN_DRA_DEVICES"; echo "$GPUPLAN_DRA_CLAIM"; echo "$NVIDIA_VISIBLE_DEVICES"; '
        "cat /var/run/fakedra/* 2>/dev/null; true",
    ).stdout.splitlines()  # fmt: skip
    devices = [d for d in out[0].split(",") if d]
    return devices, out[1], [line.split() for line in out[3:]], out[2]


def test_each_container_sees_exactly_its_claims_devices_in_one_pcie_root(
    api: Api, kubectl: Kubectl, ns: str, real_nodes: RealNodes
) -> None:
    nodes, per_node, domains = real_nodes.dra_nodes, real_nodes.dra_gpus, real_nodes.dra_domains
    per_root = per_node // domains
    m, total = len(nodes), len(nodes) * per_node
    assert m >= 1 and per_root >= 2 and total - per_root - 2 * m >= 1, (
        f"the test wants a DRA node with 2 PCIe roots of at least 2 cards (make kubelet): {real_nodes}"
    )
    driver = real_nodes.dra_driver

    # What the plugins published is the shape the planner reads: every card with its PCIe root.
    published: dict[str, dict[str, str]] = {}  # node -> device -> pcieRoot
    for node in nodes:
        slices = api.kube.get(
            f"/apis/{RESOURCE_API}/resourceslices", fieldSelector=f"spec.nodeName={node},spec.driver={driver}"
        )["items"]
        assert len(slices) == 1, to_json(slices)
        devices = slices[0]["spec"]["devices"]
        want = gpus_of(node, per_node, domains, product=f"fake-{real_nodes.dra_gpu_type}", driver=driver)
        assert [(d["name"], d["attributes"]["uuid"]["string"]) for d in devices] == [
            (g.name, g.uuid) for g in want
        ]
        published[node] = {d["name"]: d["attributes"][PCIE_ROOT]["string"] for d in devices}

    # Every DRA card of the DRA nodes: a concentrated service of a whole PCIe root, a spread one of
    # 2 cards per node, and single cards for the rest.
    requests = {"rank": {"G": per_root}, "embed": {"G": 2 * m}, "tag": {"G": total - per_root - 2 * m}}
    device_class = ensure_device_class(api, driver, driver)
    spec = one_type(
        real_nodes.dra_gpu_type,
        requests,
        [
            operator_entry("embed", "service"),
            operator_entry("rank", "machine"),
            operator_entry("tag", "single"),
        ],
        tolerations=[TOLERATION],
        image=real_nodes.image,
        deploy=True,
    )
    spec["resources"][0]["deviceClassName"] = device_class
    kubectl.apply(plan_manifest(ns, "claims", spec))
    status = wait_for("the plan Applied and Ready on the DRA nodes", settled(api, ns, "claims"), timeout=180)

    # node -> the device sets the plan chose, one per instance
    planned: dict[str, list[frozenset[str]]] = {}
    for alloc in status["allocations"]:
        for node, lists in (alloc.get("devices") or {}).items():
            planned.setdefault(node, []).extend(frozenset(d) for d in lists)
    assert sorted(planned) == sorted(nodes), to_json(status["allocations"])
    assert sum(len(s) for sets in planned.values() for s in sets) == total, to_json(status["allocations"])

    def running() -> list[dict[str, Any]] | None:
        pods = live_pods(api, ns)
        count = sum(len(v) for v in planned.values())
        ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods = wait_for("every planned pod Running on its kubelet", running, timeout=180)

    given: dict[str, list[str]] = {node: [] for node in nodes}
    got: dict[str, list[frozenset[str]]] = {}
    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits") or {}
        assert "nvidia.com/gpu" not in limits, f"{name} asks the device plugin too: {limits}"
        allocated = pod_devices(api, pod)
        assert allocated and {(r.driver, r.pool) for r in allocated} == {(driver, node)}, (name, allocated)
        [claim] = pod_claim_names(pod).values()

        devices, claim_seen, files, plugin_devices = seen(kubectl, ns, name)
        assert sorted(devices) == sorted(r.device for r in allocated), (
            f"{name} on {node}: sees {devices}, claim {allocated}"
        )
        assert claim_seen == f"{ns}/{claim}", (name, claim_seen)
        assert sorted(f[0] for f in files) == sorted(devices), (
            f"{name}: the variable says {devices}, the files {files}"
        )
        assert all(published[node][f[0]] == f[2] for f in files), f"{name}: {files} against {published[node]}"
        roots = {f[2] for f in files}
        assert len(roots) == 1, f"{name} on {node} straddles PCIe roots {sorted(roots)}: {files}"
        assert plugin_devices == "", f"{name} got device-plugin cards {plugin_devices!r} too"
        given[node] += devices
        got.setdefault(node, []).append(frozenset(devices))

    # The containers hold the plan's device sets, and no card twice on a node.
    assert {n: sorted(v, key=sorted) for n, v in got.items()} == {
        n: sorted(v, key=sorted) for n, v in planned.items()
    }
    for node, ids in given.items():
        twice = [d for d, k in Counter(ids).items() if k > 1]
        assert not twice, f"{node} handed out {twice} twice"
        assert sorted(ids) == sorted(published[node]), f"{node}: {sorted(ids)} of {sorted(published[node])}"
    plan_claims = [
        c for c in claims(api, ns) if (c["metadata"].get("labels") or {}).get(PLAN_LABEL) == "claims"
    ]
    assert len(plan_claims) == len(pods), [c["metadata"]["name"] for c in plan_claims]
