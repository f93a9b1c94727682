"""The operator serves the cluster's plans as a picture (``--view``), read only, refreshed.

A plan applied by the running operator must show on the page its metrics port serves: every
instance of its status on the node the status names, once; the metrics still answer beside it;
and when the plan is deleted the page drops its instances within the refresh. ``gpuplan status
NAME --html`` draws the same plan from the same cluster.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser

import pytest

from e2e.support import (
    Api,
    Kubectl,
    OperatorProcess,
    one_type,
    operator_entry,
    plan_manifest,
    scrape,
    settled,
    wait_for,
    with_view,
)
from gpuplan.cli import main

NAME = "pictured"


class Instances(HTMLParser):
    """(node, instance id) of every instance drawn: in node rows, and in the node lists of groups
    (drawn when the reader opens the group)."""

    def __init__(self) -> None:
        super().__init__()
        self.node = ""
        self.in_group_list = False
        self.found: list[tuple[str, str]] = []
        self.nodes: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("data-node"):
            self.node = str(a["data-node"])
            self.nodes.add(self.node)
        if a.get("data-i"):
            self.found.append((self.node, str(a["data-i"])))
        self.in_group_list = tag == "script" and a.get("class") == "nodes"

    def handle_data(self, data: str) -> None:
        if self.in_group_list:
            listed = json.loads(data)
            self.found += [(node, ident) for node, ids, _ in listed for ident in ids]
            self.nodes |= {node for node, _, _ in listed}
            self.in_group_list = False


def instances_per_node(page: str, op: str) -> Counter[tuple[str, str]]:
    """(operator, node) -> instances of the operator ``op`` drawn there (each id drawn once)."""
    parser = Instances()
    parser.feed(page)
    ids = parser.found
    assert len({ident for _, ident in ids}) == len(ids), "an instance is drawn twice"
    named = ((ident.split(":", 1)[1].split("/")[0], node) for node, ident in ids)
    return Counter(key for key in named if key[0] == op)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/html")
        return str(r.read().decode())


def test_the_operator_serves_every_plan_on_its_nodes(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = with_view(operator)
    nodes = make_nodes("view", 3)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    op = f"view-{ns[-6:]}"  # unique on the page among the other tests' plans
    spec = one_type(gpu_type, {op: {"G": 6}}, [operator_entry(op, "service")])
    kubectl.apply(plan_manifest(ns, NAME, spec))
    status = wait_for("the plan Applied", settled(api, ns, NAME, ready=False), timeout=90)
    (alloc,) = status["allocations"]
    want = Counter({(op, node): n for node, n in alloc["nodes"].items()})
    assert sum(want.values()) == alloc["instances"] >= 3

    def drawn() -> Counter[tuple[str, str]] | None:
        got = instances_per_node(get(url), op)
        return got if got == want else None

    wait_for("the plan's instances on the page, where its status has them", drawn, timeout=30)
    page = get(url)
    assert f'data-plan="{ns}/{NAME}"' in page and "Applied" in page
    parser = Instances()
    parser.feed(page)
    for node in nodes:
        assert node in parser.nodes  # each node drawn, whether in a row of its own or in a group
    assert (
        scrape(operator.metrics_url or "").value("gpuplan_plans", phase="Applied") >= 1
    )  # metrics still there
    request = urllib.request.Request(url, method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405  # read only

    # the command line draws the same plan from the same cluster
    assert main(["status", NAME, "-n", ns, "--html", "--kubeconfig", kubeconfig]) == 0
    from_cli = capsys.readouterr().out
    assert instances_per_node(from_cli, op) == want

    kubectl.run("delete", "gpuallocationplan", NAME, "-n", ns, "--wait=true", "--timeout=60s")
    wait_for(
        "the deleted plan gone from the page",
        lambda: not instances_per_node(get(url), op),
        timeout=30,
    )
