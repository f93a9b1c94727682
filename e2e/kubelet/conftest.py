"""Fixtures of the real-kubelet suite: nodes that hack/kubelet-up.sh started, and what they run.

Notes
-----
- The suite needs real nodes (``make cluster-up KUBELETS=2 KUBELET_DRA_NODES=1``; ``make kubelet``
  starts them). When there are none it fails, in CI and elsewhere: a suite about real kubelets
  that skipped for want of them would prove nothing, and podman missing is a broken setup, not a
  reason to pass.
- ``hack/kubelet-up.sh`` writes ``.cluster/kubelets/kubelets.env``: the nodes' names, their cards
  (the device plugin's, and the DRA plugin's on the DRA nodes) and the workload image that their
  containerd holds (nothing can be pulled).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.support import REPO, Api, node_ready

ENV_FILE = REPO / ".cluster" / "kubelets" / "kubelets.env"
REAL_LABEL = "gpuplan.ragnaros.io/kubelet"
TOLERATION = {"key": REAL_LABEL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}


@dataclass(frozen=True)
class RealNodes:
    names: tuple[str, ...]
    gpus: int  # fake cards per node (the device plugin's devices)
    gpu_type: str  # the nodes' gpuplan.ragnaros.io/gpu-type
    image: str  # the workload image every node's containerd holds
    dra_nodes: tuple[str, ...]  # nodes whose cards a DRA kubelet plugin publishes (hack/k8s/fakedra)
    dra_gpu_type: str  # their gpuplan.ragnaros.io/gpu-type
    dra_driver: str  # the plugin's driver
    dra_gpus: int  # its fake cards per DRA node
    dra_domains: int  # the PCIe roots they are split into


def read_env(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def from_env(env: dict[str, str]) -> RealNodes:
    """The nodes ``kubelets.env`` describes."""
    return RealNodes(
        names=tuple(env["KUBELET_NODES"].split()),
        gpus=int(env["KUBELET_GPUS"]),
        gpu_type=env["KUBELET_GPU_TYPE"],
        image=env["WORKLOAD_IMAGE"],
        dra_nodes=tuple(env["KUBELET_DRA_NODES"].split()),
        dra_gpu_type=env["KUBELET_DRA_GPU_TYPE"],
        dra_driver=env["KUBELET_DRA_DRIVER"],
        dra_gpus=int(env["KUBELET_DRA_GPUS"]),
        dra_domains=int(env["KUBELET_DRA_DOMAINS"]),
    )


@pytest.fixture(scope="session")
def real_nodes(api: Api) -> RealNodes:
    if not ENV_FILE.is_file():
        pytest.fail(
            f"no real-kubelet nodes ({ENV_FILE} is missing): start them with make cluster-up KUBELETS=2",
            pytrace=False,
        )
    nodes = from_env(read_env(ENV_FILE))
    for name in nodes.names + nodes.dra_nodes:
        node = api.node(name)
        if not node_ready(node):
            pytest.fail(
                f"real node {name} is missing or not Ready: run make cluster-up KUBELETS=2", pytrace=False
            )
        assert node is not None
        info = node["status"]["nodeInfo"]
        # a kubelet and a container runtime of its own, not kwok's fake
        assert info["kubeletVersion"].startswith("v1."), info
        assert info["containerRuntimeVersion"].startswith("containerd://"), info
    return nodes
