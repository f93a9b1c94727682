"""The planner's input, as frozen values.

Notes
-----
A plan's spec (what the user asked for) and a snapshot (what the cluster has free) are kept
apart: the spec comes from a GpuAllocationPlan or the product's JSON configuration, the snapshot
from a NodeList and a PodList. Both are immutable so a planning run can be repeated and
compared, and so the operator can hand the same values to the CLI's renderer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from planner.base.once import once
from planner.base.strategies import DEFAULT_SCORING, Strategy, Topology
from planner.model.devices import STANDARD_DOMAIN, Device
from planner.model.zones import NodeTopology


@dataclass(frozen=True)
class LinkStrategy:
    """How link services share a partition's cards.

    ``share-0-0``: one link service shares all the partition's cards with the key service.
    ``share-A-B``: one link service per A cards, at most B, at least one; all share the cards.
    ``detach-A-B``: per A cards one link service takes one card of its own, at most B; the key
    service keeps the rest. A partition smaller than A cards falls back to ``share-A-B``.
    """

    mode: str  # "share" | "detach"
    per_cards: int
    max_links: int

    @property
    def text(self) -> str:
        return f"{self.mode}-{self.per_cards}-{self.max_links}"

    def links_for(self, cards: int) -> tuple[int, bool]:
        """Return (how many link services a partition of ``cards`` starts, whether detached)."""
        if self.mode == "share" and self.per_cards == 0:
            return 1, False
        per = max(self.per_cards, 1)
        if self.mode == "detach" and cards >= per:
            # each detached link takes one card; keep at least one for the key service
            return max(0, min(self.max_links, cards // per, cards - 1)), True
        count = max(1, cards // per)
        if self.max_links > 0:
            count = min(count, self.max_links)
        return count, False


class Gang(StrEnum):
    """``spec.gang``: whether a plan's pods start together (all-or-nothing) or as they come."""

    PLAN = "plan"  # every pod starts gated; the operator lifts the gates when all of them fit
    NONE = "none"  # no gate: kube-scheduler binds each pod as soon as it sees it


class ResourceKind(StrEnum):
    GPU = "GPU"  # cards: split into instances by the request's strategy
    CPU = "CPU"  # cores: one instance per request, with all its cores


@dataclass(frozen=True)
class ResourceType:
    """One entry of the resource model: a name used in requests, and the nodes that carry it."""

    name: str
    kind: ResourceKind
    resource_name: str
    node_selector: tuple[tuple[str, str], ...]
    # when no node carries the selector's labels, use every schedulable node (the default CPU type)
    any_node_when_unlabelled: bool = False
    # GPUs published one by one (DRA): the DeviceClass an instance's claim asks (default: the
    # DeviceClass named after the devices' driver, as drivers name theirs)
    device_class: str | None = None

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.node_selector)

    @property
    def selector_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.node_selector) or "(any node)"


NUMA_SHARE = "numaShare"


@dataclass(frozen=True)
class CpuRequest:
    """The CPU each pod of an operator's GPU instances requests (``operators[].cpuRequest``).

    A fixed amount (``millicores``), or ``numaShare``: the pod's share, by cards, of the CPUs of
    the NUMA node (domain) that holds its GPUs, rounded down to whole CPUs.
    """

    millicores: int | None  # None: numaShare
    text: str  # as the user wrote it

    @property
    def numa_share(self) -> bool:
        return self.millicores is None


@dataclass(frozen=True)
class OperatorSpec:
    """One entry of the operator catalog: a service, its strategy and how its links run."""

    name: str
    key_strategy: Strategy
    link_strategy: LinkStrategy
    key_service: str
    link_services: tuple[str, ...] = ()
    flamewaker: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    patches: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, hash=False)
    source: str = field(default="catalog", compare=False)  # where the user wrote it: operators[2]
    topology: Topology = Topology.PREFERRED
    cpu_request: CpuRequest | None = None  # CPU of each pod of its GPU instances; None: none asked


@dataclass(frozen=True)
class Request:
    """Cards of one resource type asked for one operator.

    ``cards`` is the most the request may get; ``minimum`` (an elastic request, ``{min, max}``)
    the least it runs with. A fixed count leaves ``minimum`` unset: alone, a plan is planned at
    ``cards`` exactly as before ranges existed; only planning plans together chooses a count.
    """

    operator: str
    resource: str
    cards: int
    machines: int | None = None  # machineNum: fixes the instance count (special strategy)
    minimum: int | None = None  # {min, max}: the least cards it runs with (None: exactly ``cards``)

    @property
    def least(self) -> int:
        return self.cards if self.minimum is None else self.minimum

    @property
    def elastic(self) -> bool:
        return self.least < self.cards


@dataclass(frozen=True)
class Toleration:
    key: str | None
    operator: str  # "Equal" | "Exists"
    value: str | None
    effect: str | None

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key is None:  # empty key with Exists tolerates everything
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or (self.value or "") == (taint.value or "")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str


@dataclass(frozen=True)
class PlanSpec:
    """A validated GpuAllocationPlan spec."""

    name: str
    namespace: str
    resources: tuple[ResourceType, ...]
    operators: tuple[OperatorSpec, ...]
    requests: tuple[Request, ...]
    scoring: str = DEFAULT_SCORING
    deploy: bool = False
    dry_run: bool = False
    tolerations: tuple[Toleration, ...] = ()
    image: str = "ragnaros/flamewaker:latest"
    topology_attribute: str = STANDARD_DOMAIN  # the device attribute whose value is a GPU's domain
    priority: int = 0  # plans planned together: a higher priority is admitted and grows first
    gang: Gang = Gang.PLAN  # all-or-nothing deploys: the plan's pods carry a scheduling gate

    @once
    def _by_name(self) -> tuple[dict[str, ResourceType], dict[str, OperatorSpec]]:
        return {r.name: r for r in self.resources}, {o.name: o for o in self.operators}

    def resource(self, name: str) -> ResourceType:
        return self._by_name[0][name]

    def operator(self, name: str) -> OperatorSpec:
        return self._by_name[1][name]


@dataclass(frozen=True)
class Node:
    """A node as the planner sees it: labels, allocatable, and what is already used."""

    name: str
    labels: tuple[tuple[str, str], ...]
    allocatable: tuple[tuple[str, int], ...]  # resource name -> units (cpu in millicores)
    used: tuple[tuple[str, int], ...] = ()
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    devices: tuple[Device, ...] = ()  # its GPUs one by one, when a driver publishes them (DRA)
    topology: NodeTopology | None = None  # its NUMA zones (NodeResourceTopology), without DRA
    # zone -> resource name -> units the plan itself (own), and other plans (reserved), placed
    own_zones: Mapping[str, Mapping[str, int]] | None = field(default=None, compare=False, hash=False)
    reserved_zones: Mapping[str, Mapping[str, int]] | None = field(default=None, compare=False, hash=False)

    @once
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def free(self, resource_name: str) -> int:
        """Free whole units of a resource (cards, or whole CPU cores)."""
        left = self.free_units(resource_name)
        return left // 1000 if resource_name == "cpu" else left

    def free_units(self, resource_name: str) -> int:
        """Free units as the snapshot counts them (cpu in millicores)."""
        return max(0, _of(self.allocatable, resource_name) - _of(self.used, resource_name))

    def allocatable_units(self, resource_name: str) -> int:
        return _of(self.allocatable, resource_name)


def _of(pairs: tuple[tuple[str, int], ...], key: str) -> int:
    """The value of ``key`` in a few sorted pairs: a scan, no mapping made (65,000 nodes)."""
    for k, v in pairs:
        if k == key:
            return v
    return 0


def _name(node: Node) -> str:
    return node.name


def _without_devices(node: Node, names: set[str]) -> Node:
    if not names:
        return node
    return replace(
        node, devices=tuple(replace(d, free=False) if d.name in names else d for d in node.devices)
    )


@dataclass(frozen=True)
class Snapshot:
    """The cluster as planned against: every node, schedulable or not."""

    nodes: tuple[Node, ...]

    def using(
        self,
        extra: Mapping[str, Mapping[str, int]],
        mine: Mapping[str, Collection[str]] | None = None,
        theirs: Mapping[str, Collection[str]] | None = None,
    ) -> Snapshot:
        """The same cluster with ``extra`` (node -> resource -> units) used on top.

        A node whose GPUs are known one by one counts its free cards by free devices, not by
        units: there the cards in ``extra`` (every resource but ``cpu``) also keep back as many of
        its free devices, so that what others hold by count is not planned on. Which ones: first
        the devices ``theirs`` names (node -> devices the holders ran on before), then the last by
        name, and the devices ``mine`` names (what the plan being planned ran on) only when
        nothing else is left: a plan planned beside others keeps its devices, and so its pods.
        """
        if not extra:
            return self
        out = []
        for n in self.nodes:
            more = extra.get(n.name)
            if more:
                used = dict(n.used)
                for k, v in more.items():
                    used[k] = used.get(k, 0) + v
                n = replace(n, used=tuple(sorted(used.items())))
                cards = sum(v for k, v in more.items() if k != "cpu")
                if n.devices and cards > 0:
                    own = set((mine or {}).get(n.name, ()))
                    held = set((theirs or {}).get(n.name, ())) - own
                    ranked = sorted(
                        (0 if d.name in own else 2 if d.name in held else 1, i, d.name)
                        for i, d in enumerate(n.devices)
                        if d.free
                    )
                    free = [name for _, _, name in ranked]
                    n = _without_devices(n, set(free[max(0, len(free) - cards) :]))
            out.append(n)
        return Snapshot(tuple(out))

    def taking(self, devices: Mapping[str, Collection[str]]) -> Snapshot:
        """The same cluster with the named devices (node -> device names) no longer free: the
        devices plans planned before have been given."""
        if not any(devices.values()):
            return self
        return Snapshot(
            tuple(_without_devices(n, set(devices[n.name])) if devices.get(n.name) else n for n in self.nodes)
        )

    def labelled(self, resource: ResourceType) -> bool:
        """Does any node, schedulable or not, carry the resource type's labels?"""
        return any(resource.selects(node.label_map) for node in self._selected(resource.node_selector))

    def usable(self, resource: ResourceType | None, tolerations: tuple[Toleration, ...]) -> list[Node]:
        """Nodes of a type (``None``: of any type) that a pod of this plan could run on, by name."""
        selector = resource.node_selector if resource is not None else ()
        out = []
        for node in self._selected(selector):
            if node.unschedulable or (
                len(selector) > 1 and any(node.label_map.get(k) != v for k, v in selector)
            ):
                continue
            if node.taints and any(
                t.effect in ("NoSchedule", "NoExecute") and not any(tol.tolerates(t) for tol in tolerations)
                for t in node.taints
            ):
                continue
            out.append(node)
        return out

    def _selected(self, selector: tuple[tuple[str, str], ...]) -> list[Node] | tuple[Node, ...]:
        """The nodes, by name, that carry the selector's first label (all of them without one)."""
        if not selector:
            return self._by_name
        key, value = selector[0]
        return self._with_label(key).get(value, [])

    @once
    def _by_name(self) -> tuple[Node, ...]:
        return tuple(sorted(self.nodes, key=_name))

    @once
    def _label_index(self) -> dict[str, dict[str, list[Node]]]:
        return {}

    def _with_label(self, key: str) -> dict[str, list[Node]]:
        """value -> the nodes, by name, labelled ``key`` with it. Worked out once per label key:
        every plan's every type selects its nodes here, and a cluster may have 65,000 nodes."""
        found = self._label_index.get(key)
        if found is None:
            found = {}
            for node in self._by_name:
                for k, value in node.labels:  # a scan: no mapping made per node
                    if k == key:
                        found.setdefault(value, []).append(node)
                        break
            # kept only once complete: a thread reading the same snapshot never sees it half built
            self._label_index[key] = found
        return found
