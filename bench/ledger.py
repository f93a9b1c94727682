"""Where a phase of the operator bench spends the control plane's work.

Two readings around a phase: the API server's request counts by verb and resource (its own
``apiserver_request_total``, read from ``/metrics``) and the CPU seconds of every control-plane
process on this machine (``/proc/<pid>/stat``, the harness runs them as local processes), and the
operator's resident memory at the end of the phase and its peak so far (``/proc/<pid>/status``). The
difference between a phase run by the operator and the same pods created directly (the floor)
says which writes cost the extra time.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan_operator.kube import Kube

PROCESSES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "kwok-controller",
    "python",  # the bench and its helpers; the operator is counted apart
)
OPERATOR = b"gpuplan_operator"  # in the operator's command line
_SAMPLE = re.compile(
    r"^apiserver_request_(?P<metric>total|duration_seconds_sum)\{(?P<labels>[^}]*)\} (?P<value>\S+)$",
    re.MULTILINE,
)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_CYCLES = re.compile(
    r'^gpuplan_(?:cycles_total|cycle_(?P<cpu>cpu)_seconds_total|cycle_seconds_sum\{stage="(?P<stage>[^"]+)"\})'
    r" (?P<value>\S+)$",
    re.MULTILINE,
)
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Reading:
    requests: Counter[str] = field(default_factory=Counter)  # "VERB resource [subresource] [scope]"
    seconds: dict[str, float] = field(default_factory=dict)  # the API server's time answering them
    cpu: dict[str, float] = field(default_factory=dict)  # seconds per process name
    # the operator's: "cycles", seconds per stage, "cpu" (its process's CPU seconds while they ran)
    cycles: dict[str, float] = field(default_factory=dict)
    # the operator's resident set now ("resident") and its peak so far ("peak"), MiB
    memory: dict[str, float] = field(default_factory=dict)


def memory_of(pid: str) -> dict[str, float]:
    """A process's resident set now ("resident") and its peak so far ("peak"), MiB (``VmRSS``,
    ``VmHWM`` of ``/proc/<pid>/status``; ``pid`` may be ``self``); empty when it is gone."""
    names = {"VmRSS": "resident", "VmHWM": "peak"}
    out: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in names:
                    out[names[key]] = int(value.split()[0]) / 1024
    except OSError:
        return {}
    return out


def _cpu_by_process(memory: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds per process name; ``memory`` gets the operator's (:func:`memory_of`)."""
    out: dict[str, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            argv0 = argv[0].decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = os.path.basename(argv0)
        if name.startswith("python") and OPERATOR in argv:
            name = "operator"
            if memory is not None:
                memory.update(memory_of(pid))
        for known in (*PROCESSES, "operator"):
            if name.startswith(known):
                fields = stat.rsplit(")", 1)[1].split()  # utime and stime are its 12th and 13th
                out[known] = out.get(known, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
                break
    return out


def _get(kube: Kube, path: str, timeout: float = 30.0) -> bytes:
    """The API server's answer to a GET of ``path`` as it is sent (text metrics, a pprof profile:
    not JSON, which :meth:`Kube.request` decodes)."""
    api = kube.api
    headers = dict(api.default_headers)
    api.update_params_for_auth(headers, [], ["BearerToken"], path, "GET", None)
    response = api.rest_client.request(  # type: ignore[no-untyped-call]
        "GET", api.configuration.host + path, headers=headers, _request_timeout=timeout
    )
    data = bytes(response.read())
    if not 200 <= response.status <= 299:  # e.g. a second CPU profile while one is recorded
        raise RuntimeError(f"GET {path}: {response.status} {data[:200].decode(errors='replace')}")
    return data


def _operator_cycles(url: str) -> dict[str, float]:
    """The operator's scheduling cycles so far and the seconds spent in each stage of them (its
    own ``/metrics``); empty when it does not answer (not started yet, or gone)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {m["stage"] or m["cpu"] or "cycles": float(m["value"]) for m in _CYCLES.finditer(text)}


def read(kube: Kube, operator_metrics: str | None = None) -> Reading:
    """The API server's request counters and the control plane's CPU, now; with the operator's
    metrics URL, its cycles too."""
    text = _get(kube, "/metrics").decode()
    reading = Reading()
    reading.cpu = _cpu_by_process(reading.memory)
    if operator_metrics is not None:
        reading.cycles = _operator_cycles(operator_metrics)
    for m in _SAMPLE.finditer(text):
        labels = dict(_LABEL.findall(m["labels"]))
        verb = labels.get("verb", "")
        parts = [verb, labels.get("resource", ""), labels.get("subresource", "")]
        if verb in ("LIST", "WATCH"):  # who lists: a namespace's objects, or the whole cluster's
            parts.append(f"({labels.get('scope', '')})")
        key = " ".join(p for p in parts if p)
        if m["metric"] == "total":
            reading.requests[key] += int(float(m["value"]))
        else:
            reading.seconds[key] = reading.seconds.get(key, 0.0) + float(m["value"])
    return reading


def between(before: Reading, after: Reading) -> dict[str, object]:
    """What happened between two readings: requests (the most frequent first), the seconds the API
    server took answering each kind (summed over requests answered side by side), CPU seconds."""
    requests = after.requests.copy()
    requests.subtract(before.requests)
    frequent = sorted(((n, key) for key, n in requests.items() if n > 0), reverse=True)
    seconds = {key: s - before.seconds.get(key, 0.0) for key, s in after.seconds.items()}
    cpu = {name: s - before.cpu.get(name, 0.0) for name, s in after.cpu.items()}
    cycles = {k: v - before.cycles.get(k, 0.0) for k, v in after.cycles.items()}
    return {
        "requests": {key: n for n, key in frequent},
        "seconds": {key: round(seconds.get(key, 0.0), 2) for _, key in frequent},
        "cpu": {name: round(s, 1) for name, s in sorted(cpu.items()) if s > 0},
        "cycles": {k: round(v, 2) for k, v in cycles.items() if v > 0},
        "operator_mib": {k: round(v) for k, v in after.memory.items()},
    }


def summary(phase: dict[str, object], top: int = 12) -> str:
    requests = phase["requests"]
    seconds = phase["seconds"]
    cpu = phase["cpu"]
    assert isinstance(requests, dict) and isinstance(seconds, dict) and isinstance(cpu, dict)
    lines = ["  cpu s: " + ", ".join(f"{k} {v}" for k, v in cpu.items())]
    cycles = dict(phase.get("cycles") or {})  # type: ignore[call-overload]
    if count := cycles.pop("cycles", 0):
        cpu_s = cycles.pop("cpu", None)
        stages = ", ".join(f"{k} {v:.1f}" for k, v in cycles.items() if k != "total")
        used = f", the process used {cpu_s:.1f} CPU s meanwhile" if cpu_s is not None else ""
        total = cycles.get("total", 0.0)
        lines.append(f"  operator: {count:.0f} cycles, {total:.1f} s in them ({stages}){used}")
    memory = dict(phase.get("operator_mib") or {})  # type: ignore[call-overload]
    if memory:
        resident, peak = memory.get("resident"), memory.get("peak")
        lines.append(f"  operator memory: {resident} MiB resident, peak so far {peak} MiB")
    lines.append(f"  requests: {sum(requests.values())}, answered in {sum(seconds.values()):.1f} s")
    lines += [f"    {n:>7} {seconds[key]:>7.1f} s  {key}" for key, n in list(requests.items())[:top]]
    return "\n".join(lines)


def profile(kube: Kube, seconds: int, path: Path) -> threading.Thread:
    """Start recording the API server's CPU profile for ``seconds`` into ``path`` (pprof format;
    read it with ``go tool pprof -top path``), in a thread of its own."""

    def record() -> None:
        path.write_bytes(_get(kube, f"/debug/pprof/profile?seconds={seconds}", seconds + 30))

    thread = threading.Thread(target=record, name=f"profile-{path.stem}", daemon=True)
    thread.start()
    return thread
