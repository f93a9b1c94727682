"""watch.py: which node changes call for a re-plan, and the debounced feed."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from gpuplan_operator.watch import (
    ChangeFeed,
    NodeTracker,
    SpecTracker,
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


def test_tracker_reports_what_matters() -> None:
    t = NodeTracker()
    a = node("a")
    assert not t.observe(None, a), "the initial listing only learns"
    assert not t.observe("MODIFIED", copy.deepcopy(a)), "a heartbeat is not a change"
    cordoned = node("a", unschedulable=True)
    assert t.observe("MODIFIED", cordoned)
    bigger = node("a", cards=16, unschedulable=True)
    assert t.observe("MODIFIED", bigger)
    relabelled = copy.deepcopy(bigger)
    relabelled["metadata"]["labels"]["gpuplan.ragnaros.io/gpu-type"] = "T4"
    assert t.observe("MODIFIED", relabelled)
    assert t.observe("ADDED", node("b"))
    assert t.observe("DELETED", node("b"))
    assert not t.observe("DELETED", node("never-seen"))


def test_feed_wakes_waiters_and_settles_a_burst() -> None:
    async def scenario() -> tuple[bool, bool, int, set[str | None]]:
        feed = ChangeFeed()
        timed_out = await feed.wait_beyond(0, timeout=0.01)
        waiter = asyncio.create_task(feed.wait_beyond(0, timeout=5))
        await feed.bump(None)
        await feed.bump("ns/a")
        woke = await waiter
        version = await feed.settle(debounce=0.05, max_delay=1)
        return timed_out, woke, version, feed.origins_since(0)

    timed_out, woke, version, origins = asyncio.run(scenario())
    assert timed_out is False and woke is True
    assert version == 2 and origins == {None, "ns/a"}


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


def test_a_flapping_node_changes_no_fingerprint_and_a_dead_one_does_once_its_grace_ends() -> None:
    t = NodeTracker(grace=60)
    assert not t.observe(None, with_health("True"), T0)
    for i in range(1, 30):  # a minute of flapping, each flip a node event with a new taint state
        flap = (
            with_health("False", T0 + timedelta(seconds=2 * i), NOT_READY) if i % 2 else with_health("True")
        )
        assert not t.observe("MODIFIED", flap, T0 + timedelta(seconds=2 * i)), f"flip {i} re-planned"
    dead = with_health("False", T0 + timedelta(seconds=100), NOT_READY)
    assert not t.observe("MODIFIED", dead, T0 + timedelta(seconds=100))
    assert t.recheck_in("a", T0 + timedelta(seconds=130)) == pytest.approx(30)
    assert not t.recheck("a", T0 + timedelta(seconds=130)), "still within its grace"
    assert t.recheck("a", T0 + timedelta(seconds=160)), "down for the whole grace: re-plan"
    assert t.recheck_in("a") is None and not t.recheck("a"), "once is enough"


def test_a_topology_matters_through_its_zones_sizes_not_what_is_available() -> None:
    t = SpecTracker(topology_fingerprint)
    before = nrt("n0", [(4, 4), (4, 4)])
    assert not t.observe(None, before)
    busier = nrt("n0", [(4, 1), (4, 4)])  # a pod started: only `available` moved
    assert not t.observe("MODIFIED", busier), "pods coming and going are read at the next re-plan"
    smaller = nrt("n0", [(4, 1), (2, 2)])
    assert t.observe("MODIFIED", smaller), "a zone lost cards"
    strict = nrt("n0", [(4, 1), (2, 2)], policy="single-numa-node")
    assert t.observe("MODIFIED", strict), "the kubelet's policy changed"
    assert t.observe("DELETED", strict)


def test_a_slice_matters_through_its_devices() -> None:
    t = SpecTracker(slice_fingerprint)
    one: dict[str, Any] = {
        "metadata": {"name": "s"},
        "spec": {"nodeName": "n0", "devices": [{"name": "gpu-0"}]},
    }
    assert not t.observe(None, one)
    assert not t.observe("MODIFIED", copy.deepcopy(one) | {"metadata": {"name": "s", "resourceVersion": "2"}})
    two = copy.deepcopy(one)
    two["spec"]["devices"].append({"name": "gpu-1"})
    assert t.observe("MODIFIED", two), "a device came"
    assert t.observe("DELETED", two) and not t.observe("DELETED", two)
