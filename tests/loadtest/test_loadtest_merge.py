"""Two shards against one server, merged: the Indexed Job mode, on one machine.

Two ``gpuplan loadtest run --shard I/2 --start-at T`` processes send the two halves of the same
ladder of rates to one sample server at the same time, each writing its own JSON; ``merge`` adds
them up. The server counts what it served on its own, so the merged result is checked against a
count the load tester did not make.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadtest.cli import main
from loadtest.stats import LatencyHistogram

pytestmark = pytest.mark.timeout(60)

RATES = (40.0, 80.0)


@pytest.fixture(scope="module")
def shards(sample_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("shards")
    with sample_server("--mode", "io", "--latency-ms", "5", "--concurrency", "8") as srv:
        start_at = time.time() + 3.0
        procs = []
        for i in range(2):
            cmd = [
                sys.executable,
                "-m",
                "loadtest",
                "run",
                srv.url,
                "--task",
                "sample-work",
                "--rates",
                ",".join(f"{r:g}" for r in RATES),
                "--shard",
                f"{i}/2",
                "--start-at",
                f"{start_at:.3f}",
                "--processes",
                "1",
                "--concurrency",
                "8",
                "--warmup",
                "0.2",
                "--window",
                "1",
                "--timeout",
                "1",
                "--quiet",
                "--json",
                str(out / f"shard-{i}.json"),
            ]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=50)
            assert p.returncode == 0, err
        served = srv.stats()["served"]
    return {"dir": out, "served": served, "paths": [str(out / f"shard-{i}.json") for i in range(2)]}


def test_two_shards_merge_into_the_whole_rate(
    shards: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out: Path = shards["dir"]
    merged_json, csv_path, hlog_path = out / "merged.json", out / "merged.csv", out / "merged.hlog"
    rc = main(
        [
            "merge",
            *shards["paths"],
            "--json",
            str(merged_json),
            "--csv",
            str(csv_path),
            "--hlog",
            str(hlog_path),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0
    assert "merged from 2 shards" in text
    parts = [json.loads(Path(p).read_text()) for p in shards["paths"]]
    merged = json.loads(merged_json.read_text())
    assert [p["shard"]["index"] for p in parts] == [0, 1]
    for i, rate in enumerate(RATES):
        halves = [p["steps"][i] for p in parts]
        step = merged["steps"][i]
        # Each shard sent half of the one schedule, at the same moments (same offset on the grid).
        assert [h["scheduled"] for h in halves] == [rate / 2, rate / 2]
        assert halves[0]["record"]["offset_s"] == halves[1]["record"]["offset_s"]
        assert step["rate"] == rate and step["scheduled"] == rate and step["senders"] == 2
        assert step["completed"] == sum(h["completed"] for h in halves)
        assert step["held"], step["reasons"]
        # The merged p99 is the p99 of all requests: the shards' histograms added, not averaged.
        union = LatencyHistogram.decode(halves[0]["record"]["histograms"]["latency"])
        union.add(LatencyHistogram.decode(halves[1]["record"]["histograms"]["latency"]))
        assert step["latency_ms"]["p99"] == round(union.percentile_ms(99), 3)
    assert merged["capacity_qps"] == 80.0 and merged["merged_from"] == shards["paths"]
    # The server's own count covers every answered request of both shards (warm-up included).
    assert shards["served"] >= sum(s["completed"] for s in merged["steps"])
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("step,rate,throughput") and len(rows) == 1 + len(RATES)
    hlog = [line for line in hlog_path.read_text().splitlines() if line and not line.startswith(("#", '"'))]
    assert hlog and all(LatencyHistogram.decode(line.split(",")[3]).count > 0 for line in hlog)


@pytest.mark.parametrize(
    ("pick", "extra", "status", "message"),
    [
        pytest.param([0, 0], [], 2, "is also", id="the same shard twice is refused"),
        pytest.param([0], [], 2, "missing", id="a missing shard is refused"),
        pytest.param([0], ["--partial"], 0, "", id="a missing shard with --partial is merged and noted"),
    ],
)
def test_merge_refuses_what_is_not_one_load_test(
    shards: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    pick: list[int],
    extra: list[str],
    status: int,
    message: str,
) -> None:
    rc = main(["merge", *[shards["paths"][i] for i in pick], *extra, "--json", "-"])
    captured = capsys.readouterr()
    assert rc == status, captured.err
    if status:
        assert message in captured.err and len(captured.err.strip().splitlines()) == 1
    else:
        doc = json.loads(captured.out)
        assert any("missing" in n for n in doc["notes"])
        assert doc["steps"][0]["scheduled"] == RATES[0] / 2
