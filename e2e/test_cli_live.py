"""``gpuplan plan`` and ``kubectl gpuplan status`` against the live control plane, read only.

The CLI runs with a kubeconfig whose token may only get and list nodes, pods and plans: that it
plans at all proves it never writes. It must see what the operator sees: a plan's own placement
comes back as its previous plan, and the cards other plans hold are reserved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import Api, Kubectl, OperatorProcess, one_type, plan_manifest, settled, wait_for
from e2e.test_rbac import _token_kubeconfig

READ_ONLY_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]},
    {"apiGroups": ["gpuplan.ragnaros.io"], "resources": ["gpuallocationplans"], "verbs": ["get", "list"]},
]


@pytest.fixture(scope="module")
def reader(kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kubeconfig for a service account that can only read nodes, pods and plans."""
    name = f"gpuplan-reader-{uuid.uuid4().hex[:5]}"
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "default"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": READ_ONLY_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}],
        },
    ]
    for m in manifests:
        kubectl.apply(m)
    token = kubectl.run("create", "token", name, "-n", "default", "--duration=1h").stdout.strip()
    path = _token_kubeconfig(kubectl, token, "default", tmp_path_factory.mktemp("reader") / "kubeconfig")
    yield path
    kubectl.run("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found", check=False)
    kubectl.run("delete", "serviceaccount", name, "-n", "default", "--ignore-not-found", check=False)


def cli(*args: str, stdin: str | None = None, prog: str = "gpuplan") -> subprocess.CompletedProcess[str]:
    module = "gpuplan.kubectl" if prog == "kubectl-gpuplan" else "gpuplan"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}  # only what the test passes
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def nodes_of_new_type(api: Api, make_nodes: Any, count: int) -> tuple[str, list[str]]:
    """A fresh GPU type's nodes, Ready and without the not-ready taint (a one-shot read plans once)."""
    gpu_type = f"cli-{uuid.uuid4().hex[:6]}"
    names: list[str] = make_nodes("cli", count, gpu_type=gpu_type)
    wait_for(
        "untainted", lambda: all(not (api.node(n) or {}).get("spec", {}).get("taints") for n in names), 90
    )
    return gpu_type, names


def write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_plans_from_the_cluster_with_a_read_only_token(
    api: Api, ns: str, reader: str, make_nodes: Any, tmp_path: Path
) -> None:
    gpu_type, nodes = nodes_of_new_type(api, make_nodes, 3)
    doc = plan_manifest(ns, "offline", one_type(gpu_type, {"face_1vn": {"G": 8}, "security_pass": {"G": 2}}))
    proc = cli("plan", write(tmp_path, doc), "--kubeconfig", reader, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["feasible"] and {n for a in out["allocations"] for n in a["nodes"]} <= set(nodes)
    assert "read " in proc.stderr and "nodes from https://" in proc.stderr


def test_a_plan_in_the_cluster_is_planned_against_its_own_placement_and_others_cards(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    reader: str,
    operator: OperatorProcess,
    make_nodes: Any,
    tmp_path: Path,
) -> None:
    gpu_type, nodes = nodes_of_new_type(api, make_nodes, 2)
    held = plan_manifest(ns, "held", one_type(gpu_type, {"face_1vn": {"G": 8}}))
    kubectl.apply(held)
    wait_for("held Applied", settled(api, ns, "held", phase="Applied"), timeout=90)
    holder = next(iter(next(iter(api.status(ns, "held")["allocations"]))["nodes"]))
    # a second plan asking for 8 more cards of the type: only the other node can take it
    mine = plan_manifest(ns, "mine", one_type(gpu_type, {"body_1vn": {"G": 8}}))
    proc = cli("plan", write(tmp_path, mine), "--kubeconfig", reader, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    (alloc,) = json.loads(proc.stdout)["allocations"]
    assert list(alloc["nodes"]) == [n for n in nodes if n != holder]
    # the plan the cluster already has: its own placement is the previous plan, nothing moves
    proc = cli("plan", write(tmp_path, held), "--kubeconfig", reader, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["moved"] == 0


def test_nodes_from_standard_input_as_kubectl_json(
    api: Api, ns: str, kubectl: Kubectl, make_nodes: Any, tmp_path: Path
) -> None:
    gpu_type, _ = nodes_of_new_type(api, make_nodes, 2)
    nodes_json = kubectl.run(
        "get", "nodes", "-l", f"gpuplan.ragnaros.io/gpu-type={gpu_type}", "-o", "json"
    ).stdout
    doc = plan_manifest(ns, "stdin", one_type(gpu_type, {"security_pass": {"G": 4}}))
    proc = cli("plan", write(tmp_path, doc), "--nodes", "-", "-o", "json", stdin=nodes_json)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["feasible"]


def test_kubectl_plugin_status_lists_the_plans(
    api: Api, kubectl: Kubectl, ns: str, reader: str, operator: OperatorProcess, make_nodes: Any
) -> None:
    gpu_type, _ = nodes_of_new_type(api, make_nodes, 1)
    kubectl.apply(plan_manifest(ns, "shown", one_type(gpu_type, {"face_1vn": {"G": 8}})))
    wait_for("shown Applied", settled(api, ns, "shown", phase="Applied"), timeout=90)
    proc = cli("status", "-n", ns, "--kubeconfig", reader, prog="kubectl-gpuplan")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()[:2]
    assert header.split()[:5] == ["NAMESPACE", "NAME", "PHASE", "SCORE", "CARDS"]
    assert row.split()[:3] == [ns, "shown", "Applied"] and "8/8" in row
    proc = cli("status", "shown", "-n", ns, "--kubeconfig", reader, prog="kubectl-gpuplan")
    assert "placement:" in proc.stdout and "face_1vn 1×8 G" in proc.stdout and "Applied=True" in proc.stdout


def test_an_unreachable_cluster_is_one_line_and_exit_1(tmp_path: Path) -> None:
    doc = plan_manifest("x", "y", one_type("none", {"face_1vn": {"G": 8}}))
    proc = cli("plan", write(tmp_path, doc), "--kubeconfig", str(tmp_path / "absent"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
