"""Helpers of the fault suite: the fault proxy, the control plane's processes, figures to report.

Notes
-----
- :class:`FaultProxy` runs ``python -m e2e.chaos.proxy`` as a process of its own (its own GIL:
  the test's polling does not slow the operator's traffic) and writes one kubeconfig per
  listener; the operator under test talks to the API server only through it.
- :class:`ControlPlane` stops and starts single components of the local control plane, the
  processes ``kwokctl --runtime binary`` started, from their own command lines, and keeps
  kwokctl's pid files current so ``make cluster-down`` still stops them. kube-scheduler and
  kube-controller-manager exit when they lose their leader lease while the API server is down;
  :meth:`ControlPlane.revive` starts them again, as a kubelet restarts static pods.
- :class:`Figures` collects what the suite measured (leaks, over-commit, lags, re-plans,
  recovery times) into ``e2e/.logs/chaos-figures.json``; the session prints them at the end.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.support import (
    GROUP,
    METRICS_PORT_ENV,
    REPO,
    Api,
    OperatorProcess,
    Samples,
    free_port,
    label_key,
    labelled_nodes,
    placement,
    scrape,
    settled,
    wait_for,
)

FIGURES = REPO / "e2e" / ".logs" / "chaos-figures.json"


class FaultProxy:
    """The fault-injecting proxy process, and its control endpoint."""

    def __init__(self, kubeconfig: str, log_dir: Path, listeners: Sequence[str]) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.ports = {name: free_port() for name in listeners}
        self.log_path = log_dir / "chaos-proxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, attempts: int = 3) -> None:
        """Start the proxy and wait until it answers. A port picked free may be taken (by some
        connection's ephemeral port) before the proxy binds it: the proxy then exits with
        "address already in use", and is started again on new ports (before any kubeconfig
        names them)."""
        for _ in range(attempts):
            if self._start_once():
                return
            self.ports = {name: free_port() for name in self.ports}
        raise AssertionError(f"the proxy could not bind its ports in {attempts} attempts: {self.log_path}")

    def _start_once(self) -> bool:
        """True once the proxy answers; False when it could not bind one of its ports."""
        listen = [arg for name, port in self.ports.items() for arg in ("--listen", f"{name}={port}")]
        before = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "e2e.chaos.proxy", "--kubeconfig", self.kubeconfig, *listen],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

        def bind_failed() -> bool:
            with open(self.log_path, "rb") as log:
                log.seek(before)
                return b"address already in use" in log.read()

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                if bind_failed():
                    return True  # given up below: new ports
                raise AssertionError(f"the proxy exited: {self.log_path}")
            try:
                self.stats()
                return True
            except OSError:
                return False

        wait_for("the fault proxy", up, timeout=30, interval=0.2)
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def kubeconfig_for(self, listener: str) -> str:
        """A kubeconfig whose server is this proxy's port for ``listener`` (no credentials)."""
        path = self.log_dir / f"chaos-{listener}.kubeconfig"
        server = f"http://127.0.0.1:{self.ports[listener]}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "chaos", "cluster": {"server": server}}],
            "users": [{"name": "chaos", "user": {}}],
            "contexts": [{"name": "chaos", "context": {"cluster": "chaos", "user": "chaos"}}],
            "current-context": "chaos",
        }
        path.write_text(yaml.safe_dump(config))
        return str(path)

    def _call(self, action: str, doc: Mapping[str, Any] | None = None) -> dict[str, Any]:
        port = next(iter(self.ports.values()))
        data = json.dumps(doc).encode() if doc is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/__chaos__/{action}",
            data=data,
            method="POST" if action != "stats" else "GET",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            result: dict[str, Any] = json.loads(r.read())
            return result

    def rules(self, *rules: Mapping[str, Any]) -> None:
        self._call("rules", {"rules": list(rules)})

    def clear(self) -> None:
        self._call("clear", {})

    def stall(self) -> None:
        self._call("stall", {})

    def hold(self, listener: str, after: int) -> None:
        self._call("hold", {"listener": listener, "after": after})

    def release(self) -> None:
        self._call("release", {})

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def injected(self) -> int:
        return sum(n for k, n in self.stats()["counts"].items() if k.startswith("injected"))


class ChaosOperator(OperatorProcess):
    """The operator with its documented defaults (debounce 1 s, max delay 10 s, resync 60 s,
    ready poll 2 s): the suite proves what a user gets, not what a tuned test run gets."""

    ARGS: tuple[str, ...] = ("--plan-seconds", "20")

    def __init__(
        self, kubeconfig: str, log_dir: Path, name: str = "operator", args: Sequence[str] = ()
    ) -> None:
        super().__init__(kubeconfig, log_dir, name, args)
        self.metrics_port = free_port()

    def start(self, extra_env: Mapping[str, str] | None = None, wait_healthy: bool = True) -> None:
        """Started with its metrics on, always on the same port."""
        env = {METRICS_PORT_ENV: str(self.metrics_port), **(extra_env or {})}
        super().start(extra_env=env, wait_healthy=wait_healthy)

    def metrics(self) -> Samples:
        assert self.metrics_url is not None
        return wait_for("the operator's metrics", lambda: _scrape_or_none(self.metrics_url or ""), timeout=30)

    def rss_mib(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")


def _scrape_or_none(url: str) -> Samples | None:
    try:
        return scrape(url)
    except OSError:
        return None


# --- the control plane's processes ------------------------------------------------------------


def cluster_state_dir() -> Path:
    name = os.environ.get("GPUPLAN_CLUSTER_NAME", "gpuplan")
    return REPO / ".cluster" / "kwok" / "clusters" / name


class ControlPlane:
    """Stop and start components of the local control plane by their pid files."""

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.argv: dict[str, list[str]] = {}
        for c in self.COMPONENTS:
            pid = self.pid(c)
            assert pid is not None and self.alive(pid), f"{c} is not running ({state_dir})"
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                self.argv[c] = [a.decode() for a in f.read().split(b"\0") if a]

    def pid(self, component: str) -> int | None:
        try:
            return int((self.state_dir / "pids" / f"{component}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state not in ("Z", "X")

    def running(self, component: str) -> bool:
        pid = self.pid(component)
        return pid is not None and self.alive(pid)

    def stop(self, component: str, sig: signal.Signals = signal.SIGKILL) -> None:
        pid = self.pid(component)
        assert pid is not None
        os.kill(pid, sig)
        wait_for(f"{component} to exit", lambda: not self.alive(pid), timeout=30, interval=0.1)

    def start(self, component: str) -> None:
        """Start a component from its command line, detached (a child of init, as kwokctl's are:
        no Popen object of ours outlives the test run, nothing is left a zombie)."""
        log = self.state_dir / "logs" / f"{component}.log"
        launch = 'setsid "$@" </dev/null >>"$LOG" 2>&1 & echo $!'
        proc = subprocess.run(
            ["bash", "-c", launch, "start", *self.argv[component]],
            cwd=self.state_dir,
            env={**os.environ, "LOG": str(log)},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        (self.state_dir / "pids" / f"{component}.pid").write_text(proc.stdout.strip())

    def revive(self) -> list[str]:
        """Start every component that is not running (they exit on a lost leader lease)."""
        dead = [c for c in self.COMPONENTS if not self.running(c)]
        for c in dead:
            self.start(c)
        return dead


# --- measuring -------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile (p in 0..100): p99 of 30 samples is the largest."""
    ordered = sorted(values)
    assert ordered, "no samples"
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class Figures:
    """What the suite measured, merged into one JSON file across tests."""

    @staticmethod
    def record(section: str, **values: Any) -> None:
        FIGURES.parent.mkdir(exist_ok=True)
        doc = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
        doc[section] = values
        FIGURES.write_text(json.dumps(doc, indent=2, sort_keys=True))
        print(f"\nchaos figures [{section}]: {json.dumps(values, sort_keys=True)}")


class Sampler:
    """Calls ``probe`` every ``interval`` seconds in a thread until stopped; keeps what it returns."""

    def __init__(self, probe: Callable[[], Any], interval: float) -> None:
        self.probe, self.interval = probe, interval
        self.samples: list[tuple[float, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.samples.append((started, self.probe()))
            except Exception as e:  # a sample lost to a transient API error is not a finding
                self.errors.append(repr(e))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


# --- what a finished plan looks like ------------------------------------------------------------


def converged(api: Api, ns: str, name: str) -> Callable[[], dict[str, Any] | None]:
    """A probe: the plan is Applied and Ready for its latest spec, and the cluster holds all of it
    (labels on exactly its nodes, its classes, a ConfigMap listing exactly its Deployments, a
    bound pod for each): nothing half-written, nothing stale."""

    def probe() -> dict[str, Any] | None:
        status = settled(api, ns, name)()
        if not status:
            return None
        nodes = {n for a in status.get("allocations") or [] for n in a["nodes"]}
        if set(labelled_nodes(api, label_key(ns, name))) != nodes:
            return None
        if any(api.priority_class(pc) is None for pc in status["applied"]["priorityClasses"]):
            return None
        cm = api.configmap(ns, f"{name}-flamewakers")
        if cm is None:
            return None
        entries = {e["name"] for e in yaml.safe_load(cm["data"]["values.yaml"])["flamewakers"]}
        deployments = {
            d["metadata"]["name"]
            for d in api.deployments(ns)
            if d["metadata"]["labels"].get(f"{GROUP}/plan") == name
        }
        if deployments and deployments != entries:
            return None
        where = placement(api, ns, name)
        if len(where) < len(deployments) or "" in where.values():
            return None
        return status

    return probe
