"""Pure: which gated pods may start now (all-or-nothing deploys, ``spec.gang: plan``). No I/O.

Notes
-----
A plan's pods are created with the scheduling gate ``gpuplan.ragnaros.io/gang``; kube-scheduler
leaves a gated pod alone. This module decides, from plain cluster data, whose gates to lift:

- **Together or not at all, as soon as each pod exists.** A gated pod of the plan is released
  when it appears, once the whole plan can start: every node of the plan's placement (its
  ``status.applied.units``) has the free cards for all of the plan's instances planned there that
  no pod holds yet, the gated ones and the ones its controllers have not created yet alike. Free
  is allocatable minus the requests of every bound pod, Terminating ones included (a leaving pod
  holds its cards until it is gone), minus what released pods not bound yet will take. The pod's
  own node is the one node its ``nodeSelector`` matches (the plan's label pins it). Otherwise the
  plan is ``Waiting``, with the node, the resource, the cards it needs and the cards free. So
  nothing of the plan starts unless all of it can, and its pods are scheduled while the rest are
  still being created (waiting for the last pod to exist would add the creation of every pod to
  the time the first one starts).
- **A recreated pod goes alone.** A gated pod of an instance set (its ReplicaSet, or the pod
  itself for pods Ragnaros makes) that has started before (a pod deleted, a node lost, a release
  half done when the operator died) is released by itself as soon as its node has room. Started
  means a sibling is released or was seen released by this operator (so two pods deleted at once
  do not wait for each other). A re-plan that moves instances makes new ReplicaSets, whose pods
  form a new group.
- **One ledger for everyone.** Plans are decided against one ledger of free cards, and each
  release takes its cards from it, with the cards of the plan's pods still to come: two plans are
  never released onto the same cards. A plan that has started goes first (the cards its pods still
  to come count on are its own), then the others by their oldest gated pod. A group that cannot
  start holds nothing back (no partial reservation that could deadlock two plans).
- **Safety net.** A released pod still not bound ``timeout`` seconds after its release, on a
  node now asked for more cards than it has, means something took its cards in between: the plan
  is ``TimedOut`` and should be re-planned around it. While its node still has its cards the pod
  is only waiting for kube-scheduler (thousands of pods released at once take minutes to bind on
  a small control plane), and re-planning would only start the wait again.
  A group still waiting ``timeout`` seconds after its pods were created (something the plan did
  not count holds the cards: a pod bound by hand, a claim) is ``stuck``: it stays ``Waiting`` and
  is re-planned too, so the plan routes around what holds the cards rather than wait for it.

Everything is recomputed from the cluster each time (the release time is an annotation on the
pod), so an operator restarted in the middle of a release finishes it. The one thing remembered,
which instance sets started, only lets a recreated pod go sooner: forgotten (a restart), the pod
waits for its whole plan to fit, as a new one would. The outcome codes are the
status reason, the Event reason and the metric label alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Any

from gpuplan_operator.gang_devices import DeviceShortfall
from gpuplan_operator.memo import Memo
from planner import (
    GANG_GATE,
    PLAN_LABEL,
    RELEASED_ANNOTATION,
    InvalidInput,
    is_plan_label_key,
    parse_quantity,
    pod_requests,
)

Units = dict[str, int]  # resource name -> units (cpu in millicores)


class GangCode(StrEnum):
    """What a decision says about a plan (status reason, Event reason, metric label)."""

    RELEASED = "Released"  # every gated pod of the plan released together
    RECREATED = "Recreated"  # a pod of an instance set that had started, released on its own
    WAITING = "Waiting"  # some planned node lacks the cards: nothing of the group starts
    TIMED_OUT = "TimedOut"  # released pods not bound within the timeout: re-plan around the thief
    IDLE = "Idle"  # nothing gated, nothing overdue


def parse_time(text: Any) -> float | None:
    """RFC 3339 (``2026-01-02T03:04:05Z``) as epoch seconds; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class GangPod:
    """A pod as the decision sees it."""

    namespace: str
    name: str
    # its plan: ``namespace/name`` for a pod carrying the plan's label (Deployments), else the plan's
    # node label key its nodeSelector names (pods Ragnaros makes from values.yaml); None: no plan's
    group: str | None
    unit: str  # what makes it (its ReplicaSet): siblings share it
    gated: bool  # carries the gang gate
    bound: str | None  # spec.nodeName
    planned: str | None  # the one node its nodeSelector matches, if exactly one does
    requests: Mapping[str, int] = field(hash=False)
    terminating: bool = False
    released: float | None = None  # when the operator lifted its gate
    created: float | None = None
    resource_version: str = ""
    claims: bool = False  # takes GPUs from ResourceClaims (DRA): :mod:`.gang_devices` checks them

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def unit_key(self) -> str:
        """``namespace/unit``: its instance set, cluster-wide."""
        return f"{self.namespace}/{self.unit}"

    @property
    def target(self) -> str | None:
        """The node whose cards it holds or will take."""
        return self.bound or self.planned


class NodeIndex:
    """Nodes by label, to find the one node a pod's ``nodeSelector`` pins it to."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        self.allocatable: dict[str, Units] = {}
        self._by_label: dict[tuple[str, str], list[str]] = {}
        self._labels: dict[str, Mapping[str, str]] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            name = str(meta.get("name"))
            labels = meta.get("labels") or {}
            self._labels[name] = labels
            for kv in labels.items():
                self._by_label.setdefault(kv, []).append(name)
            alloc = (node.get("status") or {}).get("allocatable") or {}
            self.allocatable[name] = _allocatable(alloc)

    def pinned(self, selector: Mapping[str, str]) -> str | None:
        if not selector:
            return None
        candidates = min((self._by_label.get(kv, []) for kv in selector.items()), key=len)
        found = [n for n in candidates if all(self._labels[n].get(k) == v for k, v in selector.items())]
        return found[0] if len(found) == 1 else None


def _units(pairs: Iterable[tuple[str, Any]]) -> Units:
    out: Units = {}
    for k, v in pairs:
        try:
            out[k] = parse_quantity(v, k, k)
        except InvalidInput:
            continue  # the API server validates quantities; an odd one counts as nothing
    return out


# a node's allocatable -> its units: 10,000 distinct allocatables
_ALLOCATABLE: Memo[tuple[tuple[str, Any], ...], Units] = Memo(10_000)


def _allocatable(alloc: Mapping[str, Any]) -> Units:
    """A node's allocatable as units, remembered by its text: every round indexes every node,
    and a cluster's nodes share a handful of shapes (parsing each node's quantities each round
    was a tenth of the operator's CPU through a thousand-node deploy). Read only: callers copy."""
    key = tuple(alloc.items())
    try:
        known = _ALLOCATABLE.get(key)
    except TypeError:  # a value that is not text (the API server would not store it): no memo
        return _units(key)
    if known is None:
        known = _ALLOCATABLE.put(key, _units(key))
    return known


def is_gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GANG_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def unit_of(pod: Mapping[str, Any]) -> str:
    """What makes the pod (``kind/name`` of its controller, its ReplicaSet): siblings share it."""
    meta = pod.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    return f"{owners[0].get('kind')}/{owners[0].get('name')}" if owners else f"Pod/{meta.get('name')}"


Selector = tuple[tuple[str, str], ...]  # a pod's nodeSelector, sorted


# (uid, version) -> the pod read: 50,000 pods (each a few hundred bytes)
_READ: Memo[tuple[str, str], tuple[GangPod, Selector]] = Memo(50_000)


def read_pod(pod: Mapping[str, Any], nodes: NodeIndex) -> GangPod:
    """The pod as the decision sees it: :func:`read_own`, then :func:`placed` on ``nodes``."""
    return placed(*read_own(pod), nodes)


def read_own(pod: Mapping[str, Any]) -> tuple[GangPod, Selector]:
    """What the decision reads from the pod alone (``planned`` left None), and its nodeSelector.
    Remembered for its uid and resourceVersion: a round reads every gated, released and bound
    pod again, and during a thousand-pod deploy the rounds come every second or two with few pods
    changed in between (reading them, their requests' quantities above all, was a fifth of the
    operator's CPU)."""
    meta = pod.get("metadata") or {}
    key = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
    known = _READ.get(key) if all(key) else None
    if known is None:
        known = _read_pod(pod)
        if all(key):
            _READ.put(key, known)
    return known


def placed(read: GangPod, selector: Selector, nodes: NodeIndex) -> GangPod:
    """``read`` with the node its selector pins it to, looked up each round (node labels change
    apart from pods); a bound pod's node is its own."""
    if read.bound or not selector:
        return read
    return dataclasses.replace(read, planned=nodes.pinned(dict(selector)))


def _read_pod(pod: Mapping[str, Any]) -> tuple[GangPod, Selector]:
    """:func:`read_own`, not remembered."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    try:
        requests = pod_requests(pod)
    except InvalidInput:
        requests = {}
    bound = spec.get("nodeName") or None
    plan = (meta.get("labels") or {}).get(PLAN_LABEL)
    selector = spec.get("nodeSelector") or {}
    keys = sorted(k for k in selector if is_plan_label_key(k))
    read = GangPod(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        group=f"{meta.get('namespace')}/{plan}" if plan else (keys[0] if keys else None),
        unit=unit_of(pod),
        gated=is_gated(pod),
        bound=bound,
        planned=None,
        requests=requests,
        terminating=bool(meta.get("deletionTimestamp")),
        released=parse_time((meta.get("annotations") or {}).get(RELEASED_ANNOTATION)),
        created=parse_time(meta.get("creationTimestamp")),
        resource_version=str(meta.get("resourceVersion") or ""),
        claims=bool(spec.get("resourceClaims")),
    )
    return read, tuple(sorted((str(k), str(v)) for k, v in selector.items()))


def _holds(pod: GangPod) -> bool:
    """Does the pod hold (or is about to take) cards on a node?"""
    if pod.bound:
        return True  # bound, Terminating or not: the kubelet has not given its cards back
    return not pod.gated and not pod.terminating and pod.released is not None and pod.planned is not None


class Ledger:
    """Free units per node: allocatable minus what pods hold; a release takes from it."""

    def __init__(self, nodes: NodeIndex, pods: Iterable[GangPod]) -> None:
        self.free: dict[str, Units] = {n: dict(a) for n, a in nodes.allocatable.items()}
        for pod in pods:
            node = pod.target
            if node is not None and node in self.free and _holds(pod):
                self._take(node, pod.requests)
        # nodes asked for more than they have by the pods bound and released there: something
        # took the cards a released pod counted on (what a release takes never goes below zero)
        self.over = frozenset(n for n, free in self.free.items() if any(v < 0 for v in free.values()))

    def _take(self, node: str, requests: Mapping[str, int]) -> None:
        slot = self.free[node]
        for k, v in requests.items():
            slot[k] = slot.get(k, 0) - v

    def short(self, node: str, requests: Mapping[str, int]) -> list[tuple[str, int, int]]:
        """(resource, needed, free) for every resource the node lacks; empty when it all fits."""
        slot = self.free.get(node, {})
        return [(k, v, slot.get(k, 0)) for k, v in sorted(requests.items()) if v > slot.get(k, 0)]

    def take(self, node: str, requests: Mapping[str, int]) -> None:
        if node in self.free:
            self._take(node, requests)


@dataclass(frozen=True)
class Shortfall:
    """A planned node that lacks what its gated pods need."""

    node: str
    resource: str
    needed: int
    free: int
    pods: tuple[str, ...]

    def text(self) -> str:
        if not self.node:
            return f"{', '.join(self.pods)}: no single node matches the pod's nodeSelector"
        unit = "millicores " if self.resource == "cpu" else ""
        return f"{self.node} needs {self.needed} {unit}{self.resource}, {max(self.free, 0)} free"


@dataclass(frozen=True)
class Release:
    pod: GangPod
    code: GangCode  # RELEASED (with its group) or RECREATED (alone)
    waited: float  # seconds from the pod's creation to its release


@dataclass(frozen=True)
class GangDecision:
    """What to do about one plan's gates now, and why."""

    plan: str  # namespace/name (or, for pods without the plan's label, the plan's node label key)
    code: GangCode
    releases: tuple[Release, ...] = ()
    short: tuple[Shortfall | DeviceShortfall, ...] = ()
    overdue: tuple[GangPod, ...] = ()
    gated: int = 0  # gated pods before this decision
    stuck: bool = False  # WAITING and its group has waited longer than the timeout: re-plan it

    @property
    def message(self) -> str:
        if self.code is GangCode.TIMED_OUT:
            names = ", ".join(p.name for p in self.overdue[:5])
            return f"released pods not scheduled in time ({names}): re-planning around what took their cards"
        if self.code is GangCode.WAITING:
            waiting = self.gated - len(self.releases)
            why = "; ".join(s.text() for s in self.short[:5])
            more = " (waited longer than the gang timeout: re-planning around it)" if self.stuck else ""
            return f"{waiting} pod(s) gated until their nodes have the cards: {why}{more}"
        if self.releases:
            return f"released {len(self.releases)} gated pod(s) ({self.code})"
        return "no gated pods"


def _add(into: dict[str, Units], node: str, requests: Mapping[str, int]) -> None:
    slot = into.setdefault(node, {})
    for k, v in requests.items():
        slot[k] = slot.get(k, 0) + v


def remaining(pods: Sequence[GangPod], planned: Mapping[str, Mapping[str, int]]) -> dict[str, Units]:
    """Node -> the cards the plan's placement puts there that none of its pods holds yet: the
    pods still gated and the ones its controllers have not created yet.

    ``planned``: the plan's cards per node (``status.applied.units``). Only the resources its pods
    request count (not cpu: the placement rounds it up to whole cores, a pod asks millicores; a
    pod's cpu is checked on its own), so a resource no pod asks for (a DRA device class) is never
    waited for. A pod of the plan that holds more than is planned on its node (one of a moved
    instance, not gone yet) takes from the node's free cards like anyone's."""
    kinds = {k for p in pods for k in p.requests if k != "cpu"}
    own: dict[str, Units] = {}
    for pod in pods:
        if not pod.terminating and pod.target is not None and _holds(pod):
            _add(own, pod.target, pod.requests)
    out: dict[str, Units] = {}
    for node, units in planned.items():
        held = own.get(node, {})
        left = {k: int(v) - held.get(k, 0) for k, v in units.items() if k in kinds}
        if any(v > 0 for v in left.values()):
            out[node] = {k: v for k, v in sorted(left.items()) if v > 0}
    return out


def decide(
    pods: Sequence[GangPod],
    ledger: Ledger,
    now: float,
    timeout: float,
    planned: Mapping[str, Mapping[str, int]] | None = None,
    started: Collection[str] = (),
    devices: Sequence[DeviceShortfall] = (),
) -> GangDecision:
    """One plan's gated pods against the ledger (which the releases take their cards from).

    ``planned``: the plan's cards per node (its ``status.applied.units``). With it, a gated pod of
    an instance set that has not started is released as soon as it exists, once every node of the
    placement has the free cards for all of the plan's instances there that no pod holds yet
    (gated ones and ones not created yet alike): nothing of the plan starts unless all of it can,
    yet pods are scheduled while their siblings are still being created. The cards of the pods
    still to come are taken from the ledger too, so no other plan is released onto them. Without
    it (a plan whose placement is not known): the gated pods there are the group.

    ``started``: ``namespace/unit`` of instance sets known to have started before (a recreated pod
    whose siblings are all gone still goes alone). ``devices``: the devices of the plan's
    placement that cannot be allocated now (:mod:`.gang_devices`): a pod that takes its GPUs from
    claims waits for those of its group (a recreated one: those of its node)."""
    plan = (pods[0].group or "") if pods else ""
    current = [p for p in pods if not p.terminating]
    gated = sorted((p for p in current if p.gated), key=lambda p: (p.created or 0.0, p.name))
    # released, not bound within the timeout, and its cards taken meanwhile (its node is asked
    # for more than it has); a pod whose node still has its cards is only waiting for a busy
    # scheduler (thousands of pods released at once): re-planning would not help it
    overdue = tuple(
        p
        for p in current
        if not p.gated
        and not p.bound
        and p.released is not None
        and now - p.released > timeout
        and (p.claims or p.planned is None or p.planned in ledger.over)
    )
    begun = {p.unit for p in pods if not p.gated}
    releases: list[Release] = []
    short: list[Shortfall | DeviceShortfall] = []

    def waited(p: GangPod) -> float:
        return max(0.0, now - p.created) if p.created is not None else 0.0

    group = []
    for pod in gated:
        if pod.unit not in begun and pod.unit_key not in started:
            group.append(pod)
            continue
        taken = [d for d in devices if d.node == pod.planned] if pod.claims else []
        if pod.planned is None:
            short.append(Shortfall("", "", 0, 0, (pod.name,)))
        elif taken:
            short.extend(taken)
        elif lacks := ledger.short(pod.planned, pod.requests):
            short.extend(Shortfall(pod.planned, r, n, f, (pod.name,)) for r, n, f in lacks)
        else:
            ledger.take(pod.planned, pod.requests)
            releases.append(Release(pod, GangCode.RECREATED, waited(pod)))

    # what the group asks of each node: with the placement known, every card it plans there that
    # no pod holds yet (recreated pods just released hold theirs), plus whatever a gated pod asks
    # beyond that (its cpu, a card more than planned there); without it, the gated pods' requests
    need: dict[str, Units] = {}
    if group and planned is not None:
        alone = {r.pod.key for r in releases}
        holding = [
            dataclasses.replace(p, gated=False, released=now) if p.key in alone else p for p in current
        ]
        need = remaining(holding, planned)
    budget = {n: dict(u) for n, u in need.items()}
    who: dict[str, list[str]] = {}
    for pod in group:
        if pod.planned is None:
            short.append(Shortfall("", "", 0, 0, (pod.name,)))
            continue
        left = budget.setdefault(pod.planned, {})
        beyond = {}
        for k, v in pod.requests.items():
            covered = min(v, max(0, left.get(k, 0)))
            left[k] = left.get(k, 0) - covered
            if v > covered:
                beyond[k] = v - covered
        _add(need, pod.planned, beyond)
        who.setdefault(pod.planned, []).append(pod.name)
    group_short: list[Shortfall | DeviceShortfall] = [
        Shortfall(node, r, n, f, tuple(who.get(node, ())))
        for node in sorted(need)
        for r, n, f in ledger.short(node, need[node])
    ]
    if any(p.claims for p in group):
        group_short.extend(devices)
    if group and not group_short and not any(p.planned is None for p in group):
        for node, units in need.items():
            ledger.take(node, units)
        releases.extend(Release(p, GangCode.RELEASED, waited(p)) for p in group)
    short.extend(group_short)

    # stuck: a planned node lacks cards (something the plan did not count holds them) for longer
    # than the timeout; pods of its own still being created wait for nothing
    stuck = any(s.node for s in group_short) and max((waited(p) for p in group), default=0.0) > timeout
    if overdue:
        code = GangCode.TIMED_OUT
    elif short:
        code = GangCode.WAITING
    elif any(r.code is GangCode.RELEASED for r in releases):
        code = GangCode.RELEASED
    elif releases:
        code = GangCode.RECREATED
    else:
        code = GangCode.IDLE
    return GangDecision(plan, code, tuple(releases), tuple(short), overdue, len(gated), stuck)


def decide_all(
    plan_pods: Iterable[GangPod],
    ledger: Ledger,
    now: float,
    timeout: float,
    planned: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
    started: Collection[str] = (),
    devices: Mapping[str, Sequence[DeviceShortfall]] | None = None,
) -> list[GangDecision]:
    """Every plan with gated or released-but-unbound pods, one ledger.

    ``plan_pods`` may hold any pods: those of no plan are left out. ``planned``: group -> the
    plan's cards per node, ``devices``: group -> its placement's devices that cannot be allocated
    now (:func:`decide`). First the plans with nothing gated take the cards of
    their pods still to come (a plan half way through its release keeps the rest); then the plans
    that have started an instance set before (theirs are the cards a pod recreated or still to come
    counts on), then the others, oldest gated pod first."""
    by_plan: dict[str, list[GangPod]] = {}
    for pod in plan_pods:
        if pod.group is not None:
            by_plan.setdefault(pod.group, []).append(pod)
    wanted = planned or {}

    def interesting(pods: list[GangPod]) -> bool:
        return any(p.gated or (p.released is not None and not p.bound) for p in pods if not p.terminating)

    for group, pods in by_plan.items():
        if group in wanted and not interesting(pods):
            for node, units in remaining(pods, wanted[group]).items():
                ledger.take(node, units)

    def order(pods: list[GangPod]) -> tuple[bool, float, str]:
        times = [p.created or 0.0 for p in pods if p.gated and not p.terminating]
        begun = any(not p.gated for p in pods if not p.terminating)
        return (not begun, min(times) if times else now, pods[0].group or "")

    todo = sorted((pods for pods in by_plan.values() if interesting(pods)), key=order)
    blocked = devices or {}
    return [
        decide(pods, ledger, now, timeout, wanted.get(g := pods[0].group or ""), started, blocked.get(g, ()))
        for pods in todo
    ]
