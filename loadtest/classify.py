"""From capacities measured at 1 and at several instances to a ``keyStrategy``, with the evidence.

A service's strategy is decided "from the business logic and from performance tests". The
performance half is a question about scaling:

* **compute-bound** - each instance is limited by the CPU it runs on, so two instances (on two
  machines) serve about twice as much, and the CPU used grows with the throughput. Such a service
  wants to be *spread*: ``keyStrategy: service``.
* **IO-bound** - the instances wait on something they share (a store, a disk, the network), so
  adding instances adds processes and memory but hardly any throughput, and each instance's CPU
  sits mostly idle at the knee. Such a service wants *few* instances: ``keyStrategy: machine``.

The main number is the *scaling efficiency* ``(speedup - 1) / (ideal - 1)`` between the fewest and
the most instances measured: 1 when ``k`` instances serve ``k`` times as much, 0 when they serve
the same. At or above ``scaling_threshold`` (0.7) the service scales; at or below
``flat_threshold`` (0.35) it does not. CPU per instance at the knee is the second witness: it
raises confidence when it agrees and decides, at low confidence, in the band between.

Busy CPU outranks flat scaling. A service whose instances each burn at least ``busy_cores`` at
the knee, at every instance count measured, is compute-bound even when more instances did not
serve more: something outside the service took the CPU the next instance needed. On a small
machine that is the rule rather than the exception - two sample instances of 2 ms CPU per request
on two cores, with the load tester beside them, served 1.34x, not 2x, while each burnt 0.66 cores.
Concentrating such a service would make it slower still, so ``classify`` then answers
``service`` and says what limited the scaling, from what the measurements carry:

* ``host-cpu`` - the server's and the load tester's CPU together filled the cores the run had
  (``available_cores``: the host's CPUs, or what the run was allowed);
* ``cpu-limit`` - the server's CPU reached the limit it ran under (``cpu_limit_cores``, a
  cgroup's quota for all of its instances together);
* ``load-tester`` - a sender process was itself at a full core (the knee may be the client's);
* ``unknown`` - none of these is known to be full: measure again with more room.

An IO-bound service shows idle instances at the knee (they wait on what they share), so busy CPU
at every count is not how a shared bottleneck looks.

"Busy" is ``busy_cores_per_instance`` (a quarter of a core) - or, for a measurement made under a
CPU limit, 80% of each instance's share of that limit when that is less: a pod limited to 0.1 core
that burns 0.09 at the knee is as busy as it can be.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


class ClassifyError(ValueError):
    """The measurements cannot be classified; the message says what is missing."""


@dataclass(frozen=True)
class Measurement:
    """One capacity: instances, highest held QPS, and the server CPU (cores) at that rate."""

    instances: int
    capacity_qps: float
    cpu_cores: float | None = None
    source: str = ""
    sender_cpu_cores: tuple[float, ...] = ()  # each load-tester process's CPU at the knee
    available_cores: float | None = None  # CPUs the server and the load tester shared
    cpu_limit_cores: float | None = None  # a CPU limit on the server's instances together


@dataclass(frozen=True)
class Classification:
    key_strategy: str
    bound: str
    confidence: str
    evidence: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "keyStrategy": self.key_strategy,
            "bound": self.bound,
            "confidence": self.confidence,
            "evidence": self.evidence,
            "reasons": self.reasons,
        }


def _best_per_count(ms: Sequence[Measurement]) -> dict[int, Measurement]:
    best: dict[int, Measurement] = {}
    for m in ms:
        if m.instances not in best or m.capacity_qps > best[m.instances].capacity_qps:
            best[m.instances] = m
    return best


FULL = 0.8  # a share of a resource at or above which it counts as full


def scaling_limit(m: Measurement) -> tuple[str, str]:
    """What kept the instances of ``m`` from serving more: a code and a sentence."""
    sender = sum(m.sender_cpu_cores)
    if m.cpu_cores is not None and m.cpu_limit_cores and m.cpu_cores >= FULL * m.cpu_limit_cores:
        return "cpu-limit", (
            f"the server used {m.cpu_cores:.2f} of its {m.cpu_limit_cores:g}-core CPU limit at the knee"
        )
    if m.cpu_cores is not None and m.available_cores and m.cpu_cores + sender >= FULL * m.available_cores:
        return "host-cpu", (
            f"the server ({m.cpu_cores:.2f} cores) and the load tester ({sender:.2f}) used "
            f"{m.cpu_cores + sender:.2f} of the {m.available_cores:g} cores they shared"
        )
    if m.sender_cpu_cores and max(m.sender_cpu_cores) >= FULL:
        return "load-tester", (
            f"a load-tester process used {max(m.sender_cpu_cores):.2f} cores: the knee may be the client's"
        )
    return "unknown", (
        "no CPU the run had is known to be full (give --host-cores or --cpu-limit, or measure with more room)"
    )


def classify(
    measurements: Sequence[Measurement],
    *,
    scaling_threshold: float = 0.7,
    flat_threshold: float = 0.35,
    busy_cores_per_instance: float = 0.25,
    available_cores: float | None = None,
    cpu_limit_cores: float | None = None,
) -> Classification:
    """Recommend ``service`` (spread) or ``machine`` (concentrate) from the measurements.

    ``available_cores`` and ``cpu_limit_cores`` stand for what a measurement does not say itself
    (see :func:`scaling_limit`)."""
    measurements = [
        replace(
            m,
            available_cores=m.available_cores if m.available_cores is not None else available_cores,
            cpu_limit_cores=m.cpu_limit_cores if m.cpu_limit_cores is not None else cpu_limit_cores,
        )
        for m in measurements
    ]
    for m in measurements:
        if m.instances < 1:
            raise ClassifyError(f"instances must be at least 1 ({m.source or m})")
        if not m.capacity_qps > 0:
            raise ClassifyError(f"capacity must be positive ({m.source or m})")
    best = _best_per_count(measurements)
    if len(best) < 2:
        raise ClassifyError(
            f"need capacities at two or more instance counts (e.g. 1 and 2), got {sorted(best) or 'none'}"
        )
    counts = sorted(best)
    base = best[counts[0]]
    points = []

    def busy_at(m: Measurement) -> float:
        if m.cpu_limit_cores:
            return min(busy_cores_per_instance, FULL * m.cpu_limit_cores / m.instances)
        return busy_cores_per_instance

    for n in counts:
        m = best[n]
        ideal = n / base.instances
        speedup = m.capacity_qps / base.capacity_qps
        point: dict[str, Any] = {
            "instances": n,
            "capacity_qps": m.capacity_qps,
            "speedup": round(speedup, 3),
            "ideal_speedup": round(ideal, 3),
            "cpu_cores": m.cpu_cores,
            "cpu_per_instance": None if m.cpu_cores is None else round(m.cpu_cores / n, 3),
            "cpu_ms_per_request": (
                None if m.cpu_cores is None else round(1000 * m.cpu_cores / m.capacity_qps, 3)
            ),
            "busy_cores_per_instance": round(busy_at(m), 3),
            "source": m.source,
        }
        if n != base.instances:
            point["efficiency"] = round((speedup - 1) / (ideal - 1), 3)
        points.append(point)

    top = points[-1]
    efficiency = float(top["efficiency"])
    cpu_known = [p for p in points if p["cpu_per_instance"] is not None]
    busy: bool | None = None
    if cpu_known:
        # The most instances is where a shared bottleneck leaves each one idlest.
        busy = cpu_known[-1]["cpu_per_instance"] >= cpu_known[-1]["busy_cores_per_instance"]
    # Busy at every count measured: the instances are limited by the CPU they get.
    saturated = len(cpu_known) == len(points) and all(
        p["cpu_per_instance"] >= p["busy_cores_per_instance"] for p in points
    )
    evidence: dict[str, Any] = {
        "baseline_instances": base.instances,
        "efficiency": efficiency,
        "scaling_threshold": scaling_threshold,
        "flat_threshold": flat_threshold,
        "busy_cores_per_instance": busy_cores_per_instance,
        "cpu_busy_at_knee": busy,
        "cpu_busy_at_every_count": saturated,
        "points": points,
    }
    reasons = [
        f"{top['instances']} instances served {top['speedup']:g}x what {base.instances} did "
        f"(ideal {top['ideal_speedup']:g}x): scaling efficiency {efficiency:.2f}"
    ]
    if cpu_known:
        last = cpu_known[-1]
        reasons.append(
            f"at the knee with {last['instances']} instances each used "
            f"{last['cpu_per_instance']:.2f} cores ({last['cpu_ms_per_request']:.2f} ms CPU per "
            "request)"
        )

    if saturated and efficiency < scaling_threshold:
        strategy, bound = "service", "compute"
        code, why = scaling_limit(best[counts[-1]])
        evidence["scaling_limited_by"] = code
        reasons.append(
            "the instances' CPU was busy at the knee at every count: compute-bound, though "
            f"{top['instances']} instances did not reach {top['ideal_speedup']:g}x"
        )
        reasons.append(f"scaling was limited by {code}: {why}")
        reasons.append("spread it: concentrating a compute-bound service leaves it less CPU still")
        confidence = "low" if code == "unknown" else "medium"
    elif efficiency >= scaling_threshold:
        strategy, bound = "service", "compute"
        reasons.append("throughput grows with instances: spread them over machines")
        confidence = "high" if busy is not False else "low"
        if busy is None:
            confidence = "medium"
        elif not busy:
            reasons.append("but the instances' CPU was low at the knee: check what limits them")
    elif efficiency <= flat_threshold:
        strategy, bound = "machine", "io"
        reasons.append(
            "throughput does not grow with instances: they share a bottleneck (IO), so keep few instances"
        )
        confidence = "high" if busy is not True else "low"
        if busy is None:
            confidence = "medium"
        elif busy:
            reasons.append("but the instances' CPU was high at the knee: check for contention")
    else:
        confidence = "low"
        if busy is None:
            strategy, bound = ("service", "compute") if efficiency >= 0.5 else ("machine", "io")
            reasons.append("scaling is partial and CPU is unknown: decided by efficiency alone")
        elif busy:
            strategy, bound = "service", "compute"
            reasons.append("scaling is partial but the CPU is busy at the knee: compute-bound")
        else:
            strategy, bound = "machine", "io"
            reasons.append("scaling is partial and the CPU idles at the knee: IO-bound")
    return Classification(strategy, bound, confidence, evidence, reasons)


def parse_measurement(arg: str) -> Measurement:
    """``RESULT.json``, ``N=RESULT.json`` or ``N=QPS[:CPU_CORES]`` -> a :class:`Measurement`."""
    left, sep, right = arg.partition("=")
    instances: int | None = None
    source = arg
    if sep:
        try:
            instances = int(left)
        except ValueError:
            raise ClassifyError(f"{arg!r}: the part before '=' must be an instance count") from None
        qps_s, _, cpu_s = right.partition(":")
        try:
            qps = float(qps_s)
        except ValueError:
            qps = None
        if qps is not None:
            try:
                cpu = float(cpu_s) if cpu_s else None
            except ValueError:
                raise ClassifyError(f"{arg!r}: CPU cores after ':' must be a number") from None
            return Measurement(instances, qps, cpu, source)
        path = Path(right)
    else:
        path = Path(arg)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClassifyError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ClassifyError(f"{path}: not a loadtest JSON result ({exc})") from None
    if not isinstance(doc, dict) or "capacity_qps" not in doc:
        raise ClassifyError(f"{path}: not a loadtest JSON result (no capacity_qps)")
    if instances is None:
        instances = doc.get("instances")
        if not isinstance(instances, int):
            raise ClassifyError(
                f"{path}: the result does not say how many instances were measured; "
                "write N=FILE or run with --instances N"
            )
    cap = doc.get("capacity_qps")
    if not isinstance(cap, int | float):
        raise ClassifyError(f"{path}: no rate was held in that run, so it has no capacity")
    knee = doc.get("knee") or {}
    cpu = knee.get("server_cpu_cores")
    senders = knee.get("sender_cpu_cores") or []
    host = doc.get("host") or {}
    cores = host.get("cpus")
    return Measurement(
        instances,
        float(cap),
        float(cpu) if isinstance(cpu, int | float) else None,
        str(path),
        sender_cpu_cores=tuple(float(c) for c in senders if isinstance(c, int | float)),
        available_cores=float(cores) if isinstance(cores, int | float) and cores > 0 else None,
    )


def render_text(c: Classification) -> str:
    lines = [f"keyStrategy: {c.key_strategy}  ({c.bound}-bound, confidence {c.confidence})"]
    lines += [f"  - {r}" for r in c.reasons]
    lines.append(f"  {'instances':>9} {'qps':>9} {'speedup':>8} {'cpu':>6} {'cpu/inst':>8}")
    for p in c.evidence["points"]:
        cpu = "-" if p["cpu_cores"] is None else f"{p['cpu_cores']:.2f}"
        per = "-" if p["cpu_per_instance"] is None else f"{p['cpu_per_instance']:.2f}"
        lines.append(f"  {p['instances']:>9} {p['capacity_qps']:>9g} {p['speedup']:>8g} {cpu:>6} {per:>8}")
    return "\n".join(lines)
