"""Peering: with ``--peering NAME`` two replicas run, only the higher priority acts, the other
takes over when it is gone. (Standalone, the default, is what every other test runs.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from e2e.support import (
    REPO,
    Api,
    Kubectl,
    OperatorProcess,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
)

PEERING = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "gpuplan-e2e"}}


@pytest.fixture
def replicas(
    kubectl: Kubectl, operator: OperatorProcess
) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    """The session operator stopped (it is standalone), and two peering replicas in its place."""
    kubectl.run("apply", "--server-side", "-f", str(REPO / "crds" / "kopf-peering.yaml"))
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s", "crd/clusterkopfpeerings.kopf.dev")
    kubectl.apply(PEERING)
    operator.stop()
    low = OperatorProcess(
        operator.kubeconfig, operator.log_dir, "peer-low", ["--peering", "gpuplan-e2e", "--priority", "10"]
    )
    high = OperatorProcess(
        operator.kubeconfig, operator.log_dir, "peer-high", ["--peering", "gpuplan-e2e", "--priority", "20"]
    )
    for replica in (low, high):
        replica.log_path.unlink(missing_ok=True)  # log_since(0) must mean "this test"
    try:
        low.start()
        high.start()
        wait_for(
            "the low-priority replica to pause", lambda: "Pausing operations" in low.log_since(0), timeout=60
        )
        yield low, high
    finally:
        low.stop()
        high.stop()
        kubectl.run("delete", "clusterkopfpeering", "gpuplan-e2e", "--ignore-not-found")
        operator.start()


def test_only_the_leader_acts_and_the_other_takes_over(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]],
    replicas: tuple[OperatorProcess, OperatorProcess],
) -> None:  # fmt: skip
    low, high = replicas
    nodes = make_nodes("peer", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"lead": {"G": 4}}, [operator_entry("lead")])
    kubectl.apply(plan_manifest(ns, "led", spec))
    wait_for("the plan applied", settled(api, ns, "led"), timeout=60)
    assert f"{ns}/led: applied" in high.log_since(0)
    assert f"{ns}/led" not in low.log_since(0)

    high.stop()
    wait_for("the other replica to resume", lambda: "Resuming operations" in low.log_since(0), timeout=60)
    spec["requests"] = {"lead": {"G": 6}}
    kubectl.apply(plan_manifest(ns, "led", spec))
    status = wait_for("the change applied by the other replica", settled(api, ns, "led"), timeout=60)
    assert status["cards"] == "6/6"
    assert f"{ns}/led: applied" in low.log_since(0)
