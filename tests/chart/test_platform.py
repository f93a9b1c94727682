"""What platform teams expect of the chart: a PodDisruptionBudget, JSON logs, a values schema that
refuses mistakes by name, ClusterRoles for plan users aggregated into view/edit/admin, the node
label policy, and NOTES that stand on their own.

Notes
-----
These render with ``helm`` and need no cluster. The objects are proven on a real API server by
``e2e/test_chart_install.py`` (server-side dry run of everything, NOTES through ``helm install
--dry-run=server``), ``e2e/test_user_roles.py`` (aggregation) and ``e2e/test_node_label_policy.py``
(the policy refuses foreign node patches by the operator's account). Helm does not render
NOTES.txt in ``helm template``; :func:`notes` renders it through a copy of the chart with one
extra template that includes it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.read.parse import parse_plan
from tests.chart.helm import CHART, NAMESPACE, RELEASE, REPO, Doc, by_kind, find_helm, one, render, set_args

FULLNAME = f"{RELEASE}-gpuplan-operator"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


# --- PodDisruptionBudget ---------------------------------------------------------------------


def _pod_labels(docs: list[Doc]) -> dict[str, str]:
    return dict(one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize(
    ("values", "budget"),
    [
        pytest.param({}, {"maxUnavailable": 1}, id="by default a drain may move the one replica"),
        pytest.param({"replicaCount": 2, "podDisruptionBudget.minAvailable": 1}, {"minAvailable": 1},
                     id="minAvailable replaces maxUnavailable and keeps a standby"),
        pytest.param({"replicaCount": 4, "podDisruptionBudget.maxUnavailable": "50%"}, {"maxUnavailable": "50%"},
                     id="a percentage is passed through"),
    ],
)  # fmt: skip
def test_the_budget_selects_the_operator_pods(helm: str, values: dict[str, Any], budget: Doc) -> None:
    docs = render(helm, values)
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["metadata"]["namespace"] == NAMESPACE
    spec = dict(pdb["spec"])
    assert spec.pop("selector")["matchLabels"].items() <= _pod_labels(docs).items()
    assert spec.pop("unhealthyPodEvictionPolicy") == "AlwaysAllow"  # a crash-looping pod never blocks a drain
    assert spec == budget


def test_the_budget_can_be_left_out(helm: str) -> None:
    assert not by_kind(render(helm, {"podDisruptionBudget.enabled": False}), "PodDisruptionBudget")


# --- JSON logs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "flag"),
    [pytest.param("json", ["--log-format", "json"], id="json passes --log-format json"),
     pytest.param("text", [], id="text is the operator's default and passes nothing")],
)  # fmt: skip
def test_log_format(helm: str, value: str, flag: list[str]) -> None:
    from gpuplan_operator.__main__ import parser

    args = one(render(helm, {"logFormat": value}), "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert [a for a in args if a in ("--log-format", "json", "text")] == flag
    assert parser().parse_args(args).log_format == value


# --- values.schema.json ----------------------------------------------------------------------


def _leaf_paths(values: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of values.yaml down to the keys whose values are free-form or scalar."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, dict) and value and _schema_at(path).get("properties"):
            yield from _leaf_paths(value, f"{path}.")


def _schema_at(path: str) -> dict[str, Any]:
    node: dict[str, Any] = SCHEMA
    for part in path.split("."):
        properties = node.get("properties") or {}
        assert part in properties, f"values.schema.json has no property {path!r}"
        node = properties[part]
    return node


def test_every_value_is_in_the_schema_with_a_description() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in _leaf_paths(values):
        assert _schema_at(path).get("description"), f"{path} has no description in values.schema.json"


def test_every_schema_property_is_a_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, Any], value: Any, prefix: str) -> None:
        for key, sub in (node.get("properties") or {}).items():
            if key == "global":  # Helm's, for parent charts
                continue
            assert isinstance(value, dict) and key in value, (
                f"{prefix}{key} is in the schema, not in values.yaml"
            )
            walk(sub, value[key], f"{prefix}{key}.")

    walk(SCHEMA, values, "")


@pytest.mark.parametrize(
    ("values", "where", "why"),
    [
        pytest.param({"replicas": 2}, "''", "additional properties 'replicas'", id="a misspelt top-level value is refused"),
        pytest.param({"image.tags": "1"}, "'/image'", "additional properties 'tags'", id="a misspelt nested value is refused"),
        pytest.param({"replicaCount": 0}, "'/replicaCount'", "minimum", id="zero replicas are refused"),
        pytest.param({"replicaCount": "two"}, "'/replicaCount'", "want integer", id="replicas must be a number"),
        pytest.param({"logFormat": "xml"}, "'/logFormat'", "'text', 'json'", id="an unknown log format is refused"),
        pytest.param({"logLevel": "trace"}, "'/logLevel'", "'info', 'debug'", id="an unknown log level is refused"),
        pytest.param({"image.pullPolicy": "Sometimes"}, "'/image/pullPolicy'", "must be one of", id="an unknown pull policy is refused"),
        pytest.param({"image.digest": "latest"}, "'/image/digest'", "does not match", id="a digest must be sha256"),
        pytest.param({"watchNamespaces": ["a", "a"]}, "'/watchNamespaces'", "items at 0 and 1 are equal", id="namespaces are listed once"),
        pytest.param({"planning.planSeconds": "soon"}, "'/planning/planSeconds'", "anyOf", id="a planning time must be a number"),
        pytest.param({"planning.planSeconds": -5}, "'/planning/planSeconds'", "anyOf", id="a planning time must be positive"),
        pytest.param({"podDisruptionBudget.maxUnavailable": "lots"}, "'/podDisruptionBudget/maxUnavailable'", "anyOf", id="a budget is a number or a percentage"),
        pytest.param({"metrics.port": 70000}, "'/metrics/port'", "maximum", id="a port is at most 65535"),
        pytest.param({"nodeLabelPolicy.enabled": "yes"}, "'/nodeLabelPolicy/enabled'", "want boolean", id="switches are booleans"),
        pytest.param({"tmpSizeLimit": "lots"}, "'/tmpSizeLimit'", "does not match", id="a size is a quantity"),
    ],
)  # fmt: skip
def test_the_schema_refuses_mistakes_naming_the_value(
    helm: str, values: dict[str, Any], where: str, why: str
) -> None:
    proc = subprocess.run(
        [helm, "template", RELEASE, str(CHART), *set_args(values)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert f"at {where}" in proc.stderr and why in proc.stderr, proc.stderr


def test_the_schema_accepts_the_documented_examples(helm: str) -> None:
    values = {
        "image.digest": "sha256:" + "0" * 64, "watchNamespaces": ["ragnaros", "team-b"],
        "planning.planSeconds": 10, "planning.debounce": "2.5", "logFormat": "json",
        "podDisruptionBudget.minAvailable": "50%", "metrics.serviceMonitor.scrapeTimeout": "10s",
        "tmpSizeLimit": "128Mi", "global": {"imageRegistry": "registry.example.com"},
    }  # fmt: skip
    assert render(helm, values)


# --- ClusterRoles for plan users -------------------------------------------------------------


def test_plan_users_get_view_and_edit_roles_aggregated_into_the_defaults(helm: str) -> None:
    roles = {r["metadata"]["name"]: r for r in by_kind(render(helm), "ClusterRole")}
    view, edit = roles[f"{FULLNAME}-view"], roles[f"{FULLNAME}-edit"]
    aggregated = {
        name: sorted(k.removeprefix(AGGREGATE) for k, v in r["metadata"]["labels"].items() if k.startswith(AGGREGATE) and v == "true")
        for name, r in (("view", view), ("edit", edit))
    }  # fmt: skip
    assert aggregated == {"view": ["admin", "edit", "view"], "edit": ["admin", "edit"]}
    assert view["rules"] == [
        {
            "apiGroups": ["gpuplan.ragnaros.io"],
            "resources": ["gpuallocationplans"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert edit["rules"] == [
        {"apiGroups": ["gpuplan.ragnaros.io"], "resources": ["gpuallocationplans"],
         "verbs": ["create", "update", "patch", "delete", "deletecollection"]}
    ]  # fmt: skip
    # only the operator writes status; neither role is bound to anyone by the chart
    bound = {b["roleRef"]["name"] for b in by_kind(render(helm), "ClusterRoleBinding")}
    assert bound == {FULLNAME}


@pytest.mark.parametrize(
    "values",
    [pytest.param({"rbac.aggregateToDefaultRoles": False}, id="turned off"),
     pytest.param({"rbac.create": False}, id="no RBAC at all")],
)  # fmt: skip
def test_user_roles_can_be_left_out(helm: str, values: dict[str, Any]) -> None:
    names = [r["metadata"]["name"] for r in by_kind(render(helm, values), "ClusterRole")]
    assert f"{FULLNAME}-view" not in names and f"{FULLNAME}-edit" not in names


# --- the node label policy -------------------------------------------------------------------


def _policy(docs: list[Doc]) -> tuple[Doc, Doc]:
    return one(docs, "ValidatingAdmissionPolicy"), one(docs, "ValidatingAdmissionPolicyBinding")


def test_the_policy_binds_to_the_operators_account_and_denies(helm: str) -> None:
    docs = render(helm, {"serviceAccount.name": "ops"})
    policy, binding = _policy(docs)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:ops'"


def _allowed_keys_expression(docs: list[Doc]) -> str:
    policy, _ = _policy(docs)
    return str(next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "foreignLabels"))


def test_watched_namespaces_narrow_the_keys_to_their_own_plans(helm: str) -> None:
    long_ns = "n" * 40 + "-" + "m" * 15  # 56 characters: its plans' keys are cut and hashed
    expression = _allowed_keys_expression(render(helm, {"watchNamespaces": ["ragnaros", long_ns]}))
    prefixes = re.findall(r"'(gpuplan\.ragnaros\.io/[^']*)'", expression)
    assert prefixes == [
        "gpuplan.ragnaros.io/ragnaros.",
        f"gpuplan.ragnaros.io/{long_ns}.",
        f"gpuplan.ragnaros.io/{long_ns[:54]}-",
    ]
    cluster_wide = _allowed_keys_expression(render(helm))
    assert "k.substring(20).contains('.')" in cluster_wide  # any plan's key: <namespace>.<plan>


def test_the_policy_needs_kubernetes_1_30(helm: str) -> None:
    proc = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "--kube-version", "1.29.4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "nodeLabelPolicy needs Kubernetes 1.30+" in proc.stderr, proc.stderr
    docs = render(helm, {"nodeLabelPolicy.enabled": False}, extra=["--kube-version", "1.29.4"])
    assert not by_kind(docs, "ValidatingAdmissionPolicy") and not by_kind(
        docs, "ValidatingAdmissionPolicyBinding"
    )


# --- NOTES.txt -------------------------------------------------------------------------------


def notes(helm: str, tmp_path: Path, values: dict[str, Any] | None = None) -> str:
    """NOTES.txt as ``helm install`` prints it (rendered through an extra template)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    probe = 'kind: NotesProbe\nnotes: {{ include "gpuplan-operator/templates/NOTES.txt" . | toJson }}\n'
    (chart / "templates" / "notes-probe.yaml").write_text(probe)
    args = [
        helm,
        "template",
        RELEASE,
        str(chart),
        "-n",
        NAMESPACE,
        "--show-only",
        "templates/notes-probe.yaml",
    ]
    proc = subprocess.run(
        [*args, *set_args(values or {})], capture_output=True, text=True, timeout=60, check=True
    )
    return str(yaml.safe_load(proc.stdout)["notes"])


def inline_plan(text: str) -> dict[str, Any]:
    """The plan NOTES.txt shows between ``kubectl apply -f - <<'EOF'`` and ``EOF``."""
    match = re.search(r"^kubectl apply -f - <<'EOF'\n(.*?)^EOF$", text, re.M | re.S)
    assert match, text
    return dict(yaml.safe_load(match.group(1)))


@pytest.mark.parametrize(
    ("values", "namespace"),
    [pytest.param({}, "ragnaros", id="all namespaces: the example makes its own"),
     pytest.param({"watchNamespaces": ["team-b", "team-c"]}, "team-b", id="watched namespaces: the example uses the first")],
)  # fmt: skip
def test_notes_show_a_plan_inline_and_name_no_repository_file(
    helm: str, tmp_path: Path, values: dict[str, Any], namespace: str
) -> None:
    text = notes(helm, tmp_path, values)
    for word in ("examples/", "crds/", ".yaml", "repository", "git clone"):
        assert word not in text, f"NOTES.txt mentions {word!r}:\n{text}"
    plan = inline_plan(text)
    assert plan["kind"] == "GpuAllocationPlan" and plan["metadata"]["namespace"] == namespace
    assert plan["spec"]["dryRun"] is True  # a first plan writes nothing but its status
    assert ("kubectl create namespace" in text) is (not values)
    parse_plan(plan)  # the planner accepts it as it stands


def test_the_inline_plan_plans_on_the_example_nodes(helm: str, tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(inline_plan(notes(helm, tmp_path))))
    cmd = ["-m", "gpuplan"]
    proc = subprocess.run(
        [sys.executable, *cmd, "plan", str(path), "--nodes", str(REPO / "examples" / "nodes.yaml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "cards placed 3/3" in proc.stdout, proc.stdout
