"""The Helm chart: lint, render, security settings, least-privilege RBAC, CRD copies in sync.

Notes
-----
These run ``helm`` (see :mod:`tests.chart.helm`: built once by ``hack/install-helm.sh``) and need no
cluster; ``e2e/test_chart_install.py`` and ``e2e/test_rbac.py`` check the same chart against a real
API server. The RBAC table below is the operator's API calls, read from
``operator/gpuplan_operator/cluster.py`` and kopf; a new call there needs a row here and a rule in
``templates/rbac.yaml``.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import (
    CHART,
    NAMESPACE,
    REPO,
    Doc,
    by_kind,
    find_helm,
    one,
    render,
    run_helm,
    set_args,
    template_text,
)

# Value sets every structural test runs on: (id, values).
VALUE_SETS = [
    pytest.param({}, id="default values"),
    pytest.param({"replicaCount": 2}, id="two replicas with peering"),
    pytest.param({"metrics.serviceMonitor.enabled": True}, id="metrics with a ServiceMonitor"),
    pytest.param({"metrics.enabled": False}, id="metrics off"),
    pytest.param({"view.enabled": True}, id="the plans' picture on the metrics port"),
    pytest.param({"watchNamespaces": ["ragnaros", "team-b"]}, id="two watched namespaces"),
    pytest.param(
        {"replicaCount": 3, "watchNamespaces": ["ragnaros"], "logLevel": "debug", "planning.planSeconds": 10},
        id="namespaced peering with debug logs",
    ),
    pytest.param({"logFormat": "json", "podDisruptionBudget.minAvailable": 1}, id="JSON logs and a budget"),
    pytest.param(
        {
            "planning.priorityClassValueBase": 500000000,
            "planning.planSeconds": 2.5,
            "planning.gangTimeout": 90,
            "planning.orphanGrace": 30,
            "planning.settle": 0,
        },
        id="a lower PriorityClass base and fractional plan seconds",
    ),
]

# What the operator does to the API server: (api group, resource, verb, cluster-wide?). Cluster-wide
# rows must be granted by the ClusterRole; namespaced rows by the ClusterRole or by the Role of
# every watched namespace.
NEEDED = [
    # kopf watches plans; cluster.read_plan, cluster.list_plans (all namespaces)
    ("gpuplan.ragnaros.io", "gpuallocationplans", "list", True),
    ("gpuplan.ragnaros.io", "gpuallocationplans", "watch", True),
    ("gpuplan.ragnaros.io", "gpuallocationplans", "get", True),
    # kopf's finalizer and annotations; cluster.patch_plan_status
    ("gpuplan.ragnaros.io", "gpuallocationplans", "patch", False),
    ("gpuplan.ragnaros.io", "gpuallocationplans/status", "patch", False),
    # kopf's node_event handler; cluster.list_nodes/list_labelled_nodes/patch_node_labels
    ("", "nodes", "list", True),
    ("", "nodes", "watch", True),
    ("", "nodes", "patch", True),
    # cluster.list_active_pods (all namespaces), cluster.list_plan_pods
    ("", "pods", "list", True),
    ("", "pods", "watch", True),  # a watch-fed cache of the pods
    # cluster.release_gate: lifts the gang gate of the plans' pods
    ("", "pods", "patch", False),
    # cluster.read_priority_class/list_managed_priority_classes/apply_object/delete_priority_classes
    ("scheduling.k8s.io", "priorityclasses", "get", True),
    ("scheduling.k8s.io", "priorityclasses", "list", True),
    ("scheduling.k8s.io", "priorityclasses", "create", True),
    ("scheduling.k8s.io", "priorityclasses", "patch", True),
    ("scheduling.k8s.io", "priorityclasses", "delete", True),
    # the flamewakers ConfigMap: read_configmap, apply_object, delete_configmap
    ("", "configmaps", "get", False),
    ("", "configmaps", "create", False),
    ("", "configmaps", "patch", False),
    ("", "configmaps", "delete", False),
    # Deployments: their cache (list, watch), list_plan_deployments, read_deployment,
    # apply_object, delete_deployment
    ("apps", "deployments", "list", False),
    ("apps", "deployments", "watch", False),
    ("apps", "deployments", "get", False),
    ("apps", "deployments", "create", False),
    ("apps", "deployments", "patch", False),
    ("apps", "deployments", "delete", False),
    # kopf.event and kopf's own events
    ("", "events", "create", False),
    # DRA, read-only: cluster.list_resource_slices (and kopf's slice_event), list_resource_claims
    ("resource.k8s.io", "resourceslices", "list", True),
    ("resource.k8s.io", "resourceslices", "watch", True),
    ("resource.k8s.io", "resourceclaims", "list", True),
    # NUMA zones, read-only: cluster.list_node_topologies and kopf's topology_event
    ("topology.node.k8s.io", "noderesourcetopologies", "list", True),
    ("topology.node.k8s.io", "noderesourcetopologies", "watch", True),
    # kopf's resource observation
    ("apiextensions.k8s.io", "customresourcedefinitions", "list", True),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch", True),
]

# Never granted, whatever the values: (api group, resource, verb).
FORBIDDEN = [
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "secrets", "watch"),
    ("", "nodes", "delete"),
    ("", "nodes", "create"),
    ("", "pods", "create"),
    ("", "pods", "delete"),
    ("", "pods/exec", "create"),
    ("", "pods/attach", "create"),
    ("", "pods/portforward", "create"),
    ("", "serviceaccounts/token", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "create"),  # the operator never installs its CRD
    ("apiextensions.k8s.io", "customresourcedefinitions", "delete"),
    ("rbac.authorization.k8s.io", "clusterroles", "escalate"),
    ("rbac.authorization.k8s.io", "clusterroles", "bind"),
    ("", "serviceaccounts", "impersonate"),
    ("", "users", "impersonate"),
    ("resource.k8s.io", "resourceslices", "create"),  # it plans on devices, never publishes them
    ("topology.node.k8s.io", "noderesourcetopologies", "create"),  # nor NUMA zones
    ("topology.node.k8s.io", "noderesourcetopologies", "update"),
    ("topology.node.k8s.io", "noderesourcetopologies", "patch"),
]


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def _deployment(docs: Sequence[Doc]) -> Doc:
    return one(docs, "Deployment")


def _container(docs: Sequence[Doc]) -> Doc:
    containers = _deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def grants(rules: Iterable[Doc], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and (verb in r.get("verbs", []) or "*" in r.get("verbs", []))
        for r in rules
    )


def _for_users(role: Doc) -> bool:
    """The ClusterRoles for plan users (aggregated into view/edit/admin; tests/chart/test_platform.py)."""
    labels = role["metadata"].get("labels") or {}
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels)


def _operator_cluster_role(docs: Sequence[Doc]) -> Doc:
    roles = [d for d in by_kind(docs, "ClusterRole") if not _for_users(d)]
    assert len(roles) == 1, [r["metadata"]["name"] for r in roles]
    return roles[0]


def _rules(docs: Sequence[Doc], kind: str, namespace: str | None = None) -> list[Doc]:
    """The rules of the operator's own roles of this kind (not the roles for plan users)."""
    out: list[Doc] = []
    for d in by_kind(docs, kind):
        if _for_users(d):
            continue
        if namespace is None or d["metadata"].get("namespace") == namespace:
            out += d.get("rules") or []
    return out


# --- lint and render -------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS)
def test_helm_lint_passes_strictly(helm: str, values: dict[str, Any]) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), *set_args(values), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("values", VALUE_SETS)
def test_renders_the_operator_objects(helm: str, values: dict[str, Any]) -> None:
    docs = render(helm, values)
    kinds = sorted({d["kind"] for d in docs})
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"):
        assert kind in kinds, kinds
    for d in docs:
        assert d["metadata"]["name"]
        assert d["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuplan-operator"
    deployment = _deployment(docs)
    assert deployment["metadata"]["namespace"] == NAMESPACE
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"]
        == one(docs, "ServiceAccount")["metadata"]["name"]
    )
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == _operator_cluster_role(docs)["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": one(docs, "ServiceAccount")["metadata"]["name"],
            "namespace": NAMESPACE,
        }
    ]


def test_include_crds_renders_the_crd_first(helm: str) -> None:
    docs = render(helm, extra=["--include-crds"])
    crds = by_kind(docs, "CustomResourceDefinition")
    assert {c["metadata"]["name"] for c in crds} == {
        "gpuallocationplans.gpuplan.ragnaros.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev",
    }  # fmt: skip
    assert docs[0]["kind"] == "CustomResourceDefinition"


def test_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


# --- the Deployment --------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS)
def test_deployment_is_locked_down(helm: str, values: dict[str, Any]) -> None:
    docs = render(helm, values)
    pod = _deployment(docs)["spec"]["template"]["spec"]
    container = _container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int) and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    assert not sc.get("privileged")
    # the one writable place: an emptyDir at /tmp
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert next(v for v in pod["volumes"] if v["name"] == "tmp")["emptyDir"]
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]


@pytest.mark.parametrize("values", VALUE_SETS)
def test_probes_use_the_kopf_liveness_endpoint(helm: str, values: dict[str, Any]) -> None:
    container = _container(render(helm, values))
    args = container["args"]
    url = args[args.index("--liveness") + 1]
    assert url == "http://0.0.0.0:8080/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == 8080
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
        assert container[probe]["periodSeconds"] > 0


@pytest.mark.parametrize("values", VALUE_SETS)
def test_the_operator_accepts_the_rendered_arguments(helm: str, values: dict[str, Any]) -> None:
    """Every flag the chart passes exists in ``python -m gpuplan_operator`` (its own parser)."""
    from gpuplan_operator.__main__ import parser

    container = _container(render(helm, values))
    args = list(container["args"])
    if container.get("command"):  # peering: the shell wrapper adds a random --priority
        script = container["command"][2]
        assert container["command"][:2] == ["/bin/sh", "-c"] and "--priority" in script
        assert 'exec python -m gpuplan_operator --priority "$(' in script and script.endswith('"$@"')
        args += ["--priority", "12345"]
    parsed = parser().parse_args(args)
    assert parsed.liveness == "http://0.0.0.0:8080/healthz"
    assert parsed.namespace == list(values.get("watchNamespaces", []))
    assert parsed.verbose is (values.get("logLevel") == "debug")
    assert parsed.log_format == values.get("logFormat", "text")
    if "planning.planSeconds" in values:
        assert parsed.plan_seconds == values["planning.planSeconds"]
    assert parsed.gang_timeout == values.get("planning.gangTimeout", 180)
    assert parsed.orphan_grace == values.get("planning.orphanGrace", 300)
    assert parsed.settle == values.get("planning.settle", 0.2)
    # helm hands YAML numbers to templates as float64: a large one must not arrive as "5e+08"
    assert parsed.priority_base == values.get("planning.priorityClassValueBase", 800_000_000)


def test_the_shell_wrapper_draws_a_priority(tmp_path: Path, helm: str) -> None:
    """The peering command runs under /bin/sh and hands the operator a numeric --priority."""
    script = _container(render(helm, {"replicaCount": 2}))["command"][2]
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    proc = subprocess.run(
        ["/bin/sh", "-c", script, "gpuplan-operator", "--peering", "p"],
        capture_output=True, text=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    argv = proc.stdout.split()
    assert argv[:3] == ["-m", "gpuplan_operator", "--priority"]
    assert argv[3].isdigit() and argv[4:] == ["--peering", "p"]


def test_one_replica_runs_standalone_and_is_recreated(helm: str) -> None:
    docs = render(helm)
    container = _container(docs)
    assert "--peering" not in container["args"] and "command" not in container
    assert _deployment(docs)["spec"]["strategy"] == {"type": "Recreate"}
    assert not by_kind(docs, "ClusterKopfPeering") and not by_kind(docs, "KopfPeering")


def test_replicas_peer_through_the_peering_object_the_chart_creates(helm: str) -> None:
    docs = render(helm, {"replicaCount": 2})
    container = _container(docs)
    name = container["args"][container["args"].index("--peering") + 1]
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == name
    assert _deployment(docs)["spec"]["replicas"] == 2
    assert _deployment(docs)["spec"]["strategy"]["type"] == "RollingUpdate"
    assert grants(_rules(docs, "ClusterRole"), "kopf.dev", "clusterkopfpeerings", "patch")


def test_namespaced_peering_uses_a_kopfpeering_per_namespace(helm: str) -> None:
    docs = render(helm, {"replicaCount": 2, "watchNamespaces": ["a", "b"]})
    assert sorted(p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")) == ["a", "b"]
    assert not by_kind(docs, "ClusterKopfPeering")
    for ns in ("a", "b"):
        assert grants(_rules(docs, "Role", ns), "kopf.dev", "kopfpeerings", "patch")
    assert not grants(_rules(docs, "ClusterRole"), "kopf.dev", "clusterkopfpeerings", "patch")


def test_the_image_defaults_to_the_app_version_and_takes_a_digest(helm: str) -> None:
    assert _container(render(helm))["image"] == "gpuplan-operator:0.1.0"
    image = _container(
        render(helm, {"image.repository": "reg.example/gpuplan", "image.digest": "sha256:" + "a" * 64})
    )["image"]
    assert image == "reg.example/gpuplan@sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"logLevel": "trace"}, "logLevel", id="an unknown log level is refused"),
        pytest.param({"watchNamespaces": ["team-*"]}, "globs are not supported", id="a namespace glob is refused"),
        pytest.param({"metrics.enabled": False, "metrics.serviceMonitor.enabled": True}, "needs metrics.enabled", id="a ServiceMonitor without metrics is refused"),
        pytest.param({"metrics.enabled": False, "view.enabled": True}, "view.enabled needs metrics.enabled", id="the view without metrics is refused"),
    ],
)  # fmt: skip
def test_bad_values_fail_with_a_message(helm: str, values: dict[str, Any], message: str) -> None:
    proc = template_text(helm, values, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


# --- metrics ---------------------------------------------------------------------------------


def test_metrics_port_service_and_no_servicemonitor_by_default(helm: str) -> None:
    docs = render(helm)
    container = _container(docs)
    assert {"name": "metrics", "containerPort": 8000, "protocol": "TCP"} in container["ports"]
    assert {"name": "GPUPLAN_METRICS_PORT", "value": "8000"} in container["env"]
    service = one(docs, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8000, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert (
        service["spec"]["selector"].items()
        <= _deployment(docs)["spec"]["template"]["metadata"]["labels"].items()
    )
    assert not by_kind(docs, "ServiceMonitor")


def test_servicemonitor_scrapes_the_metrics_service(helm: str) -> None:
    docs = render(
        helm,
        {
            "metrics.port": 9100,
            "metrics.serviceMonitor.enabled": True,
            "metrics.serviceMonitor.labels": {"release": "prom"},
        },
    )
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert (
        monitor["spec"]["endpoints"][0]["port"] == "metrics"
        and monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert service["spec"]["ports"][0]["port"] == 9100
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in _container(docs)["ports"]


def test_metrics_off_leaves_no_port_or_service(helm: str) -> None:
    docs = render(helm, {"metrics.enabled": False})
    assert not by_kind(docs, "Service") and not by_kind(docs, "ServiceMonitor")
    container = _container(docs)
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert not [e for e in container["env"] if e["name"] == "GPUPLAN_METRICS_PORT"]


# --- RBAC ------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rbac_has_no_wildcards_secrets_or_node_deletion(helm: str, values: dict[str, Any]) -> None:
    docs = render(helm, values)
    rules = _rules(docs, "ClusterRole") + _rules(docs, "Role")
    assert rules
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), rule
            assert all("*" not in item for item in rule.get(field, [])), rule
        assert "nonResourceURLs" not in rule and "resourceNames" not in rule
    for group, resource, verb in FORBIDDEN:
        assert not grants(rules, group, resource, verb), f"{verb} {resource} must not be granted"
    # not even by a rule about a subresource of a resource that is not listed
    assert not any(r.startswith("secrets") for rule in rules for r in rule["resources"])


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rbac_grants_every_call_the_operator_makes(helm: str, values: dict[str, Any]) -> None:
    docs = render(helm, values)
    cluster = _rules(docs, "ClusterRole")
    watched = values.get("watchNamespaces") or []
    missing = []
    for group, resource, verb, cluster_wide in NEEDED:
        if grants(cluster, group, resource, verb):
            continue
        if (
            not cluster_wide
            and watched
            and all(grants(_rules(docs, "Role", ns), group, resource, verb) for ns in watched)
        ):
            continue
        missing.append(f"{verb} {resource}.{group or 'core'}")
    assert not missing, missing


def test_cluster_wide_rbac_is_one_clusterrole(helm: str) -> None:
    docs = render(helm)
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")
    # kopf lists namespaces only when it serves some of them
    assert not grants(_rules(docs, "ClusterRole"), "", "namespaces", "list")


def test_watched_namespaces_get_roles_and_the_clusterrole_writes_nothing_namespaced(helm: str) -> None:
    docs = render(helm, {"watchNamespaces": ["ragnaros", "team-b"]})
    cluster = _rules(docs, "ClusterRole")
    for group, resource, verb, cluster_wide in NEEDED:
        if not cluster_wide:
            assert not grants(cluster, group, resource, verb), f"{verb} {resource} should be namespaced"
    assert grants(cluster, "", "namespaces", "watch")  # kopf follows the watched namespaces
    assert {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(docs, "Role")} == {
        ("ragnaros", "gpuplan-gpuplan-operator"), ("team-b", "gpuplan-gpuplan-operator"),
        (NAMESPACE, "gpuplan-gpuplan-operator-events"),  # kopf's Events about nodes
    }  # fmt: skip
    for binding in by_kind(docs, "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_an_existing_serviceaccount_can_be_used(helm: str) -> None:
    docs = render(helm, {"serviceAccount.create": False, "serviceAccount.name": "ops-sa"})
    assert not by_kind(docs, "ServiceAccount")
    assert _deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "ops-sa"
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["name"] == "ops-sa"


def test_rbac_can_be_left_out(helm: str) -> None:
    docs = render(helm, {"rbac.create": False})
    assert not [d for d in docs if d["apiVersion"].startswith("rbac.authorization.k8s.io")]


# --- the CRD copies --------------------------------------------------------------------------


def test_helm_show_crds_keeps_every_document_apart(helm: str) -> None:
    """``helm show crds | kubectl apply -f -`` (the upgrade path) joins the files as they are: each
    must start a document of its own, or one file's first object merges into the last one's."""
    shown = [d for d in yaml.safe_load_all(run_helm(helm, "show", "crds", str(CHART)).stdout) if d]
    files = [
        d for f in sorted((REPO / "crds").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d
    ]
    assert [(d["kind"], d["metadata"]["name"]) for d in shown] == [
        (d["kind"], d["metadata"]["name"]) for d in files
    ]


@pytest.mark.parametrize(
    "name", ["gpuallocationplans.yaml", "kopf-peering.yaml", "plans-admission-policy.yaml"]
)
def test_chart_crd_is_byte_identical_to_crds(name: str) -> None:
    assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes()


def test_drift_check_passes_on_the_repository() -> None:
    proc = subprocess.run(["bash", str(REPO / "hack" / "check-crd-drift.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _drift_tree(tmp_path: Path) -> Path:
    (tmp_path / "hack").mkdir()
    shutil.copy(REPO / "hack" / "check-crd-drift.sh", tmp_path / "hack")
    shutil.copytree(REPO / "crds", tmp_path / "crds")
    shutil.copytree(CHART / "crds", tmp_path / "charts" / "gpuplan-operator" / "crds")
    return tmp_path


def _edit_source(root: Path) -> None:
    path = root / "crds" / "gpuallocationplans.yaml"
    path.write_bytes(path.read_bytes() + b"# edited\n")


def _remove_copy(root: Path) -> None:
    (root / "charts" / "gpuplan-operator" / "crds" / "kopf-peering.yaml").unlink()


def _add_chart_only(root: Path) -> None:
    (root / "charts" / "gpuplan-operator" / "crds" / "extra.yaml").write_text("{}\n")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            _edit_source, "differs from crds/gpuallocationplans.yaml", id="an edited source CRD is drift"
        ),
        pytest.param(_remove_copy, "kopf-peering.yaml is missing", id="a missing copy is drift"),
        pytest.param(_add_chart_only, "extra.yaml has no source in crds/", id="a chart-only CRD is drift"),
    ],
)
def test_drift_check_fails_with_a_clear_message(
    tmp_path: Path, change: Callable[[Path], None], message: str
) -> None:
    root = _drift_tree(tmp_path)
    change(root)
    proc = subprocess.run(["bash", str(root / "hack" / "check-crd-drift.sh")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert message in proc.stderr and "cp crds/*.yaml charts/gpuplan-operator/crds/" in proc.stderr


def test_the_view_is_off_by_default_and_one_flag_when_enabled(helm: str) -> None:
    assert "--view" not in _container(render(helm))["args"]
    assert _container(render(helm, {"view.enabled": True}))["args"].count("--view") == 1
