"""Render a plan into what the cluster should hold: labels, PriorityClasses, values.yaml, Deployments.

Notes
-----
Pure functions only (``render_*``): the operator applies exactly what this module returns and the
CLI prints the same (``-o values``, ``-o manifests``), so a plan reviewed offline is the plan that
lands. The only thing the operator adds is ``ownerReferences``, which need the plan's uid.

Names: every flamewaker entry (and so its Deployment) is named ``<plan>-<service>-<type>-<node>``,
so two plans in one namespace never claim the same object.

Pinning: every node the plan uses gets one label, ``gpuplan.ragnaros.io/<plan-key>=<node-token>``.
Each flamewaker entry covers one service of one allocation on one node (``instanceNumber`` = that
allocation's instances there) and selects that node's token, so Kubernetes can only put each
instance where the plan did. ``priorityClassName: ragnaros-cluster-critical-N`` makes larger
instances schedule, and preempt, first: pods of 5, 4, 4 and 3 cards placed one at a time on two
8-card nodes could otherwise strand each other.

All-or-nothing (``gang: plan``, the default): every pod spec (the entry's ``podAttributes`` and
each Deployment's template) carries the scheduling gate ``gpuplan.ragnaros.io/gang``. A gate can
only be removed from a pod, never added, so it must be there from creation; kube-scheduler leaves
a gated pod alone, and the operator lifts a plan's gates only once the whole plan can start
(every planned node has the free cards for all of the plan's instances there), each pod as it
appears from then on. ``gang: none`` renders no gate.

Link services follow their operator's ``linkStrategy``: shared link services run as
extra operators in the key service's flamewaker (one per started link), detached ones get
flamewakers of one card each, pinned to the same node. A link service listed by several operators
(face surveillance retrieval, for image and video flows) is rendered once, by the first.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import yaml

from planner.base.errors import InvalidInput
from planner.base.quantity import cpus_text
from planner.base.vocab import (
    FLAMEWAKER_LABEL,
    GANG_GATE,
    MANAGED_BY,
    PART_ANNOTATION,
    PLAN_LABEL,
    PRIORITY_BASE,
    configmap_name,
    dns_name,
    fit,
    node_token,
    plan_label_key,
    plan_labels,
    priority_class_name,
    priority_value,
    short_hash,
)
from planner.model.devices import Device
from planner.model.options import TypeProblem
from planner.model.result import PlanResult, zones_text
from planner.model.spec import Gang, OperatorSpec, PlanSpec, ResourceKind, ResourceType
from planner.node.pods import PodGroup, layout, pod_cpu


def _camel(service: str) -> str:
    return "".join(p.capitalize() for p in re.split(r"[-_.]", service) if p) + "Operator"


def _operator_entry(service: str) -> dict[str, Any]:
    return {
        "group": service,
        "model": "SIMPLE_ASYNC",
        "className": _camel(service),
        "configFile": f"config/{service}-config.json",
        "capacities": {"concurrency": 100},
    }


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a template: copied) under ``over`` (values made for this entry alone: taken as
    they are, not copied again), maps merged key by key; keys in base's order, then over's new
    ones. Copying what :func:`_entry` had just built cost half of rendering 2,480 entries."""
    out: dict[str, Any] = {}
    for k, b in base.items():
        if k not in over:
            out[k] = copy.deepcopy(b)
            continue
        v = over[k]
        out[k] = _deep_merge(b, v) if isinstance(v, Mapping) and isinstance(b, Mapping) else v
    for k, v in over.items():
        if k not in base:
            out[k] = v
    return out


@dataclass(frozen=True)
class Flamewaker:
    """One rendered flamewaker entry and where it was pinned (for Deployments and status)."""

    entry: dict[str, Any] = field(hash=False)
    node: str
    instances: int
    units: int
    resource: ResourceType
    claim_template: dict[str, Any] | None = field(default=None, hash=False)  # DRA: its devices


def _entry(
    spec: PlanSpec,
    op: OperatorSpec,
    resource: ResourceType,
    selector: Mapping[str, str],
    node: str,
    name: str,
    services: Sequence[str],
    instances: int,
    units: int,
    cpu: int | None = None,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "nodeSelector": dict(selector) | {plan_label_key(spec.namespace, spec.name): node_token(node)}
    }
    if resource.kind is ResourceKind.GPU:
        pod["priorityClassName"] = priority_class_name(units, spec.priority)
    if spec.tolerations:
        pod["tolerations"] = [{k: v for k, v in vars(t).items() if v is not None} for t in spec.tolerations]
    if spec.gang is Gang.PLAN:  # a gate can only be there from creation: it is in every pod's spec
        pod["schedulingGates"] = [{"name": GANG_GATE}]
    resources: dict[str, Any] = {"limits": {resource.resource_name: units}}
    if cpu:  # requests = limits: a Guaranteed pod gets exclusive CPUs of its GPUs' NUMA node
        resources["limits"]["cpu"] = cpus_text(cpu)
        resources["requests"] = {"cpu": cpus_text(cpu)}
    generated = {
        "name": name,
        "image": spec.image,
        "apiVersion": "v2",
        "instanceNumber": instances,
        "replica": 1,
        "operators": [_operator_entry(s) for s in services],
        "podAttributes": pod,
        "containerAttributes": {"resources": resources},
    }
    merged = _deep_merge(op.flamewaker, generated)  # the template gives defaults, the plan wins
    entry = {k: merged[k] for k in generated} | {k: v for k, v in merged.items() if k not in generated}
    if op.patches:
        try:
            entry = jsonpatch.apply_patch(entry, [dict(p) for p in op.patches])
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            why = str(e).split(" in {")[0]  # the library appends the whole document
            raise InvalidInput(f"{op.source}.patches", f"does not apply to {merged['name']}: {why}") from None
    return entry


def render_flamewakers(spec: PlanSpec, result: PlanResult) -> list[Flamewaker]:
    """The flamewaker entries of a feasible plan, in allocation then node order (:func:`layout`)."""
    return [k.flamewaker for k in _render_entries(spec, result, {})]


EntryKey = tuple[Any, ...]  # what an entry is rendered from, besides the spec (:func:`_entry_key`)


@dataclass
class Kept:
    """One rendered entry, kept for the next render of the same spec (:func:`render_desired`'s
    ``like``): its key, the entry, and once made, its values.yaml text and its Deployment."""

    key: EntryKey | None  # None: not kept (its claim depends on the devices' attributes)
    flamewaker: Flamewaker
    text: str | None = None
    deployment: dict[str, Any] | None = None


def _entry_key(g: PodGroup, selector: Mapping[str, str], cpu: int | None) -> EntryKey | None:
    """Everything of a pod group an entry is rendered from, the spec aside; None for an entry
    with devices (its claim template reads the devices' attributes, which the key does not hold)."""
    if g.devices:
        return None
    return (g.alloc.operator, g.alloc.resource, g.node, g.services, g.pods, g.units, g.link,
            g.instance, g.part, g.zones, tuple(selector.items()), cpu)  # fmt: skip


def _render_entries(spec: PlanSpec, result: PlanResult, like: Mapping[EntryKey, Kept]) -> list[Kept]:
    """Every entry, in :func:`layout` order; an entry of ``like`` (rendered from the same spec)
    with the same key is taken as it was, not rendered again."""
    problems = {p.resource.name: p for p in result.problems}
    out: list[Kept] = []
    any_node = {p.resource.name for p in result.problems if p.any_node}
    for g in layout(spec, result.allocations):
        resource, alloc, node = g.resource, g.alloc, g.node
        # a type that fell back to every node has no label to select: the plan's own label pins
        selector = {} if resource.name in any_node else dict(resource.node_selector)
        problem = problems.get(alloc.resource)
        cpu = pod_cpu(problem, g) if problem is not None else None
        key = _entry_key(g, selector, cpu)
        kept = like.get(key) if key is not None else None
        if kept is not None:
            out.append(kept)
            continue
        parts = (g.services[0], "link") if g.link else (g.op.key_service,)
        index: tuple[str, ...] = () if g.instance is None else (str(g.instance),)
        if g.part is not None:
            index += (str(g.part),)
        name = dns_name(spec.name, *parts, alloc.resource, node, *index)
        entry = _entry(spec, g.op, resource, selector, node, name, g.services, g.pods, g.units, cpu)
        if g.instance is not None and problem is not None:  # GPUs chosen one by one: a claim each
            out.append(Kept(key, _claimed(spec, problem, entry, node, g.devices, resource)))
            continue
        if g.zones:  # the NUMA zone each instance counted on (the kubelet picks the NUMA node)
            entry["zones"] = [zones_text(z) for z in g.zones]
        out.append(Kept(key, Flamewaker(entry, node, g.pods, g.units, resource)))
    return out


CLAIM = "gpus"  # the name a pod and its container use for an instance's ResourceClaim
UNIQUE_ATTRIBUTES = ("uuid", "index")  # driver attributes that tell one device from another


def _cel_value(kind: str, text: str) -> str:
    return text if kind in ("int", "bool") else json.dumps(text)


def _cel_attribute(qualified: str) -> str:
    prefix, _, name = qualified.rpartition("/")
    return f'device.attributes["{prefix}"].{name}'


def _cel_has(qualified: str) -> str:
    """Reading an attribute a device lacks is a CEL runtime error (the pod fails to schedule), not a
    mismatch: every read is guarded, so the driver's other devices simply do not match."""
    prefix, _, name = qualified.rpartition("/")
    return f'"{name}" in device.attributes["{prefix}"]'


def _cel_in(qualified: str, driver: str, values: str) -> str:
    attribute = _cel_attribute(qualified)
    return f'device.driver == "{driver}" && {_cel_has(qualified)} && {attribute} in [{values}]'


def _selector(devices: Sequence[Device], domain_attribute: str) -> str:
    """CEL picking exactly ``devices`` (by a driver attribute that tells devices apart), else their
    domain(s): the scheduler then chooses within the domain what the plan counted there."""
    driver = devices[0].driver
    for attribute in UNIQUE_ATTRIBUTES:
        typed = [d.typed(attribute) for d in devices]
        if all(t is not None for t in typed):
            values = ", ".join(_cel_value(*t) for t in typed if t is not None)
            return _cel_in(f"{driver}/{attribute}", driver, values)
    domains = sorted({t for d in devices if (t := d.typed(domain_attribute)) is not None})
    if not domains:
        return f'device.driver == "{driver}"'
    values = ", ".join(_cel_value(*t) for t in domains)
    qualified = domain_attribute if "/" in domain_attribute else f"{driver}/{domain_attribute}"
    return _cel_in(qualified, driver, values)


def _claim_template(
    spec: PlanSpec, name: str, problem: TypeProblem, node: str, names: Sequence[str], resource: ResourceType
) -> dict[str, Any]:
    """A ResourceClaimTemplate asking for exactly the instance's devices (resource.k8s.io/v1)."""
    devices = [problem.devices[node][n] for n in names]
    request: dict[str, Any] = {
        "deviceClassName": resource.device_class or devices[0].driver,
        "allocationMode": "ExactCount",
        "count": len(devices),
        "selectors": [{"cel": {"expression": _selector(devices, problem.domain_attribute)}}],
    }
    claim: dict[str, Any] = {"devices": {"requests": [{"name": CLAIM, "exactly": request}]}}
    if len({d.domain(problem.domain_attribute) for d in devices}) == 1 and devices[0].typed(
        problem.domain_attribute
    ):
        domain = problem.domain_attribute  # the API wants it qualified: a bare name is the driver's
        qualified = domain if "/" in domain else f"{devices[0].driver}/{domain}"
        claim["devices"]["constraints"] = [{"requests": [CLAIM], "matchAttribute": qualified}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": plan_labels(spec.name)},
        # the claims made from it carry the plan's labels: the plan's own devices, not foreign ones
        "spec": {"metadata": {"labels": plan_labels(spec.name)}, "spec": claim},
    }


def _claimed(
    spec: PlanSpec,
    problem: TypeProblem,
    entry: dict[str, Any],
    node: str,
    names: Sequence[str],
    resource: ResourceType,
) -> Flamewaker:
    """An instance entry that gets its GPUs from a claim on its chosen devices, not a card count."""
    # a template's spec cannot change: other devices are another template (a hash of them in the name)
    name = dns_name(entry["name"], short_hash(",".join(names)), limit=253)
    template = _claim_template(spec, name, problem, node, names, resource)
    container = entry.setdefault("containerAttributes", {}).setdefault("resources", {})
    container.setdefault("limits", {}).pop(resource.resource_name, None)
    if not container["limits"]:
        del container["limits"]
    container["claims"] = [{"name": CLAIM}]
    entry.setdefault("podAttributes", {})["resourceClaims"] = [
        {"name": CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    entry["devices"] = list(names)
    return Flamewaker(entry, node, 1, len(names), resource, template)


_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: ~10x faster
_HEAD = "flamewakers:\n"


def _values_yaml(flamewakers: Sequence[Flamewaker]) -> str:
    doc = {"flamewakers": [f.entry for f in flamewakers]}
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=True)


def _split_entries(flamewakers: Sequence[Flamewaker]) -> list[str]:
    """Each entry's text in the values.yaml of all of them, dumped once: ``_HEAD`` + any run of
    them, joined, is the values.yaml of that run (top-level items are the lines starting ``- ``;
    everything nested is indented)."""
    text = _values_yaml(flamewakers)
    assert text.startswith(_HEAD) and text.endswith("\n")
    out: list[str] = []
    for line in text[len(_HEAD) :].splitlines(keepends=True):
        if line.startswith("- ") or not out:
            out.append(line)
        else:
            out[-1] += line
    assert len(out) == len(flamewakers), "values.yaml items do not line up with the entries"
    return out


_TEXTS: dict[str, str] = {}  # an entry (as JSON, key order kept) -> its values.yaml text
_TEXTS_KEPT = 50_000  # entries remembered: a re-plan moves a few, the rest dump from memory


def _entry_texts(kept: Sequence[Kept]) -> list[str]:
    """Each entry's values.yaml text. A re-plan of a 2,500-instance plan changes a handful of
    entries; dumping only those keeps a node cordon's re-plan from re-dumping them all. An entry
    kept from the last render has its text already; any other is looked up by its JSON among
    the texts dumped lately (a render of a changed spec, of a plan rendered before, finds most)."""
    new = [k for k in kept if k.text is None]
    keys = [json.dumps(k.flamewaker.entry, ensure_ascii=False) for k in new]
    missing = {key: k for key, k in zip(keys, new, strict=True) if key not in _TEXTS}
    if missing:
        if len(_TEXTS) + len(missing) > _TEXTS_KEPT:
            _TEXTS.clear()
        dumped = _split_entries([k.flamewaker for k in missing.values()])
        _TEXTS.update(zip(missing, dumped, strict=True))
    for key, k in zip(keys, new, strict=True):
        k.text = _TEXTS[key]
    return [k.text or "" for k in kept]


def values_yaml(spec: PlanSpec, result: PlanResult) -> str:
    """The Ragnaros values.yaml fragment: ``flamewakers: [...]``."""
    return _values_yaml(render_flamewakers(spec, result))


def render_node_labels(spec: PlanSpec, result: PlanResult) -> dict[str, dict[str, str]]:
    """node name -> the labels this plan wants on it (only its own key)."""
    key = plan_label_key(spec.namespace, spec.name)
    return {
        node: {key: node_token(node)} for node in sorted({n for a in result.allocations for n, _ in a.nodes})
    }


def render_priority_classes(
    result: PlanResult,
    kinds: Mapping[str, ResourceKind],
    units: Iterable[int] = (),
    base: int = PRIORITY_BASE,
    priority: int = 0,
) -> list[dict[str, Any]]:
    """PriorityClasses for the instance sizes a plan uses on GPU resources, at the plan's priority.

    ``units``: the cards of each rendered flamewaker entry. A detached link service makes entries
    smaller than their allocation (a 4-card instance becomes a 3-card key service and a 1-card
    link), and every entry names the class of its own size, so those sizes need classes too.
    """
    allocated = {a.units for a in result.allocations if kinds.get(a.resource) is ResourceKind.GPU}
    sizes = sorted(allocated | set(units), reverse=True)
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class_name(n, priority), "labels": dict(MANAGED_BY)},
            "value": priority_value(n, base, priority),
            "globalDefault": False,
            "description": f"Used for {n} gpus pod of plans of priority {priority}: higher plan "
            "priorities, then larger instances, schedule and preempt first."
            if priority
            else f"Used for {n} gpus pod: larger instances schedule and preempt first.",
        }
        for n in sizes
    ]


CONFIGMAP_BYTES = 900 * 1024  # a ConfigMap holds at most 1 MiB; leave room for its metadata


def _configmaps(spec: PlanSpec, kept: Sequence[Kept]) -> list[dict[str, Any]]:
    """The flamewakers ConfigMap; past ~900 KiB of values.yaml, parts ``<plan>-flamewakers-2``, ...

    A plan of a few hundred entries fits one ConfigMap. A datacenter plan (thousands of entries)
    does not, so its entries are cut, in order, into parts that each fit; each part's values.yaml
    is a ``flamewakers:`` list of its own and carries the annotation ``part: "i/n"``.
    """
    chunks: list[list[str]] = [[]]
    size = len(_HEAD)
    for text in _entry_texts(kept):
        entry = len(text.encode())
        if chunks[-1] and size + entry > CONFIGMAP_BYTES:
            chunks.append([])
            size = len(_HEAD)
        chunks[-1].append(text)
        size += entry
    out = []
    for i, chunk in enumerate(chunks, start=1):
        meta: dict[str, Any] = {
            "name": configmap_name(spec.name, i),
            "namespace": spec.namespace,
            "labels": plan_labels(spec.name),
        }
        if len(chunks) > 1:
            meta["annotations"] = {PART_ANNOTATION: f"{i}/{len(chunks)}"}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta,
                "data": {"values.yaml": _HEAD + "".join(chunk) if chunk else _values_yaml([])},
            }
        )
    return out


# Keys of a template's containerAttributes that a generated Deployment's container carries besides
# its resources: what it runs and how it is reached and checked.
CONTAINER_KEYS = ("command", "args", "env", "ports", "readinessProbe", "workingDir")


def _deployments(spec: PlanSpec, kept: Sequence[Kept]) -> list[dict[str, Any]]:
    """Each entry's Deployment: made for those that have none yet (kept entries of the same spec
    made theirs before)."""
    for k in kept:
        if k.deployment is None:
            k.deployment = _deployment(spec, k.flamewaker.entry)
    return [k.deployment for k in kept if k.deployment is not None]


def _deployment(spec: PlanSpec, entry: Mapping[str, Any]) -> dict[str, Any]:
    """One entry's Deployment: its pods as the entry describes them, pinned the same way."""
    pod = entry.get("podAttributes", {})
    attributes = entry.get("containerAttributes", {})
    container: dict[str, Any] = {
        "name": "flamewaker",
        "image": entry.get("image", spec.image),
        "resources": copy.deepcopy(attributes.get("resources", {})),
    }
    # what the template says the container runs (the Ragnaros chart's own container keys)
    for key in CONTAINER_KEYS:
        if key in attributes:
            container[key] = copy.deepcopy(attributes[key])
    selector = {PLAN_LABEL: fit(spec.name, 63), FLAMEWAKER_LABEL: entry["name"]}
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "nodeSelector": pod.get("nodeSelector", {}),
    }
    for key in ("priorityClassName", "tolerations", "resourceClaims", "schedulingGates"):
        if key in pod:
            pod_spec[key] = pod[key]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": entry["name"],
            "namespace": spec.namespace,
            "labels": plan_labels(spec.name),
        },
        "spec": {
            "replicas": int(entry.get("instanceNumber", 1)) * int(entry.get("replica", 1)),
            # replace, never roll: a resized instance on a full node cannot surge beside
            # its old pod, and a smaller one cannot preempt it
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector | MANAGED_BY},
                "spec": pod_spec,
            },
        },
    }


@dataclass(frozen=True)
class Desired:
    """Everything a feasible plan wants in the cluster."""

    node_labels: dict[str, dict[str, str]] = field(hash=False)
    label_key: str
    priority_classes: list[dict[str, Any]] = field(hash=False)
    configmaps: list[dict[str, Any]] = field(hash=False)  # one, or parts of a very large plan
    deployments: list[dict[str, Any]] = field(hash=False)
    claim_templates: list[dict[str, Any]] = field(default_factory=list, hash=False)  # DRA: per instance
    # the entries as rendered, by key, for the next render of the same spec (not compared)
    kept: Mapping[EntryKey, Kept] = field(default_factory=dict, hash=False, compare=False, repr=False)


def render_desired(
    spec: PlanSpec, result: PlanResult, priority_base: int = PRIORITY_BASE, like: Desired | None = None
) -> Desired:
    """Everything the plan wants in the cluster (the flamewaker entries are rendered once).

    ``priority_base``: the value of a 0-card class; an N-card class is ``base + N·1000``.
    ``like``: what an earlier call rendered from the same ``spec`` and ``priority_base`` (the
    caller's promise): every entry rendered from the same pod group is taken from it, with its
    values.yaml text and its Deployment, the very objects. A cordon moves a few of a 2,500-entry
    plan's instances; rendering them all again took 0.25-0.4 s of the re-plan's cycle. The
    objects returned are shared with ``like``: nobody may change them in place."""
    kinds = {r.name: r.kind for r in spec.resources}
    kept = _render_entries(spec, result, like.kept if like is not None else {})
    flamewakers = [k.flamewaker for k in kept]
    gpu_units = [f.units for f in flamewakers if f.resource.kind is ResourceKind.GPU]
    return Desired(
        node_labels=render_node_labels(spec, result),
        label_key=plan_label_key(spec.namespace, spec.name),
        priority_classes=render_priority_classes(result, kinds, gpu_units, priority_base, spec.priority),
        configmaps=_configmaps(spec, kept),
        deployments=_deployments(spec, kept) if spec.deploy else [],
        claim_templates=[f.claim_template for f in flamewakers if f.claim_template is not None],
        kept={k.key: k for k in kept if k.key is not None},
    )


def render_key(spec: PlanSpec, result: PlanResult) -> tuple[Any, ...] | None:
    """All of ``result`` that :func:`render_desired` reads, for a given ``spec``: two results with
    the same key render the same objects. Where the placement stays and only the scores change
    (a cordon elsewhere changes every plan's score), a caller keeping what it rendered last can
    skip rendering thousands of entries again. None when the output also depends on the nodes
    themselves, which the result does not carry: the devices of a DRA claim (their attributes)
    and a CPU request sized from a node's or NUMA zone's CPUs (``numaShare``)."""
    for a in result.allocations:
        cpu = spec.operator(a.operator).cpu_request
        if a.devices or (cpu is not None and cpu.millicores is None):  # numaShare: the node's CPUs
            return None
    placement = tuple(
        (a.operator, a.resource, a.strategy, a.instances, a.units, a.nodes, a.straddling, a.zones)
        for a in result.allocations
    )  # not ``term``: a score is not rendered
    return placement, tuple(sorted(p.resource.name for p in result.problems if p.any_node))


def render_manifests(
    spec: PlanSpec, result: PlanResult, priority_base: int = PRIORITY_BASE
) -> list[dict[str, Any]]:
    """Every object the operator would write, node labels as Node patches, in apply order."""
    desired = render_desired(spec, result, priority_base)
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels}}
        for n, labels in desired.node_labels.items()
    ]
    return [
        *nodes,
        *desired.priority_classes,
        *desired.configmaps,
        *desired.claim_templates,
        *desired.deployments,
    ]
