"""The product's loop on real pods: measure each sample service, classify it, plan, deploy, compare.

What a user of gpuplan does with a new inference service, run end to end on the real-kubelet
nodes (``hack/kubelet-up.sh``):

1. **measure** - the sample service runs as pods (``loadtest sample-server``), one instance per
   pod, each with a CPU limit of :data:`CPU_LIMIT`; ``gpuplan loadtest run`` runs as a Job on a
   real node and finds the capacity of 1, 2, 4 ... instances (a targets file lists every pod: no
   Service or kube-proxy here, so the load tester spreads the requests round-robin itself), and
   reads the instances' CPU and memory at the knee from their ``/stats`` (``--server-stats``);
2. **classify** - ``loadtest classify`` turns the capacities into a ``keyStrategy``, with each
   measurement's CPU limit (``instances x CPU_LIMIT``) as what the instances had;
3. **plan and deploy** - a GpuAllocationPlan with both services and those strategies, applied
   through the operator (the Deployments run the sample server: the catalog template carries the
   command), its pods started by the kubelets with their cards;
4. **compare** - the planner's split measured on the operator's pods, beside the naive splits of
   the same cards (1 x n, ... n x 1), each deployed and measured the same way.

The two samples stand for the two kinds of service. ``cpu``: every request burns 2 ms of the
instance's own CPU time (``--clock cpu``), so an instance serves what its CPU limit allows and more
instances serve more. ``io``: every instance waits on one shared backend pod (``--backend``, 4 slots
of 100 ms: 40/s), so more instances add processes, CPU and memory, not throughput. A card does not
make either faster (no real GPU here): an allocation differs from another by its instances, which
is what the experiment measures. Every instance gets the same CPU limit, as a catalog template
gives every instance the same resources: all the kubelets share this machine's cores, and the
limit is what keeps the instances' share fixed whatever else runs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from e2e.kubelet.conftest import TOLERATION, RealNodes
from e2e.support import TYPE_LABEL, Api, Kubectl, live_pods, operator_entry, plan_manifest, settled, wait_for
from loadtest.classify import Classification, Measurement, classify

GPU = "nvidia.com/gpu"
PORT = 8080
CPU_LIMIT = "100m"
CPU_LIMIT_CORES = 0.1
MEMORY_LIMIT = "128Mi"
SERVICES = ("cpu", "io")
# the sample server's arguments per service (the io backend's address is added when it is known)
SERVER_ARGS: dict[str, tuple[str, ...]] = {
    "cpu": ("--mode", "cpu", "--instances", "1", "--clock", "cpu", "--service-ms", "2"),
    "io": ("--mode", "io", "--instances", "1", "--io-cpu-ms", "0"),
}
BACKEND_ARGS: tuple[str, ...] = ("--mode", "io", "--instances", "1", "--io-cpu-ms", "0")
BACKEND_ARGS += ("--concurrency", "4", "--latency-ms", "100", "--max-queue", "5000")
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Settings:
    """How each load test runs: the search and its bounds (the whole loop's time is mostly here)."""

    warmup: float = 1.0
    window: float = 3.0
    resolution: float = 0.1
    max_steps: int = 10
    start_per_instance: float = 12.0  # the search starts here x instances and doubles


@dataclass(frozen=True)
class Measured:
    """One load test of ``instances`` pods of a service: what ``loadtest run`` found."""

    service: str
    allocation: str  # "2x4": instances x cards per instance; "" while classifying (no cards)
    instances: int
    cards: int  # per instance
    capacity_qps: float
    cpu_cores: float | None  # the instances' CPU at the knee, all together
    rss_mib: float | None  # their resident memory at the knee, all together
    sender_cpu_cores: tuple[float, ...] = ()
    host_cpus: float | None = None
    limited_by: str = ""
    planner: bool = False
    result: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def measurement(self) -> Measurement:
        return Measurement(
            self.instances,
            self.capacity_qps,
            self.cpu_cores,
            f"{self.service}@{self.instances}",
            sender_cpu_cores=self.sender_cpu_cores,
            available_cores=self.host_cpus,
            cpu_limit_cores=CPU_LIMIT_CORES * self.instances,
        )

    def row(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("result")
        return out


def splits(cards: int) -> list[tuple[int, int]]:
    """Every split of ``cards`` into instances x cards per instance: (1, n) ... (n, 1)."""
    return [(k, cards // k) for k in range(1, cards + 1) if cards % k == 0]


def container(service: str, backend: str, cards: int = 0) -> dict[str, Any]:
    """The sample server's container: its command, CPU/memory limits and a readiness check."""
    args = [*SERVER_ARGS[service], "--host", "0.0.0.0", "--port", str(PORT), "--max-seconds", "3600"]
    if service == "io":
        args += ["--backend", backend]
    limits: dict[str, Any] = {"cpu": CPU_LIMIT, "memory": MEMORY_LIMIT}
    if cards:
        limits[GPU] = cards
    return {
        "command": ["python3", "-m", "loadtest", "sample-server"],
        "args": args,
        "ports": [{"containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": PORT}, "periodSeconds": 1},
        "resources": {"limits": limits},
    }


class Loop:
    """The loop's steps against one namespace of a cluster with real nodes."""

    def __init__(
        self,
        api: Api,
        kubectl: Kubectl,
        ns: str,
        nodes: RealNodes,
        settings: Settings = Settings(),
        log: Callable[[str], None] = print,
    ) -> None:
        self.api, self.kubectl, self.ns, self.nodes = api, kubectl, ns, nodes
        self.settings = settings
        self.log = log
        self.runs = 0
        self._backend: str | None = None

    # --- pods -------------------------------------------------------------------------------

    def _pod_spec(self, c: Mapping[str, Any], node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "tolerations": [TOLERATION],
            "nodeSelector": {TYPE_LABEL: self.nodes.gpu_type} | ({HOSTNAME: node} if node else {}),
            "containers": [{"name": "c", "image": self.nodes.image, **c}],
            "terminationGracePeriodSeconds": 2,
        }
        return spec

    def backend(self) -> str:
        """The io service's shared backend: one pod, created once; its URL."""
        if self._backend is None:
            c = container("io", "")
            c["args"] = [*BACKEND_ARGS, "--host", "0.0.0.0", "--port", str(PORT), "--max-seconds", "3600"]
            c["resources"] = {"limits": {"cpu": "300m", "memory": MEMORY_LIMIT}}
            self.api.create(
                "v1",
                "pods",
                {"metadata": {"name": "backend", "labels": {"app": "backend"}}, "spec": self._pod_spec(c)},
                ns=self.ns,
            )
            (pod,) = self.ready_pods("app=backend", 1)
            self._backend = f"http://{pod['status']['podIP']}:{PORT}/work"
        return self._backend

    def backend_stats(self) -> dict[str, Any]:
        out = self.kubectl.run(
            "exec", "-n", self.ns, "backend", "--", "python3", "-c",
            f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{PORT}/stats').read().decode())",
        ).stdout  # fmt: skip
        stats: dict[str, Any] = json.loads(out)
        return stats

    def ready_pods(self, selector: str, count: int, timeout: float = 120) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            pods = [p for p in self.api.pods(self.ns, selector) if not p["metadata"].get("deletionTimestamp")]
            ok = len(pods) == count and all(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p["status"].get("conditions") or []
                )
                for p in pods
            )
            return pods if ok else None

        return wait_for(f"{count} pods {selector} Ready", ready, timeout=timeout)

    def gone(self, selector: str, timeout: float = 60) -> None:
        wait_for(f"pods {selector} gone", lambda: not self.api.pods(self.ns, selector), timeout=timeout)

    def deploy(self, service: str, name: str, instances: int, cards: int = 0) -> list[dict[str, Any]]:
        """``instances`` pods of the service as a Deployment of our own (not the operator's)."""
        labels = {"app": name}
        self.api.create(
            "apps/v1",
            "deployments",
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": instances,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": self._pod_spec(container(service, self.backend(), cards)),
                    },
                },
            },
            ns=self.ns,
        )
        return self.ready_pods(f"app={name}", instances)

    def undeploy(self, name: str) -> None:
        self.api.delete("apps/v1", "deployments", name, ns=self.ns)
        self.gone(f"app={name}")

    # --- measuring --------------------------------------------------------------------------

    def measure(self, service: str, pods: Sequence[Mapping[str, Any]], allocation: str = "", cards: int = 0,
                planner: bool = False, best_of: int = 1) -> Measured:  # fmt: skip
        """``gpuplan loadtest run`` as a Job on the first real node, against every pod of ``pods``.

        With ``best_of`` > 1 the load test runs that many times and the highest capacity is kept:
        a capacity is the most the instances hold, and on a shared machine what else runs only
        ever takes from a sample (the instances' CPU per request rose 30% in one CI run), so the
        best of a few estimates it with less noise. Comparisons measure both sides alike.
        """
        runs = [self._measure_once(service, pods, allocation, cards, planner) for _ in range(best_of)]
        return max(runs, key=lambda m: m.capacity_qps)

    def _measure_once(
        self, service: str, pods: Sequence[Mapping[str, Any]], allocation: str, cards: int, planner: bool
    ) -> Measured:
        s = self.settings
        urls = [f"http://{p['status']['podIP']}:{PORT}/work" for p in pods]
        targets = "".join(f"GET {u}\n\n" for u in urls)
        args = [
            "python3", "-m", "loadtest", "run", urls[0], "--targets", "/tmp/targets",
            "--instances", str(len(urls)), "--processes", "1", "--concurrency", "64",
            "--start", f"{s.start_per_instance * len(urls):g}", "--resolution", f"{s.resolution:g}",
            "--warmup", f"{s.warmup:g}", "--window", f"{s.window:g}", "--max-steps", str(s.max_steps),
            "--timeout", "3", "--quiet", "--json", "-",
        ]  # fmt: skip
        for u in urls:
            args += ["--server-stats", u.replace("/work", "/stats")]
        script = f"printf %s {shlex.quote(targets)} >/tmp/targets && exec {shlex.join(args)}"
        self.runs += 1
        name = f"loadtest-{self.runs}"
        spec = self._pod_spec({"command": ["sh", "-c", script]}, node=self.nodes.names[0])
        spec["restartPolicy"] = "Never"
        self.api.create(
            "batch/v1",
            "jobs",
            {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": {"spec": spec}}},
            ns=self.ns,
        )

        def finished() -> dict[str, Any] | None:
            job = self.kubectl.run("get", "job", "-n", self.ns, name, "-o", "json").stdout
            status: dict[str, Any] = json.loads(job).get("status") or {}
            return status if status.get("succeeded") or status.get("failed") else None

        status = wait_for(f"the load test {name} ({service}, {len(urls)} instances)", finished, timeout=240)
        logs = self.kubectl.run("logs", "-n", self.ns, f"job/{name}").stdout
        if not status.get("succeeded"):
            raise AssertionError(f"the load test {name} failed: {logs[-2000:]}")
        result: dict[str, Any] = json.loads(logs[logs.index("{") :])
        self.api.delete("batch/v1", "jobs", name, ns=self.ns)
        knee = result.get("knee") or {}
        cap = result.get("capacity_qps")
        if not isinstance(cap, int | float):
            raise AssertionError(f"{name}: no rate was held: {json.dumps(result.get('steps'))[:2000]}")
        m = Measured(
            service=service,
            allocation=allocation,
            instances=len(urls),
            cards=cards,
            capacity_qps=float(cap),
            cpu_cores=knee.get("server_cpu_cores"),
            rss_mib=knee.get("server_rss_mib"),
            sender_cpu_cores=tuple(knee.get("sender_cpu_cores") or ()),
            host_cpus=(result.get("host") or {}).get("cpus"),
            limited_by=str(result.get("limited_by") or ""),
            planner=planner,
            result=result,
        )
        cpu = "-" if m.cpu_cores is None else f"{m.cpu_cores:.3f}"
        self.log(
            f"  {service} x{m.instances} {allocation or ''}: {m.capacity_qps:g} req/s, "
            f"cpu {cpu} cores, rss {m.rss_mib or 0:.0f} MiB ({len(result.get('steps') or [])} steps, "
            f"{result.get('duration_s', 0):.0f}s)"
        )
        return m

    def measure_sharded(
        self, pods: Sequence[Mapping[str, Any]], rate: float, shards: int = 2
    ) -> dict[str, Any]:
        """One fixed ``rate`` sent by an Indexed Job of ``shards`` load testers (``--shard auto/N``,
        each its share of every step, started together with ``--start-at``), their results
        combined by ``gpuplan loadtest merge``: the merged result document."""
        s = self.settings
        urls = [f"http://{p['status']['podIP']}:{PORT}/work" for p in pods]
        targets = "".join(f"GET {u}\n\n" for u in urls)
        start_at = time.time() + 15  # the shards' pods start within this (one host's clock)
        args = [
            "python3", "-m", "loadtest", "run", urls[0], "--targets", "/tmp/targets",
            "--rate", f"{rate:g}", "--shard", f"auto/{shards}", "--start-at", f"{start_at:.3f}",
            "--processes", "1", "--concurrency", "32", "--warmup", f"{s.warmup:g}",
            "--window", f"{s.window:g}", "--timeout", "3", "--no-probe", "--quiet", "--json", "-",
        ]  # fmt: skip
        script = f"printf %s {shlex.quote(targets)} >/tmp/targets && exec {shlex.join(args)}"
        self.runs += 1
        name = f"loadtest-{self.runs}"
        spec = self._pod_spec({"command": ["sh", "-c", script]})
        spec["restartPolicy"] = "Never"
        job = {
            "metadata": {"name": name},
            "spec": {
                "completionMode": "Indexed",
                "completions": shards,
                "parallelism": shards,
                "backoffLimit": 0,
                "template": {"spec": spec},
            },
        }
        self.api.create("batch/v1", "jobs", job, ns=self.ns)

        def finished() -> dict[str, Any] | None:
            status: dict[str, Any] = (
                json.loads(self.kubectl.run("get", "job", "-n", self.ns, name, "-o", "json").stdout).get(
                    "status"
                )
                or {}
            )
            done = int(status.get("succeeded") or 0) + int(status.get("failed") or 0)
            return status if done >= shards or status.get("failed") else None

        status = wait_for(f"the {shards} shards of {name}", finished, timeout=180)
        pods_of_job = self.api.pods(self.ns, f"job-name={name}")
        if int(status.get("succeeded") or 0) != shards:
            logs = [self.kubectl.run("logs", "-n", self.ns, p["metadata"]["name"], check=False).stdout
                    for p in pods_of_job]  # fmt: skip
            raise AssertionError(f"a shard of {name} failed: {logs}")
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for p in pods_of_job:
                out = self.kubectl.run("logs", "-n", self.ns, p["metadata"]["name"]).stdout
                index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                path = Path(tmp) / f"shard-{index}.json"
                path.write_text(out[out.index("{") :])
                files.append(str(path))
            merged = subprocess.run(
                [sys.executable, "-m", "loadtest", "merge", *sorted(files), "--json", "-"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        self.api.delete("batch/v1", "jobs", name, ns=self.ns)
        if merged.returncode != 0:
            raise AssertionError(f"loadtest merge: {merged.stderr}")
        doc: dict[str, Any] = json.loads(merged.stdout)
        step = doc["steps"][0]
        self.log(
            f"  {len(urls)} instances, {shards} shards at {rate:g}/s merged: "
            f"{'held' if step['held'] else 'NOT held'}, {step['throughput']:g}/s"
        )
        return doc

    def measure_instances(self, service: str, counts: Sequence[int], best_of: int = 1) -> list[Measured]:
        """The service at each instance count: one Deployment, scaled from count to count."""
        out = []
        name = f"{service}-instances"
        for i, n in enumerate(counts):
            if i == 0:
                pods = self.deploy(service, name, n)
            else:
                self.api.patch("apps/v1", "deployments", name, {"spec": {"replicas": n}}, ns=self.ns)
                pods = self.ready_pods(f"app={name}", n)
            out.append(self.measure(service, pods, best_of=best_of))
        self.undeploy(name)
        return out

    # --- planning ---------------------------------------------------------------------------

    def plan_spec(self, strategies: Mapping[str, str], cards: int) -> dict[str, Any]:
        """Both services, ``cards`` each, with their measured strategies; deployed by the operator."""
        backend = self.backend()
        return {
            "resources": [{"name": "L", "kind": "GPU", "nodeSelector": {TYPE_LABEL: self.nodes.gpu_type}}],
            "operators": [
                operator_entry(s, strategies[s])
                | {"flamewaker": {"containerAttributes": container(s, backend)}}
                for s in SERVICES
            ],
            "requests": {s: {"L": cards} for s in SERVICES},
            "tolerations": [TOLERATION],
            "image": self.nodes.image,
            "deploy": True,
        }

    def apply_plan(self, name: str, strategies: Mapping[str, str], cards: int) -> dict[str, Any]:
        self.kubectl.apply(plan_manifest(self.ns, name, self.plan_spec(strategies, cards)))
        status = wait_for(f"the plan {name} Applied and Ready", settled(self.api, self.ns, name), timeout=180)
        return status

    def planned_pods(self, plan: str, service: str) -> list[dict[str, Any]]:
        def running() -> list[dict[str, Any]] | None:
            pods = [
                p
                for p in live_pods(self.api, self.ns)
                if p["metadata"]["name"].startswith(f"{plan}-{service}-")
            ]
            ready = all(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p["status"].get("conditions") or []
                )
                for p in pods
            )
            return pods if pods and ready else None

        return wait_for(f"the {service} pods of {plan} Ready", running, timeout=120)

    def delete_plan(self, name: str) -> None:
        self.kubectl.run("delete", "gpuallocationplans", "-n", self.ns, name, "--wait=true", "--timeout=60s")
        wait_for(
            f"the pods of {name} gone",
            lambda: not [p for p in self.api.pods(self.ns) if p["metadata"]["name"].startswith(f"{name}-")],
            timeout=60,
        )


def cards_of(pod: Mapping[str, Any]) -> int:
    (c,) = pod["spec"]["containers"]
    return int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))


def classify_service(ms: Sequence[Measured]) -> Classification:
    return classify([m.measurement() for m in ms])


def table(rows: Sequence[Measured]) -> str:
    """The comparison as a Markdown table (capacity, and what it cost in CPU and memory)."""
    head = (
        "| service | allocation | instances x cards | capacity req/s | CPU at the knee (cores) "
        "| memory (MiB) | CPU limit (cores) |\n| --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for m in rows:
        alloc = ("planner " if m.planner else "") + (
            m.allocation or f"{m.instances} instance{'s' if m.instances > 1 else ''}, no cards"
        )
        cpu = "-" if m.cpu_cores is None else f"{m.cpu_cores:.2f}"
        rss = "-" if m.rss_mib is None else f"{m.rss_mib:.0f}"
        lines.append(
            f"| {m.service} | {alloc} | {m.instances} x {m.cards or '-'} | {m.capacity_qps:.1f} "
            f"| {cpu} | {rss} | {CPU_LIMIT_CORES * m.instances:g} |"
        )
    return head + "\n".join(lines) + "\n"
