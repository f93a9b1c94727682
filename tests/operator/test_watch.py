"""watch.py and the caches' stores: which changes call for a re-plan, and a node's grace."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from gpuplan_operator.cache import trim
from gpuplan_operator.cache.caches import _node_fp
from gpuplan_operator.cache.store import Store
from gpuplan_operator.watch import (
    node_fingerprint,
    planning_view,
    slice_fingerprint,
    topology_fingerprint,
)

from planner.base.vocab import is_plan_label_key as is_plan_label
from tests.operator.builders import node
from tests.test_zones import nrt


def test_plan_labels_are_recognised_and_settings_are_not() -> None:
    assert is_plan_label("gpuplan.ragnaros.io/ns.plan")
    assert not is_plan_label("gpuplan.ragnaros.io/gpu-type")
    assert not is_plan_label("kubernetes.io/hostname")


def test_our_own_label_writes_do_not_change_the_fingerprint() -> None:
    before = node("a")
    after = copy.deepcopy(before)
    after["metadata"]["labels"]["gpuplan.ragnaros.io/ns.plan"] = "a"
    after["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "now"}]
    assert node_fingerprint(before) == node_fingerprint(after)


def test_the_cordon_taint_the_controller_adds_after_a_cordon_is_not_a_second_change() -> None:
    taint = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    before = node("a")
    cordoned = copy.deepcopy(before)
    cordoned["spec"]["unschedulable"] = True
    tainted = copy.deepcopy(cordoned)
    tainted["spec"]["taints"] = [taint]
    assert node_fingerprint(cordoned) != node_fingerprint(before)
    assert node_fingerprint(tainted) == node_fingerprint(cordoned)
    uncordoned = copy.deepcopy(tainted)  # the taint is not gone yet: planning must hear when it goes
    del uncordoned["spec"]["unschedulable"]
    assert node_fingerprint(uncordoned) != node_fingerprint(before)
    assert node_fingerprint(uncordoned) != node_fingerprint(tainted)


T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
GPU_TAINT = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}


def with_health(ready: str | None, since: datetime = T0, *taints: dict[str, str]) -> dict[str, Any]:
    n = node("a", taints=list(taints)) if taints else node("a")
    if ready is not None:
        stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
        n["status"]["conditions"] = [{"type": "Ready", "status": ready, "lastTransitionTime": stamp}]
    return n


def planned(n: dict[str, Any], seconds: float) -> tuple[bool, list[str]]:
    view = planning_view(n, T0 + timedelta(seconds=seconds), grace=60)
    spec = view.get("spec") or {}
    return bool(spec.get("unschedulable")), [t["key"] for t in spec.get("taints") or []]


@pytest.mark.parametrize(
    ("n", "seconds", "unschedulable", "taints"),
    [
        pytest.param(with_health("True", T0, NOT_READY), 0, False, [],
                     id="Ready with a taint the node controller has not removed yet: usable"),
        pytest.param(with_health("False", T0, NOT_READY), 1, False, [],
                     id="not Ready for a second (a flap): planned as healthy"),
        pytest.param(with_health("Unknown", T0, NOT_READY, GPU_TAINT), 59, False, ["gpu"],
                     id="unreachable for 59 s: only its own taints count"),
        pytest.param(with_health("False", T0, NOT_READY), 60, True, ["node.kubernetes.io/not-ready"],
                     id="not Ready for the whole grace: unschedulable"),
        pytest.param(with_health(None, T0, NOT_READY), 600, False, ["node.kubernetes.io/not-ready"],
                     id="no Ready condition yet (being set up): its taints stand"),
    ],
)  # fmt: skip
def test_node_health_has_a_grace_period(
    n: dict[str, Any], seconds: float, unschedulable: bool, taints: list[str]
) -> None:
    assert planned(n, seconds) == (unschedulable, taints)


def test_a_topology_matters_through_its_zones_sizes_not_what_is_available() -> None:
    t = Store("noderesourcetopologies", trim.whole, topology_fingerprint)
    before = nrt("n0", [(4, 4), (4, 4)])
    assert not t.replace([before])
    busier = nrt("n0", [(4, 1), (4, 4)])  # a pod started: only `available` moved
    assert not t.apply("MODIFIED", busier), "pods coming and going are read at the next re-plan"
    smaller = nrt("n0", [(4, 1), (2, 2)])
    assert t.apply("MODIFIED", smaller), "a zone lost cards"
    strict = nrt("n0", [(4, 1), (2, 2)], policy="single-numa-node")
    assert t.apply("MODIFIED", strict), "the kubelet's policy changed"
    assert t.apply("DELETED", strict)


def test_a_slice_matters_through_its_devices() -> None:
    t = Store("resourceslices", trim.whole, slice_fingerprint)
    one: dict[str, Any] = {
        "metadata": {"name": "s"},
        "spec": {"nodeName": "n0", "devices": [{"name": "gpu-0"}]},
    }
    assert not t.replace([one])
    assert not t.apply("MODIFIED", copy.deepcopy(one) | {"metadata": {"name": "s", "resourceVersion": "2"}})
    two = copy.deepcopy(one)
    two["spec"]["devices"].append({"name": "gpu-1"})
    assert t.apply("MODIFIED", two), "a device came"
    assert t.apply("DELETED", two) and not t.apply("DELETED", two)


def test_a_node_store_reports_what_matters() -> None:
    t = Store("nodes", trim.node, _node_fp)
    a = node("a")
    assert not t.replace([a]), "the initial listing only learns"
    assert not t.apply("MODIFIED", copy.deepcopy(a)), "a heartbeat is not a change"
    assert t.apply("MODIFIED", node("a", unschedulable=True))
    assert t.apply("MODIFIED", node("a", cards=16, unschedulable=True))
    relabelled = node("a", cards=16, unschedulable=True)
    relabelled["metadata"]["labels"]["gpuplan.ragnaros.io/gpu-type"] = "T4"
    assert t.apply("MODIFIED", relabelled)
    assert t.apply("ADDED", node("b"))
    assert t.apply("DELETED", node("b"))
    assert not t.apply("DELETED", node("never-seen"))


def test_a_flapping_node_changes_nothing_the_store_reports() -> None:
    """Health is the cycle's, at its own time: a minute of flapping is not one change."""
    t = Store("nodes", trim.node, _node_fp)
    t.replace([with_health("True")])
    for i in range(1, 30):
        flap = (
            with_health("False", T0 + timedelta(seconds=2 * i), NOT_READY) if i % 2 else with_health("True")
        )
        assert not t.apply("MODIFIED", flap), f"flip {i} re-planned"
