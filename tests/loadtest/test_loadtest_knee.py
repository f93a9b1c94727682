"""End to end: the search finds the sample service's knee, and classify tells the modes apart.

Three references for "the knee", all from the server, never from the load tester:

* **configured** - from the server's parameters alone: cpu mode with 50 ms per request serves
  ``instances / 0.050`` (20/s with one instance, 40/s with two); io mode with 4 backend slots of
  100 ms serves ``4 / 0.100`` = 40/s with one or two instances;
* **self-measured** - what the server served per second while requests queued for it, on its
  own clock (``/stats`` ``measured_capacity_qps``), during this very search;
* **hold-time** - ``slots / mean time a slot was held``, also measured by the server during this
  very search (``hold_capacity_qps``): the capacity its slots had at the hold times they got.

The search is held to 10% of the self-measured knee (its real job: find the knee the server has
right now), and the self-measured knee to 10% of the hold-time one (the server is what its slots
say). Both references come from the same run as the search, so a machine busy with other work
moves them together: a cpu-mode instance scheduled late holds its slot longer and the knee sags,
for the server and the search alike. Comparing to the *configured* knee instead made the test
fail by a hair on a busy machine (the knee had sagged to 35-36/s) while the search was right; the
configured knee is now only printed, and must not be more than a third off (a broken server).
The knees are low (tens of requests per second, about 0.1 core of sender). The search runs with
a resolution of 5% (bracket guarantee) against the 10% it is held to, and the held rule
tolerates 5% growth of the backlog.

Each search is bounded (max 10 steps, 45 s); four searches take about 35-40 s together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from loadtest.classify import Measurement, classify
from loadtest.probe import ProcessProbe
from loadtest.runner import RunConfig
from loadtest.search import SearchConfig
from loadtest.session import Session, run_load_test

CPU = ("--mode", "cpu", "--service-ms", "50")
IO = ("--mode", "io", "--concurrency", "4", "--latency-ms", "100")
MODES = {"cpu": CPU, "io": IO}

Measure = Callable[[str, int], dict[str, Any]]


@pytest.fixture(scope="module")
def measure(sample_server: Any) -> Measure:
    """``measure(mode, instances)``: one capacity search per (mode, instances), cached.

    Two instances get the fine search the knee tests assert on; one instance gets a coarser one
    (resolution 25%) that is only used for the scaling ratio in classify.
    """
    cache: dict[tuple[str, int], dict[str, Any]] = {}

    def run(mode: str, instances: int) -> dict[str, Any]:
        key = (mode, instances)
        if key not in cache:
            fine = instances > 1
            with sample_server(*MODES[mode], "--instances", str(instances)) as srv:
                session = Session(
                    url=srv.url,
                    task_name="sample-work",
                    run_config=RunConfig(concurrency=16, processes=1, timeout=5.0, warmup=0.3, window=1.5),
                    search_config=SearchConfig(
                        start=12, resolution=0.05 if fine else 0.25, max_steps=10, max_time=45
                    ),
                    instances=instances,
                    probe=ProcessProbe([srv.pid]),
                )
                result = asyncio.run(run_load_test(session))
                result["expected_capacity"] = srv.expected_capacity
                stats = srv.stats()
                result["self_measured_capacity"] = stats["measured_capacity_qps"]
                result["hold_capacity"] = stats["hold_capacity_qps"]
            cache[key] = result
        return cache[key]

    return run


def _describe(result: dict[str, Any]) -> str:
    rows = [
        f"{s['rate']:g}/s -> {s['throughput']:.1f}/s {'held' if s['held'] else 'failed'} "
        f"(out {s['outstanding_slope']:+.1f}/s, cpu {s['server_cpu_cores']}, "
        f"loop lag p99 {s['loop_lag_p99_ms']:.0f} ms, p99 {s['latency_ms']['p99']:.0f} ms)"
        for s in result["steps"]
    ]
    return (
        f"capacity {result['capacity_qps']}, configured {result['expected_capacity']}, "
        f"self-measured {result['self_measured_capacity']}, hold-time {result['hold_capacity']}: "
        + "; ".join(rows)
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("cpu", id="cpu-bound, 2 instances of 50 ms: knee 40/s"),
        pytest.param("io", id="io-bound, 4 slots of 100 ms: knee 40/s"),
    ],
)
def test_search_finds_the_knee_within_ten_percent(measure: Measure, mode: str) -> None:
    result = measure(mode, 2)
    expected = result["expected_capacity"]
    assert expected == pytest.approx(40.0)
    cap = result["capacity_qps"]
    assert cap is not None, _describe(result)
    served = result["self_measured_capacity"]
    assert served is not None, "the server was never saturated: " + _describe(result)
    assert abs(cap - served) / served <= 0.10, _describe(result)
    hold = result["hold_capacity"]
    assert hold is not None and abs(served - hold) / hold <= 0.10, _describe(result)
    assert abs(served - expected) / expected <= 1 / 3, "the sample server is broken: " + _describe(result)
    # The knee was bracketed: a higher rate was run and failed.
    assert result["failed_qps"] is not None and result["failed_qps"] > cap, _describe(result)
    assert result["stopped"] == "converged", _describe(result)
    assert len(result["steps"]) <= 10 and result["duration_s"] <= 45 + 10
    knee = result["knee"]
    lat = knee["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    assert knee["error_rate"] <= 0.01
    assert knee["server_cpu_cores"] is not None and knee["server_rss_mib"] > 0
    # The failing steps show what "not held" means: a backlog that grows, not errors.
    failed = [s for s in result["steps"] if not s["held"]]
    assert all(s["outstanding_slope"] > s["growth_limit"] for s in failed), _describe(result)


@pytest.mark.timeout(60)
def test_classify_tells_cpu_bound_from_io_bound(measure: Measure) -> None:
    def points(mode: str) -> list[Measurement]:
        out = []
        for n in (1, 2):
            r = measure(mode, n)
            assert r["capacity_qps"] is not None, _describe(r)
            out.append(Measurement(n, r["capacity_qps"], r["knee"]["server_cpu_cores"], mode))
        return out

    cpu = classify(points("cpu"))
    io = classify(points("io"))
    assert cpu.key_strategy == "service", cpu.to_dict()
    assert cpu.bound == "compute"
    assert cpu.evidence["efficiency"] >= 0.7, cpu.to_dict()
    assert io.key_strategy == "machine", io.to_dict()
    assert io.bound == "io"
    assert io.evidence["efficiency"] <= 0.35, io.to_dict()
    # CPU evidence points the same way: an io instance idles at its knee, a cpu one does not.
    io_cpu = io.evidence["points"][-1]["cpu_ms_per_request"]
    cpu_cpu = cpu.evidence["points"][-1]["cpu_ms_per_request"]
    assert io_cpu is not None and cpu_cpu is not None
    assert cpu_cpu > 3 * io_cpu, (cpu.to_dict(), io.to_dict())
