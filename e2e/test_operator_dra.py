"""The operator's devices are the scheduler's devices: plans on GPUs published with DRA.

The suite acts as the GPU driver (:mod:`e2e.dra`): each test node publishes 8 GPUs in two PCIe
domains (0-3, 4-7), and a claim of the test holds cards 0 and 1, as another workload would. The
operator plans with the devices, writes a ResourceClaimTemplate per instance, and the real
kube-scheduler allocates the claims. Proven here: every pod's allocated devices are the ones the
plan chose, an instance that fits in one domain sits in one domain (where a naive claim for the
same cards on the same half-used node straddles both), no device is allocated twice across plans,
and deleting a plan frees its devices for the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from e2e.dra import (
    RESOURCE_API,
    DeviceRef,
    Gpu,
    cel_in,
    claim_deployment,
    claim_spec,
    claim_template,
    claims,
    hold_devices,
    holders,
    pod_devices,
)
from e2e.support import (
    Api,
    Kubectl,
    conditions,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    stays,
    wait_for,
)

PLAN_LABEL = "gpuplan.ragnaros.io/plan"


def dra_spec(gpu_type: str, device_class: str, requests: Mapping[str, int]) -> dict[str, Any]:
    """One instance of ``cards`` per service (machineNum 1), GPUs taken through ``device_class``."""
    spec = one_type(
        gpu_type,
        {name: {"resourceNum": {"G": cards}, "machineNum": {"G": 1}} for name, cards in requests.items()},
        [operator_entry(name) for name in requests],
        deploy=True,
    )
    spec["resources"][0]["deviceClassName"] = device_class
    return spec


def planned(status: Mapping[str, Any]) -> dict[str, list[frozenset[str]]]:
    """node -> the device sets of the plan's instances there (from ``status.allocations``)."""
    out: dict[str, list[frozenset[str]]] = {}
    for a in status["allocations"]:
        for node, lists in (a.get("devices") or {}).items():
            out.setdefault(node, []).extend(frozenset(devs) for devs in lists)
    return out


def plan_pods_running(api: Api, ns: str, plan: str, count: int) -> Callable[[], list[dict[str, Any]] | None]:
    def probe() -> list[dict[str, Any]] | None:
        pods = [p for p in api.pods(ns, f"{PLAN_LABEL}={plan}") if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == count == len(pods) else None

    return probe


def allocated_sets(api: Api, pods: Sequence[Mapping[str, Any]]) -> dict[str, list[frozenset[str]]]:
    """node -> the device sets the scheduler allocated to each pod there."""
    out: dict[str, list[frozenset[str]]] = {}
    for pod in pods:
        refs = pod_devices(api, pod)
        assert refs, f"pod {pod['metadata']['name']} runs without allocated devices"
        node = pod["spec"]["nodeName"]
        assert {r.pool for r in refs} == {node}, (node, refs)
        out.setdefault(node, []).append(frozenset(r.device for r in refs))
    return {n: sorted(v, key=sorted) for n, v in out.items()}


def domains(gpus: Sequence[Gpu], names: frozenset[str]) -> set[str]:
    return {g.pcie_root for g in gpus if g.name in names}


def no_device_held_twice(api: Api) -> dict[DeviceRef, list[str]]:
    held = holders(api)
    twice = {ref: names for ref, names in held.items() if len(names) > 1}
    assert not twice, f"devices allocated to more than one claim: {twice}"
    return held


def test_pods_get_the_planned_devices_one_domain_each_where_a_naive_claim_straddles(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    device_class: str,
    gpu_nodes: Callable[..., dict[str, list[Gpu]]],
) -> None:
    [(node, gpus)] = gpu_nodes("opdra").items()
    [(twin, twin_gpus)] = gpu_nodes("naive").items()  # the same half-used node, of another type
    gpu_type = node.rsplit("-", 1)[0]
    hold_devices(api, ns, "elsewhere", [gpus[0], gpus[1]])
    hold_devices(api, ns, "elsewhere-twin", [twin_gpus[0], twin_gpus[1]])

    kubectl.apply(plan_manifest(ns, "fence", dra_spec(gpu_type, device_class, {"big": 4, "small": 2})))
    status = wait_for("the plan applied and Ready", settled(api, ns, "fence"), timeout=120)
    plan = planned(status)
    assert sorted(plan) == [node] and sorted(map(len, plan[node])) == [2, 4], plan
    assert not {"gpu-0", "gpu-1"} & set().union(*plan[node]), "the plan used cards another claim holds"
    assert all(len(domains(gpus, devs)) == 1 for devs in plan[node]), plan
    assert status["applied"]["devices"] == {node: sorted(set().union(*plan[node]), key=lambda d: int(d[4:]))}

    pods = wait_for("the plan's pods Running", plan_pods_running(api, ns, "fence", 2), timeout=120)
    for pod in pods:  # the cards come from the claim, not from the device plugin's count
        limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
        assert "nvidia.com/gpu" not in limits and pod["spec"]["resourceClaims"], pod["spec"]
    assert allocated_sets(api, pods) == {node: sorted(plan[node], key=sorted)}

    # the same four cards asked for naively (count 4, no selector) on the twin straddle the domains
    kubectl.apply(claim_template(ns, "naive", claim_spec(4)))
    kubectl.apply(claim_deployment(ns, "naive", "naive", node=twin))
    [naive] = wait_for("the naive pod Running", plan_pods_running_unlabelled(api, ns, "naive"), timeout=60)
    got = {r.device for r in pod_devices(api, naive)}
    assert len(got) == 4 and len(domains(twin_gpus, frozenset(got))) == 2, got
    no_device_held_twice(api)


def plan_pods_running_unlabelled(api: Api, ns: str, app: str) -> Callable[[], list[dict[str, Any]] | None]:
    def probe() -> list[dict[str, Any]] | None:
        pods = [p for p in api.pods(ns, f"app={app}") if p["status"].get("phase") == "Running"]
        return pods or None

    return probe


def test_plans_never_share_a_device_and_a_deleted_plan_frees_its_devices(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    device_class: str,
    gpu_nodes: Callable[..., dict[str, list[Gpu]]],
) -> None:
    [(node, gpus)] = gpu_nodes("share").items()
    gpu_type = node.rsplit("-", 1)[0]
    hold_devices(api, ns, "elsewhere", [gpus[0], gpus[1]])

    kubectl.apply(plan_manifest(ns, "alpha", dra_spec(gpu_type, device_class, {"alpha": 4})))
    alpha = wait_for("alpha applied", settled(api, ns, "alpha"), timeout=120)
    kubectl.apply(plan_manifest(ns, "beta", dra_spec(gpu_type, device_class, {"beta": 2})))
    beta = wait_for("beta applied", settled(api, ns, "beta"), timeout=120)
    a, b = planned(alpha)[node], planned(beta)[node]
    assert not set().union(*a) & set().union(*b), (a, b)
    assert len(domains(gpus, a[0])) == len(domains(gpus, b[0])) == 1, (a, b)
    pods = wait_for("alpha's pod Running", plan_pods_running(api, ns, "alpha", 1), timeout=120)
    pods += wait_for("beta's pod Running", plan_pods_running(api, ns, "beta", 1), timeout=120)
    assert allocated_sets(api, pods) == {node: sorted(a + b, key=sorted)}
    no_device_held_twice(api)

    # a third plan wants alpha's domain: it waits while alpha holds it, and gets it once alpha goes
    kubectl.apply(plan_manifest(ns, "gamma", dra_spec(gpu_type, device_class, {"gamma": 4})))
    wait_for("gamma infeasible", settled(api, ns, "gamma", phase="Infeasible", ready=False), timeout=60)
    kubectl.run("delete", "gpuplan", "alpha", "-n", ns, "--timeout=60s")
    wait_for(
        "alpha's claims and templates gone",
        lambda: (
            not [c for c in claims(api, ns) if (c["metadata"].get("labels") or {}).get(PLAN_LABEL) == "alpha"]
            and not api.kube.get(
                f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
                labelSelector=f"{PLAN_LABEL}=alpha",
            ).get("items")
        ),
        timeout=60,
    )
    gamma = wait_for("gamma applied on the freed devices", settled(api, ns, "gamma"), timeout=120)
    g = planned(gamma)[node]
    assert g == a, (g, a)
    [pod] = wait_for("gamma's pod Running", plan_pods_running(api, ns, "gamma", 1), timeout=120)
    assert {r.device for r in pod_devices(api, pod)} == set(g[0])
    held = no_device_held_twice(api)
    assert {r.device for r in held if r.pool == node} == {"gpu-0", "gpu-1"} | set(b[0]) | set(g[0])


def test_a_cordon_recreates_only_the_pods_that_were_on_the_cordoned_node(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    device_class: str,
    gpu_nodes: Callable[..., dict[str, list[Gpu]]],
) -> None:
    """An instance's devices name its claim template, and so its pod: a re-plan after a cordon
    keeps every instance that did not have to move on the same devices, so its pod runs on."""
    made = gpu_nodes("keep", count=3)
    gpu_type = next(iter(made)).rsplit("-", 1)[0]
    requests = {"a": 4, "b": 4, "c": 2, "d": 2, "e": 1, "f": 1}
    kubectl.apply(plan_manifest(ns, "steady", dra_spec(gpu_type, device_class, requests)))
    before = planned(wait_for("the plan applied and Ready", settled(api, ns, "steady"), timeout=120))
    pods = wait_for("the plan's pods Running", plan_pods_running(api, ns, "steady", 6), timeout=120)
    uids = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods}
    victim = max(before, key=lambda n: (len(before[n]), n))
    assert len(before) > 1 or len(made) == 1, before  # something stays put

    api.patch("v1", "nodes", victim, {"spec": {"unschedulable": True}})

    def replanned() -> dict[str, Any] | None:
        st = (api.plan(ns, "steady") or {}).get("status") or {}
        return st if st.get("allocations") and victim not in planned(st) else None

    after = planned(wait_for("the re-plan without the cordoned node", replanned, timeout=60))
    pods = wait_for("the plan's pods Running again", plan_pods_running(api, ns, "steady", 6), timeout=120)
    for node, sets in before.items():
        if node != victim:
            assert set(sets) <= set(after.get(node, [])), (node, sets, after)
    stayed = {uid for uid, node in uids.items() if node != victim}
    running = {p["metadata"]["uid"] for p in pods}
    assert stayed <= running, "pods of instances that did not move were recreated"
    assert not {p["spec"]["nodeName"] for p in pods} & {victim}
    assert allocated_sets(api, pods) == {n: sorted(v, key=sorted) for n, v in after.items()}
    no_device_held_twice(api)


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == "gpuplan.ragnaros.io/gang" for g in pod["spec"].get("schedulingGates") or [])


def test_gated_claim_pods_wait_until_the_planned_devices_are_free(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    device_class: str,
    gpu_nodes: Callable[..., dict[str, list[Gpu]]],
) -> None:
    """A pod taking its GPUs from a claim asks for no card count; its gate is lifted only once the
    devices of the plan's placement can be allocated. Here they are held by the claim of a plan
    that was deleted (its labels: no live plan counts it, so the planner plans onto its devices,
    as in a hand-over), and the new plan's pod stays gated until that claim is gone."""
    [(node, gpus)] = gpu_nodes("gangdra").items()
    gpu_type = node.rsplit("-", 1)[0]
    hold_devices(api, ns, "elsewhere", gpus[4:])  # another workload's: the plan goes around them
    leaving = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": "leaving",
            "labels": {"app.kubernetes.io/managed-by": "gpuplan", PLAN_LABEL: "gone"},
        },
        "spec": claim_spec(4, [cel_in("uuid", [g.uuid for g in gpus[:4]], gpus[0].driver)], request="held"),
    }
    api.create(RESOURCE_API, "resourceclaims", leaving, ns=ns)
    results = [
        {"request": "held", "driver": g.driver, "pool": g.ref.pool, "device": g.name} for g in gpus[:4]
    ]
    api.kube.merge_patch(
        f"/apis/{RESOURCE_API}/namespaces/{ns}/resourceclaims/leaving/status",
        {"status": {"allocation": {"devices": {"results": results}}}},
        "e2e",
    )

    kubectl.apply(plan_manifest(ns, "gang", dra_spec(gpu_type, device_class, {"spread": 4})))
    status = wait_for("the plan applied", settled(api, ns, "gang", ready=False), timeout=120)
    assert planned(status) == {node: [frozenset(g.name for g in gpus[:4])]}, planned(status)

    def pod_gated() -> bool:
        pods = api.pods(ns, f"{PLAN_LABEL}=gang")
        return len(pods) == 1 and gated(pods[0]) and not pods[0]["spec"].get("nodeName")

    wait_for("the plan's pod, gated", pod_gated, timeout=60)
    wait_for(
        "Ready Waiting, naming the held device",
        lambda: "held by claim" in conditions(api.status(ns, "gang")).get("Ready", {}).get("message", ""),
        timeout=30,
    )
    stays("the pod gated while the leaving claim holds its devices", pod_gated, 5)

    api.delete(RESOURCE_API, "resourceclaims", "leaving", ns=ns)
    [pod] = wait_for(
        "the pod Running once the devices are free", plan_pods_running(api, ns, "gang", 1), timeout=60
    )
    assert {r.device for r in pod_devices(api, pod)} == {g.name for g in gpus[:4]}
    no_device_held_twice(api)
