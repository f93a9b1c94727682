"""The chart's RBAC on a real API server: the operator's service account can do what the operator
does and nothing it must not, and the operator runs as that account.

Notes
-----
Each mode installs the chart's ServiceAccount, ClusterRole, Roles, bindings and peering object
(from ``helm template``, under a unique release name), not its Deployment:

- ``cluster-wide`` (the default values): plans in any namespace;
- ``namespaced`` (``watchNamespaces``): the service account lives in one namespace and serves plans
  in another, so the Roles there and the events Role at home are exercised too;
- ``peering`` (``replicaCount: 2``): cluster-wide with kopf peering through the chart's
  ClusterKopfPeering.

Three layers of proof: ``kubectl auth can-i`` with impersonation (the table the report prints),
the operator's own ``cluster.*`` calls made with the account's token, and the operator process
itself, run with a kubeconfig that holds only that token, through a plan's life (synced the way
a GitOps tool does it: server-side apply with a field manager of its own).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuplan_operator import cluster
from gpuplan_operator.kube import Kube, load_api_client, path_for
from kubernetes.client.exceptions import ApiException

from e2e.support import (
    PLURAL,
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
from tests.chart.helm import CHART, find_helm, one, render

# what the chart creates besides the Deployment, the metrics Service and the budget; the node
# label policy too, so the operator's own node patches are proven to pass it
INSTALLED = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ClusterKopfPeering",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
MODES: dict[str, dict[str, Any]] = {
    "cluster-wide": {},
    "namespaced": {"watchNamespaces": ["PLANS"]},
    "peering": {"replicaCount": 2},
}
PLANS = "gpuallocationplans.gpuplan.ragnaros.io"
GITOPS_MANAGER = "kustomize-controller"  # Flux's field manager; Argo CD's server-side apply is alike


@dataclass(frozen=True)
class Account:
    """The operator's service account as the chart creates it, and a kubeconfig holding its token."""

    mode: str
    home: str  # the release namespace: the ServiceAccount lives here
    plans: str  # where the test's plans go (watched in namespaced mode)
    name: str
    kubeconfig: str
    cluster_objects: tuple[tuple[str, str], ...]  # (kind, name) to delete afterwards
    operator_args: tuple[str, ...]  # the Deployment's arguments, less --liveness

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.home}:{self.name}"


def _token_kubeconfig(kubectl: Kubectl, token: str, namespace: str, path: Path) -> str:
    """The admin kubeconfig's cluster (server, CA) with the service account's token as the user."""
    view = yaml.safe_load(
        kubectl.run("config", "view", "--raw", "--minify", "--flatten", "-o", "yaml").stdout
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": view["clusters"][0]["cluster"]}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [
            {"name": "operator", "context": {"cluster": "e2e", "user": "operator", "namespace": namespace}}
        ],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def _operator_args(deployment: dict[str, Any]) -> tuple[str, ...]:
    """The container's arguments without --liveness (the test picks a free port), and the
    --priority that the peering wrapper draws at random."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = list(container["args"])
    i = args.index("--liveness")
    del args[i : i + 2]
    if container.get("command"):
        args += ["--priority", "7"]
    return tuple(args)


@pytest.fixture(scope="module", params=list(MODES))
def account(
    request: pytest.FixtureRequest,
    helm: str,
    api: Api,
    kubectl: Kubectl,
    crd: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Account]:
    mode = str(request.param)
    suffix = uuid.uuid4().hex[:5]
    home = f"e2e-rbac-{suffix}"
    plans = f"e2e-rbac-plans-{suffix}" if mode == "namespaced" else home
    for ns in {home, plans}:
        api.create("v1", "namespaces", {"metadata": {"name": ns}})
    values = {k: [plans] if v == ["PLANS"] else v for k, v in MODES[mode].items()}
    rendered = render(helm, values, release=f"rbac-{suffix}", namespace=home)
    if mode == "peering":  # the chart's crds/ (the suite applies only the plan CRD)
        kubectl.run("apply", "--server-side", "-f", str(CHART / "crds" / "kopf-peering.yaml"))
        kubectl.run(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/clusterkopfpeerings.kopf.dev"
        )
    docs = [d for d in rendered if d["kind"] in INSTALLED]
    cluster_objects = tuple(
        (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"].startswith("Cluster")
    )
    name = one(docs, "ServiceAccount")["metadata"]["name"]
    try:
        kubectl.apply(docs)
        user = f"system:serviceaccount:{home}:{name}"
        wait_for(
            "the operator's RBAC to take effect",
            lambda: (
                kubectl.run("auth", "can-i", "patch", "nodes", f"--as={user}", check=False).stdout.strip()
                == "yes"
            ),
            timeout=30,
        )
        token = kubectl.run("create", "token", name, "-n", home, "--duration=2h").stdout.strip()
        path = _token_kubeconfig(kubectl, token, home, tmp_path_factory.mktemp("rbac") / "kubeconfig")
        args = _operator_args(one(rendered, "Deployment"))
        yield Account(mode, home, plans, name, path, cluster_objects, args)
    finally:
        for kind, obj in cluster_objects:
            kubectl.run("delete", kind.lower(), obj, "--ignore-not-found", check=False)
        for ns in {home, plans}:
            api.delete("v1", "namespaces", ns)


def can_i(kubectl: Kubectl, account: Account, verb: str, resource: str, where: str) -> bool:
    """``kubectl auth can-i`` as the account; ``where``: "cluster", "all", "plans" or a namespace."""
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, resource, f"--as={account.user}"]
    if sub:
        args.append(f"--subresource={sub}")
    if where == "all":
        args.append("--all-namespaces")
    elif where != "cluster":
        args += ["-n", account.plans if where == "plans" else where]
    answer = kubectl.run(*args, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


# (verb, resource[/subresource], where): what the operator does (see templates/rbac.yaml).
CAN = [
    ("list", PLANS, "all"),  # kopf's watch, cluster.list_plans
    ("watch", PLANS, "all"),
    ("get", PLANS, "plans"),  # cluster.read_plan
    ("patch", PLANS, "plans"),  # kopf's finalizer and annotations
    ("patch", f"{PLANS}/status", "plans"),  # cluster.patch_plan_status
    ("update", f"{PLANS}/finalizers", "plans"),  # ownerReferences with blockOwnerDeletion
    ("list", "nodes", "cluster"),  # kopf's watch, cluster.list_nodes
    ("watch", "nodes", "cluster"),
    ("patch", "nodes", "cluster"),  # cluster.patch_node_labels
    ("list", "pods", "all"),  # cluster.list_active_pods
    ("watch", "pods", "all"),  # a watch-fed cache of the pods
    ("patch", "pods", "plans"),  # cluster.release_gate: lifts the gang gate
    ("get", "priorityclasses.scheduling.k8s.io", "cluster"),
    ("list", "priorityclasses.scheduling.k8s.io", "cluster"),
    ("create", "priorityclasses.scheduling.k8s.io", "cluster"),  # server-side apply of a new class
    ("patch", "priorityclasses.scheduling.k8s.io", "cluster"),
    ("delete", "priorityclasses.scheduling.k8s.io", "cluster"),
    ("get", "configmaps", "plans"),
    ("create", "configmaps", "plans"),
    ("patch", "configmaps", "plans"),
    ("delete", "configmaps", "plans"),
    ("get", "deployments.apps", "plans"),
    ("list", "deployments.apps", "plans"),
    ("watch", "deployments.apps", "plans"),  # the Deployments cache
    ("create", "deployments.apps", "plans"),
    ("patch", "deployments.apps", "plans"),
    ("delete", "deployments.apps", "plans"),
    ("list", "resourceclaimtemplates.resource.k8s.io", "plans"),  # DRA: one per instance
    ("create", "resourceclaimtemplates.resource.k8s.io", "plans"),
    ("delete", "resourceclaimtemplates.resource.k8s.io", "plans"),
    ("list", "resourceslices.resource.k8s.io", "cluster"),  # the nodes' GPUs one by one
    ("watch", "resourceslices.resource.k8s.io", "cluster"),
    ("list", "resourceclaims.resource.k8s.io", "all"),  # devices claims already hold
    ("list", "noderesourcetopologies.topology.node.k8s.io", "cluster"),  # the nodes' NUMA zones
    ("watch", "noderesourcetopologies.topology.node.k8s.io", "cluster"),
    ("create", "events", "plans"),  # kopf.event on plans
    ("list", "customresourcedefinitions.apiextensions.k8s.io", "cluster"),  # kopf's resource observer
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", "cluster"),
]
CANNOT = [
    ("create", "resourceslices.resource.k8s.io", "cluster"),  # it plans devices, never publishes them
    ("delete", "resourceclaims.resource.k8s.io", "all"),
    ("create", "noderesourcetopologies.topology.node.k8s.io", "cluster"),  # it reads NUMA zones, never writes
    ("patch", "noderesourcetopologies.topology.node.k8s.io", "cluster"),
    ("delete", "nodes", "cluster"),
    ("create", "nodes", "cluster"),
    ("update", "nodes", "cluster"),
    ("get", "secrets", "all"),
    ("list", "secrets", "plans"),
    ("watch", "secrets", "all"),
    ("create", "pods", "plans"),
    ("delete", "pods", "plans"),
    ("create", "pods/exec", "plans"),
    ("create", "pods/attach", "plans"),
    ("create", "pods/portforward", "plans"),
    ("list", "configmaps", "all"),
    ("create", "serviceaccounts/token", "plans"),
    ("impersonate", "serviceaccounts", "all"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", "cluster"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", "cluster"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", "cluster"),  # it never installs its CRD
    ("delete", "customresourcedefinitions.apiextensions.k8s.io", "cluster"),
    ("delete", "namespaces", "cluster"),
    ("update", PLANS, "plans"),  # patches only: never replaces a plan
]


def _id(verb: str, resource: str, where: str) -> str:
    base, _, sub = resource.partition("/")
    scope = {"all": " in all namespaces", "plans": " in the plans' namespace", "cluster": ""}[where]
    return f"{verb} {base.split('.')[0]}{'/' + sub if sub else ''}{scope}"


def _served(request: pytest.FixtureRequest, resource: str) -> None:
    """``kubectl auth can-i`` answers "no" for a resource the server does not know, whatever the
    rules say: a CRD's rows are asked while the CRD exists (the NodeResourceTopology one)."""
    if resource.endswith(".topology.node.k8s.io"):
        request.getfixturevalue("nrt_crd")


@pytest.mark.parametrize(("verb", "resource", "where"), [pytest.param(*c, id="can " + _id(*c)) for c in CAN])
def test_the_service_account_can(
    kubectl: Kubectl, account: Account, verb: str, resource: str, where: str, request: pytest.FixtureRequest
) -> None:
    _served(request, resource)
    assert can_i(kubectl, account, verb, resource, where), (
        f"{account.user} cannot {verb} {resource} ({where})"
    )


@pytest.mark.parametrize(
    ("verb", "resource", "where"), [pytest.param(*c, id="cannot " + _id(*c)) for c in CANNOT]
)
def test_the_service_account_cannot(
    kubectl: Kubectl, account: Account, verb: str, resource: str, where: str, request: pytest.FixtureRequest
) -> None:
    _served(request, resource)
    assert not can_i(kubectl, account, verb, resource, where), (
        f"{account.user} can {verb} {resource} ({where})"
    )


def test_namespaced_writes_stay_in_the_served_namespaces(kubectl: Kubectl, account: Account) -> None:
    """Cluster-wide: anywhere. Namespaced: in the watched namespace only (and Events at home)."""
    everywhere = account.mode != "namespaced"
    assert can_i(kubectl, account, "create", "configmaps", "default") is everywhere
    assert can_i(kubectl, account, "patch", "deployments.apps", "default") is everywhere
    assert can_i(kubectl, account, "patch", f"{PLANS}/status", "default") is everywhere
    assert can_i(kubectl, account, "create", "events", account.home)  # kopf's Events about nodes
    assert can_i(kubectl, account, "list", "namespaces", "cluster") is not everywhere  # kopf, namespaced


def test_peering_rights_come_with_peering_only(kubectl: Kubectl, account: Account) -> None:
    peering = account.mode == "peering"
    for verb in ("get", "list", "watch", "patch"):
        assert can_i(kubectl, account, verb, "clusterkopfpeerings.kopf.dev", "cluster") is peering
    assert not can_i(kubectl, account, "create", "clusterkopfpeerings.kopf.dev", "cluster")
    assert not can_i(kubectl, account, "delete", "clusterkopfpeerings.kopf.dev", "cluster")


def test_the_operators_own_calls_succeed_with_the_token(
    account: Account, api: Api, make_nodes: Callable[..., list[str]]
) -> None:
    """``gpuplan_operator.cluster`` (every call the operator makes) with the account's token."""
    kube = Kube(load_api_client(kubeconfig=account.kubeconfig))
    ns, suffix = account.plans, uuid.uuid4().hex[:5]
    (node,) = make_nodes("rbac", 1)
    key = label_key(ns, f"probe-{suffix}")

    # reads
    cluster.list_plans(kube)
    assert any(n["metadata"]["name"] == node for n in cluster.list_nodes(kube)["items"])
    cluster.list_active_pods(kube)
    assert cluster.list_plan_pods(kube, ns, "probe") == []
    assert cluster.list_plan_deployments(kube, ns, "probe") == []
    assert cluster.read_plan(kube, ns, "absent") is None
    assert cluster.read_configmap(kube, ns, "absent") is None
    assert cluster.read_deployment(kube, ns, "absent") is None
    assert f"absent-{suffix}" not in {pc["metadata"]["name"] for pc in cluster.list_priority_classes(kube)}
    cluster.list_managed_priority_classes(kube)
    assert cluster.list_resource_slices(kube) is not None  # the local cluster serves DRA
    assert cluster.list_resource_claims(kube) is not None
    assert cluster.list_plan_claim_templates(kube, ns, "probe") == []

    # writes: node labels, server-side apply (create, then patch) and delete of each kind
    cluster.patch_node_labels(kube, node, {key: "token"})
    assert [n["metadata"]["name"] for n in cluster.list_labelled_nodes(kube, key)] == [node]
    cluster.patch_node_labels(kube, node, {key: None})
    assert cluster.list_labelled_nodes(kube, key) == []

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"probe-{suffix}", "namespace": ns}}
    cluster.apply_object(kube, {**cm, "data": {"values.yaml": "flamewakers: []\n"}})
    cluster.apply_object(kube, {**cm, "data": {"values.yaml": "flamewakers: [{}]\n"}})
    assert cluster.delete_object(kube, "ConfigMap", f"probe-{suffix}", ns)

    labels = {"app": f"probe-{suffix}"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"probe-{suffix}", "namespace": ns},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }
    cluster.apply_object(kube, deployment)
    assert cluster.read_deployment(kube, ns, f"probe-{suffix}") is not None
    assert cluster.delete_object(kube, "Deployment", f"probe-{suffix}", ns)

    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"e2e-rbac-{suffix}"},
    }
    cluster.apply_object(kube, {**pc, "value": 1000})
    assert cluster.delete_object(kube, "PriorityClass", f"e2e-rbac-{suffix}")

    event = {
        "metadata": {"generateName": "probe-", "namespace": ns},
        "involvedObject": {"kind": "ConfigMap", "name": f"probe-{suffix}", "namespace": ns},
        "reason": "Probe",
        "message": "RBAC probe",
        "type": "Normal",
    }
    kube.request("POST", path_for("v1", "events", namespace=ns), body=event)

    # and what it must not do, through the same transport
    for method, path in (
        ("GET", path_for("v1", "secrets", namespace=ns)),
        ("DELETE", path_for("v1", "nodes", node)),
        ("POST", path_for("v1", "pods", namespace=ns)),
    ):
        with pytest.raises(ApiException) as denied:
            kube.request(method, path, body={} if method != "GET" else None)
        assert denied.value.status == 403, (method, path, denied.value.status)
    assert api.node(node) is not None


def _managers(plan: dict[str, Any]) -> dict[str, set[str]]:
    """field manager -> the top-level fields (and subresource) it owns on the plan."""
    out: dict[str, set[str]] = {}
    for entry in plan["metadata"].get("managedFields") or []:
        fields = {k.removeprefix("f:") for k in (entry.get("fieldsV1") or {})}
        out.setdefault(entry["manager"], set()).update(fields)
    return out


def test_the_operator_runs_as_its_service_account(
    account: Account,
    api: Api,
    kubectl: Kubectl,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
) -> None:
    """A plan's whole life (apply, GitOps re-sync with a new spec, delete) with only the chart's RBAC."""
    nodes = make_nodes("rbac", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    ns, name = account.plans, "as-sa"

    def manifest(cards: int) -> str:
        # one instance of `cards` cards (machineNum 1): sizes no other test uses, so the
        # PriorityClasses are this plan's alone
        request = {"resourceNum": {"G": cards}, "machineNum": {"G": 1}}
        spec = one_type(gpu_type, {"rbac_probe": request}, [operator_entry("rbac_probe")], deploy=True)
        return yaml.safe_dump(plan_manifest(ns, name, spec))

    def gitops_sync(cards: int) -> subprocess.CompletedProcess[str]:
        # server-side apply without --force-conflicts: a conflict with the operator would fail it
        return kubectl.run(
            "apply", "--server-side", f"--field-manager={GITOPS_MANAGER}", "-f", "-", stdin=manifest(cards)
        )

    operator.stop()  # the session's operator has cluster-admin rights: it must not help
    mine = OperatorProcess(
        account.kubeconfig, operator.log_dir, f"operator-as-sa-{account.mode}", list(account.operator_args)
    )
    mine.log_path.unlink(missing_ok=True)
    try:
        mine.start()
        gitops_sync(5)
        status = wait_for(
            "the plan applied by the operator as its account", settled(api, ns, name), timeout=90
        )
        assert status and status["cards"] == "5/5"
        key = label_key(ns, name)
        assert set(labelled_nodes(api, key)) <= set(nodes) and labelled_nodes(api, key)
        assert api.configmap(ns, f"{name}-flamewakers") is not None
        assert api.priority_class("ragnaros-cluster-critical-5") is not None
        wait_for(
            "the plan's pod scheduled", lambda: [p for p in live_pods(api, ns) if p["spec"].get("nodeName")]
        )

        # a GitOps re-sync with a changed spec meets no conflict: Git owns spec, the operator status
        gitops_sync(3)
        status = wait_for("the new spec applied", settled(api, ns, name), timeout=90)
        assert status and status["cards"] == "3/3"
        assert api.priority_class("ragnaros-cluster-critical-5") is None  # no plan uses it any more
        managers = _managers(api.plan(ns, name) or {})
        assert "spec" in managers[GITOPS_MANAGER] and "status" not in managers[GITOPS_MANAGER], managers
        assert "status" in managers["gpuplan-operator"] and "spec" not in managers["gpuplan-operator"], (
            managers
        )

        kubectl.run("delete", PLURAL, name, "-n", ns, "--timeout=90s")
        assert labelled_nodes(api, key) == {}
        assert api.configmap(ns, f"{name}-flamewakers") is None
        assert api.deployments(ns) == []
        wait_for("the plan's pods gone", lambda: not live_pods(api, ns), timeout=60)

        log = mine.log_since(0)
        # a 403, not the milliseconds of a log line's timestamp ("08:34:14,403")
        assert not re.search(r"(?<![\d,])403(?!\d)", log), f"a 403 in the operator's log ({mine.log_path})"
        for sign in ("Forbidden", "forbidden", "Not enough permissions", "Failed to post an event"):
            assert sign not in log, f"{sign!r} in the operator's log ({mine.log_path})"
        assert f"{ns}/{name}: applied" in log
        if account.mode == "peering":  # it waited for the chart's peering object, then acted
            assert "Resuming operations" in log
    finally:
        mine.stop()
        kubectl.run("delete", PLURAL, name, "-n", ns, "--wait=false", "--ignore-not-found", check=False)
        operator.start()
