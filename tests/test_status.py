"""``gpuplan status NAME``: the placement as a user reads it, down to devices and NUMA zones."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuplan_operator.body import PlanBody

from gpuplan import status


def test_the_detail_shows_each_instances_devices_or_zones() -> None:
    plan = {
        "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
        "kind": "GpuAllocationPlan",
        "metadata": {"name": "steady", "namespace": "fence", "creationTimestamp": "2026-11-22T00:00:00Z"},
        "spec": {"requests": {}},
        "status": {
            "phase": "Applied",
            "message": "applied",
            "allocations": [
                {
                    "operator": "face_1vn",
                    "resource": "P4",
                    "instances": 2,
                    "unitsPerInstance": 2,
                    "nodes": {"p4-0": 2},
                    "devices": {"p4-0": [["gpu-0", "gpu-1"], ["gpu-4", "gpu-5"]]},
                    "straddling": 0,
                },
                {
                    "operator": "body_1vn",
                    "resource": "T4",
                    "instances": 1,
                    "unitsPerInstance": 4,
                    "nodes": {"t4-0": 1},
                    "zones": {"t4-0": ["node-0+node-1"]},
                    "straddling": 1,
                },
            ],
        },
    }
    out = status.render([PlanBody.from_object(plan)], detail=True, now=datetime(2026, 11, 23, tzinfo=UTC))
    assert "p4-0" in out and "face_1vn 2×2 P4 on gpu-0,gpu-1 | gpu-4,gpu-5" in out
    assert "body_1vn 1×4 T4 in node-0+node-1" in out
