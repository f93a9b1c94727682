"""The chart's Grafana dashboard against a real Prometheus (Debian's) scraping the operator.

Every panel's query (``hack/dashboard.py``, the dashboard's one source) must return data while
plans of two priorities share a cluster, one of them elastic: a panel that shows nothing in a
run like this one shows nothing in production either.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    REPO,
    Api,
    Kubectl,
    OperatorProcess,
    free_port,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
    with_metrics,
)


def panels_queries() -> list[str]:
    spec = importlib.util.spec_from_file_location("dashboard", REPO / "hack" / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    queries: list[str] = module.queries()
    return queries


@pytest.fixture
def prometheus(tmp_path: Path, operator: OperatorProcess) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: run bash hack/install-prometheus.sh (CI does)"
    target = urllib.parse.urlparse(with_metrics(operator))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "gpuplan-operator", "static_configs": [{"targets": [target.netloc]}]}
                ],
            }
        )
    )
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115  # closed below
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("prometheus ready", lambda: _get(f"{url}/-/ready") is not None, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bytes(r.read())
    except OSError:
        return None


def query(url: str, expr: str) -> list[dict[str, Any]]:
    body = _get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    if body is None:
        return []
    doc = json.loads(body)
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def test_every_panel_of_the_dashboard_shows_data(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]], prometheus: str
) -> None:
    nodes = make_nodes("dash", 2)
    gpu = nodes[0].rsplit("-", 1)[0]

    def plan(name: str, cards: Any, priority: int) -> dict[str, Any]:
        spec = one_type(gpu, {name: {"G": cards}}, [operator_entry(name)], deploy=True, priority=priority)
        return plan_manifest(ns, name, spec)

    kubectl.apply(plan("flex", {"min": 8, "max": 16}, 0))
    wait_for("flex applied", settled(api, ns, "flex"), timeout=90)
    kubectl.apply(plan("urgent", 8, 50))
    wait_for("urgent applied", settled(api, ns, "urgent"), timeout=90)

    queries = panels_queries()
    assert len(queries) >= 8
    empty: list[str] = []

    def all_answer() -> bool:
        empty[:] = [q for q in queries if not query(prometheus, q)]
        return not empty

    try:
        wait_for("every panel's query returns data", all_answer, timeout=90, interval=2)
    except AssertionError as e:
        raise AssertionError(f"panels without data: {empty}") from e
    placed = query(prometheus, 'gpuplan_plan_cards{bound="placed"}')
    by_plan = {(r["metric"]["plan"], r["metric"]["priority"]): float(r["value"][1]) for r in placed}
    assert by_plan.get(("urgent", "50")) == 8 and by_plan.get(("flex", "0")) == 8
