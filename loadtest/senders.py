"""Several senders driven as one: processes with coroutines in each, fed by one schedule.

The original performance-test framework spreads its workers over processes, each running many
coroutines, because one Python process cannot send a production rate: its event loop runs on
one core. Here each
sender process owns an event loop (uvloop when installed), its own keep-alive connections and a
share of the connections budget, and takes an exact shard of every step's schedule
(:class:`~loadtest.arrivals.Shard`). The coordinator never touches a request: per step it sends
each process a :class:`~loadtest.sender.StepPlan` (same rate, same start on the shared monotonic
clock, its shard), receives a live snapshot four times a second for the progress line, and at the
end one :class:`~loadtest.record.StepRecord` per process, which it merges exactly.

Processes are started once per run as fresh interpreters (``python -m loadtest.senders FD``, no
inherited threads or loops, and unlike multiprocessing's ``spawn`` no re-import of the caller's
``__main__``) and reused for every step, so connections stay warm between steps. They talk to the
coordinator over a socket pair, ignore Ctrl-C, and exit when the coordinator closes its end.
``processes=0`` runs a single sender in the caller's own loop instead, which is what a test with
a task object (not a name) wants.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from loadtest.messages import Task, TaskError
from loadtest.plugins import load_task
from loadtest.record import StepRecord, from_dict
from loadtest.sender import Live, Sender, StepPlan
from loadtest.transport import make_transport

START_TIMEOUT = 60.0


class SenderError(RuntimeError):
    """A sender process failed to start or died; the message says why."""


def default_processes() -> int:
    """One sender process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class SenderSpec:
    """Everything a sender process needs to build its transport and task by itself."""

    url: str
    task: str = "http-get"
    task_args: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 5.0
    headers: Mapping[str, str] = field(default_factory=dict)
    loop: str = "auto"


def split(total: int, parts: int) -> list[int]:
    """``total`` connections over ``parts`` senders, as evenly as whole numbers allow."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """uvloop's loop when ``kind`` is uvloop (or auto and it is installed), else asyncio's."""
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _child_main(conn: Connection, spec: SenderSpec, concurrency: int) -> None:
    """A sender process: build, say ready, then run steps until told to quit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # grpc.aio drives its own completion queue from asyncio's loop; keep uvloop to HTTP.
        grpc_target = spec.url.startswith("grpc://")
        loop = new_loop("asyncio" if grpc_target and spec.loop == "auto" else spec.loop)
        asyncio.set_event_loop(loop)
        task = load_task(spec.task, dict(spec.task_args))
        transport = make_transport(spec.url, timeout=spec.timeout, headers=spec.headers)
        sender = Sender(transport, task, concurrency=concurrency, timeout=spec.timeout)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}" if not isinstance(exc, TaskError) else str(exc)))
        return
    conn.send(("ready", os.getpid()))
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg[0] != "step":
                if msg[0] == "quit":
                    break
                continue
            plan = StepPlan.from_dict(msg[1])
            stop = asyncio.Event()

            def on_command(stop: asyncio.Event = stop) -> None:
                while conn.poll():
                    cmd = conn.recv()
                    if cmd[0] in ("stop", "quit"):
                        stop.set()

            loop.add_reader(conn.fileno(), on_command)
            try:
                record = loop.run_until_complete(
                    sender.run_step(plan, on_live=lambda live: conn.send(("live", asdict(live))), stop=stop)
                )
            finally:
                loop.remove_reader(conn.fileno())
                os.set_blocking(conn.fileno(), True)  # uvloop's add_reader made it non-blocking
            conn.send(("record", record.to_dict()))
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(transport.aclose())
        loop.close()


class ProcessSenders:
    """``count`` sender processes; :meth:`run_step` runs one plan per process and merges nothing."""

    def __init__(self, spec: SenderSpec, *, processes: int, concurrency: int) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.spec = spec
        self.count = min(processes, concurrency)
        self.concurrencies = split(concurrency, self.count)
        self.live: list[Live | None] = [None] * self.count
        self.pids: list[int] = []
        self.peak_rss_mib: float | None = None
        self._conns: list[Connection] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._waiters: list[asyncio.Future[Any] | None] = [None] * self.count

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for conc in self.concurrencies:
            parent, child = multiprocessing.Pipe()
            proc = subprocess.Popen(
                [sys.executable, "-m", "loadtest.senders", str(child.fileno())],
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
            )
            child.close()
            parent.send(("spec", asdict(self.spec), conc))
            self._conns.append(parent)
            self._procs.append(proc)
        for i, conn in enumerate(self._conns):
            self._waiters[i] = loop.create_future()
            loop.add_reader(conn.fileno(), self._on_message, i)
        try:
            async with asyncio.timeout(START_TIMEOUT):
                self.pids = [int(await w) for w in self._waiters if w is not None]
        except TimeoutError:
            await self.close()
            raise SenderError(f"the sender processes did not start in {START_TIMEOUT:.0f}s") from None
        except SenderError:
            await self.close()
            raise

    def _on_message(self, i: int) -> None:
        conn = self._conns[i]
        try:
            while conn.poll():
                kind, payload = conn.recv()
                waiter = self._waiters[i]
                if kind == "live":
                    self.live[i] = Live(**payload)
                elif waiter is not None and not waiter.done():
                    if kind == "error":
                        waiter.set_exception(SenderError(payload))
                    else:
                        waiter.set_result(payload)
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            waiter = self._waiters[i]
            if waiter is not None and not waiter.done():
                code = self._procs[i].poll()
                waiter.set_exception(SenderError(f"sender process {i} exited (status {code})"))

    async def run_step(self, plans: Sequence[StepPlan]) -> list[StepRecord]:
        loop = asyncio.get_running_loop()
        self.live = [None] * self.count
        for i, (conn, plan) in enumerate(zip(self._conns, plans, strict=True)):
            self._waiters[i] = loop.create_future()
            conn.send(("step", plan.to_dict()))
        results = [await w for w in self._waiters if w is not None]
        return [from_dict(r) for r in results]

    def stop(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", None))

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(conn.fileno())
            with contextlib.suppress(OSError):
                conn.send(("quit", None))
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            try:
                await asyncio.to_thread(proc.wait, 5.0)
            except subprocess.TimeoutExpired:
                proc.terminate()
                await asyncio.to_thread(proc.wait, 5.0)
        if self._procs:
            # The largest of this process's waited-for children: here, the biggest sender.
            self.peak_rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        self._conns.clear()
        self._procs.clear()


class LocalSender:
    """One sender in the caller's loop (``--processes 0``), with a task object or a spec."""

    def __init__(self, spec: SenderSpec, *, concurrency: int, task: Task | None = None) -> None:
        self.spec = spec
        self.count = 1
        self.concurrencies = [concurrency]
        self.live: list[Live | None] = [None]
        self.pids = [os.getpid()]
        self.peak_rss_mib: float | None = None
        self._task = task
        self._stop: asyncio.Event | None = None
        self.sender: Sender | None = None

    async def start(self) -> None:
        task = self._task or load_task(self.spec.task, dict(self.spec.task_args))
        transport = make_transport(self.spec.url, timeout=self.spec.timeout, headers=self.spec.headers)
        self.sender = Sender(transport, task, concurrency=self.concurrencies[0], timeout=self.spec.timeout)

    async def run_step(self, plans: Sequence[StepPlan]) -> list[StepRecord]:
        assert self.sender is not None
        self._stop = asyncio.Event()
        self.live = [None]

        def on_live(live: Live) -> None:
            self.live[0] = live

        return [await self.sender.run_step(plans[0], on_live=on_live, stop=self._stop)]

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def close(self) -> None:
        if self.sender is not None:
            await self.sender.transport.aclose()


def _child_entry(argv: Sequence[str]) -> None:
    """``python -m loadtest.senders FD``: the first message on FD is the spec and connections."""
    conn = Connection(int(argv[0]))
    try:
        kind, spec, concurrency = conn.recv()
    except EOFError:
        return
    if kind == "spec":
        _child_main(conn, SenderSpec(**spec), int(concurrency))
    conn.close()


if __name__ == "__main__":
    _child_entry(sys.argv[1:])
