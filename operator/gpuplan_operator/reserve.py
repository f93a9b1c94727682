"""What other plans and foreign pods already hold: the part of the snapshot that is not Nodes.

Notes
-----
Two plans must never book the same card, and nothing may be counted twice:

- Another plan's cards are read from its ``status.applied.units`` (node -> resource name ->
  units), which the operator writes when it has applied that plan and keeps while the plan is
  Infeasible, Invalid or a dry run (its outputs stay in place then). Reading what was *applied*,
  not the other plan's spec, stays right while that spec is being edited.
- PriorityClasses are shared by name (one per card count); a class is kept while a live plan
  other than the one being applied or deleted lists it in ``status.applied.priorityClasses``.
- Pods are counted only when no plan accounts for them: pods the operator deployed carry
  ``app.kubernetes.io/managed-by=gpuplan``, and pods Ragnaros starts from a plan's values.yaml
  select the plan's node label key. Both are already inside their plan's reservation (or are
  this plan's own, about to be re-planned), so they are left out of the pod list.

Units follow the planner's snapshot: cards for extended resources, millicores for ``cpu``
(``status.applied`` stores whole cores, as the plan's allocations do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuplan_operator.body import PlanBody
from planner import MANAGED_BY, PLAN_LABEL, Allocation, Gang, is_plan_label_key, plan_labels

Units = dict[str, dict[str, int]]  # node -> resource name -> units

_SNAPSHOT_SCALE = {"cpu": 1000}


def applied_units(
    allocations: Iterable[Allocation],
    resource_names: Mapping[str, str],
    pod_cpu: Mapping[str, int] | None = None,
) -> Units:
    """``status.applied.units`` from a plan's allocations and its resource names; ``pod_cpu``
    (node -> millicores its GPU pods request, ``operators[].cpuRequest``) adds whole cores, rounded
    up, to the node's ``cpu`` so other plans' CPU requests plan around them."""
    out: Units = {}
    for a in allocations:
        rname = resource_names.get(a.resource)
        if rname is None:
            continue
        for node, count in a.nodes:
            slot = out.setdefault(node, {})
            slot[rname] = slot.get(rname, 0) + a.units * count
    for node, millicores in (pod_cpu or {}).items():
        if millicores > 0:
            slot = out.setdefault(node, {})
            slot["cpu"] = slot.get("cpu", 0) + -(-millicores // 1000)
    return {n: dict(sorted(r.items())) for n, r in sorted(out.items())}


def reserved_by_others(plans: Iterable[PlanBody], uid: str) -> Units:
    """Sum of every other plan's applied units, in snapshot units."""
    out: Units = {}
    for plan in plans:
        if plan.uid == uid:
            continue
        units = (plan.status.get("applied") or {}).get("units") or {}
        for node, resources in units.items():
            for rname, n in (resources or {}).items():
                slot = out.setdefault(str(node), {})
                slot[rname] = slot.get(rname, 0) + int(n) * _SNAPSHOT_SCALE.get(rname, 1)
    return out


def plan_keys(plans: Iterable[PlanBody]) -> set[str]:
    return {plan.label_key for plan in plans if plan.name and plan.namespace}


def leaving_pods_hold(plans: Iterable[PlanBody]) -> bool:
    """Do the pods of plans that are gone hold their cards for planning? Only while some plan
    deploys without the gang gate (``gang: none``): its pods would be created onto cards still
    taken. Plans with the gate are planned onto those cards, and their new pods stay gated until
    the leaving ones are gone; the leaving pods' going then changes nothing planning reads."""
    return any(p.deploy and p.spec.get("gang") == Gang.NONE.value and not p.deleting for p in plans)


def owners_of_deployed_pods(plans: Sequence[PlanBody]) -> set[tuple[str, str]] | None:
    """:func:`plan_owners` when leaving pods hold their cards (:func:`leaving_pods_hold`), else
    None (every pod the operator deployed is left out of the snapshot)."""
    return plan_owners(plans) if leaving_pods_hold(plans) else None


def plan_owners(plans: Iterable[PlanBody]) -> set[tuple[str, str]]:
    """(namespace, plan label value) of every plan: whose deployed pods a plan accounts for."""
    return {(plan.namespace, plan_labels(plan.name)[PLAN_LABEL]) for plan in plans}


def _owner(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str((meta.get("labels") or {}).get(PLAN_LABEL) or ""))


def accounted_by_a_plan(
    pod: Mapping[str, Any], keys: set[str], owners: set[tuple[str, str]] | None = None
) -> bool:
    """Is the pod inside some plan's reservation? A pod the operator deployed is, while its plan
    exists (``owners``; None: any plan's); once the plan is gone its pods, still terminating,
    hold their cards like anyone else's until they are gone."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if all(labels.get(k) == v for k, v in MANAGED_BY.items()):
        return owners is None or _owner(pod) in owners
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return any(k in keys for k in selector if is_plan_label_key(k))


def foreign_pods(
    pods_doc: Mapping[str, Any], keys: set[str], owners: set[tuple[str, str]] | None = None
) -> dict[str, Any]:
    """The pod list without the pods some plan already accounts for."""
    items = [p for p in pods_doc.get("items") or [] if not accounted_by_a_plan(p, keys, owners)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def orphans(pods_doc: Mapping[str, Any], owners: set[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """Pods the operator deployed for plans that are gone (their cards come free as they go)."""
    return frozenset(
        (str(p["metadata"].get("namespace")), str(p["metadata"].get("name")))
        for p in pods_doc.get("items") or []
        if all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in MANAGED_BY.items())
        and _owner(p) not in owners
    )


def priority_classes_in_use(plans: Iterable[PlanBody], uid: str) -> set[str]:
    """PriorityClasses other live plans applied.

    A plan being deleted uses none: its own clean-up is under way. Counting it would make plans
    deleted together (``kubectl delete gpuplans --all``) keep each other's classes alive, and the
    last clean-up would still see the others (their finalizers not yet removed) and leave the
    class behind. A live plan that wants a class again re-creates it on its next apply.
    """
    out: set[str] = set()
    for plan in plans:
        if plan.uid == uid or plan.deleting:
            continue
        applied = plan.status.get("applied") or {}
        out.update(str(n) for n in applied.get("priorityClasses") or [])
    return out


def applied_devices(allocations: Iterable[Allocation]) -> dict[str, list[str]]:
    """``status.applied.devices``: node -> the devices the plan's instances hold (DRA)."""
    out: dict[str, list[str]] = {}
    for a in allocations:
        for node, lists in a.devices:
            out.setdefault(node, []).extend(d for devs in lists for d in devs)
    return {n: sorted(devs) for n, devs in sorted(out.items())}


def devices_reserved_by_others(plans: Iterable[PlanBody], uid: str) -> set[tuple[str, str]]:
    """(node, device) every other plan holds, from its ``status.applied.devices``."""
    out: set[tuple[str, str]] = set()
    for plan in plans:
        if plan.uid == uid:
            continue
        for node, names in ((plan.status.get("applied") or {}).get("devices") or {}).items():
            out.update((str(node), str(n)) for n in names or [])
    return out


def foreign_claims(claims_doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The claims no plan accounts for: a plan's own claims carry its labels (copied from its
    ResourceClaimTemplates), and their devices are in that plan's reservation already."""
    if claims_doc is None:
        return None
    items = [
        c
        for c in claims_doc.get("items") or []
        if not all(((c.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in MANAGED_BY.items())
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


Zones = dict[str, dict[str, dict[str, int]]]  # node -> NUMA zone -> resource name -> units


def applied_zones(allocations: Iterable[Allocation], resource_names: Mapping[str, str]) -> Zones:
    """``status.applied.zones``: per node and NUMA zone, the cards the plan counted there (GPUs
    counted per zone of a NodeResourceTopology, without DRA)."""
    out: Zones = {}
    for a in allocations:
        rname = resource_names.get(a.resource)
        if rname is None:
            continue
        for node, lists in a.zones:
            for instance in lists:
                for zone, cards in instance:
                    slot = out.setdefault(node, {}).setdefault(zone, {})
                    slot[rname] = slot.get(rname, 0) + cards
    return {n: {z: dict(sorted(r.items())) for z, r in sorted(zs.items())} for n, zs in sorted(out.items())}


def _zones_of(status: Mapping[str, Any]) -> Zones:
    out: Zones = {}
    for node, zones in ((status.get("applied") or {}).get("zones") or {}).items():
        for zone, resources in (zones or {}).items():
            for rname, n in (resources or {}).items():
                slot = out.setdefault(str(node), {}).setdefault(str(zone), {})
                slot[str(rname)] = slot.get(str(rname), 0) + int(n)
    return out


def own_zones(status: Mapping[str, Any]) -> Zones:
    """The zones this plan's own applied cards sit in (its pods are left out of the pod list, but
    a zone's ``available`` counts them)."""
    return _zones_of(status)


def zones_reserved_by_others(plans: Iterable[PlanBody], uid: str) -> Zones:
    """Per node and zone, the cards every other plan placed there (``status.applied.zones``)."""
    out: Zones = {}
    for plan in plans:
        if plan.uid == uid:
            continue
        for node, zones in _zones_of(plan.status).items():
            for zone, resources in zones.items():
                for rname, n in resources.items():
                    slot = out.setdefault(node, {}).setdefault(zone, {})
                    slot[rname] = slot.get(rname, 0) + n
    return out
