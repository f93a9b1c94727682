"""5. The operator dies mid-apply and is restarted: it converges, with no duplicate or stale output.

The crash is real and deterministic: ``GPUPLAN_FAULT_EXIT_AFTER_WRITES=N`` makes the process exit
abruptly (``os._exit``) right after its N-th write: early or late in the round that writes the node
labels, the ConfigMap and the Deployments (together: the plan's pods wait for their gates, which
wait for the labels), before status says Applied. A normal restart must finish the job; a second
restart on the converged plan must write nothing at all.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from e2e.support import (
    Api,
    Kubectl,
    OperatorProcess,
    label_key,
    labelled_nodes,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
)


def snapshot_versions(api: Api, ns: str, key: str) -> dict[str, str]:
    """resourceVersions of everything the plan wrote (nodes, ConfigMap, Deployment specs) and of it."""
    out = {f"node/{n['metadata']['name']}": n["metadata"]["labels"][key] for n in api.nodes(key)}
    cm = api.configmap(ns, "crash-flamewakers")
    assert cm is not None
    out["configmap"] = cm["metadata"]["resourceVersion"]
    for d in api.deployments(ns):
        out[f"deployment/{d['metadata']['name']}"] = f"{d['metadata']['uid']}/{d['metadata']['generation']}"
    plan = api.plan(ns, "crash")
    assert plan is not None
    out["plan"] = plan["metadata"]["resourceVersion"]
    return out


# writes of the first apply: 1 PriorityClass (none when another plan made it already), then in one
# round 4 node labels, 1 ConfigMap and 4 Deployments (which of them land first is the threads'
# race), then 1 status (Applied)
@pytest.mark.parametrize(
    "writes",
    [
        pytest.param(2, id="killed after two writes"),
        pytest.param(7, id="killed after seven writes"),
    ],
)
def test_killed_mid_apply_converges(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
    writes: int,
) -> None:
    nodes = make_nodes("crash", 4)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    key = label_key(ns, "crash")

    operator.stop()
    operator.start(extra_env={"GPUPLAN_FAULT_EXIT_AFTER_WRITES": str(writes)})
    mark = operator.mark()
    spec = one_type(gpu_type, {"spread": {"G": 4}}, [operator_entry("spread", "service")], deploy=True)
    kubectl.apply(plan_manifest(ns, "crash", spec))
    wait_for("the operator to die mid-apply", lambda: operator.exited() is not None, timeout=60)
    assert operator.exited() == 137
    assert f"GPUPLAN_FAULT_EXIT_AFTER_WRITES={writes} reached" in operator.log_since(mark)
    landed = len(labelled_nodes(api, key)) + len(api.deployments(ns))
    landed += api.configmap(ns, "crash-flamewakers") is not None
    assert writes - 1 <= landed <= writes < 9  # one may have been the PriorityClass; not all nine
    assert api.status(ns, "crash").get("phase") != "Applied"

    operator.start()
    status = wait_for("convergence after the restart", settled(api, ns, "crash"), timeout=90)
    (alloc,) = status["allocations"]
    assert labelled_nodes(api, key) == {n: n for n in alloc["nodes"]} == {n: n for n in nodes}
    cm = api.configmap(ns, "crash-flamewakers")
    assert cm is not None
    entries = yaml.safe_load(cm["data"]["values.yaml"])["flamewakers"]
    assert sorted(d["metadata"]["name"] for d in api.deployments(ns)) == sorted(e["name"] for e in entries)
    assert sorted(p["spec"]["nodeName"] for p in live_pods(api, ns)) == sorted(nodes)

    # a restart on a converged plan: its first cycle plans it, checks the cluster and writes nothing
    before = snapshot_versions(api, ns, key)
    operator.stop()
    mark = operator.mark()
    operator.start()
    wait_for(
        "the first cycle to plan it",
        lambda: any(
            "cycle: planned" in line and f"{ns}/crash" in line
            for line in operator.log_since(mark).splitlines()
        ),
        timeout=60,
    )
    assert snapshot_versions(api, ns, key) == before
    assert f"{ns}/crash: applied" not in operator.log_since(mark)
