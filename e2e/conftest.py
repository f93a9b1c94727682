"""Fixtures of the end-to-end suite: a real API server and kube-scheduler, the operator as a process.

Notes
-----
- The cluster comes from ``$KUBECONFIG`` (``make e2e`` starts the local one with
  ``hack/cluster-up.sh``). When it cannot be reached the suite fails under ``CI=true`` and skips
  elsewhere, so CI can never pass by skipping.
- The CRD is applied with ``kubectl apply`` from ``crds/`` (the operator never installs it).
- One operator process serves the whole session (tests that need to kill it restart it); its log
  goes to ``e2e/.logs/operator.log``, and the part a failed test wrote is printed with the plans,
  pods and events of the test's namespace.
- Each test gets its own namespace, and fake nodes of a GPU type of its own when it changes nodes,
  so tests neither see nor disturb each other's cards.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.dra import Gpu, dra_served, ensure_device_class, publish_slices, remove_slices
from e2e.support import (
    PLURAL,
    REPO,
    Api,
    Kubectl,
    OperatorProcess,
    fake_node,
    node_schedulable,
    wait_for,
)

CRD = REPO / "crds" / "gpuallocationplans.yaml"
POLICY = REPO / "crds" / "plans-admission-policy.yaml"  # admission checks the schema cannot make
LOGS = Path(__file__).resolve().parent / ".logs"


TEST_TIMEOUT = 300  # seconds per test: a hung wait fails one test, not the whole CI job


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("timeout"):
        for item in items:
            if item.get_closest_marker("timeout") is None:  # a test may ask for longer itself
                item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    reports = [getattr(request.node, f"rep_{when}", None) for when in ("setup", "call")]
    return any(r is not None and r.failed for r in reports)


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    path = os.environ.get("KUBECONFIG") or str(REPO / ".cluster" / "kubeconfig")
    problem = None
    if not Path(path).is_file():
        problem = f"no kubeconfig at {path} (run: bash hack/cluster-up.sh)"
    else:
        proc = Kubectl(path).run("get", "--raw", "/readyz", "--request-timeout=10s", check=False)
        if proc.returncode != 0:
            problem = f"the API server of {path} is not reachable: {proc.stderr.strip()}"
    if problem:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"e2e needs a cluster and CI=true: {problem}", pytrace=False)
        pytest.skip(problem)
    os.environ["KUBECONFIG"] = path  # the Python client reads it too
    return path


@pytest.fixture(scope="session")
def kubectl(kubeconfig: str) -> Kubectl:
    return Kubectl(kubeconfig)


@pytest.fixture(scope="session")
def api(kubeconfig: str) -> Api:
    return Api(kubeconfig)


@pytest.fixture(scope="session")
def crd(kubectl: Kubectl) -> None:
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(CRD), "-f", str(POLICY))
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s", f"crd/{PLURAL}.gpuplan.ragnaros.io")


NRT_CRD = Path(__file__).resolve().parent / "noderesourcetopology-crd.yaml"
NRT_CRD_NAME = "noderesourcetopologies.topology.node.k8s.io"


@pytest.fixture(scope="module")
def nrt_crd(kubectl: Kubectl) -> Iterator[None]:
    """node-feature-discovery's NodeResourceTopology CRD: the cluster's own if it has one, else
    a copy of its shape for this module (removed afterwards; other tests never see it)."""
    ours = kubectl.run("get", "crd", NRT_CRD_NAME, check=False).returncode != 0
    if ours:
        made = kubectl.run("create", "-f", str(NRT_CRD), check=False)
        ours = made.returncode == 0  # someone else may have created it meanwhile: then it is theirs
        assert ours or "AlreadyExists" in made.stderr, made.stderr
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s", f"crd/{NRT_CRD_NAME}")
    yield
    if ours:
        kubectl.run("delete", "crd", NRT_CRD_NAME, "--wait=true", "--timeout=60s", check=False)


@pytest.fixture(scope="session")
def operator_process(kubeconfig: str, crd: None) -> Iterator[OperatorProcess]:
    LOGS.mkdir(exist_ok=True)
    proc = OperatorProcess(kubeconfig, LOGS)
    if proc.log_path.exists():
        proc.log_path.unlink()
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def operator(operator_process: OperatorProcess) -> OperatorProcess:
    """The running operator (restarted here if an earlier test left it stopped)."""
    if operator_process.exited() is not None or operator_process.proc is None:
        operator_process.start()
    return operator_process


@pytest.fixture
def ns(
    request: pytest.FixtureRequest,
    api: Api,
    kubectl: Kubectl,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
) -> Iterator[str]:
    """A fresh namespace; on teardown its plans are deleted (the operator cleans up) and it goes.

    It depends on ``make_nodes`` so that the test's nodes outlive its pods: a node deleted under
    its pods leaves them (and the namespace) terminating until pod garbage collection.
    """
    name = _namespace_name(request)
    api.create("v1", "namespaces", {"metadata": {"name": name}})
    mark = operator.mark()
    yield name
    if _failed(request):
        _dump(kubectl, operator, name, mark)
    if operator.exited() is not None:
        operator.start()
    plans = kubectl.run("get", PLURAL, "-n", name, "-o", "name", check=False).stdout.split()
    for plan in plans:
        kubectl.run("delete", "-n", name, plan, "--wait=false", check=False)
    wait_for(f"plans in {name} to be deleted", lambda: not kubectl.run(
        "get", PLURAL, "-n", name, "-o", "name", check=False).stdout.strip(), timeout=60)  # fmt: skip
    api.delete("v1", "namespaces", name)


def _namespace_name(request: pytest.FixtureRequest) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:25].strip("-")
    return f"e2e-{words}-{uuid.uuid4().hex[:5]}"


def _dump(kubectl: Kubectl, operator: OperatorProcess, ns: str, mark: int) -> None:
    print(f"\n===== operator log during the test =====\n{operator.log_since(mark)[-20000:]}")
    for args in (
        ("get", PLURAL, "-n", ns, "-o", "yaml"),
        ("describe", "pods", "-n", ns),
        ("get", "events", "-n", ns, "--sort-by=.lastTimestamp"),
        ("get", "nodes", "--show-labels"),
    ):
        proc = kubectl.run(*args, check=False)
        print(f"\n===== kubectl {' '.join(args)} =====\n{proc.stdout[-15000:]}{proc.stderr[-2000:]}")


@pytest.fixture
def make_nodes(api: Api) -> Iterator[Callable[..., list[str]]]:
    """Create Ready kwok nodes of a fresh GPU type; they are deleted after the test."""
    created: list[str] = []

    def make(prefix: str, count: int, cards: int = 8, gpu_type: str | None = None) -> list[str]:
        gpu_type = gpu_type or f"{prefix}-{uuid.uuid4().hex[:6]}"
        names = [f"{gpu_type}-{i}" for i in range(count)]
        for name in names:
            api.create("v1", "nodes", fake_node(name, gpu_type, cards))
            created.append(name)
        wait_for(
            f"nodes {names} Ready and untainted",
            lambda: all(node_schedulable(api.node(n)) for n in names),
            timeout=60,
        )
        return names

    yield make
    if created:
        wait_for(
            "the test's pods to leave its nodes",
            lambda: not [p for n in created if api.node(n) for p in api.pods_on(n)],
            timeout=90,
        )
    for name in created:
        api.delete("v1", "nodes", name)


# --- Dynamic Resource Allocation: the suite as a GPU driver (e2e/dra.py) ----------------------


@pytest.fixture(scope="session")
def device_class(api: Api) -> str:
    """The test driver's DeviceClass; fails (never skips) where ``resource.k8s.io/v1`` is not served."""
    if not dra_served(api):
        pytest.fail("the API server does not serve resource.k8s.io/v1 (Kubernetes >= 1.34 does)")
    return ensure_device_class(api)


@pytest.fixture
def plain_ns(request: pytest.FixtureRequest, api: Api, make_nodes: Callable[..., list[str]]) -> Iterator[str]:
    """A fresh namespace without the operator, its default ServiceAccount there (pods need it).

    Like ``ns`` it depends on ``make_nodes``, so the test's nodes outlive its pods.
    """
    name = _namespace_name(request)
    api.create("v1", "namespaces", {"metadata": {"name": name}})
    wait_for(
        f"the default ServiceAccount of {name}",
        lambda: api.kube.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
    )
    yield name
    api.delete("v1", "namespaces", name)
    # A terminating namespace admits no new pods; removing its pods at once (kwok's nodes run
    # nothing) spares the namespace controller's few seconds before the test's nodes may go.
    api.kube.request("DELETE", f"/api/v1/namespaces/{name}/pods", body={"gracePeriodSeconds": 0})


@pytest.fixture
def gpu_nodes(
    api: Api, device_class: str, make_nodes: Callable[..., list[str]]
) -> Iterator[Callable[..., dict[str, list[Gpu]]]]:
    """Fresh kwok nodes with a ResourceSlice each (8 GPUs in 2 PCIe domains unless told);
    node -> its GPUs. The slices go after the test (with the nodes at the latest)."""
    published: list[str] = []

    def make(prefix: str, count: int = 1, gpus: int = 8, domains: int = 2) -> dict[str, list[Gpu]]:
        nodes = make_nodes(prefix, count, cards=gpus)
        published.extend(nodes)
        return publish_slices(api, nodes, gpus, domains)

    yield make
    remove_slices(api, published)
