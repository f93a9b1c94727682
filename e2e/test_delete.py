"""7. Deleting a plan removes everything it wrote: labels, ConfigMap, Deployments (and so pods),
and the PriorityClasses no other plan uses."""

from __future__ import annotations

from collections.abc import Callable

from e2e.support import (
    Api,
    Kubectl,
    label_key,
    labelled_nodes,
    live_pods,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    wait_for,
)

# a size no other test uses, so its PriorityClass is this plan's alone
CARDS = 7


def test_delete_removes_everything(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("delete", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"odd": {"G": CARDS}}, [operator_entry("odd")], deploy=True)
    kubectl.apply(plan_manifest(ns, "gone", spec))
    wait_for("the plan applied", settled(api, ns, "gone"), timeout=90)
    key = label_key(ns, "gone")
    pc = f"ragnaros-cluster-critical-{CARDS}"
    assert labelled_nodes(api, key) and api.configmap(ns, "gone-flamewakers") and api.deployments(ns)
    assert api.priority_class(pc) is not None and live_pods(api, ns)

    kubectl.run("delete", "gpuplan", "gone", "-n", ns, "--timeout=60s")
    assert api.plan(ns, "gone") is None
    assert labelled_nodes(api, key) == {}
    assert api.configmap(ns, "gone-flamewakers") is None
    assert api.deployments(ns) == []
    assert api.priority_class(pc) is None
    wait_for("the plan's pods gone", lambda: not live_pods(api, ns), timeout=60)
