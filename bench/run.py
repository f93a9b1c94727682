"""``make bench`` (planner part): the scale curve, re-plans after a cordon, and the previous release.

Every point is a separate process running the real command line (``gpuplan plan -o json``), timed
by wall clock, with its peak memory (``wait4`` through a small launcher, see :mod:`spawn`). Every
answer is checked by an independent validator (instance counts, free units, distinct nodes, and
with DRA each device) before its time is printed.

The comparison in the same run: the release before the node-class model (git ``BASELINE``) runs
the same inputs as far as it finishes within ``--baseline-timeout``; its ratio to today's planner
is what to read (this machine is shared and noisy, absolute times move between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import kubectl_nodes  # noqa: E402
from instances import TYPES, large, medium, scale, topology  # noqa: E402
from spawn import Measured, launch  # noqa: E402
from together import plans_for, together, validate_together  # noqa: E402
from validate import validate, validate_devices  # noqa: E402

OUT = HERE / "out"
BASELINE = "621d1d4"  # the last release whose exact search modelled every node
# the last commit whose device placement searched a model of every node, split and domain
TOPOLOGY_BASELINE = "f8bd65f"
# the last commit that read every field of every node (the generic readers only)
READER_BASELINE = "0518371"
LARGE_NODES = 65_000


def baseline_cli(module: str) -> list[str]:
    """The command line started as the installed ``gpuplan`` command starts it (a console script:
    import the module, call its main), today's and every baseline's alike. ``-P``: the working
    tree must not shadow a baseline on PYTHONPATH. (``python -m gpuplan`` costs 15-20 ms more:
    runpy, and the working tree searched first for every import.)"""
    return [sys.executable, "-P", "-c", f"import sys; from {module} import main; sys.exit(main())"]


CLI = baseline_cli("gpuplan.cli")


BASELINE_CLI = baseline_cli("planner.cli")
# the release before several plans were planned together: single plans must not be slower than it
RELEASE = "e0a1626"
RELEASE_CLI = baseline_cli("gpuplan.cli")
# several plans planned together, before large clusters were read and planned per plan rather
# than per node (65,000 nodes x 50 plans)
SHARE_BASELINE = "bcbfbc9"


def run(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> tuple[float, float, Any]:
    """Wall seconds, peak RSS in MB, and the JSON the command printed (None on a time-out)."""
    m, res = measured(cmd, env, timeout)
    return m.wall_s, m.peak_rss_mb, res


def measured(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> tuple[Measured, Any]:
    """The figures of one run (CPU seconds too) and the JSON it printed (None on a time-out)."""
    with tempfile.TemporaryFile() as out:
        m = launch(cmd, env=env, stdout=out, stderr=subprocess.DEVNULL, timeout=timeout)
        if m.timed_out:
            return m, None
        if m.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(cmd)} exited {m.returncode}")
        out.seek(0)
        return m, json.loads(out.read())


def write(name: str, plan: dict[str, Any], nodes: dict[str, Any]) -> tuple[str, str]:
    OUT.mkdir(exist_ok=True)
    p, n = OUT / f"{name}-plan.json", OUT / f"{name}-nodes.json"
    p.write_text(json.dumps(plan))
    n.write_text(json.dumps(nodes))
    return str(p), str(n)


def baseline_env(commit: str = BASELINE) -> dict[str, str] | None:
    """A checkout of ``commit`` on PYTHONPATH (git worktree under bench/out), or None without git."""
    tree = OUT / f"baseline-{commit}"
    if not (tree / "planner").is_dir():
        OUT.mkdir(exist_ok=True)
        made = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(tree), commit],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            print(f"(no baseline: git worktree add failed: {made.stderr.strip()})")
            return None
    compiled(tree)
    return os.environ | {"PYTHONPATH": str(tree)}


def compiled(tree: Path) -> None:
    """The tree's modules compiled, as installing a package compiles them: every tree is timed
    as a user runs it. Where ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) nothing
    compiled at import is kept, and each run compiled every module again: 15-40 ms of a small
    plan's 0.1 s, more for the tree with more modules."""
    packages = [str(tree / p) for p in ("planner", "gpuplan") if (tree / p).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True, capture_output=True)


def describe(res: dict[str, Any] | None) -> str:
    if res is None:
        return "timed out"
    if not res.get("feasible"):
        return "no plan" + ("" if res.get("optimal") else " found in time")
    gap = ""
    if res.get("bound") is not None and res["score"]:
        gap = f", gap {100 * (res['bound'] - res['score']) / abs(res['score']):.2f}%"
    how = "/".join(sorted({s["method"] for s in res.get("search", [])}))
    return f"{'optimal' if res['optimal'] else 'best found'} ({how}){gap}, score {res['score']:g}"


HEAD = f"{'case':<44} {'planner':<16} {'wall s':>8} {'peak MB':>8}  result"


def row(case: str, who: str, wall: float, mb: float, res: dict[str, Any] | None, extra: str = "") -> None:
    print(f"{case:<44} {who:<16} {wall:>8.2f} {mb:>8.0f}  {describe(res)}{extra}", flush=True)


def point(
    label: str, plan: str, nodes: str, repeat: int, base: dict[str, str] | None, base_timeout: float,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:  # fmt: skip
    walls, mbs, res = [], [], None
    for _ in range(repeat):
        wall, mb, res = run([*CLI, "plan", plan, "--nodes", nodes, "-o", "json", "-q", *extra_args])
        walls.append(wall)
        mbs.append(mb)
    assert res is not None
    problems = validate(plan, nodes, res)
    if problems:
        raise SystemExit(f"{label}: invalid answer: {problems[:3]}")
    wall = statistics.median(walls)
    row(label, "gpuplan" + (f" (med. {repeat})" if repeat > 1 else ""), wall, max(mbs), res)
    out = {"case": label, "wall": wall, "mb": max(mbs), "result": describe(res), "score": res.get("score")}
    if base is not None:
        bwall, bmb, bres = run(
            [*BASELINE_CLI, "plan", plan, "--nodes", nodes, "-o", "json", "-q"], base, base_timeout
        )
        ratio = f"  ({bwall / wall:.0f}x slower)" if bres is not None else f"  (> {bwall / wall:.0f}x)"
        same = "" if bres is None or bres.get("score") == res.get("score") else "  DIFFERENT SCORE"
        row("", f"release {BASELINE}", bwall, bmb, bres, ratio + same)
        out |= {"baseline_wall": bwall, "baseline_done": bres is not None}
    return out


def replan_point(label: str, plan: str, nodes: str, first: dict[str, Any]) -> dict[str, Any]:
    """Cordon the node holding most instances, re-plan with --previous: time and instances moved."""
    held: dict[str, int] = {}
    for a in first["allocations"]:
        for n, c in a["nodes"].items():
            held[n] = held.get(n, 0) + c
    victim = max(held, key=lambda n: (held[n], n))
    doc = json.loads(Path(nodes).read_text())
    for item in doc["items"]:
        if item["metadata"]["name"] == victim:
            item.setdefault("spec", {})["unschedulable"] = True
    cordoned = Path(nodes).with_name(Path(nodes).stem + "-cordoned.json")
    cordoned.write_text(json.dumps(doc))
    previous = Path(nodes).with_name(Path(nodes).stem + "-previous.json")
    previous.write_text(json.dumps(first))
    wall, mb, res = run(
        [*CLI, "plan", plan, "--nodes", str(cordoned), "--previous", str(previous), "-o", "json", "-q"]
    )
    problems = validate(plan, str(cordoned), res)
    if problems:
        raise SystemExit(f"{label}: invalid answer: {problems[:3]}")
    row(
        label, "gpuplan", wall, mb, res, f"; moved {res.get('moved')} (the cordoned node held {held[victim]})"
    )
    return {"case": label, "wall": wall, "mb": mb, "moved": res.get("moved"), "held": held[victim]}


def topology_point(
    size: int, fill: float, base: dict[str, str] | None, base_timeout: float
) -> dict[str, Any]:
    """A DRA cluster: the devices of every instance, fewest straddling, most whole domains left."""
    plan, nodes, slices, claims, count = topology(size, fill)
    OUT.mkdir(exist_ok=True)
    paths = []
    for what, doc in (("plan", plan), ("nodes", nodes), ("slices", slices), ("claims", claims)):
        path = OUT / f"dra-{size}-{fill:.0%}-{what}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    p, n, sl, cl = paths
    args = ["plan", p, "--nodes", n, "--slices", sl, "--claims", cl, "-o", "json", "-q"]
    label = f"{size} nodes, {count} req, {fill:.0%}, 2 PCIe roots"
    wall, mb, res = run([*CLI, *args])
    problems, spans = validate_devices(p, n, sl, cl, res)
    if problems:
        raise SystemExit(f"{label}: invalid answer: {problems[:3]}")
    branches = sum(s.get("branches", 0) for s in res.get("search", []))
    how = "devices proven by the bounds" if branches == 0 else f"device model: {branches} branches"
    row(label, "gpuplan", wall, mb, res, f"; {spans} straddling; {how}")
    out = {"case": label, "wall": wall, "mb": mb, "result": describe(res), "straddling": spans}
    if base is not None:
        bwall, bmb, bres = run([*baseline_cli("gpuplan.cli"), *args], base, base_timeout)
        bproblems, bspans = validate_devices(p, n, sl, cl, bres)
        if bproblems:
            raise SystemExit(f"{label} (baseline): invalid answer: {bproblems[:3]}")
        ratio = f"  ({bwall / wall:.0f}x slower)" if bres is not None else f"  (> {bwall / wall:.0f}x)"
        detail = f"; {bspans} straddling" if bres is not None else ""
        row("", f"before {TOPOLOGY_BASELINE}", bwall, bmb, bres, detail + ratio)
        out |= {"baseline_wall": bwall, "baseline_optimal": bool(bres and bres.get("optimal"))}
    return out


def large_nodes() -> dict[str, Path]:
    """The 65,000-node files (written once, from a fixed seed): as kubectl writes them, JSON and
    YAML, and cut down to the fields the planner reads."""
    OUT.mkdir(exist_ok=True)
    per_type = {t: LARGE_NODES // len(TYPES) for t in TYPES}
    paths = {}
    for fmt in ("json", "yaml"):
        path = OUT / f"large-{LARGE_NODES}-nodes.{fmt}"
        if not path.exists():  # a fixed seed: the same file every run
            kubectl_nodes.write(str(path), per_type, [8, 8, 8, 8, 6, 5, 4, 3, 0], fmt)
        paths[fmt] = path
    planner_only = OUT / f"large-{LARGE_NODES}-nodes-min.json"
    if not planner_only.exists():
        doc = json.loads(paths["json"].read_text())
        keep = [
            {"kind": "Node", "metadata": {k: i["metadata"][k] for k in ("name", "labels")}}
            | {"status": {"allocatable": i["status"]["allocatable"]}}
            for i in doc["items"]
        ]
        planner_only.write_text(json.dumps({"kind": "List", "items": keep}))
        del doc, keep
    return paths | {"planner's fields only": planner_only}


def large_cluster(base: dict[str, str] | None, base_timeout: float) -> list[dict[str, Any]]:
    """65,000 Nodes as kubectl writes them (JSON and YAML), one plan of 8,000 requests; and the
    same nodes cut down to what the planner reads, which is the planning alone."""
    plan, _, count = scale(100, 8000, 0.35, seed=5)  # the requests only: the same whatever the nodes
    p = OUT / "large-plan.json"
    p.write_text(json.dumps(plan))
    files = large_nodes()
    paths = {fmt: files[fmt] for fmt in ("json", "yaml")}
    planner_only = files["planner's fields only"]
    out = []
    for what, path in files.items():
        size = path.stat().st_size / 1e6
        label = f"{LARGE_NODES:,} nodes, {count} req, {what} ({size:.0f} MB)"
        args = ["plan", str(p), "--nodes", str(path), "-o", "json", "-q"]
        m, res = measured([*CLI, *args])
        problems = validate(str(p), str(paths["json"]), res)
        if problems:
            raise SystemExit(f"{label}: invalid answer: {problems[:3]}")
        # CPU seconds too: on a shared machine they move less than the wall clock
        row(label, "gpuplan", m.wall_s, m.peak_rss_mb, res, f"; {m.cpu_s:.1f} s CPU")
        point = {
            "case": label, "wall": m.wall_s, "cpu": m.cpu_s, "mb": m.peak_rss_mb,
            "result": describe(res), "score": res.get("score"),
        }  # fmt: skip
        if base is not None and path != planner_only:
            b, bres = measured([*baseline_cli("gpuplan.cli"), *args], base, base_timeout)
            ratio = f"({b.wall_s / m.wall_s:.1f}x slower)" if bres is not None else "(timed out)"
            same = "" if bres is None or bres.get("score") == res.get("score") else "  DIFFERENT SCORE"
            cpu = f"; {b.cpu_s:.1f} s CPU  " if bres is not None else "  "
            row("", f"before {READER_BASELINE}", b.wall_s, b.peak_rss_mb, bres, cpu + ratio + same)
            point |= {"baseline_wall": b.wall_s, "baseline_mb": b.peak_rss_mb}
            point |= {"baseline_cpu": b.cpu_s, "baseline_done": bres is not None}
        out.append(point)
    return out


def large_together(base: dict[str, str] | None, base_timeout: float) -> list[dict[str, Any]]:
    """The 65,000 nodes (JSON, YAML, the planner's fields only) and 50 plans of three priorities,
    8,000 requests, a third elastic, planned together; beside the planner of several plans before
    large clusters were planned per plan rather than per node (``SHARE_BASELINE``)."""
    files = large_nodes()
    small = files["planner's fields only"]
    docs = plans_for(json.loads(small.read_text()), 50, 8000, fill=0.6)
    plans = []
    for i, doc in enumerate(docs):
        path = OUT / f"large-together-{i:02d}.json"
        path.write_text(json.dumps(doc))
        plans.append(str(path))
    out = []
    for what, path in files.items():
        label = f"{LARGE_NODES:,} nodes, 50 plans, 8000 req, {what}"
        args = ["plan", *plans, "--nodes", str(path), "-o", "json", "-q"]
        runs: list[tuple[str, list[str], dict[str, str] | None]] = [("gpuplan", CLI, None)]
        if base is not None:
            runs.append((f"before {SHARE_BASELINE}", baseline_cli("gpuplan.cli"), base))
        point: dict[str, Any] = {"case": label}
        for who, cli, env in runs:
            m, res = measured([*cli, *args], env, base_timeout if env else None)
            if res is None:
                row(label if who == "gpuplan" else "", who, m.wall_s, m.peak_rss_mb, None)
                continue
            problems = validate_together(plans, str(small), res)
            if problems:
                raise SystemExit(f"{label} ({who}): invalid answer: {problems[:3]}")
            got = res["plans"]
            admitted = sum(p["admitted"] for p in got)
            proven = all(p["optimal"] for p in got)
            print(
                f"{label if who == 'gpuplan' else '':<44} {who:<16} {m.wall_s:>8.2f} {m.peak_rss_mb:>8.0f}  "
                f"{admitted}/50 admitted, {'proven' if proven else 'not proven'}; {m.cpu_s:.1f} s CPU",
                flush=True,
            )
            key = "" if who == "gpuplan" else "baseline_"
            point |= {f"{key}wall": m.wall_s, f"{key}cpu": m.cpu_s, f"{key}mb": m.peak_rss_mb}
        out.append(point)
    return out


def release_point(size: int, fill: float, rel: dict[str, str] | None) -> dict[str, Any]:
    """One point of the single-plan curve, today's planner and the release, taking turns (so both
    see the same load), best of five each."""
    tag = "tight" if fill > 0.9 else "loose"
    plan, nodes, _ = scale(size, size // 5 if fill < 0.9 else None, fill)
    p, n = write(f"scale-{tag}-{size}", plan, nodes)
    args = ["plan", p, "--nodes", n, "-o", "json", "-q"]
    now, then = [], []
    for _ in range(5):
        now.append(run([*CLI, *args]))
        if rel:
            then.append(run([*RELEASE_CLI, *args], rel))
    wall, mb, res = min(now, key=lambda r: r[0])
    label = f"{size} nodes, {tag}"
    row(label, "gpuplan", wall, mb, res)
    out = {"case": label, "wall": wall, "mb": mb, "score": res.get("score")}
    if then:
        bwall, bmb, bres = min(then, key=lambda r: r[0])
        same = "" if bres.get("score") == res.get("score") else "  DIFFERENT SCORE"
        row("", f"release {RELEASE}", bwall, bmb, bres, f"  (today {wall / bwall:.2f}x its time){same}")
        out |= {"release_wall": bwall, "release_mb": bmb}
    return out


def together_point(
    size: int, fill: float, base: dict[str, str] | None = None, plans: int = 20, requests: int = 1000
) -> dict[str, Any]:
    """``plans`` plan files planned together; the mins ask ``fill`` × 5/6 of the free cards.
    Best of three (wall and CPU seconds), today's planner and ``SHARE_BASELINE`` taking turns."""
    docs, nodes = together(size, plans, requests, fill)
    OUT.mkdir(exist_ok=True)
    paths = []
    for i, doc in enumerate(docs):
        path = OUT / f"together-{size}-{fill}-{i:02d}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    n = OUT / f"together-{size}-{fill}-nodes.json"
    n.write_text(json.dumps(nodes))
    args = ["plan", *paths, "--nodes", str(n), "-o", "json", "-q"]
    label = f"{size} nodes, {plans} plans, {requests} req, mins {fill * 5 / 6:.0%}"
    runs: list[tuple[str, list[str], dict[str, str] | None]] = [("gpuplan (min 3)", CLI, None)]
    if base is not None:
        runs.append((f"before {SHARE_BASELINE}", baseline_cli("gpuplan.cli"), base))
    seen: dict[str, list[tuple[Measured, Any]]] = {who: [] for who, _, _ in runs}
    for _ in range(3):
        for who, cli, env in runs:
            seen[who].append(measured([*cli, *args], env))
    out: dict[str, Any] = {"case": label}
    for who, _, _ in runs:
        res = seen[who][-1][1]
        problems = validate_together(paths, str(n), res)
        if problems:
            raise SystemExit(f"together {size} ({who}): invalid answer: {problems[:3]}")
        got = res["plans"]
        admitted = sum(p["admitted"] for p in got)
        elastic = [g for p in got for g in p.get("elastic", [])]
        at_max = sum(g["cards"] == g["max"] for g in elastic)
        how = "/".join(sorted({s["method"] for p in got for s in p.get("search", [])}))
        proven = all(p["optimal"] for p in got)
        wall = min(m.wall_s for m, _ in seen[who])
        cpu = min(m.cpu_s for m, _ in seen[who])
        mb = max(m.peak_rss_mb for m, _ in seen[who])
        print(
            f"{label if who.startswith('gpuplan') else '':<44} {who:<16} {wall:>8.2f} {mb:>8.0f}  "
            f"{admitted}/{plans} admitted, {at_max}/{len(elastic)} elastic at max, "
            f"{'proven' if proven else 'not proven'} ({how}); {cpu:.2f} s CPU",
            flush=True,
        )
        key = "" if who.startswith("gpuplan") else "baseline_"
        out |= {f"{key}wall": wall, f"{key}cpu": cpu, f"{key}mb": mb, f"{key}admitted": admitted}
        out |= {f"{key}proven": proven}
    return out


def main() -> None:
    compiled(ROOT)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer points, no baseline, no brute force")
    ap.add_argument("--baseline-timeout", type=float, default=90.0)
    ap.add_argument("--large-only", action="store_true", help="only the 65,000-node reading points")
    ap.add_argument("--together", action="store_true", help="only the several-plans points")
    ap.add_argument(
        "--large-together", action="store_true", help="only 65,000 nodes with 50 plans planned together"
    )
    ap.add_argument("--release", action="store_true", help="only single plans beside the release")
    args = ap.parse_args()
    if args.large_only:
        print(HEAD)
        rbase = None if args.quick else baseline_env(READER_BASELINE)
        large_cluster(rbase, args.baseline_timeout)
        print(f"\n{LARGE_NODES:,} nodes, 50 plans planned together:")
        sbase = None if args.quick else baseline_env(SHARE_BASELINE)
        large_together(sbase, args.baseline_timeout)
        return
    if args.large_together:
        print(HEAD)
        sbase = None if args.quick else baseline_env(SHARE_BASELINE)
        points = large_together(sbase, args.baseline_timeout)
        (OUT / "large-together-bench.json").write_text(json.dumps(points, indent=2))
        return
    if args.release:
        print(HEAD)
        rel = baseline_env(RELEASE)
        points = [release_point(s, f, rel) for f in (0.35, 0.97) for s in (100, 500, 1000, 2000, 5000)]
        (OUT / "release-bench.json").write_text(json.dumps(points, indent=2))
        return
    if args.together:
        print(HEAD)
        sbase = baseline_env(SHARE_BASELINE)
        points = [together_point(size, fill, sbase) for size in (1000, 5000) for fill in (0.5, 1.0, 1.3)]
        (OUT / "together-bench.json").write_text(json.dumps(points, indent=2))
        return
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "points": []}
    base = None if args.quick else baseline_env()
    print(HEAD)

    plan, nodes, combos = medium()
    p, n = write("medium", plan, nodes)
    case = f"medium: 2 types, 20 nodes, 18 req ({combos / 1e6:.1f}M combos)"
    results["points"].append(point(case, p, n, 1 if args.quick else 3, None, 0))
    if not args.quick:
        wall, mb, res = run([sys.executable, str(HERE / "seed_method.py"), p, n])
        row("", "seed's method", wall, mb, res, f"  ({wall / results['points'][-1]['wall']:.0f}x slower)")

    plan, nodes, _ = large(True)
    p, n = write("large-tight", plan, nodes)
    results["points"].append(
        point(
            "360 nodes, 80 req, 97% full (the hard case)",
            p,
            n,
            1 if args.quick else 5,
            base,
            args.baseline_timeout,
        )
    )

    sizes = (100, 1000, 5000) if args.quick else (100, 500, 1000, 2000, 5000)
    firsts: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for fill, tag in ((0.35, "loose"), (0.97, "tight")):
        for size in sizes:
            plan, nodes, count = scale(size, size // 5 if fill < 0.9 else None, fill)
            p, n = write(f"scale-{tag}-{size}", plan, nodes)
            label = f"{size} nodes, {count} req, {tag} ({fill:.0%})"
            with_base = base if size <= 1000 else None
            results["points"].append(point(label, p, n, 1, with_base, args.baseline_timeout))
            if size == sizes[-1]:
                _, _, first = run([*CLI, "plan", p, "--nodes", n, "-o", "json", "-q"])
                firsts[tag] = (p, n, first)

    print(f"\n{'fixed request set (400 requests), more nodes:'}")
    for size in (1000, 2000, 5000):
        plan, nodes, count = scale(size, 400, 0.35, seed=3)
        p, n = write(f"fixed-{size}", plan, nodes)
        results["points"].append(point(f"{size} nodes, {count} req (fixed set)", p, n, 1, None, 0))

    print("\nGPUs one by one (DRA ResourceSlices), each instance's devices chosen:")
    tbase = None if args.quick else baseline_env(TOPOLOGY_BASELINE)
    results["topology"] = [
        topology_point(size, fill, tbase if size <= 500 else None, args.baseline_timeout)
        for fill in (0.6, 0.9)
        for size in ((100, 1000) if args.quick else (100, 500, 1000, 2000))
    ]

    print(f"\n{LARGE_NODES:,} nodes as kubectl writes them (conditions, addresses, nodeInfo, images):")
    rbase = None if args.quick else baseline_env(READER_BASELINE)
    results["large"] = large_cluster(rbase, args.baseline_timeout)
    print(f"\n{LARGE_NODES:,} nodes, 50 plans planned together:")
    sbase = None if args.quick else baseline_env(SHARE_BASELINE)
    results["large_together"] = large_together(sbase, args.baseline_timeout)
    print("\nsingle plans beside the release before plans were planned together:")
    rel = None if args.quick else baseline_env(RELEASE)
    results["release"] = [
        release_point(size, fill, rel) for fill in (0.35, 0.97) for size in (sizes if rel else ())
    ]

    print("\nseveral plans planned together (20 plans of 3 priorities, a third of requests elastic):")
    results["together"] = [
        together_point(size, fill, sbase) for size in (1000, 5000) for fill in (0.5, 1.0, 1.3)
    ]

    print("\nre-plan after cordoning the busiest node (--previous):")
    results["replans"] = [
        replan_point(f"{sizes[-1]} nodes, {tag}", p, n, f) for tag, (p, n, f) in firsts.items()
    ]
    (OUT / "planner-bench.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
