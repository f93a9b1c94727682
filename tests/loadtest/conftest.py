"""Fixtures for the load tester's tests: the sample service, started on loopback per test.

The server runs as a real subprocess (``python -m loadtest sample-server --port 0``) so that the
probe measures a separate process tree, as it would for a real service, and so that a hung server
can always be killed. It stops by itself after ``--max-seconds`` even if a test run is killed.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

LISTENING = re.compile(
    r"listening on (?P<url>\S+) pid (?P<pid>\d+) .* (?:expected capacity (?P<cap>[\d.]+)/s|backend \S+)"
)


@dataclass(frozen=True)
class RunningServer:
    url: str
    pid: int
    expected_capacity: float  # 0 with a backend: then the backend's
    args: tuple[str, ...]

    def stats(self) -> dict[str, Any]:
        """The server's own ``/stats`` (counters and the capacity it measured itself)."""
        with httpx.Client(timeout=5.0) as client:
            data: dict[str, Any] = client.get(httpx.URL(self.url).join("/stats")).json()
        return data


@contextlib.contextmanager
def start_sample_server(*args: str, max_seconds: float = 120.0) -> Iterator[RunningServer]:
    """Start the sample server with ``args``; yields once it is listening; always stops it."""
    cmd = [
        sys.executable,
        "-m",
        "loadtest",
        "sample-server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--max-seconds",
        str(max_seconds),
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server prints this line once it accepts connections
        m = LISTENING.search(line)
        if m is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise RuntimeError(f"sample server did not start: {line!r} {err[-2000:]}")
        yield RunningServer(m["url"], int(m["pid"]), float(m["cap"] or 0), tuple(args))
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=5)


@pytest.fixture(scope="session")
def sample_server() -> Iterator[Callable[..., contextlib.AbstractContextManager[RunningServer]]]:
    """``with sample_server("--mode", "io") as srv:`` inside a test."""
    yield start_sample_server
