"""The chart's ValidatingAdmissionPolicy on a real API server: the operator's service account may
change its plans' node labels and nothing else on a node, whatever its RBAC ``patch nodes`` allows.

Notes
-----
Each case installs the chart's ServiceAccount, RBAC and policy (``helm template``, unique release
name) and patches a fresh kwok node as the account, through impersonation (``Impersonate-User``).
Refusals are checked with ``--dry-run=server`` (admission runs, nothing is stored) and the allowed
patches for real. The same patch made by the admin passes: the policy binds to the operator's
account only. ``e2e/test_rbac.py`` installs the policy too and runs the operator through a plan's
whole life under it, so the operator's own patches are proven to pass.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from gpuplan_operator.kube import MERGE_PATCH, Kube, api_error_message, load_api_client, path_for
from kubernetes.client.exceptions import ApiException

from e2e.support import Api, Kubectl, wait_for
from planner.base.vocab import plan_label_key
from tests.chart.helm import find_helm, one, render

INSTALLED = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
LONG_NS = "team-" + "x" * 50  # 55 characters: its plans' label keys are cut and hashed


@dataclass(frozen=True)
class Install:
    user: str  # system:serviceaccount:<ns>:<name>
    policy: str
    watched: tuple[str, ...]


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def _key(namespace: str, name: str) -> str:
    """The label key the operator writes for plan ``namespace/name`` (its own function)."""
    return plan_label_key(namespace, name)


@pytest.fixture(scope="module", params=["cluster-wide", "watched namespaces"])
def install(request: pytest.FixtureRequest, helm: str, api: Api, kubectl: Kubectl) -> Iterator[Install]:
    suffix = uuid.uuid4().hex[:5]
    home = f"e2e-vap-{suffix}"
    watched: tuple[str, ...] = ("ragnaros", LONG_NS) if request.param == "watched namespaces" else ()
    made = [home]
    for ns in watched:  # the Roles of watched namespaces need them
        if not api.kube.get_or_none(f"/api/v1/namespaces/{ns}"):
            made.append(ns)
    for ns in made:
        api.create("v1", "namespaces", {"metadata": {"name": ns}})
    values: dict[str, Any] = {"watchNamespaces": list(watched)} if watched else {}
    docs = [
        d for d in render(helm, values, release=f"vap-{suffix}", namespace=home) if d["kind"] in INSTALLED
    ]
    cluster_objects = [(d["kind"], d["metadata"]["name"]) for d in docs if "namespace" not in d["metadata"]]
    policy = one(docs, "ValidatingAdmissionPolicy")["metadata"]["name"]
    user = f"system:serviceaccount:{home}:{one(docs, 'ServiceAccount')['metadata']['name']}"
    try:
        kubectl.apply(docs)
        yield Install(user, policy, watched)
    finally:
        for kind, name in cluster_objects:
            kubectl.run("delete", kind.lower(), name, "--ignore-not-found", check=False)
        for ns in made:
            api.delete("v1", "namespaces", ns)


def _patch(api: Api, node: str, patch: dict[str, Any], as_user: str | None, dry_run: bool = True) -> str:
    """Merge-patch a node with the operator's transport, as ``as_user`` (impersonated) or as the
    admin; "" when admitted, else the API server's message. A PATCH, like the operator's: kubectl
    would GET the node first, which the account may not."""
    kube = Kube(load_api_client(kubeconfig=os.environ["KUBECONFIG"]))
    if as_user:
        kube.api.set_default_header("Impersonate-User", as_user)  # type: ignore[no-untyped-call]
    query = {"fieldManager": "gpuplan-operator", "dryRun": "All" if dry_run else None}
    try:
        kube.request(
            "PATCH", path_for("v1", "nodes", node), body=patch, content_type=MERGE_PATCH, query=query
        )
    except ApiException as e:
        return f"{e.status}: {api_error_message(e)}"
    return ""


@pytest.fixture
def node(install: Install, make_nodes: Callable[..., list[str]], api: Api) -> str:
    """A fresh node, once the policy is in force (the API server loads new policies in a moment)."""
    (name,) = make_nodes("vap", 1)
    wait_for(
        "the node label policy to be in force",
        lambda: install.policy in _patch(api, name, {"metadata": {"labels": {"probe": "x"}}}, install.user),
        timeout=60,
    )
    return name


def test_the_policy_type_checks_cleanly(install: Install, kubectl: Kubectl) -> None:
    """The API server type-checks CEL against the Node schema: no warnings means no typo."""

    def checked() -> dict[str, Any] | None:
        policy = json.loads(
            kubectl.run("get", "validatingadmissionpolicy", install.policy, "-o", "json").stdout
        )
        status = policy.get("status") or {}
        return status if "typeChecking" in status else None

    status = wait_for("the policy to be type-checked", checked, timeout=60)
    assert not (status["typeChecking"] or {}).get("expressionWarnings"), status


def _labels(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {key: value}}}


FORBIDDEN: list[Any] = [
    pytest.param(_labels("gpuplan.ragnaros.io/gpu-type", "T4"), "gpuplan.ragnaros.io/gpu-type",
                 id="changing the GPU type label is refused"),
    pytest.param(_labels("team", "vision"), "not: team", id="adding a label of someone else is refused"),
    pytest.param(_labels("kubernetes.io/hostname", None), "kubernetes.io/hostname",
                 id="removing a system label is refused"),
    pytest.param({"spec": {"unschedulable": True}}, "spec", id="cordoning the node is refused"),
    pytest.param({"spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}, "spec",
                 id="tainting the node is refused"),
    pytest.param({"metadata": {"annotations": {"note": "x"}}}, "annotations",
                 id="annotating the node is refused"),
    pytest.param({"metadata": {"labels": {"gpuplan.ragnaros.io/default.web": "n", "team": "x"}}}, "team",
                 id="a foreign label is refused even beside a plan label"),
]  # fmt: skip


@pytest.mark.parametrize(("patch", "why"), FORBIDDEN)
def test_the_operators_account_cannot(
    install: Install, node: str, api: Api, patch: dict[str, Any], why: str
) -> None:
    refused = _patch(api, node, patch, install.user)
    assert refused, f"{install.user} could patch {patch}"
    assert refused.startswith(("422: ", "403: ")), refused
    assert f"ValidatingAdmissionPolicy '{install.policy}'" in refused and why in refused, refused
    assert not _patch(api, node, patch, None), "the admin is not bound by the policy"


def _own_keys(install: Install) -> list[str]:
    if install.watched:
        return [_key("ragnaros", "image-fence"), _key(LONG_NS, "a-plan-with-a-long-name")]
    return [_key("default", "web"), _key("x" * 60, "long")]


def test_the_operators_account_can_set_and_remove_its_plans_labels(
    install: Install, node: str, api: Api
) -> None:
    for key in _own_keys(install):
        assert not _patch(api, node, _labels(key, node), install.user, dry_run=False)
        assert (api.node(node) or {})["metadata"]["labels"][key] == node
        assert not _patch(api, node, _labels(key, "node-0123abcd"), install.user, dry_run=False)
        assert not _patch(api, node, _labels(key, None), install.user, dry_run=False)
        assert key not in (api.node(node) or {})["metadata"]["labels"]


def test_watched_namespaces_limit_the_keys_to_their_plans(install: Install, node: str, api: Api) -> None:
    other = _key("someone-else", "plan")
    refused = _patch(api, node, _labels(other, node), install.user)
    if install.watched:
        assert other in refused and "of namespaces ragnaros" in refused, refused
    else:
        assert not refused  # cluster-wide it serves every namespace's plans
