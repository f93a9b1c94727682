"""The benchmark's measurements: a command's peak memory is its own, not the bench's."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from spawn import launch

ALLOCATE = "x = bytearray({mb} * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1"


def test_a_large_parent_does_not_inflate_the_childs_peak() -> None:
    ballast = bytearray(400 * 2**20)  # the bench holding results: larger than what it measures
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    small = launch([sys.executable, "-c", ALLOCATE.format(mb=1)])
    large = launch([sys.executable, "-c", ALLOCATE.format(mb=120)])
    assert small.returncode == large.returncode == 0
    assert small.peak_rss_mb < 100, small  # with wait4 on the child directly: over 400
    assert 120 < large.peak_rss_mb < 220, large
    assert large.peak_rss_mb - small.peak_rss_mb > 100
    del ballast


def test_exit_codes_and_time_outs_are_reported() -> None:
    assert launch(["sh", "-c", "exit 3"]).returncode == 3
    stopped = launch(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert stopped.timed_out and stopped.wall_s < 10
