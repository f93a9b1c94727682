"""Helpers of the end-to-end suite: kubectl, a JSON client, polling, the operator process, fake nodes.

Notes
-----
Every wait is a poll with an explicit timeout that fails with the last thing it saw, never a fixed
sleep. The one exception is :func:`stays`, which asserts that something does *not* happen (no
retries, no writes) and has to watch for a while to say so.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from gpuplan_operator.kube import Kube, load_api_client, path_for
from gpuplan_operator.watch import LIFECYCLE_TAINTS
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
GROUP, VERSION, PLURAL = "gpuplan.ragnaros.io", "v1alpha1", "gpuallocationplans"
PLAN_API = f"{GROUP}/{VERSION}"
TYPE_LABEL = "gpuplan.ragnaros.io/gpu-type"
MANAGED_BY = "app.kubernetes.io/managed-by=gpuplan"
METRICS_PORT_ENV = "GPUPLAN_METRICS_PORT"

T = TypeVar("T")


class Timeout(AssertionError):
    pass


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.5) -> T:
    """Call ``fn`` until it returns something truthy; fail after ``timeout`` with the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    error: BaseException | None = None
    while True:
        try:
            value = fn()
            last, error = value, None
            if value:
                return value
        except AssertionError as e:  # a check that is not true yet
            error = e
        if time.monotonic() >= deadline:
            detail = f"{error}" if error else f"last value: {last!r}"
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what}; {detail}"[:4000])
        time.sleep(interval)


def stays(what: str, fn: Callable[[], bool], seconds: float, interval: float = 0.5) -> None:
    """Assert ``fn`` holds for ``seconds`` (to prove the absence of retries or writes)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert fn(), f"{what} stopped holding"
        time.sleep(interval)


# --- kubectl ---------------------------------------------------------------------------------


def find_kubectl() -> str:
    """``$KUBECTL``, else the harness's cached build (matches the API server), else PATH."""
    if os.environ.get("KUBECTL"):
        return os.environ["KUBECTL"]
    cache = os.environ.get("GPUPLAN_CACHE", os.path.expanduser("~/.cache/gpuplan"))
    built = sorted(glob.glob(os.path.join(cache, "k8s-*", "bin", "kubectl")))
    if built:
        return built[-1]
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("no kubectl: set KUBECTL or run bash hack/build-binaries.sh")
    return found


class Kubectl:
    def __init__(self, kubeconfig: str) -> None:
        self.binary = find_kubectl()
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, "--kubeconfig", self.kubeconfig, *args]
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def apply(
        self, doc: Mapping[str, Any] | Sequence[Mapping[str, Any]], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        docs = [doc] if isinstance(doc, Mapping) else list(doc)
        return self.run("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), check=check)


# --- the API, as JSON ------------------------------------------------------------------------


class Api:
    """Plain JSON reads and writes (the operator's own transport, used here as a client)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kube = Kube(load_api_client(kubeconfig=kubeconfig))

    def plan(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.kube.get_or_none(path_for(PLAN_API, PLURAL, name, ns))

    def status(self, ns: str, name: str) -> dict[str, Any]:
        plan = self.plan(ns, name)
        return dict((plan or {}).get("status") or {})

    def nodes(self, selector: str | None = None) -> list[dict[str, Any]]:
        return list(self.kube.get(path_for("v1", "nodes"), labelSelector=selector).get("items") or [])

    def node(self, name: str) -> dict[str, Any] | None:
        return self.kube.get_or_none(path_for("v1", "nodes", name))

    def pods(self, ns: str, selector: str | None = None) -> list[dict[str, Any]]:
        return list(
            self.kube.get(path_for("v1", "pods", namespace=ns), labelSelector=selector).get("items") or []
        )

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        doc = self.kube.get(path_for("v1", "pods"), fieldSelector=f"spec.nodeName={node}")
        return list(doc.get("items") or [])

    def deployments(self, ns: str) -> list[dict[str, Any]]:
        return list(self.kube.get(path_for("apps/v1", "deployments", namespace=ns)).get("items") or [])

    def configmap(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.kube.get_or_none(path_for("v1", "configmaps", name, ns))

    def priority_class(self, name: str) -> dict[str, Any] | None:
        return self.kube.get_or_none(path_for("scheduling.k8s.io/v1", "priorityclasses", name))

    def create(
        self, api_version: str, plural: str, obj: Mapping[str, Any], ns: str | None = None
    ) -> dict[str, Any]:
        return self.kube.request("POST", path_for(api_version, plural, namespace=ns), body=obj)

    def patch(
        self, api_version: str, plural: str, name: str, patch: Mapping[str, Any], ns: str | None = None
    ) -> dict[str, Any]:
        return self.kube.merge_patch(path_for(api_version, plural, name, ns), patch, "e2e")

    def delete(
        self, api_version: str, plural: str, name: str, ns: str | None = None, grace: int | None = None
    ) -> bool:
        path = path_for(api_version, plural, name, ns)
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            self.kube.request("DELETE", path, body=body)
        except ApiException as e:
            if e.status == 404:  # already gone
                return False
            raise
        return True


def conditions(status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def is_true(status: Mapping[str, Any], type_: str) -> bool:
    return conditions(status).get(type_, {}).get("status") == "True"


def label_key(ns: str, name: str) -> str:
    return f"{GROUP}/{ns}.{name}"


def fake_node(name: str, gpu_type: str, cards: int = 8) -> dict[str, Any]:
    """A kwok-managed node with ``cards`` nvidia.com/gpu (status is kept on create for nodes)."""
    resources = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(cards), "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                TYPE_LABEL: gpu_type,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
            },
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": resources, "phase": "Running"},
    }


def node_ready(node: Mapping[str, Any] | None) -> bool:
    for c in ((node or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def node_schedulable(node: Mapping[str, Any] | None) -> bool:
    """Ready, and the node lifecycle controller has lifted its not-ready taint.

    A new node reports Ready a moment before the controller removes the ``not-ready`` taint it was
    registered with; a pod created in between is found Unschedulable once, then scheduled.
    """
    if not node_ready(node):
        return False
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return not any(t.get("key") in LIFECYCLE_TAINTS for t in taints)


# --- the operator process --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """``python -m gpuplan_operator`` as a subprocess, its output in a log file."""

    ARGS: tuple[str, ...] = (
        "--debounce",
        "1",
        "--max-delay",
        "4",
        "--resync",
        "10",
        "--ready-poll",
        "1",
        "--plan-seconds",
        "20",
    )

    def __init__(
        self, kubeconfig: str, log_dir: Path, name: str = "operator", args: Sequence[str] = ()
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_dir / f"{name}.log"
        self.extra_args = tuple(args)
        self.starts = 0
        self.metrics_url: str | None = None  # set when started with $GPUPLAN_METRICS_PORT

    def start(self, extra_env: Mapping[str, str] | None = None, wait_healthy: bool = True) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        port = free_port()
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, PYTHONUNBUFFERED="1", **(extra_env or {}))
        metrics_port = int(env.get(METRICS_PORT_ENV, "").strip() or 0)
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== operator start #{self.starts} {time.strftime('%H:%M:%S')} =====\n".encode())
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpuplan_operator",
                    "--liveness",
                    f"http://127.0.0.1:{port}/healthz",
                    *self.ARGS,
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO,
            )
        self.health = f"http://127.0.0.1:{port}/healthz"
        if wait_healthy:
            wait_for("the operator's liveness endpoint", self.healthy, timeout=60)

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the operator exited with {self.proc.returncode}; log: {self.log_path}")
        try:
            with urllib.request.urlopen(self.health, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self, timeout: float = 20) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def mark(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_since(self, mark: int) -> str:
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode("utf-8", "replace")


class Samples:
    """One scrape of the operator's Prometheus endpoint: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {
            (s.name, frozenset(s.labels.items())): float(s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        """A sample's value; 0 when the series does not exist (yet)."""
        return self.values.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str) -> float:
        """The sum of every series of ``name`` (e.g. every ``kind`` of ``gpuplan_writes_total``)."""
        return sum(v for (n, _), v in self.values.items() if n == name)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        return {dict(labels)[label]: v for (n, labels), v in self.values.items() if n == name}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as r:
        return Samples(r.read().decode())


def with_metrics(operator: OperatorProcess) -> str:
    """The operator's metrics URL; (re)starts it with ``$GPUPLAN_METRICS_PORT`` when they are off.

    The session's operator runs without metrics; a test that reads them restarts it once with a
    free port, and later tests find it running (with metrics on, which changes nothing else).
    """
    if operator.metrics_url is None or operator.exited() is not None:
        operator.stop()
        operator.start(extra_env={METRICS_PORT_ENV: str(free_port())})
    url = operator.metrics_url
    assert url is not None

    def up() -> bool:
        try:
            return bool(scrape(url).values)
        except OSError:
            return False

    wait_for("the operator's metrics endpoint", up, timeout=30)
    return url


def with_view(operator: OperatorProcess) -> str:
    """The operator's ``/view`` URL; (re)starts it with ``--view`` and a metrics port when off.

    As with :func:`with_metrics`, later tests find it running so (the view changes nothing the
    operator writes: it only reads).
    """
    if "--view" not in operator.extra_args or operator.metrics_url is None or operator.exited() is not None:
        operator.stop()
        if "--view" not in operator.extra_args:
            operator.extra_args += ("--view",)
        operator.start(extra_env={METRICS_PORT_ENV: str(free_port())})
    with_metrics(operator)
    assert operator.metrics_url is not None
    return operator.metrics_url.rsplit("/", 1)[0] + "/view"


def settled_reconciles(url: str, before: Samples, reason: str) -> Callable[[], Samples | None]:
    """A probe: a reconcile for ``reason`` started since ``before``, and every started one ended."""

    def probe() -> Samples | None:
        now = scrape(url)
        started = now.total("gpuplan_replans_total") - before.total("gpuplan_replans_total")
        ended = now.value("gpuplan_plan_duration_seconds_count") - before.value(
            "gpuplan_plan_duration_seconds_count"
        )
        grew = now.value("gpuplan_replans_total", reason=reason) > before.value(
            "gpuplan_replans_total", reason=reason
        )
        return now if grew and started == ended else None

    return probe


def gpuplan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``gpuplan`` command line from this venv."""
    cmd = [sys.executable, "-c", "import sys; from gpuplan.cli import main; sys.exit(main())", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True)


# --- plans -----------------------------------------------------------------------------------


def with_crd_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A spec as the API server stores it: the CRD's ``default:`` values filled in where absent."""
    crd = yaml.safe_load((REPO / "crds" / "gpuallocationplans.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def fill(value: Any, node: Mapping[str, Any]) -> Any:
        if isinstance(value, Mapping):
            out = {k: fill(v, node.get("properties", {}).get(k, {})) for k, v in value.items()}
            for key, sub in (node.get("properties") or {}).items():
                if key not in out and "default" in sub:
                    out[key] = sub["default"]
            return out
        if isinstance(value, list):
            return [fill(v, node.get("items", {})) for v in value]
        return value

    result: dict[str, Any] = fill(spec, schema)
    return result


def plan_manifest(ns: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": PLAN_API,
        "kind": "GpuAllocationPlan",
        "metadata": {"name": name, "namespace": ns},
        "spec": dict(spec),
    }


def one_type(
    gpu_type: str, requests: Mapping[str, Any], operators: Sequence[Mapping[str, Any]] = (), **extra: Any
) -> dict[str, Any]:
    """A spec whose only resource type, ``G``, is the nodes labelled with ``gpu_type``."""
    spec: dict[str, Any] = {
        "resources": [{"name": "G", "kind": "GPU", "nodeSelector": {TYPE_LABEL: gpu_type}}],
        "requests": dict(requests),
        **extra,
    }
    if operators:
        spec["operators"] = [dict(o) for o in operators]
    return spec


def operator_entry(name: str, strategy: str = "machine") -> dict[str, Any]:
    """A catalog entry of our own: key service ``<name>`` (DNS-safe), no link services."""
    return {"name": name, "keyStrategy": strategy, "services": {"key": name.replace("_", "-")}}


def settled(
    api: Api, ns: str, name: str, phase: str = "Applied", ready: bool = True
) -> Callable[[], dict[str, Any] | None]:
    """A probe for :func:`wait_for`: the status once it describes the latest spec in ``phase``."""

    def probe() -> dict[str, Any] | None:
        plan = api.plan(ns, name) or {}
        status = plan.get("status") or {}
        if status.get("observedGeneration") != (plan.get("metadata") or {}).get("generation"):
            return None
        if status.get("phase") != phase or (ready and not is_true(status, "Ready")):
            return None
        return dict(status)

    return probe


def live_pods(api: Api, ns: str) -> list[dict[str, Any]]:
    return [p for p in api.pods(ns, MANAGED_BY) if not p["metadata"].get("deletionTimestamp")]


def placement(api: Api, ns: str, name: str) -> dict[str, str]:
    """Pod name -> the node it is bound to, for the plan's live pods ('' while pending)."""
    pods = [p for p in live_pods(api, ns) if p["metadata"]["labels"].get(f"{GROUP}/plan") == name]
    return {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName", "") for p in pods}


def labelled_nodes(api: Api, key: str) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"][key] for n in api.nodes(key)}
