"""``make demo CLUSTER=kind`` on a kind cluster made here: ``make kind-e2e`` runs the demo, then this.

Notes
-----
- No registry is reachable here: the cluster's nodes run a node image made from the local
  harness's binaries (``hack/kind/node-image.sh``), podman is kind's engine. This suite checks
  that the cluster is what kind makes (kubeadm's control plane as static pods, kube-proxy on every
  node, the nodes of ``hack/kind/cluster.yaml``), that the demo's plan is Ready on it, and that a
  pod asking for the advertised cards really starts on a kind worker.
- It needs the cluster: without ``.cluster/kind-kubeconfig`` it fails (a suite about kind that
  skipped for want of kind would prove nothing). ``make kind-e2e`` makes it and deletes it after.
- The demo's workloads name images that exist nowhere: their pods are bound where planned, then
  ErrImagePull; that is not checked. A pod that does start (pause), pod traffic between two
  workers and a name looked up through CoreDNS and a Service (kube-proxy) are.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.support import REPO, Api, Kubectl, is_true, node_ready, wait_for

KUBECONFIG = REPO / ".cluster" / "kind-kubeconfig"
CONFIG = yaml.safe_load((REPO / "hack" / "kind" / "cluster.yaml").read_text())
GPU = "nvidia.com/gpu"
PAUSE = "registry.k8s.io/pause:3.10.1"  # kubeadm's pause image, in every node's containerd


def _versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "hack" / "versions.sh").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isupper():
            out[key] = value.strip('"')
    return out


# kube-proxy's image sits on the node image's Debian base (bash, socat, getent): client and server
TOOLS = f"registry.k8s.io/kube-proxy:{_versions()['K8S_VERSION']}"


@pytest.fixture(scope="module", autouse=True)
def _kind_cluster(kubeconfig: str) -> None:
    if kubeconfig != str(KUBECONFIG):
        pytest.fail(f"run with KUBECONFIG={KUBECONFIG} (make kind-e2e), not {kubeconfig}", pytrace=False)


def test_the_nodes_are_kinds_on_the_local_image(api: Api) -> None:
    versions = _versions()
    nodes = {n["metadata"]["name"]: n for n in api.nodes()}
    name = CONFIG["name"]
    workers = [n for n in CONFIG["nodes"] if n["role"] == "worker"]
    expected = [f"{name}-control-plane"] + [f"{name}-worker{i + 1 if i else ''}" for i in range(len(workers))]
    assert sorted(nodes) == sorted(expected)
    for node in nodes.values():
        info = node["status"]["nodeInfo"]
        assert node_ready(node), node["metadata"]["name"]
        assert info["kubeletVersion"] == versions["K8S_VERSION"]
        assert info["containerRuntimeVersion"] == f"containerd://{versions['CONTAINERD_VERSION'].lstrip('v')}"
        assert node["spec"]["providerID"] == f"kind://podman/{name}/{node['metadata']['name']}"


def test_kubeadm_started_the_control_plane_kube_proxy_and_coredns(api: Api) -> None:
    pods = api.pods("kube-system")
    running = {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert f"{component}-{CONFIG['name']}-control-plane" in running, component
    proxies = [p for p in pods if p["metadata"]["name"].startswith("kube-proxy-")]
    assert len(proxies) == len(CONFIG["nodes"])
    assert all(p["status"].get("phase") == "Running" for p in proxies)
    dns = [p for p in pods if p["metadata"]["labels"].get("k8s-app") == "kube-dns"]
    assert dns and all(p["status"].get("phase") == "Running" for p in dns), [p["status"] for p in dns]


def test_the_workers_advertise_their_labelled_cards(api: Api) -> None:
    workers = api.nodes("nvidia.com/gpu.count")
    assert len(workers) == sum(1 for n in CONFIG["nodes"] if n["role"] == "worker")
    for node in workers:
        count = node["metadata"]["labels"]["nvidia.com/gpu.count"]
        assert node["status"]["allocatable"][GPU] == node["status"]["capacity"][GPU] == count


def test_the_demo_plan_is_ready_with_every_pod_where_planned(api: Api) -> None:
    demo = yaml.safe_load((REPO / "examples" / "image-fence.yaml").read_text())["metadata"]
    ns, name = demo.get("namespace", "default"), demo["name"]
    status = api.status(ns, name)
    assert is_true(status, "Ready"), status
    pods = api.pods(ns)
    assert pods
    workers = {n["metadata"]["name"] for n in api.nodes("nvidia.com/gpu.count")}
    for pod in pods:
        assert pod["spec"].get("nodeName") in workers, pod["metadata"]["name"]
    planned = sum(int(c["resources"]["limits"][GPU]) for p in pods for c in p["spec"]["containers"])
    assert f"{planned}/" in status.get("message", ""), status.get("message")


@pytest.fixture
def scratch_ns(api: Api) -> Iterator[str]:
    ns = f"kind-e2e-{uuid.uuid4().hex[:6]}"
    api.create("v1", "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield ns
    api.delete("v1", "namespaces", ns)


def _pod(name: str, gpu_type: str, cards: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"gpuplan.ragnaros.io/gpu-type": gpu_type},
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "c", "image": PAUSE, "imagePullPolicy": "Never",
                "resources": {"limits": {GPU: str(cards)}},
            }],
        },
    }  # fmt: skip


def test_a_pod_with_cards_really_starts_on_a_kind_worker(api: Api, scratch_ns: str) -> None:
    api.create("v1", "pods", _pod("starts", "T4", 1), ns=scratch_ns)

    def running() -> dict[str, Any] | None:
        pod = api.kube.get(f"/api/v1/namespaces/{scratch_ns}/pods/starts")
        return pod if pod["status"].get("phase") == "Running" else None

    pod = wait_for("the pod Running on a kind worker", running, timeout=120)
    assert pod["spec"]["nodeName"].startswith(f"{CONFIG['name']}-worker")
    assert pod["status"]["podIP"].startswith("10.244."), pod["status"]  # the node's bridge network
    statuses = pod["status"]["containerStatuses"]
    assert statuses[0]["ready"] and statuses[0]["containerID"].startswith("containerd://")


def _tools_pod(name: str, node: str, command: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "containers": [{
                "name": "c", "image": TOOLS, "imagePullPolicy": "Never",
                "command": ["bash", "-c", command],
            }],
        },
    }  # fmt: skip


def _phase(api: Api, ns: str, name: str) -> str:
    return str(api.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")["status"].get("phase", ""))


def test_pods_on_two_workers_reach_each_other(api: Api, kubectl: Kubectl, scratch_ns: str) -> None:
    """The bridges of two nodes are routed to each other (hack/kind/up.sh), as a host-gw CNI does."""
    server_node, client_node = f"{CONFIG['name']}-worker", f"{CONFIG['name']}-worker2"
    api.create(
        "v1",
        "pods",
        _tools_pod(
            "server",
            server_node,
            "exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo hello-from-$(cat /etc/hostname)'",
        ),
        ns=scratch_ns,
    )

    def server_ip() -> str | None:
        pod = api.kube.get(f"/api/v1/namespaces/{scratch_ns}/pods/server")
        return pod["status"].get("podIP") if pod["status"].get("phase") == "Running" else None

    ip = wait_for("the server pod Running", server_ip, timeout=120)
    client = f"for i in $(seq 20); do socat -t5 -T5 - TCP:{ip}:8080 && exit 0; sleep 1; done; exit 1"
    api.create("v1", "pods", _tools_pod("client", client_node, client), ns=scratch_ns)

    def finished() -> str | None:
        phase = _phase(api, scratch_ns, "client")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for("the client pod done", finished, timeout=120)
    out = kubectl.run("logs", "-n", scratch_ns, "client", check=False)
    assert phase == "Succeeded" and "hello-from-server" in out.stdout, (phase, out.stdout, out.stderr)


def test_a_pod_finds_the_api_server_by_name(api: Api, kubectl: Kubectl, scratch_ns: str) -> None:
    """CoreDNS answers (the kube-dns Service, through kube-proxy) with the kubernetes Service's IP."""
    name = "kubernetes.default.svc.cluster.local"
    lookup = f"for i in $(seq 30); do getent hosts {name} && exit 0; sleep 1; done; exit 1"
    api.create("v1", "pods", _tools_pod("lookup", f"{CONFIG['name']}-worker3", lookup), ns=scratch_ns)

    def finished() -> str | None:
        phase = _phase(api, scratch_ns, "lookup")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for("the lookup pod done", finished, timeout=120)
    out = kubectl.run("logs", "-n", scratch_ns, "lookup", check=False).stdout
    service_ip = api.kube.get("/api/v1/namespaces/default/services/kubernetes")["spec"]["clusterIP"]
    assert phase == "Succeeded" and out.split()[:1] == [service_ip], (phase, out)
