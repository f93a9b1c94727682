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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
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


def classify(
    measurements: Sequence[Measurement],
    *,
    scaling_threshold: float = 0.7,
    flat_threshold: float = 0.35,
    busy_cores_per_instance: float = 0.25,
) -> Classification:
    """Recommend ``service`` (spread) or ``machine`` (concentrate) from the measurements."""
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
        busy = cpu_known[-1]["cpu_per_instance"] >= busy_cores_per_instance
    evidence = {
        "baseline_instances": base.instances,
        "efficiency": efficiency,
        "scaling_threshold": scaling_threshold,
        "flat_threshold": flat_threshold,
        "busy_cores_per_instance": busy_cores_per_instance,
        "cpu_busy_at_knee": busy,
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

    if efficiency >= scaling_threshold:
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
    return Measurement(instances, float(cap), float(cpu) if isinstance(cpu, int | float) else None, str(path))


def render_text(c: Classification) -> str:
    lines = [f"keyStrategy: {c.key_strategy}  ({c.bound}-bound, confidence {c.confidence})"]
    lines += [f"  - {r}" for r in c.reasons]
    lines.append(f"  {'instances':>9} {'qps':>9} {'speedup':>8} {'cpu':>6} {'cpu/inst':>8}")
    for p in c.evidence["points"]:
        cpu = "-" if p["cpu_cores"] is None else f"{p['cpu_cores']:.2f}"
        per = "-" if p["cpu_per_instance"] is None else f"{p['cpu_per_instance']:.2f}"
        lines.append(f"  {p['instances']:>9} {p['capacity_qps']:>9g} {p['speedup']:>8g} {cpu:>6} {per:>8}")
    return "\n".join(lines)
