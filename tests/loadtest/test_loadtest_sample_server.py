"""The sample service: configuration, its self-measured capacity, HTTP behaviour, and the probe."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from loadtest.probe import ProcessProbe, StatsProbe, is_local_host, pids_listening_on
from loadtest.sample_server import ServerConfig, Slots, burn, hold

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("kwargs", "capacity"),
    [
        pytest.param({"mode": "cpu", "instances": 2, "service_ms": 50}, 40.0, id="cpu 2x50ms"),
        pytest.param({"mode": "cpu", "instances": 1, "service_ms": 20}, 50.0, id="cpu 1x20ms"),
        pytest.param(
            {"mode": "io", "instances": 1, "concurrency": 4, "latency_ms": 100},
            40.0,
            id="io 4 slots of 100ms",
        ),
        pytest.param(
            {"mode": "io", "instances": 8, "concurrency": 4, "latency_ms": 100},
            40.0,
            id="io ignores instances",
        ),
        pytest.param(
            {"mode": "io", "instances": 1, "concurrency": 100, "latency_ms": 10, "io_cpu_ms": 1},
            1000.0,
            id="io bound by its CPU part",
        ),
    ],
)
def test_expected_capacity(kwargs: dict[str, Any], capacity: float) -> None:
    assert ServerConfig(**kwargs).expected_capacity() == pytest.approx(capacity)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"mode": "cpu", "backend": "http://127.0.0.1:1/work"}, id="a backend in cpu mode"),
        pytest.param({"mode": "io", "backend": "127.0.0.1:1"}, id="a backend that is no URL"),
        pytest.param({"host": "example.com"}, id="refuses a name"),
        pytest.param({"mode": "gpu"}, id="unknown mode"),
        pytest.param({"instances": 0}, id="no instances"),
        pytest.param({"service_ms": 0}, id="free work"),
        pytest.param({"tail": 1.0}, id="no spin at all"),
        pytest.param({"max_seconds": 0}, id="no lifetime"),
    ],
)
def test_invalid_configuration(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ServerConfig(**kwargs)


def test_slots_measure_their_own_saturated_rate() -> None:
    async def run() -> tuple[float | None, float | None]:
        slots = Slots(2)

        async def hold() -> None:
            async with slots:
                await asyncio.sleep(0.02)

        await asyncio.gather(*[hold() for _ in range(4)])  # too short a queue to count
        early = slots.measured_capacity(min_seconds=0.0)
        await asyncio.gather(*[hold() for _ in range(60)])  # 0.6 s saturated at 100/s
        return early, slots.measured_capacity(min_seconds=0.3)

    early, measured = asyncio.run(run())
    assert early is None
    assert measured is not None and measured == pytest.approx(100, rel=0.15)


def test_burn_spins_the_cpu() -> None:
    used = burn(0.05, "wall")
    assert 0.0 < used <= 0.06
    assert burn(0.02, "cpu") >= 0.02


def test_endpoints_and_keep_alive(sample_server: Any) -> None:
    with sample_server("--mode", "io", "--latency-ms", "5", "--concurrency", "2") as srv:
        base = httpx.URL(srv.url)
        with httpx.Client(timeout=5.0) as client:
            first = client.post(srv.url, json={"i": 1})
            second = client.get(srv.url)
            assert first.status_code == second.status_code == 200
            assert first.json()["ok"] is True
            assert first.headers["connection"] == "keep-alive"
            assert client.get(base.join("/healthz")).text == "ok"
            assert client.get(base.join("/missing")).status_code == 404
            closing = client.get(srv.url, headers={"connection": "close"})
            assert closing.headers["connection"] == "close"
            stats = client.get(base.join("/stats")).json()
        assert stats["served"] == 3
        assert stats["expected_capacity_qps"] == pytest.approx(400)
        assert stats["pid"] == srv.pid and len(stats["instance_pids"]) == 1


def test_instances_share_a_backend_and_report_their_cpu(sample_server: Any) -> None:
    """Two fronts with ``--backend`` (two pods of one IO-bound service) are bounded together by
    the one backend they call: it serves what they both served, at most its own capacity. And each
    reports the CPU and memory of its processes, which a load tester elsewhere reads."""
    with (
        sample_server("--mode", "io", "--concurrency", "2", "--latency-ms", "20", "--io-cpu-ms", "0") as be,
        sample_server("--mode", "io", "--io-cpu-ms", "1", "--backend", be.url) as a,
        sample_server("--mode", "io", "--io-cpu-ms", "1", "--backend", be.url) as b,
    ):
        assert be.expected_capacity == pytest.approx(100) and a.expected_capacity == 0

        async def load(url: str, n: int) -> list[int]:
            async with httpx.AsyncClient(timeout=10.0) as client:
                answers = await asyncio.gather(*[client.get(url) for _ in range(n)])
            return [r.status_code for r in answers]

        async def both() -> list[int]:
            x, y = await asyncio.gather(load(a.url, 20), load(b.url, 20))
            return x + y

        started = time.monotonic()
        codes = asyncio.run(both())
        took = time.monotonic() - started
        fronts, backend = [a.stats(), b.stats()], be.stats()
    assert codes == [200] * 40
    # 40 requests through 2 backend slots of 20 ms: at least 0.4 s, whatever the two fronts do
    assert took >= 0.38, took
    assert backend["served"] == sum(f["served"] for f in fronts) == 40
    assert all(f["backend_errors"] == 0 for f in fronts)
    for f in fronts:
        assert f["cpu_seconds"] > 0 and f["rss_bytes"] > 1 << 20, f


@pytest.mark.parametrize(
    ("service_ms", "slower"),
    [
        # A hand-off to an instance process and back takes a few tenths of a millisecond on an
        # idle machine, and more than a millisecond when compilers fill both cores: a 2 ms request
        # may then be held longer than announced (the server's own figures say so), never shorter.
        pytest.param(2, None, id="2 ms: never let go early"),
        pytest.param(20, 0.1, id="20 ms: held within 10% of the announced time"),
    ],
)
def test_a_request_holds_its_instance_for_the_announced_time(
    sample_server: Any, service_ms: int, slower: float | None
) -> None:
    """The announced capacity is ``instances / service_ms``: each request must hold its slot that
    long (a 2 ms request used to be let go a millisecond early: the server announced 500/s and
    served 781/s). ``hold_capacity_qps`` is the server's own ``1 / mean hold``, so this needs no
    saturation and no timing of the test itself: one request after another."""
    with sample_server("--mode", "cpu", "--instances", "1", "--service-ms", str(service_ms)) as srv:
        base = httpx.URL(srv.url)
        with httpx.Client(timeout=5.0) as client:
            for _ in range(max(20, 200 // service_ms)):
                assert client.get(srv.url).status_code == 200
            stats = client.get(base.join("/stats")).json()
    expected = stats["expected_capacity_qps"]
    assert expected == pytest.approx(1000 / service_ms)
    assert stats["hold_capacity_qps"] <= expected * 1.02, stats
    if slower is not None:
        assert stats["hold_capacity_qps"] >= expected * (1 - slower), stats


def test_hold_ends_at_its_deadline() -> None:
    start = time.monotonic()
    cpu = hold(0.001, start + 0.003)
    ended = time.monotonic() - start
    # never early; how late depends on the machine's load (a loaded 2-core host woke it 6 ms late)
    assert 0.003 <= ended < 0.05
    assert 0.0 < cpu <= 0.002


def test_probe_follows_the_process_tree(sample_server: Any) -> None:
    """The tree's CPU covers what the instances say they burned, to the probe's resolution.

    The reference is measured in the same run: each reply carries the CPU its instance spent
    (``cpu_ms``, from the instance's own ``process_time``), and ``--clock cpu`` makes that a fixed
    100 ms per request however busy the machine is. The probe reads ``/proc`` in clock ticks, so
    a process's user and system time differences may each come out up to one tick short (the
    old version compared 0.58 - 0.48 with 0.1 and lost to the float): that, and nothing more, is
    the allowance. A probe that missed the children would see only the front's few milliseconds.
    """
    with sample_server("--mode", "cpu", "--instances", "2", "--service-ms", "100", "--clock", "cpu") as srv:
        port = httpx.URL(srv.url).port
        assert port is not None
        assert pids_listening_on(port) == [srv.pid]
        probe = ProcessProbe([srv.pid])
        before = probe.read()
        assert before.processes >= 3  # the front and its two instances
        with httpx.Client(timeout=5.0) as client:
            burned = sum(client.get(srv.url).json()["cpu_ms"] for _ in range(3)) / 1000.0
        after = probe.read()
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    resolution = 2 * tick * after.processes  # user and system may each read a tick short
    assert burned >= 0.3  # three requests of 100 ms of CPU each
    assert after.cpu_seconds - before.cpu_seconds >= burned - resolution, (before, after, burned)
    assert after.rss_bytes > 10 * 2**20


def test_stats_probe_reads_what_the_instances_report(sample_server: Any) -> None:
    """``--server-stats``: two instances that the load tester cannot see as processes (pods) are
    probed through their ``/stats``; the sum covers the CPU both burned, as the tree probe does."""
    args = ("--mode", "cpu", "--instances", "1", "--service-ms", "100", "--clock", "cpu")
    with sample_server(*args) as a, sample_server(*args) as b:
        urls = [str(httpx.URL(s.url).join("/stats")) for s in (a, b)]
        probe = StatsProbe(urls)
        probe.check()
        before = probe.read()
        with httpx.Client(timeout=5.0) as client:
            burned = sum(client.get(s.url).json()["cpu_ms"] for s in (a, b, a)) / 1000.0
        after = probe.read()
        assert probe.pids == [] and after.processes == 2
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    assert burned >= 0.3
    assert after.cpu_seconds - before.cpu_seconds >= burned - 4 * tick * 2, (before, after, burned)
    assert after.rss_bytes > 2 * 10 * 2**20
    with pytest.raises(ValueError, match="/nothing"):
        StatsProbe([urls[0].replace("/stats", "/nothing")]).check()


def test_probe_counts_children_that_come_and_go() -> None:
    spin = "import time\nt = time.time()\nwhile time.time() - t < 0.3: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        probe = ProcessProbe([os.getpid()])
        first = probe.read().cpu_seconds
        child.wait(timeout=10)
        time.sleep(0.05)
        assert probe.read().cpu_seconds >= first  # never goes backwards
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_local_hosts() -> None:
    assert is_local_host("localhost") and is_local_host("127.0.0.1") and is_local_host("::1")
    assert not is_local_host("no-such-host.invalid")


def test_a_port_nobody_listens_on() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert pids_listening_on(port) == []
