"""The Helm chart's manifests are accepted by a real API server (server-side dry run), and so are the
GitOps example's plans.

Notes
-----
``kubectl apply --dry-run=server`` runs everything an install would (schema, defaulting,
admission, RBAC escalation checks on the ClusterRole) and stores nothing. The chart's CRDs are
applied for real first (they are byte-identical to ``crds/``, which the suite applies anyway):
a dry run cannot create a CRD and validate an object of it in one go. The ServiceMonitor needs
the Prometheus Operator's CRD, which this cluster does not have; it is dry-run only where it does.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from e2e.support import REPO, Api, Kubectl
from tests.chart.helm import CHART, find_helm, render, run_helm
from tests.chart.test_platform import inline_plan

SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


@pytest.fixture(scope="module")
def chart_crds(helm: str, kubectl: Kubectl, crd: None) -> None:
    """The chart's CRDs, applied the way charts/gpuplan-operator/README.md says to upgrade them."""
    crds = run_helm(helm, "show", "crds", str(CHART)).stdout
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=crds)
    for name in (
        "gpuallocationplans.gpuplan.ragnaros.io",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    ):
        kubectl.run("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")


@pytest.fixture
def namespaces(api: Api) -> Iterator[Callable[[str], str]]:
    """Make namespaces named after the test (deleted afterwards)."""
    made: list[str] = []

    def make(word: str) -> str:
        name = f"e2e-chart-{word}-{uuid.uuid4().hex[:5]}"
        api.create("v1", "namespaces", {"metadata": {"name": name}})
        made.append(name)
        return name

    yield make
    for name in made:
        api.delete("v1", "namespaces", name)


def _has_crd(kubectl: Kubectl, name: str) -> bool:
    return kubectl.run("get", "crd", name, "-o", "name", check=False).returncode == 0


def _kubectl_name(doc: dict[str, Any]) -> str:
    """How kubectl names an object in its output: ``deployment.apps/x``, ``serviceaccount/x``."""
    group = doc["apiVersion"].rpartition("/")[0]
    return f"{doc['kind'].lower()}{'.' + group if group else ''}/{doc['metadata']['name']}"


def _dry_run(kubectl: Kubectl, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    return kubectl.run("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs), check=False)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="default values"),
        pytest.param(
            {
                "replicaCount": 2,
                "metrics.port": 9100,
                "metrics.serviceMonitor.enabled": True,
                "logLevel": "debug",
            },
            id="two peering replicas with metrics and a ServiceMonitor",
        ),
        pytest.param(
            {"watchNamespaces": ["WATCHED"], "replicaCount": 2}, id="one watched namespace with peering"
        ),
    ],
)
def test_the_rendered_chart_passes_a_server_side_dry_run(
    helm: str, kubectl: Kubectl, chart_crds: None, namespaces: Callable[[str], str], values: dict[str, Any]
) -> None:
    release_ns = namespaces("release")
    values = dict(values)
    if values.get("watchNamespaces"):
        values["watchNamespaces"] = [namespaces("watched")]
    release = f"dry-{uuid.uuid4().hex[:6]}"  # unique cluster-scoped names (ClusterRole, peering)
    docs = render(helm, values, release=release, namespace=release_ns)
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == int(bool(values.get("metrics.serviceMonitor.enabled")))
    if monitors and not _has_crd(kubectl, SERVICE_MONITOR_CRD):
        docs = [d for d in docs if d["kind"] != "ServiceMonitor"]  # no Prometheus Operator here

    proc = _dry_run(kubectl, docs)
    assert proc.returncode == 0, proc.stderr
    accepted = set(
        re.findall(r"^(\S+) (?:created|configured|unchanged) \(server dry run\)$", proc.stdout, re.M)
    )
    assert accepted == {_kubectl_name(d) for d in docs}, proc.stdout
    # nothing was stored
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")["metadata"]["name"]
    assert kubectl.run("get", "clusterrole", cluster_role, check=False).returncode != 0


def test_the_gitops_example_plans_pass_a_server_side_dry_run(
    kubectl: Kubectl, crd: None, namespaces: Callable[[str], str]
) -> None:
    built = kubectl.run("kustomize", str(REPO / "examples" / "gitops"))
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["GpuAllocationPlan", "GpuAllocationPlan", "Namespace"], kinds
    target = namespaces("gitops")  # the example's namespace may exist for real: use a fresh one
    plans = []
    for d in docs:
        if d["kind"] == "GpuAllocationPlan":
            d["metadata"]["namespace"] = target
            plans.append(d)
    proc = _dry_run(kubectl, plans)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("(server dry run)") == 2, proc.stdout


def test_helm_install_prints_notes_whose_inline_plan_the_api_server_accepts(
    helm: str, kubectl: Kubectl, chart_crds: None, namespaces: Callable[[str], str]
) -> None:
    """``helm install --dry-run=server`` against the cluster prints NOTES.txt as a user sees it."""
    release_ns = namespaces("notes")
    proc = run_helm(
        helm, "install", f"notes-{uuid.uuid4().hex[:6]}", str(CHART), "--namespace", release_ns,
        "--dry-run=server", "--kubeconfig", kubectl.kubeconfig,
    )  # fmt: skip
    assert "NOTES:" in proc.stdout
    text = proc.stdout.split("NOTES:", 1)[1]
    assert "examples/" not in text and "crds/" not in text, text
    plan = inline_plan(text)
    plan["metadata"]["namespace"] = namespaces("plan")
    applied = kubectl.run("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(plan), check=False)
    assert applied.returncode == 0, applied.stderr
    assert "(server dry run)" in applied.stdout
