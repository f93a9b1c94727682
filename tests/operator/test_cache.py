"""The watched caches: trimming keeps what planning reads, stores tell changes that matter, an
informer lists, watches, resumes, re-lists on 410 and re-opens a silent watch."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from gpuplan_operator.cache import informer as informer_module
from gpuplan_operator.cache import trim
from gpuplan_operator.cache.caches import ClusterCache, _node_fp, deep_size
from gpuplan_operator.cache.informer import Informer
from gpuplan_operator.cache.store import Store
from gpuplan_operator.gang import NodeIndex, read_pod
from gpuplan_operator.kube import JSON, WatchSilent
from kubernetes.client.exceptions import ApiException

from planner import MANAGED_BY, PLAN_LABEL, plan_labels, snapshot
from tests.operator.builders import NOW, cluster, node, plan, pod


def bulky_node(name: str) -> dict[str, Any]:
    n = node(name)
    n["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}] * 5
    n["status"]["images"] = [{"names": [f"registry/image-{i}:v1"], "sizeBytes": 1000} for i in range(50)]
    n["status"]["nodeInfo"] = {"kernelVersion": "6.1", "osImage": "Debian"}
    n["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "MemoryPressure", "status": "False"},
    ]
    return n


def test_trimmed_nodes_and_pods_plan_exactly_as_whole_ones_and_are_smaller() -> None:
    nodes = [bulky_node(f"n{i}") for i in range(3)]
    pods = [pod("x", "n0", 2), pod("y", "n1", 1)]
    whole = snapshot({"kind": "List", "items": nodes}, {"kind": "List", "items": pods})
    cut = snapshot(
        {"kind": "List", "items": [trim.node(n) for n in nodes]},
        {"kind": "List", "items": [trim.pod(p) for p in pods]},
    )
    assert cut == whole
    assert deep_size(trim.node(nodes[0])) * 3 < deep_size(nodes[0])


def test_pods_kept_are_the_bound_unfinished_ones_and_every_pod_of_a_plan() -> None:
    bound = pod("a", "n0", 1)
    pending_mine = pod("b", "", 1, labels={"app.kubernetes.io/managed-by": "gpuplan"})
    pending_mine["spec"].pop("nodeName")
    done = pod("c", "n0", 1)
    done["status"]["phase"] = "Succeeded"
    pending_other = pod("d", "", 1)
    pending_other["spec"].pop("nodeName")
    assert [trim.pod_kept(p) for p in (bound, pending_mine, done, pending_other)] == [
        True,
        True,
        False,
        False,
    ]


def test_the_gang_release_reads_trimmed_pods_as_whole_ones() -> None:
    """Pods no plan labels but the gang release looks after are kept (a gated pod Ragnaros made
    from values.yaml, a released one not bound yet); an unbound pod keeps its gates and every
    annotation (the gate's patch tests the pod as read), a bound one drops them."""
    selector = {"gpuplan.ragnaros.io/ns.p": "n0"}
    gated = pod("g", "", 2, schedulingGates=[{"name": "gpuplan.ragnaros.io/gang"}], nodeSelector=selector)
    gated["spec"].pop("nodeName")
    gated["metadata"]["annotations"] = {"team": "x"}
    released = pod("r", "", 2, nodeSelector=selector)
    released["spec"].pop("nodeName")
    released["metadata"]["annotations"] = {"gpuplan.ragnaros.io/released": "2026-01-02T03:04:05Z"}
    bound = pod("b", "n0", 2)
    bound["metadata"]["annotations"] = {"team": "x"}
    assert [trim.pod_kept(p) for p in (gated, released, bound)] == [True, True, True]
    assert trim.pod(gated)["metadata"]["annotations"] == {"team": "x"}
    assert "annotations" not in trim.pod(bound)["metadata"]
    n0 = node("n0")
    n0["metadata"]["labels"].update(selector)
    index = NodeIndex([n0])
    for whole in (gated, released, bound):
        assert read_pod(trim.pod(whole), index) == read_pod(whole, index)
    seen = read_pod(trim.pod(gated), index)
    assert (seen.gated, seen.planned, seen.group) == (True, "n0", "gpuplan.ragnaros.io/ns.p")
    assert read_pod(trim.pod(released), index).released is not None


def test_a_store_reports_only_changes_that_matter_and_ignores_older_versions() -> None:
    store = Store("nodes", trim.node, _node_fp)
    n = node("n0")
    n["metadata"]["resourceVersion"] = "5"
    assert not store.replace([n])  # the first listing learns, it reports nothing
    heartbeat = copy.deepcopy(n)
    heartbeat["metadata"]["resourceVersion"] = "6"
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "x"}]
    assert not store.apply("MODIFIED", heartbeat)
    ours = copy.deepcopy(heartbeat)
    ours["metadata"]["resourceVersion"] = "7"
    ours["metadata"]["labels"]["gpuplan.ragnaros.io/ns.p"] = "n0"  # a plan's own label
    assert not store.apply("MODIFIED", ours)
    cordoned = copy.deepcopy(ours)
    cordoned["metadata"]["resourceVersion"] = "8"
    cordoned["spec"]["unschedulable"] = True
    assert store.apply("MODIFIED", cordoned)
    stale = copy.deepcopy(n)  # an event older than what the store holds
    assert not store.apply("MODIFIED", stale)
    assert (store.get("n0") or {})["spec"]["unschedulable"] is True
    assert store.apply("DELETED", cordoned) and len(store) == 0
    assert not store.apply("DELETED", cordoned)


def test_a_pod_that_starts_running_wakes_no_cycle_and_one_that_finishes_does() -> None:
    told: list[tuple[str, bool]] = []
    cache = ClusterCache(cluster(), lambda kind, matters: told.append((kind, matters)))
    p = _plan_pod("a", "ns1", "p")
    p["status"] = {"phase": "Pending"}
    cache.pods.replace([p])
    running = copy.deepcopy(p)
    running["metadata"]["resourceVersion"] = "2"
    running["status"]["phase"] = "Running"
    assert not cache.pods.apply("MODIFIED", running)
    assert (cache.pods.get("ns1/a") or {})["status"]["phase"] == "Running"  # kept all the same
    done = copy.deepcopy(running)
    done["metadata"]["resourceVersion"] = "3"
    done["status"]["phase"] = "Succeeded"
    assert cache.pods.apply("MODIFIED", done) and len(cache.pods) == 0  # its cards come free


def _plan_pod(name: str, ns: str, plan: str | None, rv: str = "1") -> dict[str, Any]:
    p = pod(name, "n0", 1, labels={PLAN_LABEL: plan, **MANAGED_BY} if plan else {})
    p["metadata"] |= {"namespace": ns, "resourceVersion": rv}
    return p


def test_pods_of_a_plan_coming_up_wake_no_cycle_unless_gated_going_or_another_plans() -> None:
    """The cycle checks a plan coming up on a timer of its own: its pods being made and bound
    (thousands in a deploy) wake no cycle. A gated pod (the gang release lifts it at once), one
    being deleted or gone (its cards come free), and another plan's pods still do."""

    def at(kind: str, p: dict[str, Any], rv: str, **meta: Any) -> JSON:
        p = copy.deepcopy(p)
        p["metadata"] |= {"resourceVersion": rv, **meta}
        return {"type": kind, "object": p}

    unbound = _plan_pod("a", "ns1", "p")
    del unbound["spec"]["nodeName"]
    gated = copy.deepcopy(unbound)
    gated["metadata"]["name"] = "b"
    gated["spec"]["schedulingGates"] = [{"name": "gpuplan.ragnaros.io/gang"}]
    script = [
        at("ADDED", unbound, "2"),
        at("MODIFIED", _plan_pod("a", "ns1", "p"), "3"),  # bound
        at("ADDED", gated, "4"),
        at("ADDED", _plan_pod("c", "ns1", "q"), "5"),  # another plan's
        at("MODIFIED", _plan_pod("a", "ns1", "p"), "6", deletionTimestamp=NOW),
        at("DELETED", _plan_pod("a", "ns1", "p"), "7"),
    ]

    def told_for(coming_up: frozenset[tuple[str, str]]) -> list[bool]:
        told: list[tuple[str, bool]] = []
        cache = ClusterCache(cluster(), lambda kind, matters: told.append((kind, matters)))
        cache.coming_up = coming_up
        (pods,) = [i for i in cache.informers if i.store is cache.pods]
        watcher = ScriptedWatcher(lists=[], streams=[copy.deepcopy(script)])
        pods.api = watcher
        pods.start()
        assert watcher.done.wait(5)
        pods.close()
        return [matters for _, matters in told[1:7]]  # after the first listing's

    assert told_for(frozenset({("ns1", "p")})) == [False, False, True, True, True, True]
    assert told_for(frozenset()) == [True] * 6


def test_the_pods_index_follows_labels_deletions_and_re_lists() -> None:
    cache = ClusterCache(cluster(), lambda kind, matters: None)
    labels = plan_labels("p")
    cache.pods.replace([_plan_pod("a", "ns1", "p"), _plan_pod("b", "ns1", "q"), _plan_pod("c", "ns1", None)])
    assert [x["metadata"]["name"] for x in cache.plan_pods("ns1", labels)] == ["a"]
    cache.pods.apply("MODIFIED", _plan_pod("b", "ns1", "p", rv="2"))  # relabelled into the plan
    cache.pods.apply("MODIFIED", _plan_pod("a", "ns1", "q", rv="2"))  # and out of it
    assert [x["metadata"]["name"] for x in cache.plan_pods("ns1", labels)] == ["b"]
    cache.pods.apply("DELETED", _plan_pod("b", "ns1", "p", rv="3"))
    assert cache.plan_pods("ns1", labels) == []
    cache.pods.replace([_plan_pod("d", "ns1", "p"), _plan_pod("e", "ns1", "p")])  # a re-list
    assert sorted(x["metadata"]["name"] for x in cache.plan_pods("ns1", labels)) == ["d", "e"]
    assert cache.pods.indexed(("ns1", "q")) == []  # empty buckets go


def test_a_plans_pods_stamp_moves_with_its_pods_only_and_never_comes_back() -> None:
    cache = ClusterCache(cluster(), lambda kind, matters: None)
    labels = plan_labels("p")
    assert cache.plan_pods_stamp("ns1", labels) == 0  # nothing filed yet
    cache.pods.replace([_plan_pod("a", "ns1", "p"), _plan_pod("b", "ns1", "q")])
    first = cache.plan_pods_stamp("ns1", labels)
    assert first != 0
    cache.pods.apply("MODIFIED", _plan_pod("b", "ns1", "q", rv="2"))  # another plan's pod
    cache.pods.apply("ADDED", _plan_pod("c", "ns2", "p", rv="3"))  # the same name elsewhere
    assert cache.plan_pods_stamp("ns1", labels) == first
    cache.pods.apply("MODIFIED", _plan_pod("a", "ns1", "p", rv="4"))
    second = cache.plan_pods_stamp("ns1", labels)
    assert second != first
    cache.pods.apply("DELETED", _plan_pod("a", "ns1", "p", rv="5"))  # the plan has no pod left
    gone = cache.plan_pods_stamp("ns1", labels)
    cache.pods.apply("ADDED", _plan_pod("d", "ns1", "p", rv="6"))
    assert len({first, second, gone, cache.plan_pods_stamp("ns1", labels)}) == 4
    cache.pods.apply("MODIFIED", _plan_pod("b", "ns1", "p", rv="7"))  # relabelled into the plan
    assert cache.plan_pods_stamp("ns1", labels) != gone


def test_a_re_list_keeps_the_objects_it_finds_unchanged_and_their_stamps() -> None:
    """A periodic re-list of thousands of unchanged pods trimmed every one again (the process
    kept the memory) and moved every plan's pods stamp (every plan's readiness read again)."""
    cache = ClusterCache(cluster(), lambda kind, matters: None)
    labels = plan_labels("p")
    cache.pods.replace([_plan_pod("a", "ns1", "p"), _plan_pod("b", "ns1", "p"), _plan_pod("c", "ns1", "q")])
    held = {x["metadata"]["name"]: x for x in cache.pods.items()}
    stamp, version = cache.plan_pods_stamp("ns1", labels), cache.pods.version
    assert not cache.pods.replace(
        [_plan_pod("a", "ns1", "p"), _plan_pod("b", "ns1", "p"), _plan_pod("c", "ns1", "q")]
    )
    assert all(x is held[x["metadata"]["name"]] for x in cache.pods.items())  # the same objects
    assert cache.plan_pods_stamp("ns1", labels) == stamp
    cache.pods.replace([_plan_pod("a", "ns1", "p"), _plan_pod("b", "ns1", "p", rv="2")])  # b changed, c gone
    now = {x["metadata"]["name"]: x for x in cache.pods.items()}
    assert now["a"] is held["a"] and now["b"] is not held["b"] and "c" not in now
    assert cache.plan_pods_stamp("ns1", labels) != stamp and cache.pods.version > version


def test_a_plans_pods_are_its_namespaces_only() -> None:
    """Two plans of one name in two namespaces: each one's readiness counts its own pods."""
    cache = ClusterCache(cluster(), lambda kind, matters: None)
    cache.pods.replace([_plan_pod("a", "ns1", "p"), _plan_pod("b", "ns2", "p"), _plan_pod("c", "ns2", "p")])
    assert [x["metadata"]["name"] for x in cache.plan_pods("ns1", plan_labels("p"))] == ["a"]
    assert len(cache.plan_pods("ns2", plan_labels("p"))) == 2


def test_node_allocatables_are_parsed_once_per_shape_and_a_new_shape_is_read() -> None:
    nodes = [node(f"n{i}") for i in range(3)] + [node("big", cards=16)]
    index = NodeIndex(nodes)
    assert index.allocatable["n0"] == {"nvidia.com/gpu": 8, "cpu": 32000}
    assert index.allocatable["n0"] is index.allocatable["n2"]  # one parse for one shape
    assert index.allocatable["big"]["nvidia.com/gpu"] == 16
    grown = node("n0", cards=12)
    assert NodeIndex([grown]).allocatable["n0"]["nvidia.com/gpu"] == 12
    odd = node("n9")
    odd["status"]["allocatable"]["weird"] = {"not": "text"}  # no memo for an unhashable value
    assert NodeIndex([odd]).allocatable["n9"]["nvidia.com/gpu"] == 8


def test_a_re_list_reports_what_the_missed_events_would_have() -> None:
    store = Store("nodes", trim.node, _node_fp)
    store.replace([node("a"), node("b")])
    assert not store.replace([node("a"), node("b")])
    assert store.replace([node("a")])  # b went while nobody watched
    assert [n["metadata"]["name"] for n in store.items()] == ["a"]


class ScriptedWatcher:
    """Listings and watch streams from a script; records what was asked."""

    def __init__(self, lists: list[JSON], streams: list[list[JSON] | Exception]) -> None:
        self.lists = lists
        self.streams = streams
        self.asked: list[tuple[str, str]] = []
        self.done = threading.Event()

    def get(self, path: str, **query: Any) -> JSON:
        self.asked.append(("list", ""))
        return self.lists.pop(0) if self.lists else {"items": [], "metadata": {"resourceVersion": "99"}}

    def stream(self, path: str, query: Mapping[str, Any], read_timeout: float) -> Iterator[JSON]:
        self.asked.append(("watch", str(query["resourceVersion"])))
        if not self.streams:
            self.done.set()
            threading.Event().wait(0.05)
            return iter(())
        step = self.streams.pop(0)
        if isinstance(step, Exception):
            raise step
        return iter(step)


def event(kind: str, name: str, rv: str, **spec: Any) -> JSON:
    obj = node(name, **spec)
    obj["metadata"]["resourceVersion"] = rv
    return {"type": kind, "object": obj}


def test_an_informer_resumes_from_the_last_version_re_lists_on_410_and_re_opens_a_silent_watch() -> None:
    watcher = ScriptedWatcher(
        lists=[
            {"items": [node("a")], "metadata": {"resourceVersion": "10"}},
            {"items": [node("a"), node("c")], "metadata": {"resourceVersion": "30"}},
        ],
        streams=[
            [
                event("ADDED", "b", "11"),
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ],
            WatchSilent("silent"),
            [event("MODIFIED", "b", "16", unschedulable=True)],
            [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
        ],
    )
    store = Store("nodes", trim.node, _node_fp)
    seen: list[bool] = []
    informer = Informer(watcher, "/api/v1/nodes", store, lambda s, matters: seen.append(matters))
    informer.start()
    assert watcher.done.wait(5)
    informer.close()
    assert watcher.asked[:6] == [
        ("list", ""),
        ("watch", "10"),
        ("watch", "15"),  # resumed after the bookmark
        ("watch", "15"),  # re-opened after the silence, from where it was
        ("watch", "16"),
        ("list", ""),  # 410: listed again
    ]
    assert informer.silent_watches == 1
    assert sorted(n["metadata"]["name"] for n in store.items()) == ["a", "c"]
    assert True in seen


class PagedWatcher(ScriptedWatcher):
    """One listing of ``names`` served in pages of the ``limit`` asked (``continue`` is the offset);
    each page's request notes how many objects ``trimmed`` held by then. ``fail_at``: the offset
    whose page answers 410 (its continue token too old)."""

    def __init__(self, names: list[str], trimmed: list[str], fail_at: int | None = None) -> None:
        super().__init__([], [])
        self.names = names
        self.trimmed = trimmed
        self.fail_at = fail_at
        self.pages: list[tuple[int, int]] = []

    def get(self, path: str, **query: Any) -> JSON:
        start, limit = int(query.get("continue") or 0), int(query["limit"])
        self.pages.append((start, len(self.trimmed)))
        if start == self.fail_at:
            raise ApiException(status=410, reason="Expired")
        end = start + limit
        more = {"continue": str(end)} if end < len(self.names) else {}
        return {
            "items": [node(n) for n in self.names[start:end]],
            "metadata": {"resourceVersion": "7", **more},
        }


def test_a_listing_is_read_page_by_page_each_trimmed_before_the_next_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-list of thousands of pods read whole held them all as the API server sends them (ten
    times their trimmed size) at once, and the process kept that memory."""
    monkeypatch.setattr(informer_module, "PAGE", 2)
    trimmed: list[str] = []

    def trim_node(obj: Mapping[str, Any]) -> JSON:
        trimmed.append(obj["metadata"]["name"])
        return trim.node(obj)

    watcher = PagedWatcher(["a", "b", "c", "d", "e"], trimmed)
    store = Store("nodes", trim_node, _node_fp)
    informer = Informer(watcher, "/api/v1/nodes", store, lambda s, matters: None)
    assert informer._list() == "7"
    assert watcher.pages == [(0, 0), (2, 2), (4, 4)]  # each page once the one before is trimmed
    assert [n["metadata"]["name"] for n in store.items()] == ["a", "b", "c", "d", "e"]  # in order


def test_a_listing_whose_continue_expires_leaves_the_store_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer_module, "PAGE", 2)
    store = Store("nodes", trim.node, _node_fp)
    store.replace([node("a"), node("b"), node("c")])
    watcher = PagedWatcher(["a", "d", "e"], [], fail_at=2)
    informer = Informer(watcher, "/api/v1/nodes", store, lambda s, matters: None)
    with pytest.raises(ApiException):
        informer._list()
    assert [n["metadata"]["name"] for n in store.items()] == ["a", "b", "c"]
    assert store.served


def test_a_kind_the_cluster_does_not_serve_is_marked_so() -> None:
    kube = cluster(node("a"))
    cache = ClusterCache(kube, lambda kind, matters: None)
    for informer in cache.informers:
        informer._list()
    read = cache.read()
    assert read.slices is None and read.claims is None and read.topologies is None
    assert [n["metadata"]["name"] for n in read.nodes["items"]] == ["a"]
    assert cache.synced()


@pytest.mark.parametrize("silent", [0.0, 100.0])
def test_health_names_a_watch_quiet_too_long(silent: float) -> None:
    cache = ClusterCache(cluster(), lambda kind, matters: None)
    for informer in cache.informers:
        informer.last_heard -= silent
    assert bool(cache.health()) == (silent > 0)


def test_a_kind_not_served_is_listed_again_at_once_when_woken() -> None:
    """A CRD installed after the operator started: the CRDs' watch wakes the kind's informer,
    which lists it then rather than a resync (here a minute) later."""

    class LateCrd(ScriptedWatcher):
        def get(self, path: str, **query: Any) -> JSON:
            self.asked.append(("list", ""))
            if len(self.asked) == 1:
                raise ApiException(status=404, reason="Not Found")
            return {"items": [node("a")], "metadata": {"resourceVersion": "5"}}

    watcher = LateCrd([], [])
    store = Store("noderesourcetopologies", trim.whole)
    informer = Informer(watcher, "/apis/x/v1/things", store, lambda s, m: None, resync=60.0)
    informer.start()
    try:
        deadline = threading.Event()
        for _ in range(100):
            if watcher.asked:
                break
            deadline.wait(0.02)
        assert watcher.asked == [("list", "")] and not store.served
        informer.wake()
        assert watcher.done.wait(5), watcher.asked
        assert store.served and [o["metadata"]["name"] for o in store.items()] == ["a"]
    finally:
        informer.close()


def test_a_plan_our_status_write_returned_with_a_new_spec_is_told_as_a_change() -> None:
    """The status write's answer carries a spec changed meanwhile (generation 2): told at once,
    for its own watch event, arriving after, finds nothing new. Our status alone is not a change."""
    told: list[tuple[str, bool]] = []
    cache = ClusterCache(cluster(), lambda kind, matters: told.append((kind, matters)))
    first = plan("p", generation=1, requests={"svc": {"P4": 4}})
    first["metadata"]["resourceVersion"] = "10"
    cache.plans.apply("ADDED", first)
    ours = dict(first, status={"phase": "Applied"}, metadata=dict(first["metadata"], resourceVersion="11"))
    cache.assume_plan(ours)
    assert told == []
    newer = dict(ours, spec={"requests": {"svc": {"P4": 6}}})
    newer["metadata"] = dict(first["metadata"], generation=2, resourceVersion="13")
    cache.assume_plan(newer)
    assert told == [("plans", True)]
    assert not cache.plans.apply("MODIFIED", newer)  # its watch event: nothing new by then
