"""``make bench``: the planner against the seed's method, and alone on the large cases.

Every run is a separate process, timed by wall clock, with its peak memory from ``wait4``; the
planner runs through the real command line (``gpuplan plan -o json``), start-up included.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from instances import large, medium  # noqa: E402

OUT = HERE / "out"
GPUPLAN = [str(Path(sys.executable).with_name("gpuplan"))]


def run(cmd: list[str]) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, peak RSS in MB, and the JSON the command printed."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, json.loads(out)


def write(name: str, plan: dict[str, Any], nodes: dict[str, Any]) -> tuple[str, str]:
    OUT.mkdir(exist_ok=True)
    p, n = OUT / f"{name}-plan.yaml", OUT / f"{name}-nodes.yaml"
    p.write_text(yaml.safe_dump(plan))
    n.write_text(yaml.safe_dump(nodes))
    return str(p), str(n)


def row(case: str, who: str, wall: float, mb: float, res: dict[str, Any]) -> None:
    score = res.get("score")
    print(
        f"{case:<34} {who:<22} {wall:>8.2f} {mb:>8.0f}  {res.get('feasible')!s:<6} "
        f"{res.get('optimal', '-')!s:<6} {score if score is not None else '-'}",
        flush=True,
    )


def planner_runs(case: str, plan: str, nodes: str, repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        wall, mb, res = run([*GPUPLAN, "plan", plan, "--nodes", nodes, "-o", "json", "-q"])
        walls.append(wall)
    row(case, f"gpuplan (median of {repeat})", statistics.median(walls), mb, res)
    for s in res.get("search", []):
        print(
            f"{'':<34}   {s['resource']}: {s['method']}, {s['status']}, "
            f"{s['seconds']}s, {s['branches']} branches"
        )
    return statistics.median(walls)


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"{'case':<34} {'planner':<22} {'wall s':>8} {'peak MB':>8}  {'feas.':<6} {'opt.':<6} score")
    plan, nodes, combos = medium()
    p, n = write("medium", plan, nodes)
    case = f"medium: 2 types, 20 nodes, 18 req, {combos / 1e6:.1f}M combos"
    ours = planner_runs(case, p, n, 1 if quick else 3)
    if not quick:
        wall, mb, res = run([sys.executable, str(HERE / "seed_method.py"), p, n])
        row(case, "seed brute force", wall, mb, res)
        print(f"{'':<34} speed-up through the CLI: {wall / ours:.1f}×")
    for tight in (False, True):
        plan, nodes, _ = large(tight)
        p, n = write("large-tight" if tight else "large", plan, nodes)
        label = "large: 3 types × 120 nodes, 80 req" + (", 97% full" if tight else "")
        planner_runs(label, p, n, 1 if quick else 3)


if __name__ == "__main__":
    main()
