"""``make demo CLUSTER=kind``, checked as far as these machines allow.

Notes
-----
Creating the kind cluster takes minutes and a node image made here (``hack/kind/node-image.sh``):
``make kind-e2e`` does that, outside ``make test`` (``e2e/kind/``). What this suite checks, in
seconds:

- kind itself (built from the Go module proxy by ``hack/kind/install-kind.sh``) parses, defaults
  and validates ``hack/kind/cluster.yaml``: ``kind create cluster`` with the podman provider gets
  past its config checks to "Ensuring node image", where it fails as it must (the image named
  does not exist, and registries.conf blocks its registry, so nothing leaves the machine and
  nothing is created). Broken configs stop earlier, with kind's own message: the control.
- the config has the layout of the local harness's sample nodes, and names the nodes the demo's
  legacy pods are bound to;
- ``hack/kind/gpu-nodes.sh`` turns nodes labelled as the config labels kind's workers, without
  any GPU, into GPU nodes on the local harness's real API server and scheduler: capacity and
  allocatable through the status subresource, and pods asking for ``nvidia.com/gpu`` schedule.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import REPO, Api, Kubectl, fake_node, node_ready, wait_for

KIND_DIR = REPO / "hack" / "kind"
CONFIG = KIND_DIR / "cluster.yaml"
GPU = "nvidia.com/gpu"
COUNT_LABEL = "nvidia.com/gpu.count"
TYPE_LABEL = "gpuplan.ragnaros.io/gpu-type"
DEMO_LABEL = "gpuplan.ragnaros.io/demo-node"
NODE_IMAGE = "localhost/gpuplan-kind-check:none"  # no such image, and registries.conf blocks localhost


def _config() -> dict[str, Any]:
    return dict(yaml.safe_load(CONFIG.read_text()))


def _workers() -> list[dict[str, str]]:
    return [dict(n.get("labels") or {}) for n in _config()["nodes"] if n["role"] == "worker"]


# --- the config, by kind itself --------------------------------------------------------------


@pytest.fixture(scope="module")
def kind() -> str:
    proc = subprocess.run(
        ["bash", str(KIND_DIR / "install-kind.sh")], capture_output=True, text=True, timeout=900, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def kind_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """podman's settings (hack/podman-env.sh), with every pull from "localhost" blocked."""
    out = subprocess.run(
        ["bash", "-c", f'source "{REPO / "hack" / "podman-env.sh"}" && env -0'],
        capture_output=True, check=True, cwd=REPO,
    ).stdout.decode()  # fmt: skip
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    registries = tmp_path_factory.mktemp("kind") / "registries.conf"
    registries.write_text(
        'unqualified-search-registries = []\n\n[[registry]]\nlocation = "localhost"\nblocked = true\n'
    )
    env.update(CONTAINERS_REGISTRIES_CONF=str(registries), KIND_EXPERIMENTAL_PROVIDER="podman")
    return env


def _kind_create(
    kind: str, env: dict[str, str], config: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    name = f"gpuplan-check-{uuid.uuid4().hex[:6]}"
    cmd = [kind, "create", "cluster", "--name", name, "--config", str(config), "--image", NODE_IMAGE,
           "--kubeconfig", str(tmp_path / "kubeconfig")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    made = subprocess.run(
        ["podman", "ps", "--all", "--quiet", "--filter", f"label=io.x-k8s.kind.cluster={name}"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert not made.stdout.strip(), f"kind created containers: {made.stdout}"
    return proc


def test_kind_accepts_the_config_up_to_the_node_image(
    kind: str, kind_env: dict[str, str], tmp_path: Path
) -> None:
    proc = _kind_create(kind, kind_env, CONFIG, tmp_path)
    assert proc.returncode != 0  # no node image here
    assert "Ensuring node image (localhost/gpuplan-kind-check:none)" in proc.stderr, proc.stderr
    assert 'failed to pull image "localhost/gpuplan-kind-check:none"' in proc.stderr, proc.stderr


def _misspelt_field(config: dict[str, Any]) -> None:
    config["nodes"][1]["lables"] = config["nodes"][1].pop("labels")


def _no_control_plane(config: dict[str, Any]) -> None:
    config["nodes"] = config["nodes"][1:]


def _bad_role(config: dict[str, Any]) -> None:
    config["nodes"][1]["role"] = "gpu-worker"


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        pytest.param(_misspelt_field, "field lables not found", id="kind refuses a misspelt field"),
        pytest.param(_no_control_plane, "must have at least one control-plane node",
                     id="kind refuses a cluster without a control plane"),
        pytest.param(_bad_role, '"gpu-worker" is not a valid node role', id="kind refuses an unknown role"),
    ],
)  # fmt: skip
def test_kind_refuses_a_broken_config_before_the_node_image(
    kind: str,
    kind_env: dict[str, str],
    tmp_path: Path,
    break_it: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    """The control: the test above would pass vacuously if kind skipped its checks."""
    config = _config()
    break_it(config)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = _kind_create(kind, kind_env, path, tmp_path)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "Ensuring node image" not in proc.stderr


# --- the layout ------------------------------------------------------------------------------


def test_the_workers_play_the_harness_sample_nodes() -> None:
    sample = {
        n["metadata"]["name"]: n
        for n in yaml.safe_load_all((REPO / "hack" / "sample-nodes.yaml").read_text())
        if n and n["kind"] == "Node"
    }
    played = []
    for labels in _workers():
        node = sample[labels[DEMO_LABEL]]
        assert labels[TYPE_LABEL] == node["metadata"]["labels"][TYPE_LABEL]
        assert labels[COUNT_LABEL] == node["status"]["allocatable"][GPU]
        assert labels["nvidia.com/gpu.product"] == node["metadata"]["labels"]["nvidia.com/gpu.product"]
        played.append(labels[DEMO_LABEL])
    gpu_nodes = sorted(name for name, n in sample.items() if GPU in n["status"]["allocatable"])
    assert sorted(played) == gpu_nodes
    pods = yaml.safe_load((REPO / "examples" / "pods.yaml").read_text())["items"]
    assert {p["spec"]["nodeName"] for p in pods} <= set(played)  # the demo maps them to kind's names


# --- the node patches, on the local harness ---------------------------------------------------


def _gpu_nodes_sh(kubectl: Kubectl, *nodes: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=kubectl.kubeconfig, KUBECTL=kubectl.binary)
    return subprocess.run(
        ["bash", str(KIND_DIR / "gpu-nodes.sh"), *nodes], capture_output=True, text=True, timeout=120, env=env
    )


def _kind_like_node(api: Api, labels: dict[str, str], suffix: str) -> str:
    """A kwok node labelled as kind labels a worker, with no GPU (its own type, to stay apart)."""
    labels = dict(labels, **{TYPE_LABEL: f"{labels[TYPE_LABEL].lower()}kind-{suffix}"})
    name = f"kind-{labels[DEMO_LABEL]}-{suffix}"
    node = fake_node(name, labels[TYPE_LABEL])
    node["metadata"]["labels"].update(labels)
    for field in ("allocatable", "capacity"):  # (fake_node shares one dict between the two)
        node["status"][field] = {k: v for k, v in node["status"][field].items() if k != GPU}
    api.create("v1", "nodes", node)
    return name


@pytest.fixture
def kind_nodes(api: Api) -> Iterator[list[str]]:
    suffix = uuid.uuid4().hex[:5]
    names = [_kind_like_node(api, labels, suffix) for labels in _workers()[:2]]
    wait_for("the kind-like nodes Ready", lambda: all(node_ready(api.node(n)) for n in names), timeout=60)
    yield names
    for name in names:
        for pod in api.pods_on(name):
            api.delete("v1", "pods", pod["metadata"]["name"], pod["metadata"]["namespace"], grace=0)
        api.delete("v1", "nodes", name)


def _gpu_pod(ns: str, name: str, node_type: str, cards: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {TYPE_LABEL: node_type},
            "containers": [
                {"name": "c", "image": "pause:3.10", "resources": {"limits": {GPU: str(cards)}}}
            ],
        },
    }  # fmt: skip


def test_gpu_nodes_sh_advertises_the_labelled_cards(
    api: Api, kubectl: Kubectl, kind_nodes: list[str], ns: str
) -> None:
    for name in kind_nodes:
        assert GPU not in (api.node(name) or {})["status"]["allocatable"]
    proc = _gpu_nodes_sh(kubectl, *kind_nodes)
    assert proc.returncode == 0, proc.stderr
    for name in kind_nodes:
        node = api.node(name) or {}
        count = node["metadata"]["labels"][COUNT_LABEL]
        assert node["status"]["capacity"][GPU] == node["status"]["allocatable"][GPU] == count
        assert f"node {name}: {count} {GPU}" in proc.stderr
    again = _gpu_nodes_sh(kubectl, *kind_nodes)
    assert again.returncode == 0 and "node " not in again.stderr, again.stderr  # nothing left to do

    # the real scheduler places GPU pods there, up to the advertised count and no further
    node_type = (api.node(kind_nodes[0]) or {})["metadata"]["labels"][TYPE_LABEL]
    api.create("v1", "pods", _gpu_pod(ns, "fits", node_type, 8), ns=ns)
    api.create("v1", "pods", _gpu_pod(ns, "too-many", node_type, 9), ns=ns)

    def scheduled() -> str:
        return str(
            ((api.kube.get(f"/api/v1/namespaces/{ns}/pods/fits").get("spec")) or {}).get("nodeName", "")
        )

    assert wait_for("the 8-card pod scheduled", scheduled, timeout=60) in kind_nodes

    def refused() -> bool:
        events = kubectl.run("get", "events", "-n", ns, "-o", "json").stdout
        return any(
            e["involvedObject"]["name"] == "too-many"
            and "Insufficient nvidia.com/gpu" in e.get("message", "")
            for e in json.loads(events)["items"]
        )

    wait_for("the 9-card pod refused for lack of GPUs", refused, timeout=60)


def test_gpu_nodes_sh_refuses_a_count_that_is_not_a_number(
    api: Api, kubectl: Kubectl, kind_nodes: list[str]
) -> None:
    api.patch("v1", "nodes", kind_nodes[0], {"metadata": {"labels": {COUNT_LABEL: "eight"}}})
    proc = _gpu_nodes_sh(kubectl, kind_nodes[0])
    assert proc.returncode == 1
    assert f"node {kind_nodes[0]}: label {COUNT_LABEL} is 'eight', not a number of cards" in proc.stderr
    assert GPU not in (api.node(kind_nodes[0]) or {})["status"]["allocatable"]
