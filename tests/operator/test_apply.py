"""apply.py: writes go out wave by wave, each wave's writes together, against an in-memory API
server that makes every write take a moment (so what was in flight together shows)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from gpuplan_operator.apply import perform
from gpuplan_operator.body import PlanBody
from gpuplan_operator.cluster import as_applied, read_for_apply
from gpuplan_operator.metrics import Metrics
from gpuplan_operator.writes import Step, Verb, Write, in_order, paired_wave

from planner import Desired
from tests.operator.builders import node, plan
from tests.operator.fake_kube import FakeKube

KEY = "gpuplan.ragnaros.io/ns.p"
NS = "ns"


class SlowKube(FakeKube):
    """Every write (and with ``reads``, every read) takes ``delay`` seconds; when each started and
    ended is kept by path."""

    def __init__(self, delay: float = 0.1, reads: bool = False) -> None:
        super().__init__()
        self.delay = delay
        self.reads = reads
        self.spans: dict[str, tuple[float, float]] = {}
        self.created_at: list[tuple[float, str]] = []  # (start, name) of each create
        self._spans = threading.Lock()

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "GET" and not self.reads:
            return super().request(method, path, **kw)
        started = time.monotonic()
        time.sleep(self.delay)
        try:
            return super().request(method, path, **kw)
        finally:
            with self._spans:
                self.spans[f"{method} {path}"] = (started, time.monotonic())
                if method == "POST":
                    self.created_at.append((started, str(kw["body"]["metadata"]["name"])))


def manifest(kind: str, name: str) -> Mapping[str, Any]:
    meta = {"name": name, "namespace": NS}
    if kind == "ConfigMap":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "data": {}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": {}}


def test_a_moves_writes_go_in_four_waves_and_nothing_runs_ahead_of_what_it_needs() -> None:
    kube = SlowKube()
    for n in ("old", "new"):
        kube.put("api/v1/nodes", node(n))
    kube.put(f"apis/apps/v1/namespaces/{NS}/deployments", {"metadata": {"name": "leaving", "namespace": NS}})
    writes = [
        Write(Step.UNLABEL_NODES, Verb.LABEL, "Node", "old", labels={KEY: None}),
        Write(Step.DEPLOYMENTS, Verb.APPLY, "Deployment", "arriving", NS, manifest("Deployment", "arriving")),
        Write(Step.CONFIGMAP, Verb.APPLY, "ConfigMap", "p-flamewakers", NS, manifest("ConfigMap", "p-flamewakers")),
        Write(Step.LABEL_NODES, Verb.LABEL, "Node", "new", labels={KEY: "new"}),
        Write(Step.DROP, Verb.DELETE, "Deployment", "leaving", NS),
    ]  # fmt: skip
    took: dict[str, float] = {}
    perform(kube, writes, Metrics(), took=took)

    def span(fragment: str) -> tuple[float, float]:
        (found,) = [v for k, v in kube.spans.items() if fragment in k]
        return found

    drop, label = span("DELETE /apis/apps/v1/namespaces/ns/deployments/leaving"), span("nodes/new")
    cm, deploy = span("configmaps/p-flamewakers"), span("deployments/arriving")
    unlabel = span("nodes/old")
    assert drop[1] <= label[0]  # the cards are free before anything is written that may take them
    assert label[1] <= min(cm[0], deploy[0])  # the label exists before what makes the pods
    assert max(cm[0], deploy[0]) < min(cm[1], deploy[1])  # the ConfigMap and the Deployment together
    assert max(cm[1], deploy[1]) <= unlabel[0]  # the old label goes once nothing new selects it
    assert list(took) == ["drop 1", "label_nodes 1", "configmap 1+deployments 1", "unlabel_nodes 1"]


def pinned(name: str, value: str) -> Write:
    """A Deployment whose pods select the nodes labelled ``value``."""
    body = dict(manifest("Deployment", name))
    body["spec"] = {"template": {"spec": {"nodeSelector": {KEY: value}}}}
    return Write(Step.DEPLOYMENTS, Verb.CREATE, "Deployment", name, NS, body)


def label(node_name: str, value: str | None) -> Write:
    step = Step.LABEL_NODES if value is not None else Step.UNLABEL_NODES
    return Write(step, Verb.LABEL, "Node", node_name, labels={KEY: value})


def test_a_paired_wave_sends_each_label_just_before_the_first_deployment_selecting_it() -> None:
    writes = [
        label("n1", "a"), label("n2", "b"), label("n3", "b"), label("n4", "c"), label("gone", None),
        pinned("d-b", "b"), pinned("d-a", "a"), pinned("d-a2", "a"),
        Write(Step.PRIORITY_CLASSES, Verb.APPLY, "PriorityClass", "pc", None, manifest("PriorityClass", "pc")),
    ]  # fmt: skip
    names = [w.name for w in in_order(writes, paired_wave)]
    # the class first (a pod naming it is refused without it); a label no Deployment selects
    # (n4) after them; removals last, in their own wave
    assert names == ["pc", "n2", "n3", "d-b", "n1", "d-a", "d-a2", "n4", "gone"]
    # without the paired wave the labels keep a wave of their own, before every Deployment
    plain = [w.name for w in in_order(writes)]
    assert plain[:5] == ["n1", "n2", "n3", "n4", "pc"] and plain[-1] == "gone"


def test_the_log_names_a_waves_steps_once_however_its_writes_interleave() -> None:
    kube = SlowKube(delay=0.0)
    for n in ("n1", "n2"):
        kube.put("api/v1/nodes", node(n))
    writes = [label("n1", "a"), label("n2", "b"), pinned("d-a", "a"), pinned("d-b", "b")]
    took: dict[str, float] = {}
    perform(kube, writes, Metrics(), took=took, waves=paired_wave)
    assert list(took) == ["label_nodes 2+deployments 2"]


def test_after_labels_each_deployment_waits_for_its_own_label_and_no_other() -> None:
    """A plan without the gang gate: its pods are tried by the scheduler as soon as they exist,
    so each Deployment goes once the label it selects has landed, and not once all have."""
    kube = SlowKube(delay=0.05)
    nodes = [f"n{i}" for i in range(8)]
    for n in nodes:
        kube.put("api/v1/nodes", node(n))
    writes = [label(n, n) for n in nodes] + [pinned(f"d-{n}", n) for n in nodes]
    perform(kube, writes, Metrics(), parallel=4, waves=paired_wave, after_labels=True)
    labelled = {n: kube.spans[f"PATCH /api/v1/nodes/{n}"] for n in nodes}
    created = sorted(kube.created_at)  # (start, name) of each Deployment's create
    for started, name in created:
        assert labelled[name.removeprefix("d-")][1] <= started  # its label had landed
    last_label = max(end for _, end in labelled.values())
    assert created[0][0] < last_label  # the first Deployments did not wait for every label


def test_a_deployment_whose_label_failed_is_not_sent() -> None:
    from kubernetes.client.exceptions import ApiException

    kube = SlowKube(delay=0.01)
    for n in ("n1", "n2"):
        kube.put("api/v1/nodes", node(n))
    kube.fail_on = "nodes/n1"
    writes = [label("n1", "n1"), label("n2", "n2"), pinned("d-n1", "n1"), pinned("d-n2", "n2")]
    with pytest.raises(ApiException):
        perform(kube, writes, Metrics(), waves=paired_wave, after_labels=True)
    assert [name for _, name in kube.created_at] == ["d-n2"]  # no pod would find n1's label


def test_an_applys_reads_go_out_together() -> None:
    kube = SlowKube(reads=True)
    body = PlanBody.from_object(plan())
    desired = Desired(
        node_labels={},
        label_key=KEY,
        priority_classes=[],
        configmaps=[dict(manifest("ConfigMap", n)) for n in ("p-flamewakers", "p-flamewakers-2")],
        deployments=[dict(manifest("Deployment", f"d{i}")) for i in range(3)],
    )
    observed = read_for_apply(kube, body, desired, [], managed=[])
    gets = [v for k, v in kube.spans.items() if k.startswith("GET ")]
    assert len(gets) == 3 + 2 + 1 + 1  # three Deployments, two ConfigMaps by name, classes, templates
    assert observed.deployments == {} and observed.configmaps == {}
    in_flight = max(sum(1 for a, b in gets if a <= t < b) for t, _ in gets)
    assert in_flight >= 4  # not one after the other


DEPLOYMENTS = f"apis/apps/v1/namespaces/{NS}/deployments"


def test_a_new_deployment_is_created_and_its_first_apply_takes_over_the_creates_fields() -> None:
    """Created whole (a POST), owned by that create; the first apply moves the ownership to the
    apply (a JSON patch of managedFields) and applies again, so fields it drops go; later applies
    are one request."""
    kube = FakeKube()
    new = Write(Step.DEPLOYMENTS, Verb.CREATE, "Deployment", "d", NS, manifest("Deployment", "d"))
    perform(kube, [new], Metrics())
    assert kube.writes == [("POST", f"/{DEPLOYMENTS}/d")]
    owners = kube.objects[(DEPLOYMENTS, "d")]["metadata"]["managedFields"]
    assert [(o["manager"], o["operation"]) for o in owners] == [("gpuplan-operator", "Update")]

    changed = Write(Step.DEPLOYMENTS, Verb.APPLY, "Deployment", "d", NS, manifest("Deployment", "d"))
    kube.writes.clear()
    perform(kube, [changed], Metrics())
    assert [m for m, _ in kube.writes] == ["PATCH", "PATCH", "PATCH"]  # apply, ownership, apply
    owners = kube.objects[(DEPLOYMENTS, "d")]["metadata"]["managedFields"]
    assert [(o["manager"], o["operation"]) for o in owners] == [("gpuplan-operator", "Apply")]
    kube.writes.clear()
    perform(kube, [changed], Metrics())
    assert len(kube.writes) == 1


def test_a_create_that_finds_the_name_taken_applies() -> None:
    """An operator that died after its create landed: the next one's create finds the object."""
    kube = FakeKube()
    kube.put(DEPLOYMENTS, dict(manifest("Deployment", "d")))
    new = Write(Step.DEPLOYMENTS, Verb.CREATE, "Deployment", "d", NS, manifest("Deployment", "d"))
    landed: list[Any] = []
    perform(kube, [new], Metrics(), landed=lambda w, obj: landed.append(obj))
    assert [m for m, _ in kube.writes] == ["POST", "PATCH"]
    assert landed and landed[0]["metadata"]["name"] == "d"


def test_the_creates_ownership_becomes_the_applys_with_both_field_sets() -> None:
    def entry(manager: str, operation: str, fields: dict[str, Any], sub: str | None = None) -> dict[str, Any]:
        out = {"manager": manager, "operation": operation, "apiVersion": "apps/v1", "fieldsType": "FieldsV1"}
        return out | {"fieldsV1": fields, "time": "t"} | ({"subresource": sub} if sub else {})

    status = entry("gpuplan-operator", "Update", {"f:status": {}}, sub="status")
    kcm = entry("kube-controller-manager", "Update", {"f:metadata": {"f:annotations": {}}})
    created = entry("gpuplan-operator", "Update", {"f:spec": {"f:replicas": {}, "f:strategy": {}}})
    applied = entry("gpuplan-operator", "Apply", {"f:spec": {"f:replicas": {}, "f:template": {}}})
    assert as_applied([kcm, applied, status]) is None  # nothing of a create's to move
    out = as_applied([kcm, created, status])
    assert out is not None
    assert [(o["manager"], o["operation"]) for o in out] == [
        ("kube-controller-manager", "Update"),
        ("gpuplan-operator", "Apply"),
        ("gpuplan-operator", "Update"),  # the status subresource's, not the object's
    ]
    assert out[1]["fieldsV1"] == created["fieldsV1"] and "time" not in out[1]
    both = as_applied([applied, kcm, created])
    assert both is not None and [o["operation"] for o in both] == ["Apply", "Update"]
    assert both[0]["fieldsV1"] == {"f:spec": {"f:replicas": {}, "f:template": {}, "f:strategy": {}}}
