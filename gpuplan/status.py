"""``gpuplan status``: the cluster's plans as a person reads them (pure: plans in, text out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

COLUMNS = ("NAMESPACE", "NAME", "PHASE", "SCORE", "CARDS", "OPTIMAL", "READY", "AGE")


def _age(created: str | None, now: datetime) -> str:
    if not created:
        return "-"
    seconds = int(
        (now - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)).total_seconds()
    )
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def _row(plan: Any, now: datetime) -> tuple[str, ...]:
    s = plan.status
    score = s.get("score")
    return (
        plan.namespace,
        plan.name,
        str(s.get("phase") or "-"),
        "-" if score is None else f"{score:g}",
        str(s.get("cards") or "-"),
        str(s.get("optimal", "-")).lower(),
        str(_condition(s, "Ready").get("status") or "-"),
        _age((plan.raw.get("metadata") or {}).get("creationTimestamp"), now),
    )


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


def render(plans: Sequence[Any], detail: bool = False, now: datetime | None = None) -> str:
    """A ``kubectl get``-like table; with ``detail``, each plan's placement and conditions too."""
    now = now or datetime.now(UTC)
    if not plans:
        return "No GpuAllocationPlans found.\n"
    out = _table([COLUMNS, *(_row(p, now) for p in sorted(plans, key=lambda p: (p.namespace, p.name)))])
    if not detail:
        return out
    for plan in plans:
        s = plan.status
        out += f"\n{plan.namespace}/{plan.name}: {s.get('message') or 'no status yet'}\n"
        per_node: dict[str, list[str]] = {}
        for a in s.get("allocations") or []:
            for node, count in (a.get("nodes") or {}).items():
                line = f"{a['operator']} {count}×{a['unitsPerInstance']} {a['resource']}"
                devices = (a.get("devices") or {}).get(node)
                zones = (a.get("zones") or {}).get(node)
                if devices:  # GPUs chosen one by one (DRA): each instance's devices
                    line += " on " + " | ".join(",".join(map(str, d)) for d in devices)
                elif zones:  # NUMA zones: the zone each instance counted on
                    line += " in " + ", ".join(map(str, zones))
                per_node.setdefault(node, []).append(line)
        if per_node:
            out += "placement:\n"
            out += "".join(f"  {node:<24} {', '.join(items)}\n" for node, items in sorted(per_node.items()))
        for c in s.get("conditions") or []:
            out += f"  {c.get('type')}={c.get('status')} ({c.get('reason')}): {c.get('message')}\n"
        for c in s.get("conflicts") or []:
            out += f"  conflict {c.get('resource')} {c.get('kind', '')}: {c.get('detail')}\n"
    return out
