"""A plan gone without its clean-up leaves no node label behind for long.

The operator was stopped (uninstalled first, say), the plan's finalizer removed by hand and the
plan deleted: it goes at once and nothing cleans up after it. Its Deployments and ConfigMap go
with their owner (the API server's garbage collector); its node labels stay until the operator,
started again, has seen their key orphaned for ``--orphan-grace`` seconds and a listing of the
plans confirms that no plan holds it. Another plan's labels stay.
"""

from __future__ import annotations

from collections.abc import Callable

from e2e.support import (
    PLAN_API,
    PLURAL,
    Api,
    Kubectl,
    OperatorProcess,
    label_key,
    labelled_nodes,
    one_type,
    operator_entry,
    plan_manifest,
    wait_for,
)


def test_a_plan_deleted_without_its_clean_up_has_its_node_labels_removed(
    api: Api,
    kubectl: Kubectl,
    ns: str,
    operator: OperatorProcess,
    make_nodes: Callable[..., list[str]],
) -> None:
    nodes = make_nodes("orphan", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    gone, kept = label_key(ns, "gone"), label_key(ns, "kept")
    for name in ("gone", "kept"):
        spec = one_type(gpu_type, {"spread": {"G": 2}}, [operator_entry("spread", "service")])
        kubectl.apply(plan_manifest(ns, name, spec))
    wait_for(
        "both plans Applied, their nodes labelled",
        lambda: (
            all(api.status(ns, n).get("phase") == "Applied" for n in ("gone", "kept"))
            and bool(labelled_nodes(api, gone))
            and bool(labelled_nodes(api, kept))
        ),
        timeout=60,
    )
    kept_labels = labelled_nodes(api, kept)

    operator.stop()
    api.patch(PLAN_API, PLURAL, "gone", {"metadata": {"finalizers": None}}, ns=ns)
    api.delete(PLAN_API, PLURAL, "gone", ns=ns)
    wait_for("the plan gone", lambda: api.plan(ns, "gone") is None, timeout=30)
    assert labelled_nodes(api, gone), "nothing cleaned up after it"

    usual = operator.extra_args
    operator.extra_args = (*usual, "--orphan-grace", "3")
    try:
        mark = operator.mark()
        operator.start()
        wait_for("the orphaned node labels removed", lambda: not labelled_nodes(api, gone), timeout=60)
        # the operator logs the removal once every node's patch has returned: a poll may see the
        # labels gone before the line is written (CI at 12:15 on 2026-11-29 did)
        wait_for(
            "the removal logged",
            lambda: f"removed node label {gone} from" in operator.log_since(mark),
            timeout=10,
        )
        assert labelled_nodes(api, kept) == kept_labels
        assert api.status(ns, "kept").get("phase") == "Applied"
    finally:
        operator.stop()
        operator.extra_args = usual
        operator.start()
