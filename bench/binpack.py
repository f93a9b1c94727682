"""``make bench-packing``: classic bin-packing instances with known optima, planned as GPU plans.

Each instance (bench/binpack/, BPPLIB format, sources in its README) becomes a plan: one node per
bin, each with the bin's capacity free, and one ``special`` request of one instance per item.
It is planned twice: with the optimal number of nodes (a plan exists) and with one fewer (none
does). Beside it, in the same run, a plain CP-SAT model of the same instance (bench/binpack_cpsat.py)
gets the same time. Every run is a separate process (wall time, peak RSS, see :mod:`spawn`); every
plan gpuplan prints is checked by the independent validator, and a conflict it calls minimal is
checked by dropping each request in turn (the rest must then fit).

The targets: at the optimal node count a plan for at least 20 of 22 within 10 s each; at one
fewer, every one refuted within 10 s; no conflict called minimal that is not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from spawn import launch  # noqa: E402
from validate import validate  # noqa: E402

DATA = HERE / "binpack"
OUT = HERE / "out"
CLI = [sys.executable, "-m", "gpuplan"]
TYPE = "BIN"


def instances() -> list[tuple[str, str, int]]:
    """(name, family, optimum) of every instance in bench/binpack/optima.tsv."""
    rows = []
    for line in (DATA / "optima.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            name, family, optimum = line.split("\t")
            rows.append((name, family, int(optimum)))
    return rows


def read(name: str) -> tuple[int, list[int]]:
    nums = [int(x) for x in (DATA / f"{name}.txt").read_text().split()]
    return nums[1], nums[2 : 2 + nums[0]]


def docs(name: str, bins: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan (one special request of one instance per item) and the nodes (one per bin)."""
    capacity, weights = read(name)
    label = {"gpuplan.ragnaros.io/gpu-type": TYPE}
    nodes = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"bin-{b:03d}", "labels": label},
                "status": {"allocatable": {"nvidia.com/gpu": str(capacity)}},
            }
            for b in range(bins)
        ],
    }
    operators = [
        {"name": f"item{i:03d}", "keyStrategy": "machine", "services": {"key": f"item-{i:03d}"}}
        for i in range(len(weights))
    ]
    requests = {
        f"item{i:03d}": {"resourceNum": {TYPE: w}, "machineNum": {TYPE: 1}} for i, w in enumerate(weights)
    }
    plan = {
        "apiVersion": "gpuplan.ragnaros.io/v1alpha1",
        "kind": "GpuAllocationPlan",
        "metadata": {"name": name.lower().replace("_", "-"), "namespace": "bench"},
        "spec": {
            "resources": [{"name": TYPE, "nodeSelector": label}],
            "operators": operators,
            "requests": requests,
        },
    }
    return plan, nodes


def write(name: str, bins: int) -> tuple[str, str]:
    plan, nodes = docs(name, bins)
    OUT.mkdir(exist_ok=True)
    p, n = OUT / f"binpack-{name}-{bins}-plan.json", OUT / f"binpack-{name}-{bins}-nodes.json"
    p.write_text(json.dumps(plan))
    n.write_text(json.dumps(nodes))
    return str(p), str(n)


def gpuplan(plan: str, nodes: str, seconds: float) -> tuple[float, float, dict[str, Any] | None, float]:
    """Wall seconds, peak MB, the JSON answer (None: killed) and CPU seconds of one plan."""
    with tempfile.TemporaryFile() as out:
        cmd = [*CLI, "plan", plan, "--nodes", nodes, "-o", "json", "-q", "--time-limit", str(seconds)]
        m = launch(cmd, stdout=out, stderr=subprocess.DEVNULL, timeout=seconds * 3 + 10)
        if m.timed_out:
            return m.wall_s, 0.0, None, 0.0
        if m.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(cmd)} exited {m.returncode}")
        out.seek(0)
        return m.wall_s, m.peak_rss_mb, json.loads(out.read()), m.cpu_s


def cpsat(name: str, bins: int, seconds: float) -> tuple[float, float, dict[str, Any] | None]:
    with tempfile.TemporaryFile() as out:
        cmd = [
            sys.executable,
            str(HERE / "binpack_cpsat.py"),
            str(DATA / f"{name}.txt"),
            str(bins),
            str(seconds),
        ]
        m = launch(cmd, stdout=out, stderr=subprocess.DEVNULL, timeout=seconds * 3 + 10)
        if m.timed_out or m.returncode != 0:
            return m.wall_s, 0.0, None
        out.seek(0)
        return m.wall_s, m.peak_rss_mb, json.loads(out.read())


def conflict_is_minimal(name: str, bins: int, res: dict[str, Any], seconds: float) -> str:
    """For a conflict called minimal: drop each of its requests in turn; the rest must fit."""
    conflicts = res.get("conflicts", [])
    if not conflicts or not conflicts[0].get("minimal"):
        return "not claimed"
    named = conflicts[0]["requests"]
    _, weights = read(name)
    plan, nodes = docs(name, bins)
    by_size: dict[int, str] = {}
    for op in named:  # requests of one size are interchangeable: one check per size
        by_size.setdefault(weights[int(op.removeprefix("item"))], op)
    for op in by_size.values():
        kept = {k: v for k, v in plan["spec"]["requests"].items() if k in named and k != op}
        trial = json.loads(json.dumps(plan))
        trial["spec"]["requests"] = kept
        OUT.mkdir(exist_ok=True)
        p, n = OUT / "binpack-drop-plan.json", OUT / "binpack-drop-nodes.json"
        p.write_text(json.dumps(trial))
        n.write_text(json.dumps(nodes))
        _, _, out, _ = gpuplan(str(p), str(n), seconds)
        if out is None or not out.get("feasible"):
            return f"NOT MINIMAL (without {op} the rest does not fit, or was not decided)"
    return f"checked ({len(by_size)} sizes)"


def verdict(res: dict[str, Any] | None) -> str:
    if res is None:
        return "killed"
    if res.get("feasible"):
        return "plan"
    kinds = {c["kind"] for c in res.get("conflicts", [])}
    return "timed out" if "TimedOut" in kinds else "refuted"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="time limit of each run (default 10)")
    ap.add_argument("--only", help="instances whose name contains this")
    ap.add_argument("--no-cpsat", action="store_true", help="skip the plain CP-SAT model")
    ap.add_argument("--check-minimal", action="store_true", help="re-check conflicts called minimal")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    head = (
        f"{'instance':<20} {'family':<13} {'n':>4} {'bins':>5}"
        f"  {'gpuplan':<10} {'wall s':>7} {'cpu s':>6} {'MB':>5}"
        f"  {'cp-sat':<9} {'wall s':>7} {'MB':>5}  how"
    )
    print(head, flush=True)
    for name, family, optimum in instances():
        if args.only and args.only not in name:
            continue
        _, weights = read(name)
        for bins in (optimum, optimum - 1):
            plan, nodes = write(name, bins)
            # the whole command is held to the limit: a second of it for the process to start
            wall, mb, res, cpu = gpuplan(plan, nodes, args.seconds - 1.0)
            if res is not None and res.get("feasible"):
                problems = validate(plan, nodes, res)
                if problems:
                    raise SystemExit(f"{name} on {bins} nodes: invalid plan: {problems[:3]}")
            c_wall, c_mb, c_res = (0.0, 0.0, None) if args.no_cpsat else cpsat(name, bins, args.seconds)
            c_what = (
                "-"
                if c_res is None
                else "packed"
                if c_res["packed"]
                else "refuted"
                if c_res["refuted"]
                else "undecided"
            )
            minimal = ""
            if res is not None and not res.get("feasible") and args.check_minimal:
                minimal = conflict_is_minimal(name, bins, res, args.seconds)
            methods = sorted({s["method"] for s in (res or {}).get("search", [])})
            row: dict[str, Any] = {
                "instance": name, "family": family, "items": len(weights), "bins": bins, "optimum": optimum,
                "gpuplan": verdict(res), "wall": wall, "cpu": cpu, "mb": mb,
                "cpsat": c_what, "cpsat_wall": c_wall, "cpsat_mb": c_mb, "minimal": minimal,
                "methods": methods,
                "conflict_minimal": bool(res and res.get("conflicts") and res["conflicts"][0].get("minimal")),
            }  # fmt: skip
            rows.append(row)
            print(
                f"{name:<20} {family:<13} {len(weights):>4} {bins:>5}"
                f"  {row['gpuplan']:<10} {wall:>7.2f} {cpu:>6.2f} {mb:>5.0f}"
                f"  {c_what:<9} {c_wall:>7.2f} {c_mb:>5.0f}  {'/'.join(methods)} {minimal}",
                flush=True,
            )
    at_opt = [r for r in rows if r["bins"] == r["optimum"]]
    below = [r for r in rows if r["bins"] < r["optimum"]]
    ok_opt = sum(r["gpuplan"] == "plan" and r["wall"] <= args.seconds for r in at_opt)
    ok_below = sum(r["gpuplan"] == "refuted" and r["wall"] <= args.seconds for r in below)
    c_opt = sum(r["cpsat"] == "packed" for r in at_opt)
    c_below = sum(r["cpsat"] == "refuted" for r in below)
    limit = f"within {args.seconds:g}s"
    n_opt, n_below = len(at_opt), len(below)
    print(f"\nat the optimum: gpuplan planned {ok_opt}/{n_opt} {limit}, plain CP-SAT {c_opt}/{n_opt}")
    print(f"one node fewer: gpuplan refuted {ok_below}/{n_below} {limit}, plain CP-SAT {c_below}/{n_below}")
    print(f"conflicts called minimal: {sum(r['conflict_minimal'] for r in below)}/{len(below)}")
    OUT.mkdir(exist_ok=True)
    (OUT / "binpack.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
