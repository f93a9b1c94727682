"""view.py: the page the operator serves at /view (built from what it read), and how it is served."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuplan_operator.__main__ import main
from gpuplan_operator.body import PlanBody
from gpuplan_operator.view import CachedPage, ClusterRead, page, with_view

from planner import parse_plan, plan, snapshot
from tests.test_view import instance_ids

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def cluster(phase: str = "Applied") -> ClusterRead:
    doc = yaml.safe_load((EXAMPLES / "image-fence.yaml").read_text())
    nodes = yaml.safe_load((EXAMPLES / "nodes.yaml").read_text())
    result = plan(parse_plan(doc), snapshot(nodes))
    body = PlanBody.from_object(
        {**doc, "metadata": {**doc["metadata"], "uid": "u1"}, "status": result.to_json() | {"phase": phase}}
    )
    return ClusterRead(nodes=nodes, pods={"items": []}, plans=(body,))


def test_the_page_draws_every_instance_of_the_plans_status() -> None:
    read = cluster()
    html = page(read)
    instances = sum(a["instances"] for a in read.plans[0].status["allocations"])
    assert sorted(instance_ids(html)) == sorted(set(instance_ids(html)))
    assert len(instance_ids(html)) == instances
    assert 'data-plan="ragnaros/image-fence"' in html and "Applied" in html


def test_one_plans_page_counts_the_other_plans_cards_as_held() -> None:
    read = cluster()
    mine = read.plans[0]
    applied = {**mine.status, "applied": {"units": {"p4-000": {"nvidia.com/gpu": 8}}}}
    holder = PlanBody.from_object({**mine.raw, "status": applied})
    empty = PlanBody.from_object(
        {**mine.raw, "metadata": {"name": "other", "namespace": "x", "uid": "u2"}, "status": {}}
    )
    html = page(ClusterRead(read.nodes, read.pods, (holder, empty)), only=["x/other"])
    assert 'data-plan="ragnaros/image-fence"' not in html and 'data-i="' not in html
    assert '<div class="row" data-node="p4-000" data-free="0">' in html  # image-fence's 8 cards: held
    assert '<details class="group" data-count="3" data-type="P4" data-free="8">' in html  # p4-001..003


def call(app: Callable[..., Iterable[bytes]], path: str, method: str = "GET") -> tuple[str, bytes]:
    seen: list[str] = []
    body = b"".join(
        app(
            {"PATH_INFO": path, "REQUEST_METHOD": method, "wsgi.input": io.BytesIO()},
            lambda s, h: seen.append(s),
        )
    )
    return seen[0], body


def metrics_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [])
    return [b"metrics"]


def test_view_path_serves_the_page_other_paths_the_metrics_and_writes_are_refused() -> None:
    reads: list[int] = []

    def read() -> ClusterRead:
        reads.append(1)
        return cluster()

    app = with_view(metrics_app, CachedPage(read, refresh=3600))
    status, body = call(app, "/view")
    assert status == "200 OK" and body.startswith(b"<!DOCTYPE html>")
    assert call(app, "/view/")[0] == "200 OK"
    assert len(reads) == 1  # cached within the refresh
    assert call(app, "/metrics") == ("200 OK", b"metrics")
    assert call(app, "/view", "POST")[0].startswith("405")


def test_a_failed_read_answers_503_and_the_next_request_retries() -> None:
    calls: list[int] = []

    def read() -> ClusterRead:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("connection refused")
        return cluster()

    app = with_view(metrics_app, CachedPage(read, refresh=0))
    status, body = call(app, "/view")
    assert status.startswith("503") and b"connection refused" in body
    assert call(app, "/view")[0] == "200 OK"


def test_view_without_a_metrics_port_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GPUPLAN_METRICS_PORT", raising=False)
    with pytest.raises(SystemExit) as out:
        main(["--view"])
    assert out.value.code == 2 and "--metrics-port" in capsys.readouterr().err
