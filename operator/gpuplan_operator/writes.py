"""Pure: the writes one apply (or one clean-up) must make, from the desired state and a read.

Notes
-----
The operator's flow runs one way: read the cluster, compute the writes (here, no I/O), perform
them (:mod:`.apply`), write status. Computing the writes as values makes "a re-run on an unchanged
plan writes nothing" a property of a pure function, testable without a cluster.

Order matters, for the cards and for crashes, so every write carries its :class:`Step`:

1. Deployments the plan no longer wants go first, so their pods free the cards the new placement
   may need (kube-scheduler retries pending pods when pods are deleted).
2. Node labels the new placement needs, then PriorityClasses, the ConfigMap and Deployments: a
   pod is never created before the label and class it refers to exist.
3. Labels the plan no longer needs are removed last; then PriorityClasses no plan uses any more.

Writes of one step do not depend on each other, so :mod:`.apply` may send them together; nor do
some steps, so it sends those together too (:func:`wave`): what must come first is only what a
pod needs and what frees cards, not the listing order above. Every
write is computed by comparing first (:func:`~.diff.covers`), so a crash anywhere is repaired by
the next reconcile with no duplicates and nothing stale. A Deployment or ConfigMap of the same name
that another controller owns is never taken over: :class:`OwnershipConflict` names the owner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from itertools import groupby
from typing import Any

import msgspec

from gpuplan_operator.body import PlanBody
from gpuplan_operator.diff import covers, foreign_owner, node_label_changes, with_owner
from gpuplan_operator.memo import Memo
from planner import CLAIM_TEMPLATE, CONFIGMAP, DEPLOYMENT, MANAGED_BY, NODE, PRIORITY_CLASS, Desired


class Step(IntEnum):
    """When a write happens; lower first. Writes of one step are independent."""

    DROP = 1  # Deployments and ConfigMap parts the plan no longer wants
    LABEL_NODES = 2
    PRIORITY_CLASSES = 3
    CONFIGMAP = 4
    CLAIM_TEMPLATES = 5  # DRA: the claims that pin each instance to its devices, before its pod
    DEPLOYMENTS = 6
    UNLABEL_NODES = 7
    PRUNE_PRIORITY_CLASSES = 8


_WAVES = {
    Step.DROP: 1,  # cards free before anything may take them
    Step.LABEL_NODES: 2,  # what a pod refers to: its node's label, its class, its claims ...
    Step.PRIORITY_CLASSES: 2,
    Step.CLAIM_TEMPLATES: 2,
    Step.CONFIGMAP: 3,  # ... before what makes pods: Ragnaros (from values.yaml) or Deployments;
    Step.DEPLOYMENTS: 3,  # neither reads the other
    Step.UNLABEL_NODES: 4,  # what no pod refers to any more, once the new ones are written
    Step.PRUNE_PRIORITY_CLASSES: 4,
}


def wave(step: Step) -> int:
    """The round of writes a step goes out in. A round starts when the one before it has landed;
    the steps of one round do not depend on each other, so their writes are sent together."""
    return _WAVES[step]


def cleans_up(step: Step) -> bool:
    """Does the step remove what no pod refers to any more (the last round)? A cycle that writes
    several plans sends these once every plan's new instances are written: they free nothing a
    pod waits for, and sent beside another plan's Deployments they only slow them."""
    return _WAVES[step] == _WAVES[Step.UNLABEL_NODES]


def frees_or_prepares(step: Step) -> bool:
    """Is the step one the hand-over sends before any plan's new instances: what frees cards
    (:data:`Step.DROP`), and what pods will refer to but takes none (classes, claim templates)?
    Sending the classes beside another plan's drops, not in a round after them, starts a
    higher-priority plan's Deployments one round trip sooner."""
    return step in (Step.DROP, Step.PRIORITY_CLASSES, Step.CLAIM_TEMPLATES)


def paired_wave(step: Step) -> int:
    """:func:`wave` for a plan that makes its pods with Deployments: its nodes' labels go out with
    its Deployments, not a round before (a higher-priority plan's 250 nodes labelled and its 250
    Deployments written took 4.6 s and 3.8 s, one after the other, at 1,000 nodes). A pod needs
    its node's label to be scheduled, not to be created: a gated pod is not scheduled before its
    gate is lifted, which waits for the label (the release finds a pod's node by it), and a
    Deployment of a plan without the gate is sent only once the labels it selects have landed
    (:func:`~gpuplan_operator.apply.perform`, ``after_labels``). PriorityClasses and claim
    templates still go first: a pod naming one that does not exist is refused at creation."""
    return _WAVES[Step.DEPLOYMENTS] if step is Step.LABEL_NODES else _WAVES[step]


def in_order(writes: Iterable[Write], waves: Callable[[Step], int] = wave) -> list[Write]:
    """``writes`` in the order they are sent: wave by wave (``waves``), step by step inside a
    wave, except that a wave carrying both node labels and Deployments (:func:`paired_wave`) sends
    each label just before the first Deployment whose pods select it: with a few writes in
    flight at a time, a new plan's first pods then exist, labelled and ready for their gates, a
    moment after its writes begin, not once its hundreds of labels have all gone out."""
    ordered = sorted(writes, key=lambda w: (waves(w.step), w.step))
    out: list[Write] = []
    for _, group in groupby(ordered, key=lambda w: waves(w.step)):
        batch = list(group)
        labels = [w for w in batch if w.step is Step.LABEL_NODES]
        if not labels or not any(w.step is Step.DEPLOYMENTS for w in batch):
            out.extend(batch)
            continue
        by_value: dict[tuple[str, str], list[Write]] = {}
        for w in labels:
            for pair in sets(w):
                by_value.setdefault(pair, []).append(w)
        sent: set[int] = set()
        rest = [w for w in batch if w.step is not Step.LABEL_NODES]
        for w in rest:
            if w.step is Step.DEPLOYMENTS:
                for pair in selects(w):
                    for label in by_value.pop(pair, ()):
                        if id(label) not in sent:
                            sent.add(id(label))
                            out.append(label)
            out.append(w)
        out.extend(w for w in labels if id(w) not in sent)  # selected by no Deployment
    return out


def sets(write: Write) -> list[tuple[str, str]]:
    """The node labels a label write sets (a removal sets none)."""
    return [(key, value) for key, value in (write.labels or {}).items() if value is not None]


def selects(write: Write) -> list[tuple[str, str]]:
    """The node labels a Deployment's pods select (its template's ``nodeSelector``)."""
    spec = ((((write.manifest or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
    selector = spec.get("nodeSelector") or {}
    return [(str(k), str(v)) for k, v in selector.items()] if isinstance(selector, Mapping) else []


class Verb(StrEnum):
    APPLY = "apply"  # server-side apply of a whole manifest the operator owns
    CREATE = "create"  # a new Deployment, created whole (cheaper than an apply; applied from then on)
    LABEL = "label"  # merge patch naming only plan label keys (None removes one): see carry_unlabels
    DELETE = "delete"


@dataclass(frozen=True)
class Write:
    step: Step
    verb: Verb
    kind: str
    name: str
    namespace: str | None = None
    manifest: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    labels: Mapping[str, str | None] | None = None
    # a Deployment's manifest as rendered, before its owner was added (:func:`_covered`)
    rendered: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Observed:
    """What the cluster holds of what one plan writes, read just before the writes are computed."""

    nodes: Sequence[Mapping[str, Any]]  # nodes whose plan label key is compared
    deployments: Mapping[str, Mapping[str, Any]]  # by name: the plan's, and any of a name it wants
    configmaps: Mapping[str, Mapping[str, Any]]  # by name: the plan's, and any of a name it wants
    priority_classes: Mapping[str, Mapping[str, Any]]  # by name, every PriorityClass
    claim_templates: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # the plan's, by name


class OwnershipConflict(Exception):
    """An object the plan would write belongs to someone else."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _managed(obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in MANAGED_BY.items())


def _prune(observed: Observed, keep: Iterable[str]) -> list[Write]:
    """Delete the PriorityClasses gpuplan created that no plan uses any more."""
    keep = set(keep)
    return [
        Write(Step.PRUNE_PRIORITY_CLASSES, Verb.DELETE, PRIORITY_CLASS, name)
        for name, pc in sorted(observed.priority_classes.items())
        if name not in keep and _managed(pc)
    ]


def unlabel_writes(key: str, nodes: Iterable[str]) -> list[Write]:
    """The plan label ``key`` removed from ``nodes``."""
    return [Write(Step.UNLABEL_NODES, Verb.LABEL, NODE, n, labels={key: None}) for n in nodes]


@dataclass(frozen=True)
class Carried:
    """One plan's label removal sent in another plan's label patch of the same node."""

    giver: int  # the index of the plan whose key leaves the node
    unlabel: Write  # that removal, as the giver's writes computed it
    taker: int  # the index of the plan that labels the node
    label: Write  # the taker's patch, naming both keys


def carry_unlabels(plans: Sequence[Sequence[Write]]) -> tuple[list[list[Write]], list[Carried]]:
    """Each plan's writes, with a plan's label removal folded into another plan's label patch of
    the same node (a node that passes from one plan to another), and what was folded where.

    In a hand-over the plan that gives a node up removes its key and the plan that takes the node
    sets its own: two patches of one node, the first sent last in the cycle (it frees nothing a
    pod waits for). One patch that sets the one key and removes the other does both, at no cost
    to the order: the giver's Deployments there are gone before any taker writes a label (the
    cycle sends every plan's drops first), and nothing of the giver selects that key on that node
    any more. At 1,000 nodes a higher-priority plan taking 49 nodes from a shrinking one sent 300
    node patches where one per node changed, 250, do. Call it only with plans whose drops have all
    landed."""
    labels: dict[str, tuple[int, int]] = {}  # node -> (plan, write) of the first label patch
    for i, writes in enumerate(plans):
        for j, w in enumerate(writes):
            if w.step is Step.LABEL_NODES and w.kind == NODE and w.labels:
                labels.setdefault(w.name, (i, j))
    folded: dict[tuple[int, int], list[tuple[int, Write]]] = {}
    for i, writes in enumerate(plans):
        for w in writes:
            at = labels.get(w.name) if w.step is Step.UNLABEL_NODES and w.kind == NODE else None
            if at is not None and at[0] != i and w.labels:  # keys are a plan's own: never shared
                folded.setdefault(at, []).append((i, w))
    carried: list[Carried] = []
    merged: dict[tuple[int, int], Write] = {}
    for (t, j), removals in folded.items():
        label = plans[t][j]
        keys = dict(label.labels or {})
        for _, w in removals:
            keys.update(w.labels or {})
        merged[(t, j)] = replace(label, labels=keys)
        carried += [Carried(i, w, t, merged[(t, j)]) for i, w in removals]
    gone = {id(c.unlabel) for c in carried}
    out = [
        [merged.get((i, j), w) for j, w in enumerate(writes) if id(w) not in gone]
        for i, writes in enumerate(plans)
    ]
    return out, carried


def _drop_owned(
    plan: PlanBody, objects: Mapping[str, Any], wanted: Iterable[str], kind: str, step: Step
) -> list[Write]:
    """Delete the plan's own objects of one kind that it no longer wants (by name)."""
    keep = set(wanted)
    return [
        Write(step, Verb.DELETE, kind, name, plan.namespace)
        for name, obj in sorted(objects.items())
        if name not in keep and _owned_by(obj, plan.uid)
    ]


def _drop_deployments(plan: PlanBody, observed: Observed, wanted: Iterable[str]) -> list[Write]:
    return _drop_owned(plan, observed.deployments, wanted, DEPLOYMENT, Step.DROP)


def _drop_configmaps(plan: PlanBody, observed: Observed, wanted: Iterable[str]) -> list[Write]:
    """The plan's ConfigMaps it no longer wants (a large plan that shrank to fewer parts)."""
    return _drop_owned(plan, observed.configmaps, wanted, CONFIGMAP, Step.DROP)


def _drop_claim_templates(plan: PlanBody, observed: Observed, wanted: Iterable[str]) -> list[Write]:
    """Templates of devices the plan no longer uses (after their pods: claims already made stay
    with their pods until those go)."""
    return _drop_owned(plan, observed.claim_templates, wanted, CLAIM_TEMPLATE, Step.UNLABEL_NODES)


# (namespace/name, uid, version) -> the desired manifest as rendered and its digest: 50,000
# comparisons (a few MB), a re-plan repeats nearly all of the last one's
_COVERED: Memo[tuple[str, str, bytes], tuple[Mapping[str, Any], bytes]] = Memo(50_000)
# JSON with map keys sorted: a version or a manifest encodes the same whatever its key order;
# msgspec encodes a Deployment in a tenth of the time the standard library's encoder takes
_ENCODE = msgspec.json.Encoder(order="sorted")


def _version(meta: Mapping[str, Any], desired: Mapping[str, Any]) -> bytes | None:
    """What of an object's version :func:`~.diff.covers` reads against ``desired`` (its metadata):
    the spec's generation, and the labels, annotations and owners that ``desired`` sets, which are
    all it compares (not the status: a Deployment's moves with every pod, and its resourceVersion
    with it; not an annotation ``desired`` does not set: the Deployment controller adds its
    revision after a create). None without a generation (then nothing is remembered)."""
    generation = meta.get("generation")
    if generation is None:
        return None
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    owners = {str(o.get("uid")) for o in desired.get("ownerReferences") or [] if isinstance(o, Mapping)}
    parts = (
        generation,
        {k: labels.get(k) for k in desired.get("labels") or {}},
        {k: notes.get(k) for k in desired.get("annotations") or {}},
        [
            o
            for o in meta.get("ownerReferences") or []
            if isinstance(o, Mapping) and str(o.get("uid")) in owners
        ],
    )
    try:
        return _ENCODE.encode(parts)
    except (TypeError, msgspec.EncodeError):
        return None


def _covered(
    actual: Mapping[str, Any], desired: Mapping[str, Any], rendered: Mapping[str, Any] | None = None
) -> bool:
    """:func:`~.diff.covers`, remembered for an object version (:func:`_version`) and a desired
    manifest (the digest of its JSON) it was found to cover. A re-plan compares all of a plan's
    Deployments again, nearly all unchanged on both sides: at 2,480 of them that was seconds of a
    cordon's cycle, where encoding each desired manifest takes milliseconds for them all. An
    object whose spec or the metadata the operator sets changed since (another writer) is
    compared afresh; one whose status alone changed (the Deployment controller, after every pod)
    is not.

    ``rendered``: the manifest as rendered, before the owner was added to make ``desired``. The
    renderer hands the very object again for an entry it did not render again (a cordon's
    re-plan: all but a few), so when it is the one remembered, ``desired`` is not even encoded:
    a manifest is never changed in place once rendered."""
    meta = actual.get("metadata") or {}
    version = _version(meta, desired.get("metadata") or {})
    if version is None:
        return covers(actual, desired)
    key = (f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("uid")), version)
    known = _COVERED.get(key)
    if known is not None and rendered is not None and known[0] is rendered:
        return True
    try:
        digest = hashlib.sha256(_ENCODE.encode(desired)).digest()
    except (TypeError, msgspec.EncodeError):  # not plain JSON: compare it the long way
        return covers(actual, desired)
    if (known is None or known[1] != digest) and not covers(actual, desired):
        return False
    _COVERED.put(key, (rendered if rendered is not None else desired, digest))
    return True


def remember_applied(write: Write, obj: Mapping[str, Any] | None) -> None:
    """A write landed and the API server returned ``obj``: when it applied a Deployment, the
    comparison of that object with the manifest is made now and remembered (:func:`_covered`),
    so the next re-plan does not compare it again. Without this, the first cordon after a new
    plan's deploy compared every one of its Deployments (0.4-0.5 s of a 3.4 s cordon at 2,480):
    nothing had been compared before, the apply having found them all missing."""
    if (
        obj is not None
        and write.verb in (Verb.APPLY, Verb.CREATE)
        and write.kind == DEPLOYMENT
        and write.manifest is not None
    ):
        _covered(obj, write.manifest, write.rendered)


def apply_writes(
    plan: PlanBody, desired: Desired, observed: Observed, in_use_elsewhere: Iterable[str]
) -> list[Write]:
    """Everything that must change for the cluster to hold ``desired``, in step order."""
    owner = plan.owner_reference()
    rendered = {d["metadata"]["name"]: d for d in desired.deployments}
    wanted = {name: with_owner(d, owner) for name, d in rendered.items()}
    parts = {c["metadata"]["name"]: with_owner(c, owner) for c in desired.configmaps}
    writes = _drop_deployments(plan, observed, wanted) + _drop_configmaps(plan, observed, parts)

    labels = node_label_changes(list(observed.nodes), desired.node_labels, desired.label_key)
    writes += [
        Write(Step.LABEL_NODES, Verb.LABEL, NODE, node, labels={desired.label_key: value})
        for node, value in sorted(labels.set.items())
    ]
    for pc in desired.priority_classes:
        name = pc["metadata"]["name"]
        actual = observed.priority_classes.get(name)
        if actual is None or not covers(actual, pc):
            writes.append(Write(Step.PRIORITY_CLASSES, Verb.APPLY, PRIORITY_CLASS, name, manifest=pc))

    for name, cm in parts.items():
        other = foreign_owner(observed.configmaps.get(name), plan.uid)
        if other:
            raise OwnershipConflict(CONFIGMAP, f"ConfigMap {plan.namespace}/{name} belongs to {other}")
        actual = observed.configmaps.get(name)
        if actual is None or not covers(actual, cm):
            writes.append(Write(Step.CONFIGMAP, Verb.APPLY, CONFIGMAP, name, plan.namespace, cm))

    templates = {t["metadata"]["name"]: with_owner(t, owner) for t in desired.claim_templates}
    for name, t in templates.items():
        if name not in observed.claim_templates:  # a template's spec never changes: its name says it
            writes.append(Write(Step.CLAIM_TEMPLATES, Verb.APPLY, CLAIM_TEMPLATE, name, plan.namespace, t))
    writes += _drop_claim_templates(plan, observed, templates)

    for name, dep in wanted.items():
        actual = observed.deployments.get(name)
        other = foreign_owner(actual, plan.uid)
        if other:
            raise OwnershipConflict(DEPLOYMENT, f"Deployment {plan.namespace}/{name} belongs to {other}")
        if actual is not None and _covered(actual, dep, rendered[name]):
            continue
        verb = Verb.CREATE if actual is None else Verb.APPLY
        writes.append(
            Write(Step.DEPLOYMENTS, verb, DEPLOYMENT, name, plan.namespace, dep, rendered=rendered[name])
        )

    writes += unlabel_writes(plan.label_key, labels.remove)
    keep = set(in_use_elsewhere) | {pc["metadata"]["name"] for pc in desired.priority_classes}
    return writes + _prune(observed, keep)


def cleanup_writes(plan: PlanBody, observed: Observed, in_use_elsewhere: Iterable[str]) -> list[Write]:
    """Everything the plan wrote, gone: Deployments, the ConfigMap, labels, unused classes."""
    writes = _drop_deployments(plan, observed, ()) + _drop_configmaps(plan, observed, ())
    writes += _drop_claim_templates(plan, observed, ())
    labelled = [
        str(n["metadata"]["name"])
        for n in observed.nodes
        if plan.label_key in ((n.get("metadata") or {}).get("labels") or {})
    ]
    return writes + unlabel_writes(plan.label_key, labelled) + _prune(observed, in_use_elsewhere)


@dataclass
class Changes:
    """What one apply or clean-up wrote, for Events and logs."""

    labelled: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)
    priority_classes: list[str] = field(default_factory=list)
    priority_classes_deleted: list[str] = field(default_factory=list)
    configmap: bool = False
    configmap_deleted: bool = False
    deployments: list[str] = field(default_factory=list)
    deployments_deleted: list[str] = field(default_factory=list)
    claim_templates: list[str] = field(default_factory=list)
    claim_templates_deleted: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, writes: Iterable[Write]) -> Changes:
        out = cls()
        for w in writes:
            deleting = w.verb is Verb.DELETE
            if w.kind == NODE:
                # a patch that sets the plan's key is its label, whatever other plan's key it also
                # removes (:func:`carry_unlabels`)
                (out.labelled if sets(w) else out.unlabelled).append(w.name)
            elif w.kind == PRIORITY_CLASS:
                (out.priority_classes_deleted if deleting else out.priority_classes).append(w.name)
            elif w.kind == DEPLOYMENT:
                (out.deployments_deleted if deleting else out.deployments).append(w.name)
            elif w.kind == CLAIM_TEMPLATE:
                (out.claim_templates_deleted if deleting else out.claim_templates).append(w.name)
            elif w.kind == CONFIGMAP:
                out.configmap_deleted |= deleting
                out.configmap |= not deleting
        return out

    def __bool__(self) -> bool:
        return any(vars(self).values())

    def describe(self) -> str:
        parts = []
        for label, items in (
            ("labelled nodes", self.labelled),
            ("unlabelled nodes", self.unlabelled),
            ("applied priority classes", self.priority_classes),
            ("deleted priority classes", self.priority_classes_deleted),
            ("applied deployments", self.deployments),
            ("deleted deployments", self.deployments_deleted),
            ("applied resource claim templates", self.claim_templates),
            ("deleted resource claim templates", self.claim_templates_deleted),
        ):
            if items:
                parts.append(f"{label}: {_names(items)}")
        if self.configmap:
            parts.append("applied the flamewakers ConfigMap")
        if self.configmap_deleted:
            parts.append("deleted the flamewakers ConfigMap")
        return "; ".join(parts) or "no changes"


def _names(items: Sequence[str], limit: int = 10) -> str:
    """Names for an event: the first few and how many more (events hold 1 kB)."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"
