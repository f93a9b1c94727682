"""A plan's pods on real kubelets: they start, and each gets exactly its planned cards.

The nodes are real kubelets with containerd (``hack/kubelet-up.sh``), each advertising fake GPUs
through a device plugin of its own (``hack/k8s/fakegpu``). The kubelet's device manager admits a
pod only when it can hand out the cards the pod asks for, and tells the plugin which devices it
chose; the plugin puts their ids into the container (``NVIDIA_VISIBLE_DEVICES`` and one file per
device under ``/var/run/fakegpu``). So what a container reads there is what the kubelet gave it,
and two containers with one id between them would be a card handed out twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from e2e.kubelet.conftest import TOLERATION, RealNodes
from e2e.support import (
    TYPE_LABEL,
    Api,
    Kubectl,
    live_pods,
    operator_entry,
    plan_manifest,
    settled,
    to_json,
    wait_for,
)

GPU = "nvidia.com/gpu"
LIMITS = {"limits": {"cpu": "250m", "memory": "64Mi"}}


def devices_seen(kubectl: Kubectl, ns: str, pod: str) -> tuple[list[str], list[str]]:
    """The device ids in the container: from the environment variable and from the files."""
    out = kubectl.run(
        "exec", "-n", ns, pod, "--", "sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES"; ls /var/run/fakegpu'
    ).stdout.splitlines()
    env = [d for d in (out[0] if out else "").split(",") if d]
    return env, sorted(out[1:])


def cards_of(pod: dict[str, Any]) -> int:
    (container,) = pod["spec"]["containers"]
    return int(((container.get("resources") or {}).get("limits") or {}).get(GPU, 0))


def test_a_plan_runs_on_real_kubelets_with_exactly_its_cards(
    api: Api, kubectl: Kubectl, ns: str, real_nodes: RealNodes
) -> None:
    n, gpus = len(real_nodes.names), real_nodes.gpus
    assert n >= 2 and gpus >= 4, f"the suite plans for at least 2 real nodes of 4 cards, got {real_nodes}"
    # Every card of the real nodes: a spread service of 2 cards per node, a concentrated one of
    # 2 cards, and single cards for the rest.
    requests = {"extract": {"L": 2 * n}, "search": {"L": 2}, "gate": {"L": n * gpus - 2 * n - 2}}
    spec = {
        "resources": [{"name": "L", "kind": "GPU", "nodeSelector": {TYPE_LABEL: real_nodes.gpu_type}}],
        "operators": [
            # a CPU and memory limit from the catalog's template, as a load test would need them
            operator_entry("extract", "service")
            | {"flamewaker": {"containerAttributes": {"resources": LIMITS}}},
            operator_entry("search", "machine"),
            operator_entry("gate", "single"),
        ],
        "requests": requests,
        "tolerations": [TOLERATION],
        "image": real_nodes.image,
        "deploy": True,
    }
    kubectl.apply(plan_manifest(ns, "real", spec))
    status = wait_for(
        "the plan Applied and its pods Ready on the real nodes", settled(api, ns, "real"), timeout=180
    )

    # What the plan placed: (node, cards per instance) once per instance.
    planned: Counter[tuple[str, int]] = Counter()
    for alloc in status["allocations"]:
        for node, count in alloc["nodes"].items():
            planned[(node, int(alloc["unitsPerInstance"]))] += int(count)
    assert sum(cards * k for (_, cards), k in planned.items()) == n * gpus, to_json(status["allocations"])

    # The plan is Ready once its pods are bound to their planned nodes; the kubelets start them.
    def running() -> list[dict[str, Any]] | None:
        pods = live_pods(api, ns)
        ok = len(pods) == sum(planned.values()) and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods = wait_for("every planned pod Running on its kubelet", running, timeout=120)
    assert Counter((p["spec"]["nodeName"], cards_of(p)) for p in pods) == planned

    given: dict[str, list[str]] = {name: [] for name in real_nodes.names}
    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        env, files = devices_seen(kubectl, ns, name)
        assert len(env) == cards_of(pod), f"{name} on {node} asked for {cards_of(pod)} cards, sees {env}"
        assert sorted(env) == files, f"{name}: the variable says {env}, the files {files}"
        assert all(d.startswith(f"{node}-gpu-") for d in env), f"{name} on {node} sees {env}"
        given[node] += env
    # The template's limits reach the containers as cgroup limits (cgroup v1 here): the kubelet
    # enforces what the plan wrote, beside the cards.
    extract = [p for p in pods if p["metadata"]["name"].startswith("real-extract-")]
    assert len(extract) == n, [p["metadata"]["name"] for p in pods]  # 2 cards on each node
    for pod in extract:
        quota, memory = kubectl.run(
            "exec", "-n", ns, pod["metadata"]["name"], "--", "cat",
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        ).stdout.split()  # fmt: skip
        assert (int(quota), int(memory)) == (25_000, 64 * 2**20), (pod["metadata"]["name"], quota, memory)
    for node, ids in given.items():
        twice = [d for d, k in Counter(ids).items() if k > 1]
        assert not twice, f"{node} handed out {twice} twice"
        assert len(ids) == gpus, f"{node}: {gpus} cards, {len(ids)} handed out"

    # Every card is taken: a pod pinned to a node past the scheduler is refused by the kubelet's
    # device manager, not started on a card that another container holds.
    full = real_nodes.names[0]
    api.create(
        "v1",
        "pods",
        {
            "metadata": {"name": "one-too-many"},
            "spec": {
                "nodeName": full,
                "tolerations": [TOLERATION],
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": real_nodes.image, "resources": {"limits": {GPU: 1}}}],
            },
        },
        ns=ns,
    )

    def refused() -> dict[str, Any] | None:
        pod = next(p for p in api.pods(ns) if p["metadata"]["name"] == "one-too-many")
        return pod["status"] if pod["status"].get("phase") in ("Failed", "Running") else None

    st = wait_for("the kubelet to decide on the pinned pod", refused, timeout=60)
    assert (st.get("phase"), st.get("reason")) == ("Failed", "UnexpectedAdmissionError"), to_json(st)
    assert GPU in st.get("message", ""), st
    # and the plan's pods on that node kept their cards
    after = {p["metadata"]["name"]: p["status"].get("phase") for p in live_pods(api, ns)}
    assert set(after.values()) == {"Running"}, after
