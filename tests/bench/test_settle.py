"""The operator bench leaves new nodes with the TTL the controller-manager wants at their size."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from operator_bench import node_ttl


@pytest.mark.parametrize(
    ("count", "ttl"),
    [(8, "0"), (100, "0"), (108, "15"), (500, "15"), (501, "30"), (1008, "60"), (2000, "60"), (3008, "300")],
)
def test_the_ttl_a_grown_cluster_has_follows_the_controllers_steps(count: int, ttl: str) -> None:
    assert node_ttl(count) == ttl
