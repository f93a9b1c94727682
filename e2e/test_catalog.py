"""1. A plan for the built-in catalog on the sample nodes: applied, Ready, and exactly what the CLI says.

The plan is the repository's example (``examples/image-fence.yaml``) moved into the test's
namespace: P4 and T4 cards of the sample kwok nodes, the built-in operator catalog, deploy: true.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from e2e.support import (
    MANAGED_BY,
    REPO,
    Api,
    Kubectl,
    gpuplan_cli,
    label_key,
    labelled_nodes,
    live_pods,
    settled,
    wait_for,
)


def test_catalog_plan_is_applied_like_the_cli_says(
    api: Api, kubectl: Kubectl, ns: str, tmp_path: Path
) -> None:
    manifest = yaml.safe_load((REPO / "examples" / "image-fence.yaml").read_text())
    manifest["metadata"]["namespace"] = ns
    assert manifest["spec"]["deploy"] is True

    # the CLI's answer for the same snapshot: these nodes, and no other pods or plans holding cards
    plan_file, nodes_file = tmp_path / "plan.yaml", tmp_path / "nodes.json"
    plan_file.write_text(yaml.safe_dump(manifest))
    nodes_file.write_text(kubectl.run("get", "nodes", "-o", "json").stdout)
    cli = gpuplan_cli("plan", str(plan_file), "--nodes", str(nodes_file), "-o", "values", "-q")
    assert cli.returncode == 0, cli.stderr
    cli_json = json.loads(
        gpuplan_cli("plan", str(plan_file), "--nodes", str(nodes_file), "-o", "json", "-q").stdout
    )

    kubectl.apply(manifest)
    status = wait_for("the plan Applied and Ready", settled(api, ns, "image-fence"), timeout=120)

    assert (
        status["optimal"] is True
        and status["cards"] == f"{status['cardsRequested']}/{status['cardsRequested']}"
    )
    assert status["score"] == cli_json["score"]
    assert status["allocations"] == cli_json["allocations"]

    cm = api.configmap(ns, "image-fence-flamewakers")
    assert cm is not None
    assert cm["data"]["values.yaml"] == cli.stdout
    entries = yaml.safe_load(cm["data"]["values.yaml"])["flamewakers"]

    # every pod scheduled by kube-scheduler onto exactly the node its flamewaker entry names
    key = label_key(ns, "image-fence")
    wanted = sum(e["instanceNumber"] for e in entries)
    pods = live_pods(api, ns)
    assert len(pods) == wanted, [p["metadata"]["name"] for p in pods]
    by_deployment = {e["name"]: e["podAttributes"]["nodeSelector"][key] for e in entries}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        fw = pod["metadata"]["labels"]["gpuplan.ragnaros.io/flamewaker"]
        assert node == by_deployment[fw], f"{pod['metadata']['name']} on {node}, planned {by_deployment[fw]}"
    assert not [p for p in api.pods(ns, MANAGED_BY) if p["status"].get("phase") == "Pending"]

    # node labels: the planned nodes, each with its own token; PriorityClasses for every size used
    planned_nodes = {n for a in status["allocations"] for n in a["nodes"]}
    assert labelled_nodes(api, key) == {n: n for n in planned_nodes}
    for entry in entries:
        pc = api.priority_class(entry["podAttributes"]["priorityClassName"])
        assert pc is not None and pc["value"] == 800_000_000 + 1000 * int(
            pc["metadata"]["name"].rsplit("-", 1)[1]
        )


def test_kubectl_get_and_explain(api: Api, kubectl: Kubectl, ns: str) -> None:
    manifest = yaml.safe_load((REPO / "examples" / "image-fence.yaml").read_text())
    manifest["metadata"] |= {"namespace": ns, "name": "shown"}
    manifest["spec"]["dryRun"] = True
    kubectl.apply(manifest)
    status = wait_for(
        "the dry run reported", settled(api, ns, "shown", phase="Planning", ready=False), timeout=60
    )
    assert status["allocations"] and not status.get("applied")
    assert labelled_nodes(api, label_key(ns, "shown")) == {}

    out = kubectl.run("get", "gpuplans", "-n", ns).stdout.splitlines()
    assert out[0].split() == ["NAME", "PHASE", "SCORE", "PRIORITY", "CARDS", "OPTIMAL", "AGE"]
    name, phase, score, priority, cards, optimal, _age = out[1].split()
    assert (name, phase, priority, cards, optimal) == ("shown", "Planning", "0", status["cards"], "true")
    assert float(score) == status["score"]
    short = kubectl.run("get", "gpuplan", "shown", "-n", ns, "-o", "jsonpath={.status.phase}").stdout
    assert short == "Planning"

    explained = kubectl.run("explain", "gpuplan.spec.requests").stdout
    assert "machineNum" in explained and "resourceNum" in explained
