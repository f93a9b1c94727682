"""A sample service with a known knee, to test the load tester (and to try it by hand).

``python -m loadtest sample-server --mode cpu|io ...`` listens on loopback (``--host`` takes another
address, e.g. ``0.0.0.0`` in a pod) and serves

* ``POST|GET /work`` - one unit of work, answered ``{"ok": true, ...}``;
* ``GET /healthz`` - ``ok``; ``GET /stats`` - its configuration, expected capacity, counters, and
  ``measured_capacity_qps``: the rate it served while requests queued for it (see :class:`Slots`),
  and ``cpu_seconds`` / ``rss_bytes`` of its process tree, so that a load tester that cannot see
  its processes (the server in a pod, the tester in another) still reads its CPU and memory.

Two modes stand for the two kinds of service:

``cpu`` (compute-bound, like feature extraction)
    Each request occupies one *instance* - a worker process - for ``service_ms``, spinning the CPU.
    There are ``instances`` of them behind one front, so capacity is ``instances / service_ms`` and
    grows with instances, and the server's CPU grows with the load.

    With ``--clock wall`` (the default) a request holds its instance for exactly ``service_ms`` of
    wall time: the front takes one of ``instances`` slots, has an instance process spin for the
    first ``1 - tail`` of the time (default half) and then sleep until ``service_ms`` has passed
    (see :func:`hold`), and frees the slot when the instance is done. The slack absorbs what a busy
    machine adds - a spinner descheduled when its time is up, the hand-offs to and from the process.
    Measured on this 2-core machine with a compiler on both cores, a 70% spin let the 40/s knee sag
    to 36/s; with half, the slots were held 49.5-50.5 ms (p50-p99) and the knee stayed at 40/s. A
    test of the search can then tell a wrong answer from a busy machine: the knee is ``instances /
    service_ms`` as long as the spin fits in the slot, and an instance at its knee still burns half
    a core.
    ``--clock cpu`` instead burns ``service_ms`` of the instance's own CPU time with no timer, which
    is more realistic and makes the knee depend on the free cores.

``io`` (IO-bound, like a 1vN search against one shared store)
    Each request does ``io_cpu_ms`` of CPU in an instance, then waits ``latency_ms`` on a backend
    that serves at most ``concurrency`` requests at a time, shared by all instances. Capacity is
    ``concurrency / latency_ms`` whatever the number of instances, and the CPU stays low: adding
    instances adds processes and memory, not throughput. That is exactly the case the ``machine``
    strategy is for.

    With ``--backend URL`` the backend is another sample server (io mode, ``--io-cpu-ms 0``) that
    every instance calls over HTTP instead of slots of its own: the store that several pods of one
    service share. The capacity is then the backend's, whatever the number of pods.

Requests beyond ``max_queue`` waiting ones are refused with 503, as a real server sheds load. The
server stops by itself after ``max_seconds``; SIGTERM and SIGINT stop it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtest.http import HttpClient, HttpError
from loadtest.messages import Request

MODES = ("cpu", "io")
CLOCKS = ("wall", "cpu")


@dataclass(frozen=True)
class ServerConfig:
    """The sample server's knobs; ``expected_capacity`` is the knee they imply."""

    mode: str = "cpu"
    instances: int = 1
    service_ms: float = 50.0
    clock: str = "wall"
    latency_ms: float = 100.0
    concurrency: int = 4
    io_cpu_ms: float = 0.5
    tail: float = 0.5
    max_queue: int = 1000
    host: str = "127.0.0.1"
    port: int = 0
    max_seconds: float = 600.0
    backend: str = ""  # io: the shared backend's URL (another sample server); "" = slots of its own

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {self.clock!r}")
        if not 1 <= self.instances <= 64:
            raise ValueError(f"instances must be between 1 and 64, got {self.instances}")
        if self.service_ms <= 0 or self.latency_ms <= 0 or self.io_cpu_ms < 0:
            raise ValueError("service-ms and latency-ms must be positive, io-cpu-ms not negative")
        if not 0 <= self.tail < 1:
            raise ValueError(f"tail must be at least 0 and below 1, got {self.tail}")
        if self.concurrency < 1 or self.max_queue < 1:
            raise ValueError("concurrency and max-queue must be at least 1")
        if not 0 < self.max_seconds <= 24 * 3600:
            raise ValueError("max-seconds must be positive and at most a day")
        if not is_address(self.host):
            raise ValueError(f"host must be an IP address (or localhost), not {self.host!r}")
        if self.backend and (self.mode != "io" or not self.backend.startswith("http://")):
            raise ValueError(f"backend must be an http:// URL, in io mode only, not {self.backend!r}")

    def expected_capacity(self) -> float | None:
        """Requests per second at the knee, from the configuration alone (None: the backend's)."""
        if self.mode == "cpu":
            return self.instances / (self.service_ms / 1000.0)
        cpu = self.instances / (self.io_cpu_ms / 1000.0) if self.io_cpu_ms > 0 else None
        if self.backend:
            return cpu
        backend = self.concurrency / (self.latency_ms / 1000.0)
        return backend if cpu is None else min(backend, cpu)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def is_address(host: str) -> bool:
    """An address to listen on: ``localhost`` or an IP literal (``0.0.0.0`` for every one)."""
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def tree_usage(pids: list[int]) -> tuple[float, int]:
    """CPU seconds and resident bytes of ``pids``, read from ``/proc`` (0 where it cannot be read).

    The standard library alone (the server runs without the load tester's dependencies): the
    front's and its instances' user + system time, and their resident memory.
    """
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        cpu += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
        rss += pages * _PAGE
    return cpu, rss


def burn(seconds: float, clock: str) -> float:
    """Spin one CPU for ``seconds`` of wall (or own CPU) time; returns the CPU time used.

    Runs in an instance process. Spinning rather than sleeping is the point: the instance's CPU is
    busy, which is what a compute-bound request looks like.
    """
    c0 = time.process_time()
    if clock == "cpu":
        end = c0 + seconds
        while time.process_time() < end:
            pass
    else:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return time.process_time() - c0


def hold(spin: float, deadline: float) -> float:
    """Spin for ``spin`` seconds (never past ``deadline``), then sleep until ``deadline``.

    Runs in an instance process, for ``--clock wall``: the instance is taken for the whole
    request, as the slot is. ``deadline`` is on :func:`time.monotonic`, the clock of the front's
    event loop, which is the same clock in every process of the machine. ``time.sleep`` wakes
    within tens of microseconds, where the front's own asyncio timer fires up to a millisecond
    late; for a request of a few milliseconds that millisecond was the whole error (a 2 ms
    request announced 500/s and served 781/s, its hold cut short by the timer's margin).
    """
    c0 = time.process_time()
    end = min(time.monotonic() + spin, deadline)
    while time.monotonic() < end:
        pass
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)
    return time.process_time() - c0


def _instance_init() -> None:
    # Ctrl-C goes to the whole process group; the front shuts the instances down in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _warm(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


# asyncio timers fire up to a millisecond late (epoll's timeout is whole milliseconds, rounded up);
# ending holds this much early keeps a 50 ms request at 50 ms rather than 51.
TIMER_EARLY = 0.001


class Slots:
    """A semaphore that also measures how fast it serves while there is a queue for it.

    While anyone waits for a slot the server is saturated, so completions per second of
    saturated time *is* its capacity at that moment - measured by the server on its own clock,
    independently of any load tester. On a machine busy with other work this is the honest
    reference for a test of the capacity search; the configured capacity is what it is when the
    machine is idle.

    Only whole gaps between releases count, and only in stretches of saturation that last at
    least two rounds of every slot. Short queues that form just under the knee, after a burst of
    arrivals took all slots at once, end with a cluster of releases a few microseconds apart;
    counting those would overstate the capacity.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.holds = 0
        self.held_seconds = 0.0
        self._sem = asyncio.Semaphore(n)
        self.waiting = 0
        self.served_saturated = 0
        self.saturated_seconds = 0.0
        self._last_release: float | None = None
        self._stretch_count = 0
        self._stretch_seconds = 0.0

    def _end_stretch(self) -> None:
        if self._stretch_count >= 2 * self.n:
            self.served_saturated += self._stretch_count
            self.saturated_seconds += self._stretch_seconds
        self._stretch_count = 0
        self._stretch_seconds = 0.0
        self._last_release = None

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
            if self.waiting == 0:
                self._end_stretch()

    async def __aexit__(self, *exc: object) -> None:
        now = time.monotonic()
        if self.waiting > 0:
            if self._last_release is not None:
                self._stretch_seconds += now - self._last_release
                self._stretch_count += 1
            self._last_release = now
        self._sem.release()

    def note_hold(self, seconds: float) -> None:
        """One use of a slot lasted ``seconds`` (from acquiring it to giving it back)."""
        self.holds += 1
        self.held_seconds += seconds

    def hold_capacity(self) -> float | None:
        """What the slots can serve at the hold time they actually had: ``n / mean hold``.

        On an idle machine this is the configured capacity; on a busy one a hold can last longer
        than configured (an instance process scheduled late), and this says by how much - the
        same-run reference for :meth:`measured_capacity`.
        """
        return self.n * self.holds / self.held_seconds if self.held_seconds > 0 else None

    def measured_capacity(self, min_seconds: float = 1.0) -> float | None:
        """Completions per saturated second, once there is at least ``min_seconds`` of it."""
        count, seconds = self.served_saturated, self.saturated_seconds
        if self._stretch_count >= 2 * self.n:
            count += self._stretch_count
            seconds += self._stretch_seconds
        return count / seconds if seconds > 0 and seconds >= min_seconds else None


class SampleServer:
    """The asyncio front: a minimal HTTP/1.1 server with keep-alive, plus the instance pool."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.served = 0
        self.refused = 0
        self.waiting = 0
        self.instance_pids: list[int] = []
        self._pool: ProcessPoolExecutor | None = None
        self._backend = Slots(config.concurrency)
        self._slots = Slots(config.instances)
        self._return_lag = 0.0  # seconds from an instance's deadline to the front seeing it done
        self._writers: set[asyncio.StreamWriter] = set()
        self._client = HttpClient(config.backend) if config.backend else None
        self._backend_request = Request(method="GET", path="")
        self.backend_errors = 0
        self.port = 0

    async def start(self) -> asyncio.Server:
        cfg = self.config
        ctx = multiprocessing.get_context("spawn")
        self._pool = ProcessPoolExecutor(cfg.instances, mp_context=ctx, initializer=_instance_init)
        loop = asyncio.get_running_loop()
        # Start every instance now: a process spawned by the first requests would be a cold start
        # inside the measurement.
        warm = [loop.run_in_executor(self._pool, _warm, 0.3) for _ in range(cfg.instances)]
        self.instance_pids = sorted(set(await asyncio.gather(*warm)))
        server = await asyncio.start_server(self._handle, cfg.host, cfg.port)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def close(self) -> None:
        for w in list(self._writers):
            w.close()
        if self._pool is not None:
            pool = self._pool
            self._pool = None
            await asyncio.to_thread(pool.shutdown, True, cancel_futures=True)
        if self._client is not None:
            await self._client.aclose()

    def stats(self) -> dict[str, Any]:
        cpu, rss = tree_usage([os.getpid(), *self.instance_pids])
        return {
            "config": asdict(self.config),
            "expected_capacity_qps": _round(self.config.expected_capacity()),
            "cpu_seconds": round(cpu, 3),
            "rss_bytes": rss,
            "backend_errors": self.backend_errors,
            "pid": os.getpid(),
            "instance_pids": self.instance_pids,
            "served": self.served,
            "refused": self.refused,
            "waiting": self.waiting,
            "saturated_seconds": round(self._limit.saturated_seconds, 3),
            "measured_capacity_qps": _round(self._limit.measured_capacity()),
            "hold_capacity_qps": _round(self._limit.hold_capacity()),
        }

    @property
    def _limit(self) -> Slots:
        """The slots that bound capacity: instances in cpu mode, the backend in io mode."""
        return self._slots if self.config.mode == "cpu" else self._backend

    async def _work(self) -> tuple[int, dict[str, Any]]:
        cfg = self.config
        if self.waiting >= cfg.max_queue:
            self.refused += 1
            return 503, {"ok": False, "error": "overloaded"}
        assert self._pool is not None
        loop = asyncio.get_running_loop()
        self.waiting += 1
        try:
            if cfg.mode == "cpu":
                async with self._slots:
                    t_hold = time.monotonic()
                    seconds = cfg.service_ms / 1000.0
                    if cfg.clock == "cpu":
                        cpu = await loop.run_in_executor(self._pool, burn, seconds, "cpu")
                    else:
                        # The instance sleeps out the tail itself, to a deadline that is early by
                        # how late its answers reach the front (the hand-off back, measured).
                        spin = seconds * (1 - cfg.tail)
                        early = min(self._return_lag, seconds * cfg.tail)
                        deadline = t_hold + seconds - early
                        cpu = await loop.run_in_executor(self._pool, hold, spin, deadline)
                        lag = max(0.0, time.monotonic() - deadline)
                        self._return_lag += 0.1 * (lag - self._return_lag)
                    self._slots.note_hold(time.monotonic() - t_hold)
            else:
                cpu = 0.0
                if cfg.io_cpu_ms > 0:
                    cpu = await loop.run_in_executor(self._pool, burn, cfg.io_cpu_ms / 1000.0, "cpu")
                if self._client is not None:
                    try:
                        answer = await self._client.send(self._backend_request)
                    except HttpError:
                        answer = None
                    if answer is None or answer.status != 200:
                        self.backend_errors += 1
                        return 503, {"ok": False, "error": "backend"}
                else:
                    async with self._backend:
                        t_hold = loop.time()
                        await asyncio.sleep(max(0.0, cfg.latency_ms / 1000.0 - TIMER_EARLY))
                        self._backend.note_hold(loop.time() - t_hold)
        finally:
            self.waiting -= 1
        self.served += 1
        return 200, {"ok": True, "cpu_ms": round(cpu * 1000.0, 3)}

    async def _route(self, method: str, path: str) -> tuple[int, bytes, str]:
        path = path.split("?", 1)[0]
        if path == "/work" and method in ("GET", "POST"):
            status, payload = await self._work()
            return status, json.dumps(payload).encode(), "application/json"
        if path == "/healthz" and method == "GET":
            return 200, b"ok", "text/plain"
        if path == "/stats" and method == "GET":
            return 200, json.dumps(self.stats()).encode(), "application/json"
        return 404, b"not found", "text/plain"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    return
                method, target, version = parts
                headers = {}
                for line in lines[1:]:
                    key, sep, value = line.partition(":")
                    if sep:
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or "0")
                if length:
                    await reader.readexactly(length)
                status, body, ctype = await self._route(method, target)
                keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
                    f"content-length: {len(body)}\r\n"
                    f"connection: {'keep-alive' if keep else 'close'}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def serve(config: ServerConfig, *, announce: bool = True) -> int:
    """Run until SIGTERM/SIGINT or ``max_seconds``; prints one ``listening on URL`` line first."""
    app = SampleServer(config)
    server = await app.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if announce:
        expected = config.expected_capacity()
        print(
            f"listening on http://{config.host}:{app.port}/work pid {os.getpid()} "
            f"mode {config.mode} instances {config.instances} "
            + (f"backend {config.backend}" if config.backend else f"expected capacity {expected or 0:.1f}/s"),
            flush=True,
        )
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=config.max_seconds)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        server.close()
        await app.close()
        await server.wait_closed()
    return 0
