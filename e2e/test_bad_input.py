"""4. Bad input: the API server rejects what the schema can; the operator marks the rest.

- Schema-invalid plans never exist: kubectl apply fails with the field named.
- A semantically invalid plan (an operator the catalog does not know) gets ``phase: Invalid``, a
  message naming the field, no writes at all, and no endless retries.
- An infeasible plan gets ``phase: Infeasible`` with the reason, and the previous applied state
  (labels, ConfigMap, Deployments, status allocations) stays exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from e2e.support import (
    Api,
    Kubectl,
    OperatorProcess,
    is_true,
    label_key,
    labelled_nodes,
    one_type,
    operator_entry,
    plan_manifest,
    settled,
    stays,
    wait_for,
)


@pytest.mark.parametrize(
    ("requests", "operators", "complaint"),
    [
        pytest.param({"x": {"G": 1}}, [{"name": "x", "keyStrategy": "sideways", "services": {"key": "x"}}],
                     "keyStrategy", id="an unknown strategy"),
        pytest.param({"face_1vn": {"resourceNum": {"G": -2}}}, [], "resourceNum", id="a negative card count"),
        pytest.param({"face_image_flow": {"resourceNum": {"G": 8}, "machineNum": {"G": 3}}}, [],
                     "machineNum must divide resourceNum", id="machineNum not dividing resourceNum"),
        pytest.param({"x": {"G": 1}}, [{"name": "x"}], "needs keyStrategy and services.key",
                     id="a new operator without its key service"),
        pytest.param({"face_1vn": {"G": 1}}, [], "scoring", id="an unknown scoring"),
        pytest.param({"face_1vn": {"G": -1}}, [], "spec.requests.face_1vn: the short form maps each type",
                     id="a negative count in the short form"),
        pytest.param({"face_1vn": {"G": "4"}}, [], "spec.requests.face_1vn: the short form maps each type",
                     id="a string count in the short form"),
        pytest.param({"face_1vn": {"G": 4, "resourceNum": {"G": 4}}}, [],
                     "spec.requests.face_1vn: use either", id="short and long forms mixed"),
    ],
)  # fmt: skip
def test_schema_rejects_at_the_door(
    kubectl: Kubectl, ns: str, requests: dict[str, Any], operators: list[dict[str, Any]], complaint: str
) -> None:
    spec = one_type("none", requests, operators)
    if complaint == "scoring":
        spec["scoring"] = "v3"
    proc = kubectl.apply(plan_manifest(ns, "bad", spec), check=False)
    assert proc.returncode != 0
    assert complaint in proc.stderr, proc.stderr
    assert not kubectl.run("get", "gpuplans", "-n", ns, "-o", "name").stdout.strip()


def test_semantically_invalid_plan_writes_only_status(
    api: Api, kubectl: Kubectl, ns: str, operator: OperatorProcess
) -> None:
    mark = operator.mark()
    kubectl.apply(plan_manifest(ns, "wrong", {"requests": {"no_such_operator": {"P4": 2}}, "deploy": True}))
    status = wait_for("phase Invalid", settled(api, ns, "wrong", phase="Invalid", ready=False), timeout=60)
    assert "requests.no_such_operator" in status["message"]
    assert not is_true(status, "Planned")
    assert api.configmap(ns, "wrong-flamewakers") is None
    assert api.deployments(ns) == []
    assert labelled_nodes(api, label_key(ns, "wrong")) == {}

    def attempts() -> int:  # cycles that planned it (an Invalid plan waits for its spec to change)
        return sum(
            "cycle: planned" in line and f"{ns}/wrong" in line
            for line in operator.log_since(mark).splitlines()
        )

    wait_for("a cycle to find it Invalid", lambda: attempts() >= 1, timeout=30)
    version = (api.plan(ns, "wrong") or {})["metadata"]["resourceVersion"]
    stays(
        "no retries and no writes",
        lambda: attempts() == 1 and (api.plan(ns, "wrong") or {})["metadata"]["resourceVersion"] == version,
        seconds=4,
    )


def test_infeasible_plan_keeps_the_previous_state(
    api: Api, kubectl: Kubectl, ns: str, make_nodes: Callable[..., list[str]]
) -> None:
    nodes = make_nodes("infeasible", 2)
    gpu_type = nodes[0].rsplit("-", 1)[0]
    spec = one_type(gpu_type, {"big": {"G": 8}}, [operator_entry("big")], deploy=True)
    kubectl.apply(plan_manifest(ns, "grow", spec))
    applied = wait_for("the plan applied", settled(api, ns, "grow"), timeout=90)
    key = label_key(ns, "grow")
    labels = labelled_nodes(api, key)
    cm = api.configmap(ns, "grow-flamewakers")
    deployments = {
        d["metadata"]["name"]: (d["metadata"]["uid"], d["metadata"]["generation"])
        for d in api.deployments(ns)
    }
    assert labels and cm is not None and deployments

    spec["requests"] = {"big": {"G": 64}}
    kubectl.apply(plan_manifest(ns, "grow", spec))
    status = wait_for(
        "phase Infeasible", settled(api, ns, "grow", phase="Infeasible", ready=False), timeout=90
    )
    assert "no deployable plan" in status["message"] and "64" in status["message"]
    assert "previous placement stays applied" in status["message"]
    assert status["allocations"] == applied["allocations"]
    assert labelled_nodes(api, key) == labels
    now = api.configmap(ns, "grow-flamewakers")
    assert now is not None and now["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    assert {
        d["metadata"]["name"]: (d["metadata"]["uid"], d["metadata"]["generation"])
        for d in api.deployments(ns)
    } == deployments
