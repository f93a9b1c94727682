"""Targets files (vegeta's format) and the request options, parsed and then sent for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.cli import main
from loadtest.plugins import TaskError, load_task
from loadtest.targets import parse_targets

pytestmark = pytest.mark.timeout(30)


def test_a_targets_file_with_headers_bodies_and_comments(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_bytes(b'{"i": 1}')
    text = (
        "# two targets\n"
        "GET http://127.0.0.1:8080/a?q=1\n"
        "X-Account: 42\n"
        "\n\n"
        "post http://127.0.0.1:8080/b\n"
        "Content-Type: application/json\n"
        "@b.json\n"
    )
    a, b = parse_targets(text, tmp_path)
    assert (a.method, a.path, dict(a.headers), a.body) == (
        "GET",
        "http://127.0.0.1:8080/a?q=1",
        {"X-Account": "42"},
        None,
    )
    assert (b.method, b.body, b.headers["Content-Type"]) == ("POST", b'{"i": 1}', "application/json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no target", id="an empty file"),
        pytest.param("FETCH http://x/\n", "line 1: expected 'METHOD URL'", id="an unknown method"),
        pytest.param(
            "GET http://x/\nno colon here\n",
            "line 2: expected 'Header: value'",
            id="a header without a colon",
        ),
        pytest.param(
            "GET http://x/\n@missing.bin\n", "line 2: body file", id="a body file that is not there"
        ),
    ],
)
def test_a_bad_targets_file_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        parse_targets(text, tmp_path)


def test_requests_cycle_through_the_targets_by_index(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("GET http://h/1\n\nGET http://h/2\n\nGET http://h/3\n")
    task = load_task("targets", {"file": str(f)})
    assert [task.build(i).path[-1] for i in range(7)] == list("1231231")


def test_a_run_sends_every_target_and_the_headers(
    sample_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sample_server("--mode", "io", "--latency-ms", "5", "--concurrency", "4") as srv:
        (tmp_path / "body.json").write_text('{"i": 7}')
        targets = tmp_path / "targets.txt"
        targets.write_text(f"GET {srv.url}\n\nPOST {srv.url}\n@body.json\n\nGET /healthz\nX-Probe: 1\n")
        rc = main(
            [
                srv.url,
                "--targets",
                str(targets),
                "-H",
                "X-Run: test",
                "--rate",
                "30",
                "--warmup",
                "0.2",
                "--window",
                "1",
                "--processes",
                "1",
                "--quiet",
                "--json",
                "-",
            ]
        )
        stats = srv.stats()
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    sent = 36  # 30/s over 1.2 s: requests 0..35, targets i mod 3
    assert stats["served"] == 24 == sent * 2 // 3  # /work twice per round, /healthz once
    assert doc["steps"][0]["statuses"] == {"200": doc["steps"][0]["completed"]}
    assert doc["headers"] == {"X-Run": "test"} and doc["task"] == "targets"


def test_targets_on_several_origins_share_the_load_round_robin(
    sample_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Instances with no load balancer in front (pods): a targets file that lists each one's URL
    sends request ``i`` to instance ``i mod n``, each over connections of its own."""
    args = ("--mode", "io", "--latency-ms", "5", "--concurrency", "4")
    with sample_server(*args) as a, sample_server(*args) as b:
        targets = tmp_path / "targets.txt"
        targets.write_text(f"GET {a.url}\n\nGET {b.url}\n")
        rc = main(
            [
                b.url,
                "--targets",
                str(targets),
                "--rate",
                "30",
                "--warmup",
                "0.2",
                "--window",
                "1",
                "--processes",
                "1",
                "--quiet",
                "--json",
                "-",
            ]
        )
        served = [a.stats()["served"], b.stats()["served"]]
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["steps"][0]["errors"] == 0
    assert served == [18, 18], served  # 30/s over 1.2 s: requests 0..35, alternately
