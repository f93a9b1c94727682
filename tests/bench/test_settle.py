"""The operator bench: new nodes left with the TTL the controller-manager wants at their size, and the
gated floor's Deployments."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from operator_bench import FLOOR_KEY, gated_deployments, node_ttl


@pytest.mark.parametrize(
    ("count", "ttl"),
    [(8, "0"), (100, "0"), (108, "15"), (500, "15"), (501, "30"), (1008, "60"), (2000, "60"), (3008, "300")],
)
def test_the_ttl_a_grown_cluster_has_follows_the_controllers_steps(count: int, ttl: str) -> None:
    assert node_ttl(count) == ttl


def test_the_gated_floor_pins_by_a_label_of_its_own_and_gates_every_pod() -> None:
    bare: dict[str, Any] = {
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n7"}, "containers": []}}},
    }
    (gated,) = gated_deployments([bare])
    spec = gated["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {FLOOR_KEY: "n7"}
    assert spec["schedulingGates"] == [{"name": "gpuplan.ragnaros.io/gang"}]
    assert bare["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n7"}  # a copy
