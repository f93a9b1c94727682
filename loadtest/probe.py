"""CPU and memory of the server under test, when it runs on this machine.

Whether a service is compute- or IO-bound is read off two things: does throughput grow with
instances, and how much CPU does the server burn at its knee. The second needs the server's own
numbers, so for a target on this machine the probe finds the process listening on the target's
port (or takes ``--server-pid``) and follows its whole process tree: a server that serves from
worker processes (gunicorn, a process pool, the sample server) spends its CPU in the children.

CPU is accumulated per pid, so a child that starts mid-run counts from its start and a child that
exits stops counting instead of making the total go backwards.

A server elsewhere (in pods, the load tester in another) cannot be seen that way; when it reports
its own numbers (``cpu_seconds`` and ``rss_bytes`` in a JSON document, as the sample server's
``/stats`` does), :class:`StatsProbe` reads them from every instance and adds them up
(``--server-stats URL``, once per instance).
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import psutil

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "ip6-localhost"}


@dataclass(frozen=True)
class ProbeReading:
    """Cumulative CPU seconds of the tree and its current resident memory."""

    cpu_seconds: float
    rss_bytes: int
    processes: int


class ServerProbe(Protocol):
    """What the runner reads during each step's window."""

    pids: list[int]  # the processes probed (empty when the server reports its own numbers)

    def read(self) -> ProbeReading: ...


class ProcessProbe:
    """Reads a process tree (roots plus all descendants) each time ``read`` is called."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = sorted(set(pids))
        if not self.pids:
            raise ValueError("no process to probe")
        self._roots = [psutil.Process(pid) for pid in self.pids]
        self._last: dict[int, float] = {}
        self._total = 0.0

    def read(self) -> ProbeReading:
        procs: dict[int, psutil.Process] = {}
        for root in self._roots:
            try:
                procs[root.pid] = root
                for child in root.children(recursive=True):
                    procs[child.pid] = child
            except psutil.Error:
                continue
        rss = 0
        seen: dict[int, float] = {}
        for pid, proc in procs.items():
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    cpu = t.user + t.system
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            seen[pid] = cpu
            self._total += max(0.0, cpu - self._last.get(pid, 0.0))
        self._last = seen
        return ProbeReading(cpu_seconds=self._total, rss_bytes=rss, processes=len(seen))


class StatsProbe:
    """Adds up ``cpu_seconds`` and ``rss_bytes`` that each instance reports at its stats URL.

    Each instance counts from its first reading, and one whose counter went backwards (it
    restarted) counts again from there, so the total never decreases. An instance that does not
    answer keeps its last numbers for that reading.
    """

    def __init__(self, urls: Sequence[str], timeout: float = 2.0) -> None:
        if not urls:
            raise ValueError("no stats URL to probe")
        self.urls = list(urls)
        self.pids: list[int] = []
        self.timeout = timeout
        self._last: dict[str, tuple[float, int]] = {}
        self._total = 0.0

    def _fetch(self, url: str) -> tuple[float, int] | None:
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as r:
                doc = json.loads(r.read())
            return float(doc["cpu_seconds"]), int(doc["rss_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def read(self) -> ProbeReading:
        rss = 0
        for url in self.urls:
            got = self._fetch(url)
            last = self._last.get(url)
            if got is None:
                rss += last[1] if last else 0
                continue
            cpu, mem = got
            if last is not None:
                self._total += cpu - last[0] if cpu >= last[0] else cpu
            self._last[url] = got
            rss += mem
        return ProbeReading(cpu_seconds=self._total, rss_bytes=rss, processes=len(self._last))

    def check(self) -> None:
        """Every URL answers now: a typo should stop the run before it starts, not leave it blind."""
        bad = [u for u in self.urls if self._fetch(u) is None]
        if bad:
            raise ValueError(f"no cpu_seconds/rss_bytes JSON at {', '.join(bad)}")


def self_cpu_seconds() -> float:
    """CPU seconds of this process (the sender), to tell when the client is the bottleneck."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def is_local_host(host: str) -> bool:
    """Whether ``host`` is this machine (loopback or one of its interface addresses)."""
    if host.lower() in LOOPBACK_NAMES or host.startswith("127."):
        return True
    try:
        addrs = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    local = {a.address for nics in psutil.net_if_addrs().values() for a in nics}
    return bool(addrs & local)


def pids_listening_on(port: int) -> list[int]:
    """Pids with a TCP socket listening on ``port`` (empty when none, or not allowed to see)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return sorted(
        {
            c.pid
            for c in conns
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
        }
    )
