"""gang.py: a plan's gated pods start together, only when every planned node has their cards."""

from __future__ import annotations

from typing import Any

import pytest
from gpuplan_operator.gang import GangCode, GangDecision, Ledger, NodeIndex, decide_all, read_pod

GATE = "gpuplan.ragnaros.io/gang"
KEY = "gpuplan.ragnaros.io/ns.p"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TIMEOUT = 180.0


def stamp(seconds_ago: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, cards: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {KEY: name, "kubernetes.io/hostname": name}},
        "status": {"allocatable": {"nvidia.com/gpu": str(cards), "cpu": "32"}},
    }


def pod(
    name: str,
    cards: int,
    *,
    plan: str | None = "p",
    planned: str | None = None,
    bound: str | None = None,
    gated: bool = False,
    rs: str | None = None,
    terminating: bool = False,
    released_ago: float | None = None,
    created_ago: float = 10.0,
    ns: str = "ns",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "labels": {"gpuplan.ragnaros.io/plan": plan} if plan else {},
        "creationTimestamp": stamp(created_ago),
        "resourceVersion": "7",
        "ownerReferences": [{"kind": "ReplicaSet", "name": rs or f"{name}-rs", "controller": True}],
    }
    if terminating:
        meta["deletionTimestamp"] = stamp(1)
    if released_ago is not None:
        meta["annotations"] = {"gpuplan.ragnaros.io/released": stamp(released_ago)}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": cards}}}]}
    if planned:
        spec["nodeSelector"] = {KEY: planned}
    if bound:
        spec["nodeName"] = bound
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"metadata": meta, "spec": spec}


def run(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[GangDecision]:
    index = NodeIndex(nodes)
    seen = [read_pod(p, index) for p in pods]
    return decide_all(seen, Ledger(index, seen), NOW, TIMEOUT)


def gated(name: str, cards: int, planned: str, **kw: Any) -> dict[str, Any]:
    return pod(name, cards, planned=planned, gated=True, **kw)


CASES = [
    pytest.param(
        [node("a"), node("b")],
        [gated("x", 4, "a"), gated("y", 8, "b")],
        GangCode.RELEASED,
        {"x", "y"},
        "",
        id="every planned node has the cards: all gated pods are released together",
    ),
    pytest.param(
        [node("a"), node("b")],
        [gated("x", 4, "a"), gated("y", 8, "b"), pod("foreign", 2, plan=None, bound="b")],
        GangCode.WAITING,
        set(),
        "b needs 8 nvidia.com/gpu, 6 free",
        id="a foreign pod on one planned node: no pod of the plan is released",
    ),
    pytest.param(
        [node("a")],
        [gated("x", 4, "a"), gated("y", 4, "a"), pod("old", 2, plan="q", bound="a", terminating=True)],
        GangCode.WAITING,
        set(),
        "a needs 8 nvidia.com/gpu, 6 free",
        id="a Terminating pod of a leaving plan still holds its cards: the newcomer waits",
    ),
    pytest.param(
        [node("a")],
        [gated("x", 5, "a"), gated("y", 5, "a")],
        GangCode.WAITING,
        set(),
        "a needs 10 nvidia.com/gpu, 8 free",
        id="two gated pods on one node count together against its free cards",
    ),
    pytest.param(
        [node("a"), node("b")],
        [
            gated("x", 4, "a", rs="rs1"),
            pod("x-old", 4, bound="a", rs="rs1", released_ago=600),
            gated("y", 8, "b", rs="rs2"),
            pod("foreign", 1, plan=None, bound="b"),
        ],
        GangCode.WAITING,
        {"x"},
        "b needs 8",
        id="a recreated pod of a started instance set goes alone while a new group waits",
    ),
    pytest.param(
        [node("a", cards=4)],
        [
            gated("x", 4, "a", rs="rs1"),
            pod("x-gone", 4, bound="a", rs="rs1", terminating=True, released_ago=600),
        ],
        GangCode.WAITING,
        set(),
        "a needs 4 nvidia.com/gpu, 0 free",
        id="a pod deleted by hand: its replacement waits until the old one has left the node",
    ),
    pytest.param(
        [node("a")],
        [
            gated("x", 4, "a", rs="rs1"),
            pod("x-gone", 4, bound="a", rs="rs1", terminating=True, released_ago=600),
            pod("other", 4, bound="a", rs="rs9"),
        ],
        GangCode.WAITING,
        set(),
        "a needs 4 nvidia.com/gpu, 0 free",
        id="a recreated pod whose node is full waits, naming the node and cards",
    ),
    pytest.param(
        [node("a")],
        [
            gated("x", 4, "a", rs="rs1"),
            pod("x-gone", 4, bound="b-lost", rs="rs1", terminating=True, released_ago=60),
        ],
        GangCode.RECREATED,
        {"x"},
        "",
        id="a pod recreated after its old one left: released alone as soon as its node has room",
    ),
    pytest.param(
        [node("a"), node("b")],
        [
            pod("x", 4, planned="a", bound="a", rs="rs1", released_ago=5),
            gated("y", 4, "b", rs="rs2"),
            gated("z", 4, "b", rs="rs3"),
        ],
        GangCode.RELEASED,
        {"y", "z"},
        "",
        id="an operator killed half way through a release: the rest is released when it restarts",
    ),
    pytest.param(
        [node("a")],
        [pod("x", 4, planned="a", rs="rs1", released_ago=TIMEOUT + 5), pod("thief", 8, plan=None, bound="a")],
        GangCode.TIMED_OUT,
        set(),
        "re-planning",
        id="released pods not bound within the timeout: the plan is re-planned",
    ),
    pytest.param(
        [node("a")],
        [pod("x", 4, planned="a", rs="rs1", released_ago=TIMEOUT + 5), pod("other", 4, plan=None, bound="a")],
        GangCode.IDLE,
        set(),
        "",
        id="released pods not bound within the timeout whose node still has their cards: only waiting",
    ),
    pytest.param(
        [node("a")],
        [pod("x", 4, planned="a", rs="rs1", released_ago=TIMEOUT - 5), gated("y", 6, "a", rs="rs2")],
        GangCode.WAITING,
        set(),
        "a needs 6 nvidia.com/gpu, 4 free",
        id="a released pod not bound yet keeps its cards from the next release",
    ),
    pytest.param(
        [node("a")],
        [gated("x", 1, "nowhere")],
        GangCode.WAITING,
        set(),
        "no single node matches",
        id="a gated pod whose selector matches no node waits and says why",
    ),
    pytest.param(
        [node("a")],
        [pod("x", 4, bound="a", released_ago=60)],
        None,
        set(),
        "",
        id="nothing gated and nothing pending: no decision at all",
    ),
]


@pytest.mark.parametrize(("nodes", "pods", "code", "released", "says"), CASES)
def test_gang_decision(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    code: GangCode | None,
    released: set[str],
    says: str,
) -> None:
    decisions = [d for d in run(nodes, pods) if d.plan == "ns/p"]
    if code is None:
        assert decisions == []
        return
    (decision,) = decisions
    assert decision.code is code, decision.message
    assert {r.pod.name for r in decision.releases} == released
    assert says in decision.message


def test_two_plans_are_never_released_onto_the_same_cards() -> None:
    """The older plan's group takes the cards first; the younger one then finds them gone."""
    nodes = [node("a")]
    pods = [
        gated("old", 6, "a", plan="p", created_ago=30),
        gated("young", 6, "a", plan="q", created_ago=5),
    ]
    by_plan = {d.plan: d for d in run(nodes, pods)}
    assert by_plan["ns/p"].code is GangCode.RELEASED
    assert by_plan["ns/q"].code is GangCode.WAITING
    assert "a needs 6 nvidia.com/gpu, 2 free" in by_plan["ns/q"].message


def test_a_released_pod_records_how_long_it_waited() -> None:
    (decision,) = run([node("a")], [gated("x", 2, "a", created_ago=42)])
    (release,) = decision.releases
    assert release.code is GangCode.RELEASED and release.waited == pytest.approx(42)


def test_cpu_requests_count_as_the_scheduler_counts_them() -> None:
    big = gated("x", 1, "a")
    big["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "40"}
    (decision,) = run([node("a")], [big])
    assert decision.code is GangCode.WAITING
    assert "a needs 40000 millicores cpu, 32000 free" in decision.message


def test_a_group_waiting_longer_than_the_timeout_is_stuck_and_says_it_is_re_planned() -> None:
    """Cards held by something the plan did not count (a pod bound by hand): the group waits, and
    once it has waited longer than the timeout the plan is re-planned around it."""
    nodes = [node("a")]
    held = pod("foreign", 4, plan=None, bound="a")
    (fresh,) = run(nodes, [gated("x", 8, "a", created_ago=TIMEOUT - 5), held])
    assert fresh.code is GangCode.WAITING and not fresh.stuck
    (late,) = run(nodes, [gated("x", 8, "a", created_ago=TIMEOUT + 5), held])
    assert late.code is GangCode.WAITING and late.stuck
    assert "re-planning around it" in late.message
    (free,) = run(nodes, [gated("x", 8, "a", created_ago=TIMEOUT + 5)])
    assert free.code is GangCode.RELEASED and not free.stuck


PLANNED = {"ns/p": {"a": {"nvidia.com/gpu": 4, "cpu": 1}, "b": {"nvidia.com/gpu": 8, "cpu": 1}}}


def decide_planned(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    planned: dict[str, Any] = PLANNED,
    started: tuple[str, ...] = (),
) -> dict[str, GangDecision]:
    index = NodeIndex(nodes)
    seen = [read_pod(p, index) for p in pods]
    return {d.plan: d for d in decide_all(seen, Ledger(index, seen), NOW, TIMEOUT, planned, started)}


def test_a_pod_is_released_as_soon_as_it_exists_when_the_whole_plan_fits() -> None:
    """The placement says a gets 4 cards and b 8; only a's pod exists yet. Both nodes have the
    room for the whole plan, so a's pod goes now, while b's is still being created."""
    nodes = [node("a"), node("b")]
    first = decide_planned(nodes, [gated("x", 4, "a")])["ns/p"]
    assert first.code is GangCode.RELEASED and [r.pod.name for r in first.releases] == ["x"]
    later = decide_planned(
        nodes, [pod("x", 4, planned="a", rs="x-rs", released_ago=1), gated("y", 8, "b", rs="y-rs")]
    )["ns/p"]
    assert later.code is GangCode.RELEASED and [r.pod.name for r in later.releases] == ["y"]


def test_no_pod_is_released_while_a_node_lacks_the_cards_of_pods_not_created_yet() -> None:
    """b's pod does not exist yet and b holds a foreign pod: a's pod must not start alone."""
    nodes = [node("a"), node("b")]
    (decision,) = decide_planned(
        nodes, [gated("x", 4, "a"), pod("foreign", 2, plan=None, bound="b")]
    ).values()
    assert decision.code is GangCode.WAITING and not decision.releases
    assert "b needs 8 nvidia.com/gpu, 6 free" in decision.message


def test_the_cards_of_a_plan_s_pods_still_to_come_are_not_given_to_another_plan() -> None:
    """p released a's pod and waits for b's to be created (nothing of it gated now); q's gated pod
    on b would take the cards p's pod is due to take."""
    nodes = [node("a"), node("b")]
    pods = [
        pod("x", 4, planned="a", bound="a", released_ago=2),
        gated("q1", 4, "b", plan="q", created_ago=60),
    ]
    planned = {**PLANNED, "ns/q": {"b": {"nvidia.com/gpu": 4}}}
    decisions = decide_planned(nodes, pods, planned)
    assert decisions["ns/q"].code is GangCode.WAITING
    assert "b needs 4 nvidia.com/gpu, 0 free" in decisions["ns/q"].message


def test_a_plan_whose_cards_are_free_waits_for_nothing_of_its_own() -> None:
    """At 1,000 nodes a plan's Deployments take minutes to write: its first pods go at once (never
    stuck behind the last ones); a group short of cards past the timeout is stuck."""
    nodes = [node("a"), node("b")]
    early = decide_planned(nodes, [gated("x", 4, "a", created_ago=TIMEOUT + 60)])["ns/p"]
    assert early.code is GangCode.RELEASED and not early.stuck
    held = pod("foreign", 1, plan=None, bound="b")
    late = decide_planned(nodes, [gated("x", 4, "a", created_ago=TIMEOUT + 60), held])["ns/p"]
    assert late.code is GangCode.WAITING and late.stuck


def test_a_plan_s_own_leaving_pod_does_not_count_for_its_new_one() -> None:
    """A re-plan moved an instance: the old pod (not Terminating yet) still holds a's cards, and the
    placement puts a new 4-card instance there. The new pod waits for the old one to go."""
    nodes = [node("a", cards=4), node("b")]
    pods = [pod("old", 4, planned="a", bound="a", rs="old-rs"), gated("new", 4, "a", rs="new-rs")]
    (decision,) = decide_planned(nodes, pods, {"ns/p": {"a": {"nvidia.com/gpu": 4}}}).values()
    assert decision.code is GangCode.WAITING and "a needs 4 nvidia.com/gpu, 0 free" in decision.message


def test_two_recreated_pods_go_each_as_soon_as_its_node_has_room() -> None:
    """Two single-replica pods of a running plan deleted at once (their old pods gone): their
    instance sets had started, so the one whose node has room goes without the other."""
    nodes = [node("a"), node("b")]
    pods = [
        gated("x2", 4, "a", rs="x-rs"),
        gated("y2", 8, "b", rs="y-rs"),
        pod("foreign", 8, plan=None, bound="b"),
    ]
    started = ("ns/ReplicaSet/x-rs", "ns/ReplicaSet/y-rs")
    decision = decide_planned(nodes, pods, started=started)["ns/p"]
    assert decision.code is GangCode.WAITING
    assert [(r.pod.name, r.code) for r in decision.releases] == [("x2", GangCode.RECREATED)]
    assert "b needs 8 nvidia.com/gpu, 0 free" in decision.message
    forgotten = decide_planned(nodes, pods)["ns/p"]  # an operator restarted: both wait, as a new group
    assert forgotten.code is GangCode.WAITING and not forgotten.releases


def slice_of(node_name: str, *devices: str) -> dict[str, Any]:
    return {
        "spec": {
            "nodeName": node_name,
            "driver": "gpu.example.com",
            "pool": {"name": node_name},
            "devices": [{"name": d} for d in devices],
        }
    }


def claim(
    name: str, node_name: str, devices: list[str], plan: str | None = None, pod: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if plan:
        meta["labels"] = {"gpuplan.ragnaros.io/plan": plan}
    if pod:
        meta["ownerReferences"] = [{"kind": "Pod", "name": pod, "controller": True}]
    results = [{"driver": "gpu.example.com", "pool": node_name, "device": d} for d in devices]
    return {"metadata": meta, "status": {"allocation": {"devices": {"results": results}}}}


def claimed(name: str, planned: str, **kw: Any) -> dict[str, Any]:
    """A gated pod taking its GPUs from a claim (no card count)."""
    p = gated(name, 0, planned, **kw)
    p["spec"]["containers"][0]["resources"] = {}
    p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"{name}-tpl"}]
    return p


def test_claim_pods_wait_until_every_device_of_the_placement_can_be_allocated() -> None:
    """The plan's devices are gpu-2/3 on a and gpu-0 on b; another workload's claim holds b's
    gpu-0. No pod of the plan goes (a's would, by its card count: it asks none) until it is free;
    the plan's own claim of a pod still there holds a device the plan counts already."""
    from gpuplan_operator.gang_devices import DeviceIndex

    nodes = [node("a"), node("b")]
    placed = {"a": ["gpu-2", "gpu-3"], "b": ["gpu-0"]}
    slices = [slice_of("a", "gpu-0", "gpu-1", "gpu-2", "gpu-3"), slice_of("b", "gpu-0", "gpu-1")]
    pods = [claimed("x", "a"), claimed("y", "b"), pod("run", 0, planned="a", bound="a")]
    index = NodeIndex(nodes)
    seen = [read_pod(p, index) for p in pods]
    assert seen[0].claims

    def decision(claims: list[dict[str, Any]]) -> GangDecision:
        short = DeviceIndex(slices, claims).short("ns", "p", placed, {"x", "y", "run"})
        (d,) = decide_all(seen, Ledger(index, seen), NOW, TIMEOUT, {}, (), {"ns/p": short})
        return d

    held = decision([claim("other", "b", ["gpu-0"]), claim("own", "a", ["gpu-3"], plan="p", pod="run")])
    assert held.code is GangCode.WAITING and not held.releases
    assert "b: device gpu-0 held by claim ns/other" in held.message
    assert "gpu-3" not in held.message  # the plan's own claim, for its pod still there
    leaving = decision([claim("old", "a", ["gpu-3"], plan="p", pod="gone")])  # its pod is gone
    assert leaving.code is GangCode.WAITING and "a: device gpu-3 held by claim ns/old" in leaving.message
    missing = DeviceIndex(slices[:1], []).short("ns", "p", placed, set())
    assert [s.text() for s in missing] == ["b: device gpu-0 not published in its ResourceSlices"]
    free = decision([])
    assert free.code is GangCode.RELEASED and {r.pod.name for r in free.releases} == {"x", "y"}


def test_a_pod_is_read_once_per_version_and_its_planned_node_follows_the_node_labels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuplan_operator import gang
    from gpuplan_operator.memo import Memo

    monkeypatch.setattr(gang, "_READ", Memo(50_000))
    parsed: list[str] = []
    from planner import pod_requests as real

    def counting(p: dict[str, Any]) -> Any:
        parsed.append(p["metadata"]["name"])
        return real(p)

    monkeypatch.setattr("gpuplan_operator.gang.pod_requests", counting)
    gated = pod("a", 4, planned="n1", gated=True)
    gated["metadata"]["uid"] = "uid-a"
    first = read_pod(gated, NodeIndex([node("n1"), node("n2")]))
    assert (first.planned, first.gated, dict(first.requests)) == ("n1", True, {"nvidia.com/gpu": 4})
    relabelled = node("n2")
    relabelled["metadata"]["labels"][KEY] = "n1"  # now two nodes match: pinned to neither
    again = read_pod(gated, NodeIndex([node("n1"), node("n2")]))
    assert again.planned == "n1" and parsed == ["a"]  # the pod's own part was not read again
    assert read_pod(gated, NodeIndex([node("n1"), relabelled])).planned is None
    bound = dict(
        gated,
        spec={**gated["spec"], "nodeName": "n1"},
        metadata={**gated["metadata"], "resourceVersion": "8"},
    )
    assert read_pod(bound, NodeIndex([node("n1")])).bound == "n1" and parsed == ["a", "a"]
