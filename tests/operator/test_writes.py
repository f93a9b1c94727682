"""writes.py: the writes of an apply or a clean-up, computed without a cluster."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from gpuplan_operator import diff
from gpuplan_operator import writes as writes_module
from gpuplan_operator.apply import perform
from gpuplan_operator.body import PlanBody
from gpuplan_operator.cluster import read_for_apply
from gpuplan_operator.memo import Memo
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.writes import (
    Changes,
    Observed,
    OwnershipConflict,
    Step,
    Verb,
    Write,
    apply_writes,
    carry_unlabels,
    cleanup_writes,
    unlabel_writes,
)

from planner.output.render import Desired, render_desired
from planner.planning import plan as make_plan
from planner.read.parse import parse_spec, snapshot
from tests.operator.builders import node, plan
from tests.operator.fake_kube import FakeKube

KEY = "gpuplan.ragnaros.io/ns.p"


def desired_for(requests: dict[str, Any], nodes: list[dict[str, Any]], deploy: bool = True) -> Desired:
    spec = parse_spec({"requests": requests, "deploy": deploy}, name="p", namespace="ns")
    result = make_plan(spec, snapshot({"kind": "List", "items": nodes}))
    assert result.feasible
    return render_desired(spec, result)


def landed(body: PlanBody, desired: Desired, nodes: list[dict[str, Any]]) -> Observed:
    """The cluster as it reads once ``desired`` has been applied for ``body``."""
    owner = body.owner_reference()
    for n in nodes:
        name = n["metadata"]["name"]
        if name in desired.node_labels:
            n["metadata"]["labels"].update(desired.node_labels[name])
    cms = {
        c["metadata"]["name"]: dict(c, metadata=dict(c["metadata"], ownerReferences=[owner]))
        for c in desired.configmaps
    }
    deps = {
        d["metadata"]["name"]: dict(d, metadata=dict(d["metadata"], ownerReferences=[owner]))
        for d in desired.deployments
    }
    pcs = {pc["metadata"]["name"]: pc for pc in desired.priority_classes}
    return Observed(nodes=nodes, deployments=deps, configmaps=cms, priority_classes=pcs)


def test_a_fresh_apply_writes_in_step_order_and_a_rerun_writes_nothing() -> None:
    nodes = [node(f"p4-{i}") for i in range(4)]
    body = PlanBody.from_object(plan(requests={"face_feature_extract": {"P4": 4}}, deploy=True))
    desired = desired_for({"face_feature_extract": {"P4": 4}}, nodes)
    empty = Observed(nodes=nodes, deployments={}, configmaps={}, priority_classes={})
    writes = apply_writes(body, desired, empty, in_use_elsewhere=())
    assert [w.step for w in writes] == sorted(w.step for w in writes)
    assert {w.step for w in writes} == {
        Step.LABEL_NODES,
        Step.PRIORITY_CLASSES,
        Step.CONFIGMAP,
        Step.DEPLOYMENTS,
    }
    changes = Changes.of(writes)
    assert changes.labelled == [f"p4-{i}" for i in range(4)] and changes.configmap
    new = [w for w in writes if w.step is Step.DEPLOYMENTS]
    assert new and all(w.verb is Verb.CREATE for w in new)  # a Deployment not there yet is created
    assert changes.deployments == [w.name for w in new]
    assert apply_writes(body, desired, landed(body, desired, nodes), in_use_elsewhere=()) == []
    changed = landed(body, desired, nodes)
    name = new[0].name
    edited = copy.deepcopy(changed.deployments[name])
    changed = dataclasses.replace(changed, deployments={**changed.deployments, name: edited})
    edited["spec"]["replicas"] = 7  # someone scaled it (a new generation)
    edited["metadata"]["generation"] = int(edited["metadata"].get("generation") or 1) + 1
    (again,) = apply_writes(body, desired, changed, in_use_elsewhere=())
    assert (again.verb, again.name) == (Verb.APPLY, name)  # one that is there is applied


def test_a_smaller_plan_drops_deployments_first_and_labels_last() -> None:
    nodes = [node(f"p4-{i}") for i in range(4)]
    body = PlanBody.from_object(plan(requests={"face_feature_extract": {"P4": 4}}, deploy=True))
    before = landed(body, desired_for({"face_feature_extract": {"P4": 4}}, nodes), nodes)
    after = desired_for({"face_feature_extract": {"P4": 2}}, nodes)
    writes = apply_writes(body, after, before, in_use_elsewhere=())
    steps = [w.step for w in writes]
    assert steps[0] is Step.DROP and Step.UNLABEL_NODES in steps
    unlabel = [w for w in writes if w.step is Step.UNLABEL_NODES]
    assert all(w.verb is Verb.LABEL and w.labels == {KEY: None} for w in unlabel)
    assert steps.index(Step.UNLABEL_NODES) > steps.index(Step.DROP)


def test_an_object_of_another_owner_is_a_conflict_naming_it() -> None:
    nodes = [node("p4-0")]
    body = PlanBody.from_object(plan(requests={"face_1vn": {"P4": 8}}, deploy=True))
    desired = desired_for({"face_1vn": {"P4": 8}}, nodes)
    name = desired.deployments[0]["metadata"]["name"]
    theirs = {
        "metadata": {
            "name": name,
            "ownerReferences": [{"uid": "x", "kind": "Thing", "name": "t", "controller": True}],
        }
    }
    observed = Observed(nodes=nodes, deployments={name: theirs}, configmaps={}, priority_classes={})
    with pytest.raises(OwnershipConflict, match="belongs to Thing/t") as caught:
        apply_writes(body, desired, observed, in_use_elsewhere=())
    assert caught.value.kind == "Deployment"


def test_cleanup_removes_only_what_the_plan_owns_and_keeps_classes_in_use() -> None:
    body = PlanBody.from_object(plan())
    mine = {"metadata": {"name": "d", "ownerReferences": [body.owner_reference()]}}
    other = {"metadata": {"name": "e", "ownerReferences": [{"uid": "x"}]}}
    labelled = node("n1")
    labelled["metadata"]["labels"][KEY] = "n1"
    managed = {
        "metadata": {
            "name": "ragnaros-cluster-critical-4",
            "labels": {"app.kubernetes.io/managed-by": "gpuplan"},
        }
    }
    used = {
        "metadata": {
            "name": "ragnaros-cluster-critical-8",
            "labels": {"app.kubernetes.io/managed-by": "gpuplan"},
        }
    }
    observed = Observed(
        nodes=[labelled, node("n2")],
        deployments={"d": mine, "e": other},
        configmaps={},
        priority_classes={"ragnaros-cluster-critical-4": managed, "ragnaros-cluster-critical-8": used},
    )
    writes = cleanup_writes(body, observed, in_use_elsewhere={"ragnaros-cluster-critical-8"})
    assert [(w.step, w.verb, w.kind, w.name) for w in writes] == [
        (Step.DROP, Verb.DELETE, "Deployment", "d"),
        (Step.UNLABEL_NODES, Verb.LABEL, "Node", "n1"),
        (Step.PRUNE_PRIORITY_CLASSES, Verb.DELETE, "PriorityClass", "ragnaros-cluster-critical-4"),
    ]


def test_changes_describe_long_lists_briefly() -> None:
    writes = [Write(Step.LABEL_NODES, Verb.LABEL, "Node", f"n{i:02d}", labels={KEY: "x"}) for i in range(25)]
    text = Changes.of(writes).describe()
    assert text.startswith("labelled nodes: n00, n01") and text.endswith("and 15 more")


def test_configmap_parts_a_plan_no_longer_needs_are_deleted() -> None:
    body = PlanBody.from_object(plan())
    owner = body.owner_reference()
    desired = desired_for({"face_1vn": {"P4": 8}}, [node("p4-0")])
    stale = {"metadata": {"name": "p-flamewakers-2", "ownerReferences": [owner]}}
    theirs = {"metadata": {"name": "p-flamewakers-3", "ownerReferences": [{"uid": "x"}]}}
    observed = Observed(
        nodes=[node("p4-0")], deployments={}, configmaps={"p-flamewakers-2": stale, "p-flamewakers-3": theirs},
        priority_classes={},
    )  # fmt: skip
    deletes = [w for w in apply_writes(body, desired, observed, ()) if w.verb is Verb.DELETE]
    assert [(w.kind, w.name) for w in deletes] == [("ConfigMap", "p-flamewakers-2")]


def comparisons_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Deployments :func:`~gpuplan_operator.diff.covers` compares from now on, by name."""
    compared: list[str] = []
    real = diff.covers

    def counting(actual: Any, desired: Any, key: str = "") -> bool:
        if isinstance(desired, dict) and desired.get("kind") == "Deployment":
            compared.append(desired["metadata"]["name"])
        return real(actual, desired, key)

    monkeypatch.setattr(writes_module, "covers", counting)
    return compared


def test_a_deployment_compared_before_in_the_same_version_is_not_compared_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        writes_module, "_COVERED", Memo(50_000)
    )  # what earlier tests compared is not this test's
    nodes = [node(f"p4-{i}") for i in range(4)]
    body = PlanBody.from_object(plan(requests={"face_feature_extract": {"P4": 4}}, deploy=True))
    desired = desired_for({"face_feature_extract": {"P4": 4}}, nodes)
    observed = landed(body, desired, nodes)
    for i, (name, dep) in enumerate(observed.deployments.items()):
        meta = dict(
            dep["metadata"], uid=f"uid-{name}", resourceVersion=str(100 + i), namespace="ns", generation=1
        )
        observed.deployments[name] = dict(dep, metadata=meta)  # type: ignore[index]
    assert apply_writes(body, desired, observed, ()) == []
    compared = comparisons_counted(monkeypatch)
    assert apply_writes(body, desired, observed, ()) == []
    assert compared == []  # every Deployment: the same version, the same manifest as last time
    for name, dep in observed.deployments.items():  # the Deployment controller wrote every status
        meta = dict(dep["metadata"], resourceVersion=str(int(dep["metadata"]["resourceVersion"]) + 500))
        observed.deployments[name] = dict(dep, metadata=meta)  # type: ignore[index]
    assert apply_writes(body, desired, observed, ()) == []
    assert compared == []  # nothing the comparison reads changed
    name, dep = next(iter(observed.deployments.items()))
    edited = dict(dep, spec=dict(dep["spec"], replicas=5))  # someone scaled it: a new generation
    edited["metadata"] = dict(dep["metadata"], resourceVersion="999", generation=2)
    observed.deployments[name] = edited  # type: ignore[index]
    (write,) = apply_writes(body, desired, observed, ())
    assert (write.step, write.name) == (Step.DEPLOYMENTS, name) and compared == [name]
    compared.clear()
    name, dep = list(observed.deployments.items())[1]
    relabelled = dict(dep, metadata=dict(dep["metadata"], labels={}, resourceVersion="1000"))
    observed.deployments[name] = relabelled  # type: ignore[index]  # its labels removed: same generation
    writes = apply_writes(body, desired, observed, ())
    assert name in [w.name for w in writes] and name in compared


def test_a_manifest_rendered_again_as_the_very_same_object_is_not_even_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A render given the last one hands unmoved entries' Deployments back as the same objects:
    those, found to cover their objects before, are neither compared nor encoded again. A fresh
    render of the same (equal, other objects) is encoded, found by its digest, not compared."""
    monkeypatch.setattr(writes_module, "_COVERED", Memo(50_000))
    nodes = [node(f"p4-{i}") for i in range(4)]
    body = PlanBody.from_object(plan(requests={"face_feature_extract": {"P4": 4}}, deploy=True))
    spec = parse_spec(
        {"requests": {"face_feature_extract": {"P4": 4}}, "deploy": True}, name="p", namespace="ns"
    )
    result = make_plan(spec, snapshot({"kind": "List", "items": nodes}))
    desired = render_desired(spec, result)
    observed = landed(body, desired, nodes)
    for i, (name, dep) in enumerate(observed.deployments.items()):
        meta = dict(dep["metadata"], uid=f"uid-{name}", resourceVersion=str(i), namespace="ns", generation=1)
        observed.deployments[name] = dict(dep, metadata=meta)  # type: ignore[index]
    assert apply_writes(body, desired, observed, ()) == []  # compared once, remembered
    encoded: list[str] = []
    real = writes_module._ENCODE

    class Counting:
        def encode(self, value: Any) -> bytes:
            if isinstance(value, dict) and value.get("kind") == "Deployment":
                encoded.append(value["metadata"]["name"])
            return real.encode(value)

    monkeypatch.setattr(writes_module, "_ENCODE", Counting())
    compared = comparisons_counted(monkeypatch)
    again = render_desired(spec, result, like=desired)
    assert [a is b for a, b in zip(again.deployments, desired.deployments, strict=True)] == [True] * len(
        desired.deployments
    )
    assert apply_writes(body, again, observed, ()) == []
    assert encoded == [] and compared == []
    fresh = render_desired(spec, result)
    assert apply_writes(body, fresh, observed, ()) == []
    assert sorted(encoded) == sorted(observed.deployments) and compared == []


def test_a_deployment_applied_is_not_compared_again_after_its_controller_annotates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The apply's own answer is compared when it lands: the first re-plan after a new plan's
    deploy (a cordon) compares none of its Deployments, though the Deployment controller has
    since written each one's status and added its revision annotation."""
    monkeypatch.setattr(writes_module, "_COVERED", Memo(50_000))
    kube = FakeKube()
    nodes = [node(f"p4-{i}") for i in range(4)]
    for n in nodes:
        kube.put("api/v1/nodes", n)
    body = PlanBody.from_object(plan(requests={"face_feature_extract": {"P4": 4}}, deploy=True))
    desired = desired_for({"face_feature_extract": {"P4": 4}}, nodes)
    perform(kube, apply_writes(body, desired, read_for_apply(kube, body, desired, nodes), ()), Metrics())
    compared = comparisons_counted(monkeypatch)
    observed = read_for_apply(kube, body, desired, kube.items("api/v1/nodes"))
    assert len(observed.deployments) == len(desired.deployments) > 0
    for name, dep in observed.deployments.items():  # what the Deployment controller does next
        notes = {**(dep["metadata"].get("annotations") or {}), "deployment.kubernetes.io/revision": "1"}
        meta = dict(dep["metadata"], annotations=notes, resourceVersion="7000")
        observed.deployments[name] = dict(dep, metadata=meta, status={"replicas": 1})  # type: ignore[index]
    assert apply_writes(body, desired, observed, ()) == []
    assert compared == []


def label(key: str, node_name: str) -> Write:
    return Write(Step.LABEL_NODES, Verb.LABEL, "Node", node_name, labels={key: node_name})


def test_a_label_removal_rides_in_another_plan_s_label_patch_of_the_same_node() -> None:
    giver, taker, other = "gpuplan.ragnaros.io/ns.a", "gpuplan.ragnaros.io/ns.b", "gpuplan.ragnaros.io/ns.c"
    gives = unlabel_writes(giver, ["n1", "n2"])
    takes = [label(taker, "n1"), label(taker, "n3")]
    also = [label(other, "n1")]  # a second plan labelling n1 too: the first one's patch carries it
    out, carried = carry_unlabels([gives, takes, also])
    assert out[0] == [gives[1]]  # n2: nobody labels it, its own patch stays
    assert out[1][0].labels == {taker: "n1", giver: None} and out[1][1] is takes[1]
    assert out[2] == also
    assert [(c.giver, c.unlabel, c.taker, c.label) for c in carried] == [(0, gives[0], 1, out[1][0])]
    assert Changes.of([out[1][0]]).labelled == ["n1"] and Changes.of([gives[0]]).unlabelled == ["n1"]


def test_a_plan_s_own_removal_and_claim_template_drops_are_not_carried() -> None:
    key = "gpuplan.ragnaros.io/ns.a"
    own = [label(key, "n1"), *unlabel_writes(key, ["n1"])]  # never computed, but never folded either
    template = Write(Step.UNLABEL_NODES, Verb.DELETE, "ResourceClaimTemplate", "n1", "ns")
    out, carried = carry_unlabels([own, [template]])
    assert out == [own, [template]] and carried == []
