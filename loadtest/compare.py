"""Compare three allocations of a plan, from measured per-instance capacities.

The planner was validated with a controlled experiment: every service as "1 card × n
instances", every service as "n cards × 1 instance", and the planner's own split. This module
estimates the same three side by side from a plan (``gpuplan plan -o json``) and a capacities file,
so the comparison can be redone whenever the measurements change.

Capacities file (YAML or JSON)::

    kind: gpuplan.loadtest/capacities-v1    # optional
    cluster:                                # optional, per card type
      P4: {nodes: 4, cpuPerNode: 32}        # nodes for the alternatives; CPU cap per node
    operators:
      face_feature_extract:                 # or "face_feature_extract@P4" for one card type only
        cardsPerInstance: 1                 # the instance size the numbers below were measured at
        qpsPerInstance: 2000                # capacity_qps of `gpuplan loadtest` for one instance
        cpuPerInstance: 10                  # CPU cores that instance used at that rate (knee cpu)
        memoryMiBPerInstance: 3000          # optional, resident memory of one instance
        scalesWithCards: false              # does an instance with more cards serve more?
        scalesWithInstances: true           # optional (default true): do more instances add QPS?

The model, kept simple enough to check by hand:

* an instance with ``g`` cards serves ``q·g/g0`` if ``scalesWithCards`` else ``q`` (``g0``, ``q``
  = ``cardsPerInstance``, ``qpsPerInstance``), and uses CPU in proportion to what it serves;
* ``scalesWithInstances: true`` (compute-bound): the operator's QPS is the sum over its
  instances. ``false`` (IO-bound, e.g. a partitioned 1vN search where each query visits every
  partition): the operator serves what its slowest instance serves, and every instance still
  spends its CPU - more instances cost, they don't add;
* memory is ``instances × memoryMiBPerInstance``;
* with ``cpuPerNode``, instances placed on one node share its CPU: if they want more, all of them
  are slowed by the same factor. The planner's placement comes from the plan; the alternatives are
  spread round-robin over the type's nodes (the plan's node names, padded to ``cluster.T.nodes``).
  The alternatives are estimates, not plans: whether their instances fit the nodes' free cards is
  not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner import InvalidInput, read_allocations

CAPACITIES_KIND = "gpuplan.loadtest/capacities-v1"
STRATEGIES = ("1xn", "nx1", "planner")
LABELS = {"1xn": "1 card x n", "nx1": "n cards x 1", "planner": "planner"}
_OP_KEYS = {
    "cardsPerInstance",
    "qpsPerInstance",
    "cpuPerInstance",
    "memoryMiBPerInstance",
    "scalesWithCards",
    "scalesWithInstances",
}


class CompareError(ValueError):
    """Invalid plan or capacities; the message names the file and the field."""


@dataclass(frozen=True)
class Capacity:
    cards_per_instance: int
    qps_per_instance: float
    cpu_per_instance: float
    memory_mib_per_instance: float = 0.0
    scales_with_cards: bool = False
    scales_with_instances: bool = True

    def qps(self, cards: int) -> float:
        if self.scales_with_cards:
            return self.qps_per_instance * cards / self.cards_per_instance
        return self.qps_per_instance

    def cpu(self, cards: int) -> float:
        return self.cpu_per_instance * self.qps(cards) / self.qps_per_instance


@dataclass(frozen=True)
class ClusterType:
    nodes: int = 0
    cpu_per_node: float | None = None


@dataclass(frozen=True)
class Capacities:
    operators: Mapping[str, Capacity]
    cluster: Mapping[str, ClusterType]

    def lookup(self, operator: str, resource: str) -> Capacity | None:
        return self.operators.get(f"{operator}@{resource}") or self.operators.get(operator)


@dataclass(frozen=True)
class Row:
    """One operator on one card type, as the plan gives it."""

    operator: str
    resource: str
    strategy: str
    cards: int
    instances: int
    units_per_instance: int
    nodes: Mapping[str, int]


def _load_doc(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CompareError(f"{path}: no such file") from None
    except OSError as exc:
        raise CompareError(f"{path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CompareError(f"{path}: not valid YAML/JSON ({str(exc).splitlines()[0]})") from None


def _num(doc: Mapping[str, Any], key: str, where: str, *, positive: bool = True) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CompareError(f"{where}.{key} must be a number")
    if positive and not value > 0:
        raise CompareError(f"{where}.{key} must be positive")
    if not positive and value < 0:
        raise CompareError(f"{where}.{key} must not be negative")
    return float(value)


def _bool(doc: Mapping[str, Any], key: str, where: str, default: bool | None) -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        raise CompareError(f"{where}.{key} must be true or false")
    return value


def parse_capacities(doc: Any, source: str = "capacities") -> Capacities:
    """Validate a capacities document (see the module docstring)."""
    if not isinstance(doc, dict):
        raise CompareError(f"{source}: must be a mapping with an 'operators' key")
    kind = doc.get("kind", CAPACITIES_KIND)
    if kind != CAPACITIES_KIND:
        raise CompareError(f"{source}: kind must be {CAPACITIES_KIND}, not {kind!r}")
    ops = doc.get("operators")
    if not isinstance(ops, dict) or not ops:
        raise CompareError(f"{source}: operators must be a non-empty mapping")
    operators: dict[str, Capacity] = {}
    for name, entry in ops.items():
        where = f"{source}: operators.{name}"
        if not isinstance(entry, dict):
            raise CompareError(f"{where} must be a mapping")
        unknown = sorted(set(entry) - _OP_KEYS)
        if unknown:
            raise CompareError(f"{where}: unknown field {unknown[0]!r}")
        cards = _num(entry, "cardsPerInstance", where)
        if cards != int(cards):
            raise CompareError(f"{where}.cardsPerInstance must be a whole number")
        operators[str(name)] = Capacity(
            cards_per_instance=int(cards),
            qps_per_instance=_num(entry, "qpsPerInstance", where),
            cpu_per_instance=_num(entry, "cpuPerInstance", where, positive=False),
            memory_mib_per_instance=(
                _num(entry, "memoryMiBPerInstance", where, positive=False)
                if "memoryMiBPerInstance" in entry
                else 0.0
            ),
            scales_with_cards=_bool(entry, "scalesWithCards", where, None),
            scales_with_instances=_bool(entry, "scalesWithInstances", where, True),
        )
    cluster: dict[str, ClusterType] = {}
    raw_cluster = doc.get("cluster") or {}
    if not isinstance(raw_cluster, dict):
        raise CompareError(f"{source}: cluster must be a mapping of card type to settings")
    for res, entry in raw_cluster.items():
        where = f"{source}: cluster.{res}"
        if not isinstance(entry, dict):
            raise CompareError(f"{where} must be a mapping")
        nodes = _num(entry, "nodes", where) if "nodes" in entry else 0.0
        cpu = _num(entry, "cpuPerNode", where) if "cpuPerNode" in entry else None
        cluster[str(res)] = ClusterType(int(nodes), cpu)
    return Capacities(operators, cluster)


def parse_plan(doc: Any, source: str = "plan") -> list[Row]:
    """The allocations of a ``gpuplan plan -o json`` document, one row per operator and type."""
    if not isinstance(doc, dict) or not isinstance(doc.get("allocations"), list):
        raise CompareError(f"{source}: not a plan (expected gpuplan plan -o json output)")
    if doc.get("feasible") is False:
        raise CompareError(f"{source}: the plan is infeasible: {doc.get('reason', 'no reason')}")
    try:
        allocations = read_allocations(doc["allocations"])
    except InvalidInput as e:
        raise CompareError(f"{source}: {e}") from None
    rows: dict[tuple[str, str], Row] = {}
    for i, a in enumerate(allocations):
        prev = rows.get((a.operator, a.resource))
        if prev is None:
            strategy = a.strategy.value if a.strategy is not None else "?"
            rows[a.operator, a.resource] = Row(
                a.operator, a.resource, strategy, a.units_total, a.instances, a.units, dict(a.nodes)
            )
            continue
        if prev.units_per_instance != a.units:
            where = f"{source}: allocations[{i}]"
            raise CompareError(f"{where}: {a.operator} on {a.resource} appears twice with different sizes")
        merged = dict(prev.nodes)
        for n, c in a.nodes:
            merged[n] = merged.get(n, 0) + c
        rows[a.operator, a.resource] = Row(
            a.operator,
            a.resource,
            prev.strategy,
            prev.cards + a.units_total,
            prev.instances + a.instances,
            a.units,
            merged,
        )
    return list(rows.values())


def load_capacities(path: str | Path) -> Capacities:
    p = Path(path)
    return parse_capacities(_load_doc(p), str(p))


def load_plan(path: str | Path) -> list[Row]:
    p = Path(path)
    return parse_plan(_load_doc(p), str(p))


@dataclass(frozen=True)
class _Placed:
    row: int
    node: str
    cards: int


def _placements(rows: Sequence[Row], caps: Capacities, strategy: str) -> list[_Placed]:
    """Where each instance of each row sits under ``strategy``."""
    out: list[_Placed] = []
    if strategy == "planner":
        for i, r in enumerate(rows):
            nodes = r.nodes or {f"{r.resource}#?": r.instances}
            for node, count in sorted(nodes.items()):
                out.extend(_Placed(i, node, r.units_per_instance) for _ in range(count))
        return out
    names: dict[str, list[str]] = {}
    for r in rows:
        names.setdefault(r.resource, [])
        for n in r.nodes:
            if n not in names[r.resource]:
                names[r.resource].append(n)
    for res, lst in names.items():
        lst.sort()
        want = caps.cluster.get(res, ClusterType()).nodes
        lst.extend(f"{res}#{j}" for j in range(len(lst), max(want, 1)))
    cursor = dict.fromkeys(names, 0)
    for i, r in enumerate(rows):
        k, g = (r.cards, 1) if strategy == "1xn" else (1, r.cards)
        for _ in range(k):
            lst = names[r.resource]
            out.append(_Placed(i, lst[cursor[r.resource] % len(lst)], g))
            cursor[r.resource] += 1
    return out


def estimate(rows: Sequence[Row], caps: Capacities, strategy: str) -> list[dict[str, Any] | None]:
    """Per row: instances, cards per instance, QPS, CPU and memory (None when unmeasured)."""
    placed = _placements(rows, caps, strategy)
    demand: dict[tuple[str, str], float] = {}
    for p in placed:
        cap = caps.lookup(rows[p.row].operator, rows[p.row].resource)
        if cap is not None:
            key = (rows[p.row].resource, p.node)
            demand[key] = demand.get(key, 0.0) + cap.cpu(p.cards)
    factor: dict[tuple[str, str], float] = {}
    for (res, node), want in demand.items():
        limit = caps.cluster.get(res, ClusterType()).cpu_per_node
        factor[(res, node)] = 1.0 if limit is None or want <= limit else limit / want
    out: list[dict[str, Any] | None] = []
    for i, r in enumerate(rows):
        cap = caps.lookup(r.operator, r.resource)
        mine = [p for p in placed if p.row == i]
        if cap is None:
            out.append(None)
            continue
        qps_each = [cap.qps(p.cards) * factor[(r.resource, p.node)] for p in mine]
        cpu = sum(cap.cpu(p.cards) * factor[(r.resource, p.node)] for p in mine)
        qps = sum(qps_each) if cap.scales_with_instances else min(qps_each)
        throttled = any(factor[(r.resource, p.node)] < 1.0 for p in mine)
        out.append(
            {
                "instances": len(mine),
                "cardsPerInstance": mine[0].cards if mine else 0,
                "qps": round(qps, 3),
                "cpu": round(cpu, 3),
                "memoryMiB": round(len(mine) * cap.memory_mib_per_instance, 3),
                "cpuLimited": throttled,
            }
        )
    return out


def compare(rows: Sequence[Row], caps: Capacities) -> dict[str, Any]:
    """The three strategies side by side, per operator and in total."""
    per = {s: estimate(rows, caps, s) for s in STRATEGIES}
    out_rows = []
    unmeasured = []
    for i, r in enumerate(rows):
        measured = per["planner"][i] is not None
        if not measured:
            unmeasured.append(f"{r.operator}@{r.resource}")
        out_rows.append(
            {
                "operator": r.operator,
                "resource": r.resource,
                "cards": r.cards,
                "plannedStrategy": r.strategy,
                "measured": measured,
                "strategies": {s: per[s][i] for s in STRATEGIES},
            }
        )
    totals = {}
    for s in STRATEGIES:
        vals = [v for v in per[s] if v is not None]
        qps = sum(v["qps"] for v in vals)
        cpu = sum(v["cpu"] for v in vals)
        totals[s] = {
            "instances": sum(v["instances"] for v in vals),
            "qps": round(qps, 3),
            "cpu": round(cpu, 3),
            "memoryMiB": round(sum(v["memoryMiB"] for v in vals), 3),
            "qpsPerCore": round(qps / cpu, 3) if cpu > 0 else None,
        }
    notes = [
        "estimates from per-instance measurements; the 1xn and nx1 alternatives are spread "
        "round-robin and not checked against free cards"
    ]
    if unmeasured:
        notes.append(f"no capacities for {', '.join(unmeasured)}: left out of the totals")
    return {"rows": out_rows, "totals": totals, "notes": notes}


def _cell(v: Mapping[str, Any] | None) -> str:
    if v is None:
        return "unmeasured"
    flag = "*" if v.get("cpuLimited") else ""
    shape = f"{v['instances']}x{v['cardsPerInstance']}"
    return f"{shape:>5} {v['qps']:>9.0f}{flag:1} {v['cpu']:>6.1f}"


def render_text(report: Mapping[str, Any]) -> str:
    """A table: one row per operator and type, three column groups, then totals."""
    head = f"{'operator':<28} {'type':<5} {'cards':>5}"
    groups = "".join(f" | {LABELS[s]:<23}" for s in STRATEGIES)
    sub = "".join(f" | {'inst':>5} {'qps':>10} {'cpu':>6}" for _ in STRATEGIES)
    lines = [head + groups, " " * len(head) + sub]
    for r in report["rows"]:
        line = f"{r['operator']:<28} {r['resource']:<5} {r['cards']:>5}"
        line += "".join(f" | {_cell(r['strategies'][s]):<23}" for s in STRATEGIES)
        lines.append(line)
    t = report["totals"]
    line = f"{'total':<28} {'':<5} {'':>5}"
    line += "".join(f" | {t[s]['instances']:>5} {t[s]['qps']:>9.0f}  {t[s]['cpu']:>6.1f}" for s in STRATEGIES)
    lines.append(line)
    for label, key in (("memory (MiB)", "memoryMiB"), ("QPS per CPU core", "qpsPerCore")):
        line = f"{label:<40}"
        line += "".join(f" | {'':>5} {_fmt(t[s][key]):>9}  {'':>6}" for s in STRATEGIES)
        lines.append(line)
    if any(v and v.get("cpuLimited") for r in report["rows"] for v in r["strategies"].values()):
        lines.append("* slowed by the node's CPU (cluster.<type>.cpuPerNode)")
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(line.rstrip() for line in lines)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"
