"""GitOps: a plan whose spec another field manager owns is never written to, and no-ops write nothing.

An Argo CD-like controller server-side applies the plan as ``argocd-controller``. The operator
must leave the spec to it (it writes only ``status``, as ``gpuplan-operator``), and a reconcile
with nothing to change must send no write at all: re-applying the identical manifest, a user's
client-side ``kubectl apply`` of it, a node annotation (ignored: not a planning input) and a node
label the plan does not select on (a re-plan that finds the same placement) leave every object
the plan owns at the same resourceVersion, and ``gpuplan_writes_total`` where it was.

Identical applies leave nothing to observe (server-side: no new resourceVersion, no watch event;
client-side: only kubectl's last-applied annotation, which kopf ignores), so the node-label
re-plan is the point at which the operator has provably re-read the plan after both applies:
``gpuplan_replans_total{reason="nodes_changed"}`` goes up and every started reconcile has ended
(``gpuplan_plan_duration_seconds_count``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from e2e.support import (
    GROUP,
    Api,
    Kubectl,
    OperatorProcess,
    label_key,
    one_type,
    operator_entry,
    plan_manifest,
    scrape,
    settled,
    settled_reconciles,
    stays,
    wait_for,
    with_crd_defaults,
    with_metrics,
)

ARGOCD = "argocd-controller"
OPERATOR = "gpuplan-operator"
NAME = "gitops"
KOPF_DIFFBASE = f"{GROUP}/last-handled-configuration"


def server_side_apply(kubectl: Kubectl, doc: Mapping[str, Any], manager: str = ARGOCD) -> str:
    proc = kubectl.run(
        "apply", "--server-side", f"--field-manager={manager}", "-f", "-", stdin=yaml.safe_dump(dict(doc))
    )
    return proc.stdout.strip()


def rv(obj: Mapping[str, Any] | None) -> str:
    assert obj is not None, "an object the plan owns is gone"
    return str(obj["metadata"]["resourceVersion"])


def owned(api: Api, ns: str) -> dict[str, str]:
    """resourceVersions of the plan and of everything it wrote, by ``Kind/name``."""
    plan = api.plan(ns, NAME)
    status = (plan or {}).get("status") or {}
    out = {f"GpuAllocationPlan/{NAME}": rv(plan)}
    out[f"ConfigMap/{NAME}-flamewakers"] = rv(api.configmap(ns, f"{NAME}-flamewakers"))
    out |= {f"Deployment/{d['metadata']['name']}": rv(d) for d in api.deployments(ns)}
    out |= {f"Node/{n['metadata']['name']}": rv(n) for n in api.nodes(label_key(ns, NAME))}
    for pc in (status.get("applied") or {}).get("priorityClasses") or []:
        out[f"PriorityClass/{pc}"] = rv(api.priority_class(pc))
    return out


def rolled_out(api: Api, ns: str) -> bool:
    """Every Deployment's controller is done with it (its status stops changing)."""
    deps = api.deployments(ns)
    return bool(deps) and all(
        (d.get("status") or {}).get("observedGeneration") == d["metadata"]["generation"]
        and (d.get("status") or {}).get("availableReplicas") == d["spec"]["replicas"]
        and (d.get("status") or {}).get("updatedReplicas") == d["spec"]["replicas"]
        for d in deps
    )


def managers(plan: Mapping[str, Any], field: str) -> set[tuple[str, str]]:
    """(manager, operation) of each managedFields entry that owns part of ``field``."""
    return {
        (e["manager"], e["operation"])
        for e in plan["metadata"].get("managedFields") or []
        if f"f:{field}" in (e.get("fieldsV1") or {})
    }


def test_reapplies_and_replans_cause_no_write_churn(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
) -> None:
    url = with_metrics(operator)
    nodes = make_nodes("gitops", 3)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"gitops": {"G": 4}}, [operator_entry("gitops", "service")], deploy=True)
    manifest = plan_manifest(ns, NAME, spec)

    # 1. Argo CD creates the plan; the operator plans, applies and reports Ready
    assert "serverside-applied" in server_side_apply(kubectl, manifest)
    wait_for("the plan Applied and Ready", settled(api, ns, NAME), timeout=90)
    wait_for(
        "kopf done with the plan and the Deployments rolled out",
        lambda: (
            KOPF_DIFFBASE in ((api.plan(ns, NAME) or {})["metadata"].get("annotations") or {})
            and rolled_out(api, ns)
        ),
        timeout=60,
    )
    plan = api.plan(ns, NAME)
    assert plan is not None
    applied_spec = plan["spec"]
    before = owned(api, ns)
    assert len([k for k in before if k.startswith("Deployment/")]) >= 2, before
    assert len([k for k in before if k.startswith("Node/")]) >= 2, before
    metrics = scrape(url)
    assert metrics.value("gpuplan_writes_total", kind="Deployment") > 0, "the first apply was counted"

    # 2. the identical manifest again, server-side as Argo CD: an API-level no-op
    assert "serverside-applied" in server_side_apply(kubectl, manifest)
    assert owned(api, ns) == before, "a server-side re-apply of the same spec changed something"

    # 3. ... and client-side once, as a user would: only kubectl's annotation on the plan changes
    kubectl.apply(manifest)
    plan = api.plan(ns, NAME)
    assert plan is not None
    expected = before | {f"GpuAllocationPlan/{NAME}": rv(plan)}
    assert plan["metadata"]["annotations"].get("kubectl.kubernetes.io/last-applied-configuration")

    # 4. a node annotation is not a planning input: no re-plan, no write
    touched = nodes[0]
    assert f"Node/{touched}" in before, "the plan uses every node of its type"
    node = api.patch("v1", "nodes", touched, {"metadata": {"annotations": {"e2e.gpuplan.test/touched": "1"}}})
    expected[f"Node/{touched}"] = rv(node)
    quiet = scrape(url)

    def nothing_happened() -> bool:
        now = scrape(url)
        return now.by_label("gpuplan_replans_total", "reason") == quiet.by_label(
            "gpuplan_replans_total", "reason"
        ) and now.by_label("gpuplan_writes_total", "kind") == quiet.by_label("gpuplan_writes_total", "kind")

    # a re-plan would start within --debounce 1 (at most --max-delay 4) seconds of the event
    stays("no re-plan and no write after a node annotation", nothing_happened, seconds=6)

    # 5. a label the plan does not select on changes the node's fingerprint: a re-plan, which
    #    finds the same placement and writes nothing
    node = api.patch("v1", "nodes", touched, {"metadata": {"labels": {"e2e.gpuplan.test/touched": "1"}}})
    expected[f"Node/{touched}"] = rv(node)
    after = wait_for(
        "a node-triggered re-plan to run and end", settled_reconciles(url, quiet, "nodes_changed"), timeout=60
    )

    assert after.by_label("gpuplan_writes_total", "kind") == metrics.by_label("gpuplan_writes_total", "kind")
    assert after.total("gpuplan_apply_errors_total") == metrics.total("gpuplan_apply_errors_total")
    assert owned(api, ns) == expected, "an owned object was written by a no-op reconcile"
    plan = api.plan(ns, NAME)
    assert plan is not None
    assert plan["spec"] == applied_spec == with_crd_defaults(spec)
    assert plan["metadata"]["generation"] == 1, "the spec was never changed"
    assert managers(plan, "spec") == {(ARGOCD, "Apply")}, plan["metadata"]["managedFields"]
    assert {m for m, _ in managers(plan, "status")} == {OPERATOR}, plan["metadata"]["managedFields"]
    status = plan["status"]
    assert status["phase"] == "Applied" and status["observedGeneration"] == 1
    assert after.value("gpuplan_plans", phase="Applied") >= 1
    assert after.value("gpuplan_cards_placed", namespace=ns, plan=NAME) == 4
    assert after.value("gpuplan_cards_requested", namespace=ns, plan=NAME) == 4
