"""watch.py: which node changes call for a re-plan, and the debounced feed."""

from __future__ import annotations

import asyncio
import copy

from gpuplan_operator.watch import ChangeFeed, NodeTracker, node_fingerprint

from planner.vocab import is_plan_label_key as is_plan_label
from tests.operator.builders import node


def test_plan_labels_are_recognised_and_settings_are_not() -> None:
    assert is_plan_label("gpuplan.ragnaros.io/ns.plan")
    assert not is_plan_label("gpuplan.ragnaros.io/gpu-type")
    assert not is_plan_label("kubernetes.io/hostname")


def test_our_own_label_writes_do_not_change_the_fingerprint() -> None:
    before = node("a")
    after = copy.deepcopy(before)
    after["metadata"]["labels"]["gpuplan.ragnaros.io/ns.plan"] = "a"
    after["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "now"}]
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


def test_a_topology_matters_through_its_zones_sizes_not_what_is_available() -> None:
    from gpuplan_operator.watch import topology_fingerprint

    from tests.test_zones import nrt

    t = NodeTracker(topology_fingerprint)
    before = nrt("n0", [(4, 4), (4, 4)])
    assert not t.observe(None, before)
    busier = nrt("n0", [(4, 1), (4, 4)])  # a pod started: only `available` moved
    assert not t.observe("MODIFIED", busier), "pods coming and going are read at the next re-plan"
    smaller = nrt("n0", [(4, 1), (2, 2)])
    assert t.observe("MODIFIED", smaller), "a zone lost cards"
    strict = nrt("n0", [(4, 1), (2, 2)], policy="single-numa-node")
    assert t.observe("MODIFIED", strict), "the kubelet's policy changed"
    assert t.observe("DELETED", strict)
