"""The operator bench's ledger: the operator's own cycles are read from its metrics and told per phase."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ledger

METRICS = """# HELP gpuplan_cycles_total Scheduling cycles run.
gpuplan_cycles_total {cycles}
gpuplan_cycle_seconds_sum{{stage="release"}} {release}
gpuplan_cycle_seconds_sum{{stage="readiness"}} 0.5
gpuplan_cycle_seconds_sum{{stage="total"}} {total}
gpuplan_cycle_seconds_count{{stage="total"}} {cycles}
gpuplan_cycle_cpu_seconds_total {cpu}
gpuplan_cycle_cpu_seconds_created 1.7e9
"""


@pytest.fixture
def operator() -> Iterator[tuple[str, dict[str, float]]]:
    """An HTTP server answering ``/metrics`` as the operator would, from the dict it yields."""
    now = {"cycles": 3, "release": 1.0, "total": 2.0, "cpu": 0.25}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = METRICS.format(**now).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/metrics", now
    server.shutdown()
    server.server_close()


def test_a_phase_tells_the_cycles_the_operator_ran_in_it_and_their_stages(
    operator: tuple[str, dict[str, float]],
) -> None:
    url, now = operator
    before = ledger.Reading(cycles=ledger._operator_cycles(url))
    assert before.cycles == {"cycles": 3, "release": 1.0, "readiness": 0.5, "total": 2.0, "cpu": 0.25}
    now.update(cycles=43, release=9.0, total=12.5, cpu=3.25)
    after = ledger.Reading(cycles=ledger._operator_cycles(url))
    phase = ledger.between(before, after)
    # readiness: no time in it
    assert phase["cycles"] == {"cycles": 40, "release": 8.0, "total": 10.5, "cpu": 3.0}
    assert (
        "operator: 40 cycles, 10.5 s in them (release 8.0), the process used 3.0 CPU s meanwhile"
        in ledger.summary(phase)
    )


def test_an_operator_not_answering_has_no_cycles() -> None:
    assert ledger._operator_cycles("http://127.0.0.1:9/metrics") == {}
    assert "operator:" not in ledger.summary(ledger.between(ledger.Reading(), ledger.Reading()))


def test_a_phase_tells_the_operators_memory_at_its_end_and_its_peak_so_far() -> None:
    """A re-list that held every object at once took the operator from 320 to 564 MiB at 3,000
    nodes; the ledger says where each phase left it."""
    import subprocess

    code = "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); del b; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        memory: dict[str, float] = {}
        for _ in range(200):
            memory = ledger.memory_of(str(child.pid))
            if memory.get("peak", 0) >= 64 and memory.get("resident", 99) < 64:
                break
            threading.Event().wait(0.05)
        assert memory["peak"] >= 64 > memory["resident"]  # the bytes touched, then let go
        phase = ledger.between(ledger.Reading(), ledger.Reading(memory=memory))
        assert phase["operator_mib"] == {"resident": round(memory["resident"]), "peak": round(memory["peak"])}
        assert f"operator memory: {round(memory['resident'])} MiB resident, peak so far" in ledger.summary(
            phase
        )
    finally:
        child.kill()
        child.wait()
    assert ledger.memory_of(str(child.pid)) == {}  # gone
    assert "operator memory" not in ledger.summary(ledger.between(ledger.Reading(), ledger.Reading()))
