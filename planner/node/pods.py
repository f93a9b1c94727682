"""The pods a plan runs, and the CPU each GPU pod requests so it can sit on its GPUs' NUMA node.

Notes
-----
:func:`layout` is the one place that says how allocations become pods: one :class:`PodGroup`
per flamewaker entry (a service of an allocation on a node; with DRA, of one instance), with the
link services' rules (shared in the key service's pod, or detached with cards of their own, a
link service rendered once however many operators list it). The renderer writes entries from it,
and the search counts the CPU of GPU pods from it, so the two never disagree.

``operators[].cpuRequest`` sizes the CPU of each pod of an operator's GPU instances:

- a quantity (``4``, ``3500m``): each pod requests that much;
- ``numaShare``: the pod's share, by cards, of the CPUs of the NUMA node (domain) that holds its
  GPUs, rounded **down** to whole CPUs, so a kubelet with the static CPU manager can give it
  exclusive CPUs of that NUMA node. A domain's CPUs are its NodeResourceTopology zone's
  allocatable ``cpu`` when known, else the node's allocatable cpu × the domain's cards / the
  node's cards; a node without domains is one domain.

Both are requests *and* limits (a pod is Guaranteed, and gets exclusive CPUs, only when they are
equal; its memory request and limit come from the operator's flamewaker template).

GPU pods take CPU on their node that CPU requests might otherwise count on: the search plans CPU
types after GPU types, against what the GPU pods leave (:func:`cpu_by_node`). What cannot be
checked before the pods start is said in :func:`cpu_warnings`: a fixed request larger than the
NUMA node holding the GPUs (a ``single-numa-node`` kubelet refuses such a pod), GPU pods asking
more CPU than their node has free, a share that rounds down to no CPU at all, and an instance
straddling NUMA zones on a node whose kubelet runs ``single-numa-node``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from planner.base.quantity import MILLI, cpus_text
from planner.model.devices import Domain
from planner.model.options import TypeProblem
from planner.model.result import Allocation, InstanceZones
from planner.model.spec import CpuRequest, OperatorSpec, PlanSpec, ResourceKind, ResourceType


@dataclass(frozen=True)
class PodGroup:
    """The pods of one flamewaker entry: ``pods`` pods of ``units`` cards each on ``node``."""

    alloc: Allocation
    op: OperatorSpec
    resource: ResourceType
    node: str
    services: tuple[str, ...]  # the key service and its shared links, or the detached links
    pods: int
    units: int
    link: bool = False  # the detached link services of an allocation
    instance: int | None = None  # with DRA: the instance's index on the node (an entry each)
    devices: tuple[str, ...] = ()  # with DRA: the devices of this entry
    part: int | None = None  # with DRA, several detached links of an instance: which one (an entry each)
    zones: tuple[InstanceZones, ...] = ()  # without DRA, NUMA zones: each instance's zones


def layout(spec: PlanSpec, allocations: Iterable[Allocation]) -> list[PodGroup]:
    """Every flamewaker entry's pods, in allocation then node order (the renderer's order)."""
    out: list[PodGroup] = []
    rendered_links: set[str] = set()
    for alloc in allocations:
        op = spec.operator(alloc.operator)
        resource = spec.resource(alloc.resource)
        links = tuple(s for s in op.link_services if s not in rendered_links)
        rendered_links.update(links)
        if resource.kind is ResourceKind.GPU:
            n_links, detached = op.link_strategy.links_for(alloc.units)
        else:  # cores are not cards: link services share the instance's cores, one each
            n_links, detached = 1, False
        detached = detached and bool(links)
        key_units = alloc.units - (n_links if detached else 0)
        shared = () if detached else tuple(s for s in links for _ in range(n_links))
        services = (op.key_service, *shared)
        devices, zones = dict(alloc.devices), dict(alloc.zones)
        for node, count in alloc.nodes:
            if node in devices:  # GPUs chosen one by one: an entry per instance
                for i, devs in enumerate(devices[node]):
                    out.append(PodGroup(alloc, op, resource, node, services, 1, key_units, False, i,
                                        tuple(devs[:key_units])))  # fmt: skip
                    # each detached link pod claims its own card: one entry (and claim) per link
                    link_devices = devs[key_units:] if detached else ()
                    for j, dev in enumerate(link_devices):
                        part = j if len(link_devices) > 1 else None
                        out.append(
                            PodGroup(alloc, op, resource, node, links, 1, 1, True, i, (dev,), part=part)
                        )
                continue
            here = zones.get(node, ())
            out.append(PodGroup(alloc, op, resource, node, services, count, key_units, zones=here))
            if detached:
                out.append(PodGroup(alloc, op, resource, node, links, count * n_links, 1, True, zones=here))
    return out


# --- CPU ------------------------------------------------------------------------------------


def _domain_cpu(problem: TypeProblem, node: str, domain: Domain) -> Fraction:
    """A domain's CPUs (millicores): its zone's allocatable cpu, else its part of the node's."""
    if domain.cpu is not None:
        return Fraction(domain.cpu)
    host = problem.hosts.get(node)
    if host is None or not host.cards:
        return Fraction(0)
    return Fraction(host.cpu * domain.total, host.cards)


def _instances(problem: TypeProblem, group: PodGroup) -> list[list[tuple[Domain | None, int]]]:
    """Each instance of the group as (domain, cards there); ``None``: the node is one domain."""
    domains = {d.name: d for d in problem.domains.get(group.node, ())}
    if group.devices or group.instance is not None:
        by_device = {dev: d for d in domains.values() for dev in d.free}
        counts: dict[str, int] = {}
        for dev in group.devices:
            name = by_device[dev].name if dev in by_device else ""
            counts[name] = counts.get(name, 0) + 1
        return [[(domains.get(n), c) for n, c in counts.items()]] if counts else [[(None, group.units)]]
    if group.zones:
        return [[(domains.get(z), c) for z, c in instance] for instance in group.zones]
    return [[(None, group.alloc.units)]]


def _instance_cpu(problem: TypeProblem, node: str, parts: Sequence[tuple[Domain | None, int]]) -> Fraction:
    """The CPUs (millicores) of the domains an instance's cards sit in, in proportion to its cards."""
    total = Fraction(0)
    for domain, cards in parts:
        if domain is None:
            host = problem.hosts.get(node)
            total += Fraction(host.cpu * cards, host.cards) if host and host.cards else Fraction(0)
        elif domain.total:
            total += _domain_cpu(problem, node, domain) * cards / domain.total
    return total


def _domain_limit(problem: TypeProblem, node: str, parts: Sequence[tuple[Domain | None, int]]) -> Fraction:
    """All the CPUs of the domain(s) holding an instance's cards (the node's, without domains)."""
    host = problem.hosts.get(node)
    if all(d is None for d, _ in parts):
        return Fraction(host.cpu) if host else Fraction(0)
    return sum((_domain_cpu(problem, node, d) for d, _ in parts if d is not None), Fraction(0))


def pod_cpu(problem: TypeProblem, group: PodGroup) -> int | None:
    """Millicores each pod of the group requests; None when its operator asks for no CPU."""
    request: CpuRequest | None = group.op.cpu_request
    if request is None or group.resource.kind is not ResourceKind.GPU:
        return None
    if request.millicores is not None:
        return request.millicores
    instances = _instances(problem, group)
    share = min(
        _instance_cpu(problem, group.node, parts) / sum(c for _, c in parts) * group.units
        for parts in instances
    )
    return int(share // MILLI) * MILLI


def concerned(spec: PlanSpec, allocations: Iterable[Allocation]) -> bool:
    """Does any allocation ask for CPU or sit in NUMA zones? Only then is the layout walked (a
    5,000-node plan has thousands of entries, and most plans neither)."""
    return any(a.zones or spec.operator(a.operator).cpu_request is not None for a in allocations)


def cpu_by_node(problems: Sequence[TypeProblem], groups: Iterable[PodGroup]) -> dict[str, int]:
    """Node -> the millicores the plan's GPU pods (``groups``, from :func:`layout`) request there."""
    by_type = {p.resource.name: p for p in problems}
    out: dict[str, int] = {}
    for group in groups:
        problem = by_type.get(group.alloc.resource)
        cpu = pod_cpu(problem, group) if problem is not None else None
        if cpu:
            out[group.node] = out.get(group.node, 0) + cpu * group.pods
    return out


def _cpus(millicores: Fraction | int) -> str:
    return (
        cpus_text(int(millicores))
        if Fraction(millicores).denominator == 1
        else f"{float(millicores) / MILLI:.3g}"
    )


def cpu_warnings(problems: Sequence[TypeProblem], groups: Sequence[PodGroup]) -> list[str]:
    """What the kubelet may refuse or leave Pending, in words (see the module notes)."""
    by_type = {p.resource.name: p for p in problems}
    warnings: list[str] = []
    seen: set[tuple[str, str]] = set()

    def once(key: tuple[str, str], text: str) -> None:
        if key not in seen:
            seen.add(key)
            warnings.append(text)

    for group in groups:
        problem = by_type.get(group.alloc.resource)
        if problem is None or group.resource.kind is not ResourceKind.GPU:
            continue
        host = problem.hosts.get(group.node)
        single = host is not None and host.single_numa
        label = group.op.name
        for parts in _instances(problem, group):
            if len(parts) > 1 and single and not group.link:
                zones = "+".join(d.name for d, _ in parts if d is not None)
                once(
                    (label, f"straddle {group.node}"),
                    f"{label}: an instance on {group.node} straddles NUMA zones {zones} and the "
                    f"node's kubelet runs single-numa-node: it will refuse the pod",
                )
        request = group.op.cpu_request
        if request is None:
            continue
        cpu = pod_cpu(problem, group)
        if request.millicores is not None:
            for parts in _instances(problem, group):
                limit = _domain_limit(problem, group.node, parts)
                if limit and request.millicores > limit:
                    names = " + ".join(d.name for d, _ in parts if d is not None)
                    kind = "NUMA zone" if group.node in problem.zoned else "domain"
                    where = f"{kind} {names}" if names else "the node"
                    refuses = (
                        f"{group.node}'s kubelet runs single-numa-node and refuses it"
                        if single
                        else "a kubelet with topologyManagerPolicy single-numa-node refuses it"
                    )
                    once(
                        (label, "fixed"),
                        f"{label}: cpuRequest {request.text} is more than the {_cpus(limit)} CPUs of "
                        f"{where} on {group.node}, which holds its GPUs: {refuses} after scheduling",
                    )
        elif cpu == 0:
            once(
                (label, "zero"),
                f"{label}: numaShare of {group.units} card(s) on {group.node} is less than one "
                f"whole CPU: its pods request no CPU",
            )
    load = cpu_by_node(problems, groups)
    if not load:  # no GPU pod asks for CPU: nothing to compare with what is free
        return warnings
    # the GPU types' view: the CPU types' problems already have the GPU pods' CPU taken
    free = {
        n: h.cpu_free for p in problems if p.resource.kind is ResourceKind.GPU for n, h in p.hosts.items()
    }
    for node, cpu in sorted(load.items()):
        if node in free and cpu > free[node]:
            warnings.append(
                f"{node}: the plan's GPU pods request {_cpus(cpu)} CPUs, only {_cpus(free[node])} "
                f"are free there: some of them will stay Pending"
            )
    return warnings


def cpu_note(taken: Mapping[str, int]) -> str | None:
    """A CPU type's note: the CPU that the plan's GPU pods take on its nodes."""
    if not taken:
        return None
    total = sum(taken.values())
    nodes = ", ".join(sorted(taken))
    return f"the plan's GPU pods request {_cpus(total)} CPUs on {nodes}: not free for CPU requests"
