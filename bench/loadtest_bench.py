"""``make bench-loadtest``: does ``gpuplan loadtest`` hold production rates, next to vegeta?

Everything runs against servers on loopback that this script starts (nginx, see
``loadtest_env.py``, and the sample server), each load generator as a separate process timed by
wall clock with its CPU and peak RSS from ``wait4``. Sections, all in one run:

1. **clients** - the HTTP client, picked by measurement: httpx, aiohttp and loadtest's own
   keep-alive client, each on asyncio and on uvloop, closed loop with 32 connections for a few
   seconds against nginx's ``return 200``: requests/s and CPU per request of one process.
2. **held rate** - the highest rate each tool holds against that nginx under the same rule
   (errors <= 1%, backlog not growing over a 10 s window after 1 s of warm-up), found by the same
   bisect search (``loadtest.search``) from 8,000/s. vegeta's per-request log (``vegeta encode
   --to csv``) is judged by the very code that judges ours (``loadtest.sender.build_record`` and
   ``loadtest.record.judge``), due times from its sequence numbers. Prints the ratio.
3. **knees** - capacity searches against a service with a known knee: nginx with ``limit_req``
   at 8,000/s, the sample server's io mode at 1,000/s (100 backend slots of 100 ms, its own
   measured capacity as the reference), and that server again from a sender given too few
   connections, to show a knee that is the sender's.
4. **shards** - two ``--shard I/2 --start-at`` runs at 8,000/s together against one nginx, merged.

Exits 1 when a claim fails: the 8,000/s rate not held, a knee off by more than 10% or blamed on
the wrong side. ``--quick`` shortens the windows (numbers then are not the README's).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loadtest_env import Nginx, ensure_vegeta, nginx, timed  # noqa: E402
from loadtest_vegeta import vegeta_step  # noqa: E402

from loadtest.search import SearchConfig, SearchResult, search_capacity  # noqa: E402

OUT = HERE / "out"
PY = sys.executable
CLI = [PY, "-m", "loadtest"]
CONNECTIONS = 256  # ours: --concurrency (the default); vegeta: -max-workers
FAILURES: list[str] = []


def claim(ok: bool, text: str) -> None:
    print(f"  [{'PASS' if ok else 'FAIL'}] {text}", flush=True)
    if not ok:
        FAILURES.append(text)


# -- 1. clients --------------------------------------------------------------------------------


async def _client_probe(client: str, url: str, seconds: float, conc: int) -> dict[str, Any]:
    from loadtest.plugins import Request

    if client == "loadtest":
        from loadtest.http import HttpClient

        raw = HttpClient(url)
        req = Request()

        async def one() -> int:
            return (await raw.send(req)).status

        close: Callable[[], Any] = raw.aclose
    elif client == "httpx":
        hx = httpx.AsyncClient(limits=httpx.Limits(max_connections=conc, max_keepalive_connections=conc))

        async def one() -> int:
            return (await hx.get(url)).status_code

        close = hx.aclose
    else:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc))

        async def one() -> int:
            async with session.get(url) as r:
                await r.read()
                return r.status

        close = session.close
    n = bad = 0
    end = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal n, bad
        while time.monotonic() < end:
            status = await one()
            n += 1
            bad += status != 200

    await asyncio.gather(*[one() for _ in range(conc)])  # open the connections first
    c0, t0 = time.process_time(), time.monotonic()
    await asyncio.gather(*[worker() for _ in range(conc)])
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    await close()
    return {"requests": n, "bad": bad, "rps": n / wall, "cpu_us": cpu / max(n, 1) * 1e6, "cores": cpu / wall}


def client_probe_main(argv: list[str]) -> None:
    client, loop, url, seconds, conc = argv[0], argv[1], argv[2], float(argv[3]), int(argv[4])
    if loop == "uvloop":
        import uvloop

        out = uvloop.run(_client_probe(client, url, seconds, conc))
    else:
        out = asyncio.run(_client_probe(client, url, seconds, conc))
    print(json.dumps(out))


def clients(srv: Nginx, seconds: float) -> list[dict[str, Any]]:
    print("\n== 1. HTTP clients: one process, 32 connections, closed loop against nginx 'return 200'")
    print(f"{'client':<10} {'loop':<8} {'req/s':>9} {'CPU us/req':>11} {'cores':>6} {'peak MB':>8}")
    rows = []
    for client in ("loadtest", "aiohttp", "httpx"):
        for loop in ("asyncio", "uvloop"):
            t = timed([PY, __file__, "--client-probe", client, loop, srv.flat_url, str(seconds), "32"])
            if t.returncode != 0:
                raise SystemExit(f"client probe {client}/{loop} failed: {t.stderr[-500:]}")
            r = json.loads(t.stdout.strip().splitlines()[-1])
            rows.append({"client": client, "loop": loop, **r, "peak_rss_mb": t.peak_rss_mb})
            print(
                f"{client:<10} {loop:<8} {r['rps']:>9.0f} {r['cpu_us']:>11.1f} {r['cores']:>6.2f} "
                f"{t.peak_rss_mb:>8.0f}",
                flush=True,
            )
    return rows


# -- 2. held rate: ours and vegeta's, same server, same rule, same search ----------------------


def held_search_config(quick: bool) -> tuple[SearchConfig, float, float]:
    cfg = SearchConfig(start=8000, growth=1.5, resolution=0.05, max_steps=8, max_time=400)
    return cfg, (0.5 if quick else 1.0), (3.0 if quick else 10.0)


def ours_held(srv: Nginx, quick: bool, work: Path) -> dict[str, Any]:
    cfg, warmup, window = held_search_config(quick)
    out = work / "ours-held.json"
    cmd = [
        *CLI,
        "run",
        srv.flat_url,
        "--start",
        f"{cfg.start:g}",
        "--growth",
        f"{cfg.growth:g}",
        "--resolution",
        f"{cfg.resolution:g}",
        "--max-steps",
        str(cfg.max_steps),
        "--max-time",
        f"{cfg.max_time:g}",
        "--warmup",
        f"{warmup:g}",
        "--window",
        f"{window:g}",
        "--concurrency",
        str(CONNECTIONS),
        "--server-pid",
        str(srv.pid),
        "--json",
        str(out),
    ]
    t = timed(cmd)
    if t.returncode != 0:
        raise SystemExit(f"gpuplan loadtest failed ({t.returncode}): {t.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    sender_mb = (doc.get("senders") or {}).get("peak_rss_mib") or 0.0
    print(f"  gpuplan knee: {doc['limited_by']}: {doc['limited_because']}")
    return {
        "doc": doc,
        "wall_s": t.wall_s,
        "coordinator_cpu_s": t.cpu_s,
        "peak_rss_mb": t.peak_rss_mb,
        "sender_peak_rss_mb": sender_mb,
    }


def vegeta_held(srv: Nginx, vegeta: str, quick: bool, work: Path) -> dict[str, Any]:
    cfg, warmup, window = held_search_config(quick)
    run = vegeta_step(vegeta, srv.flat_url, warmup, window, work, CONNECTIONS)
    t0 = time.monotonic()
    result: SearchResult = asyncio.run(search_capacity(run, cfg, step_seconds=warmup + window + 6))
    return {"result": result, "wall_s": time.monotonic() - t0, "usage": run.usage}  # type: ignore[attr-defined]


def held(srv: Nginx, vegeta: str, quick: bool, work: Path) -> dict[str, Any]:
    cfg, warmup, window = held_search_config(quick)
    print(
        f"\n== 2. Held rate against nginx 'return 200': bisect from {cfg.start:g}/s, x{cfg.growth:g}, "
        f"resolution {cfg.resolution:.0%}, {warmup:g} s warm-up + {window:g} s window per step, "
        f"{CONNECTIONS} connections, rule: errors <= 1%, backlog growth <= 5% of the rate"
    )
    ours = ours_held(srv, quick, work)
    doc = ours["doc"]
    for s in doc["steps"]:
        print(
            f"  gpuplan step {s['index']} {s['rate']:g}/s: {'HELD' if s['held'] else 'not held'}: "
            f"throughput {s['throughput']:.0f}/s, errors {s['error_rate']:.2%}, p99 "
            f"{s['latency_ms']['p99']:.1f} ms, release lag p99 {s['release_lag_p99_ms']:.1f} ms, "
            f"sender cpu {'/'.join(f'{c:.2f}' for c in s['sender_cpu_cores'])}",
            flush=True,
        )
    veg = vegeta_held(srv, vegeta, quick, work)
    ours_cap = doc["capacity_qps"] or 0.0
    veg_cap = veg["result"].capacity_qps or 0.0
    ratio = ours_cap / veg_cap if veg_cap else float("nan")
    at_8000 = next((s for s in doc["steps"] if s["rate"] == 8000), None)
    print(f"{'tool':<10} {'held req/s':>11} {'lowest failed':>14} {'steps':>6} {'wall s':>7} {'peak MB':>8}")
    print(
        f"{'gpuplan':<10} {ours_cap:>11g} {doc['failed_qps'] or '-'!s:>14} {len(doc['steps']):>6} "
        f"{ours['wall_s']:>7.1f} {ours['peak_rss_mb']:>8.0f}  (coordinator; each sender "
        f"process up to {ours['sender_peak_rss_mb']:.0f} MB)"
    )
    print(
        f"{'vegeta':<10} {veg_cap:>11g} {veg['result'].failed_qps or '-'!s:>14} "
        f"{len(veg['result'].steps):>6} {veg['wall_s']:>7.1f} "
        f"{max((u['peak_rss_mb'] for u in veg['usage']), default=0):>8.0f}"
    )
    print(f"ratio gpuplan / vegeta held rate: {ratio:.2f}")
    claim(
        at_8000 is not None
        and at_8000["held"]
        and at_8000["error_rate"] <= 0.01
        and at_8000["window_s"] >= window,
        f"gpuplan held 8000/s for {window:g} s with <= 1% errors"
        + (
            f" (errors {at_8000['error_rate']:.2%}, p99 {at_8000['latency_ms']['p99']:.1f} ms)"
            if at_8000
            else ""
        ),
    )
    print(f"  [{'MET' if ratio >= 0.8 else 'MISSED'}] aim: at least 0.8 of vegeta's held rate ({ratio:.2f})")
    return {
        "gpuplan": {
            "capacity_qps": ours_cap,
            "failed_qps": doc["failed_qps"],
            "steps": [(s["rate"], s["held"]) for s in doc["steps"]],
            "wall_s": ours["wall_s"],
            "peak_rss_mb": ours["peak_rss_mb"],
            "sender_peak_rss_mb": ours["sender_peak_rss_mb"],
        },
        "vegeta": {
            "capacity_qps": veg_cap,
            "failed_qps": veg["result"].failed_qps,
            "steps": [(s.rate, s.held) for s in veg["result"].steps],
            "usage": veg["usage"],
        },
        "ratio": ratio,
    }


# -- 3. knees ------------------------------------------------------------------------------------


def knee_run(name: str, url: str, args: list[str], work: Path) -> dict[str, Any]:
    out = work / f"knee-{name}.json"
    t = timed([*CLI, "run", url, "--json", str(out), "--quiet", *args])
    if t.returncode not in (0,):
        raise SystemExit(f"knee run {name} failed ({t.returncode}): {t.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    steps = ", ".join(f"{s['rate']:g}{'+' if s['held'] else '-'}" for s in doc["steps"])
    print(
        f"  {name}: capacity {doc['capacity_qps']}/s, lowest failed {doc['failed_qps']}/s, "
        f"{len(doc['steps'])} steps in {doc['duration_s']:.0f} s (wall {t.wall_s:.0f} s): {steps}"
    )
    print(f"    knee is {doc['limited_by']}'s: {doc['limited_because']}")
    return {"doc": doc, "wall_s": t.wall_s}


def knees(srv: Nginx, quick: bool, work: Path) -> dict[str, Any]:
    window = "2" if quick else "4"
    print("\n== 3. Capacity search against services with a known knee (one bounded run each)")
    out: dict[str, Any] = {}
    common = [
        "--growth",
        "2",
        "--resolution",
        "0.05",
        "--warmup",
        "1",
        "--window",
        window,
        "--max-steps",
        "12",
    ]
    r = knee_run(
        "nginx-limit-req-8000",
        srv.limited_url,
        ["--start", "2000", "--max-time", "150", "--server-pid", str(srv.pid), *common],
        work,
    )
    cap = r["doc"]["capacity_qps"] or 0.0
    claim(abs(cap - 8000) / 8000 <= 0.10, f"knee of nginx limit_req 8000r/s found within 10% ({cap:g}/s)")
    claim(r["doc"]["limited_by"] == "server", f"and blamed on the server ({r['doc']['limited_by']})")
    out["nginx_8000"] = {"capacity_qps": cap, "limited_by": r["doc"]["limited_by"], "wall_s": r["wall_s"]}

    sample = [PY, "-m", "loadtest", "sample-server", "--mode", "io", "--concurrency", "100"]
    sample += ["--latency-ms", "100", "--io-cpu-ms", "0", "--max-queue", "5000", "--port", "0"]
    proc = subprocess.Popen([*sample, "--max-seconds", "400"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[2]
        r = knee_run(
            "sample-io-1000",
            url,
            ["--task", "sample-work", "--start", "250", "--max-time", "150", *common],
            work,
        )
        stats = httpx.get(url.replace("/work", "/stats"), timeout=5).json()
        ref = stats["measured_capacity_qps"] or stats["expected_capacity_qps"]
        cap = r["doc"]["capacity_qps"] or 0.0
        print(
            f"    the server measured its own capacity: {ref}/s "
            f"(configured {stats['expected_capacity_qps']}/s)"
        )
        claim(
            abs(cap - ref) / ref <= 0.10, f"knee of the 1000/s sample found within 10% of its own ({cap:g}/s)"
        )
        claim(r["doc"]["limited_by"] == "server", f"and blamed on the server ({r['doc']['limited_by']})")
        out["sample_1000"] = {"capacity_qps": cap, "reference_qps": ref, "limited_by": r["doc"]["limited_by"]}
        r = knee_run(
            "sample-io-1000-with-20-connections",
            url,
            [
                "--task",
                "sample-work",
                "--start",
                "100",
                "--processes",
                "1",
                "--concurrency",
                "20",
                "--max-time",
                "100",
                "--growth",
                "2",
                "--resolution",
                "0.1",
                "--warmup",
                "1",
                "--window",
                window,
            ],
            work,
        )
        owner = r["doc"]["limited_by"]
        claim(owner == "sender-connections", f"20 connections x 100 ms: the knee is the sender's ({owner})")
        out["sample_1000_20_connections"] = {"capacity_qps": r["doc"]["capacity_qps"], "limited_by": owner}
    finally:
        proc.terminate()
        proc.wait(15)
    return out


# -- 4. shards -----------------------------------------------------------------------------------


def shards(srv: Nginx, quick: bool, work: Path) -> dict[str, Any]:
    window = "3" if quick else "5"
    print("\n== 4. Two shards (--shard I/2 --start-at T) at 8000/s against one nginx, merged")
    start_at = time.time() + 4
    procs = []
    for i in range(2):
        cmd = [
            *CLI,
            "run",
            srv.flat_url,
            "--rate",
            "8000",
            "--shard",
            f"{i}/2",
            "--start-at",
            f"{start_at:.3f}",
        ]
        cmd += ["--processes", "1", "--warmup", "1", "--window", window, "--quiet"]
        cmd += ["--json", str(work / f"shard-{i}.json")]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise SystemExit(f"shard failed: {err[-1000:]}")
    merged = work / "shards-merged.json"
    done = subprocess.run(
        [*CLI, "merge", str(work / "shard-0.json"), str(work / "shard-1.json"), "--json", str(merged)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"merge failed: {done.stderr}")
    doc = json.loads(merged.read_text())
    s = doc["steps"][0]
    parts = [json.loads((work / f"shard-{i}.json").read_text())["steps"][0] for i in range(2)]
    for i, p in enumerate(parts):
        print(
            f"  shard {i}/2: {p['throughput']:.0f}/s, p99 {p['latency_ms']['p99']:.1f} ms, "
            f"{'held' if p['held'] else 'not held'} (its half)"
        )
    print(
        f"  merged: {s['throughput']:.0f}/s of {s['rate']:g}/s, errors {s['error_rate']:.2%}, "
        f"p50 {s['latency_ms']['p50']:.2f} ms, p99 {s['latency_ms']['p99']:.1f} ms, "
        f"p99.9 {s['latency_ms']['p99.9']:.1f} ms, "
        + ("held" if s["held"] else "not held: " + "; ".join(s["reasons"]))
    )
    claim(
        s["scheduled"] == 8000 * float(window) and s["senders"] == 2,
        "the two shards sent the whole schedule once",
    )
    claim(s["held"], "and the merged 8000/s held")
    return {"throughput": s["throughput"], "held": s["held"], "p99_ms": s["latency_ms"]["p99"]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client-probe":
        client_probe_main(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="short windows (a smoke run, not the README's numbers)"
    )
    p.add_argument(
        "--only",
        choices=("clients", "held", "knees", "shards"),
        action="append",
        help="run only these sections",
    )
    args = p.parse_args()
    only = set(args.only or ("clients", "held", "knees", "shards"))
    OUT.mkdir(exist_ok=True)
    load = os.getloadavg()
    print(
        f"gpuplan loadtest bench, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start"
    )
    vegeta = ensure_vegeta() if "held" in only else ""
    summary: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "loadavg_start": load,
    }
    with tempfile.TemporaryDirectory(prefix="gpuplan-lt-bench-") as d, nginx(8000) as srv:
        work = Path(d)
        if "clients" in only:
            summary["clients"] = clients(srv, 1.5 if args.quick else 3.0)
        if "held" in only:
            summary["held"] = held(srv, vegeta, args.quick, work)
        if "knees" in only:
            summary["knees"] = knees(srv, args.quick, work)
        if "shards" in only:
            summary["shards"] = shards(srv, args.quick, work)
    summary["loadavg_end"] = os.getloadavg()
    summary["failures"] = FAILURES
    (OUT / "loadtest.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"\nload average at the end {summary['loadavg_end'][0]:.2f}; summary in {OUT / 'loadtest.json'}")
    if FAILURES:
        print(f"{len(FAILURES)} claim(s) failed: " + "; ".join(FAILURES))
        sys.exit(1)


if __name__ == "__main__":
    main()
