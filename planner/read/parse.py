"""Turn manifests (already loaded as dicts) into the planner's frozen input values.

Notes
-----
This is the planner's front door: everything it admits is well-formed, and everything it refuses
raises :class:`~planner.base.errors.InvalidInput` naming the field, in the shape users wrote it
(``requests.face_image_flow``, ``resources[1].kind``). The CRD's schema rejects most of this at
the API server already; these checks are for the CLI and for rules a schema cannot express.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from planner.base.errors import InvalidInput
from planner.base.quantity import parse_quantity
from planner.base.strategies import DEFAULT_SCORING, KEY_STRATEGIES, SCORINGS, Strategy, Topology, one_of
from planner.base.vocab import API_VERSION, KIND, SEED_KEY
from planner.model.catalog import BUILTIN_OPERATORS, default_resources
from planner.model.devices import STANDARD_DOMAIN
from planner.model.spec import (
    NUMA_SHARE,
    CpuRequest,
    Gang,
    LinkStrategy,
    Node,
    OperatorSpec,
    PlanSpec,
    Request,
    ResourceKind,
    ResourceType,
    Snapshot,
    Taint,
    Toleration,
)
from planner.model.zones import ZoneUnits
from planner.read.fields import items, mapping
from planner.read.slices import parse_claims, parse_slices
from planner.read.topologies import parse_topologies

_LINK_RE = re.compile(r"^(share|detach)-(\d+)-(\d+)$")
_CPU_RE = re.compile(r"^[0-9]+(\.[0-9]+)?m?$")  # the CRD's pattern for cpuRequest, numaShare aside
_SEED_LONG = {"resource_num": "resourceNum", "machine_num": "machineNum"}
CONFIG_PLAN_NAME = "ragnaros"  # the plan a ragnaros_operator_config JSON becomes
MAX_COUNT = 100_000  # cards (or machines) per request: as the CRD schema and admission policy say
MAX_PRIORITY = 1000  # spec.priority: 0 (the default) to 1000


def _count(value: Any, field: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, f"expected a whole number of cards, got {value!r}")
    number: int = value
    if number < 0:
        raise InvalidInput(field, f"must not be negative, got {number}")
    if number > MAX_COUNT:  # no cluster has that many; planning would enumerate their splits
        raise InvalidInput(field, f"at most {MAX_COUNT} cards, got {number:.3g}")
    return number


def _find_config(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if SEED_KEY in doc:
        return mapping(doc[SEED_KEY], SEED_KEY)
    for value in doc.values():  # the product nests it one level down in its config file
        if isinstance(value, Mapping) and SEED_KEY in value:
            return mapping(value[SEED_KEY], SEED_KEY)
    return None


def parse_plan(doc: Any) -> PlanSpec:
    """Parse a GpuAllocationPlan manifest, or the product's ``ragnaros_operator_config`` JSON."""
    doc = mapping(doc, "plan")
    config = _find_config(doc)
    if config is not None:  # the product's configuration names no plan: call it after itself
        return parse_spec(
            {"requests": _config_requests(config)}, name=CONFIG_PLAN_NAME, namespace="default", ranges=False
        )
    if doc.get("kind") != KIND:
        raise InvalidInput("kind", f"expected {KIND} (or a {SEED_KEY} JSON), got {doc.get('kind')!r}")
    if doc.get("apiVersion") != API_VERSION:
        raise InvalidInput("apiVersion", f"expected {API_VERSION}, got {doc.get('apiVersion')!r}")
    meta = mapping(doc.get("metadata") or {}, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("metadata.name", "is required")
    namespace = meta.get("namespace") or "default"
    # the API server's schema requires both; the command line holds a file to the same rule
    if doc.get("spec") is None:
        raise InvalidInput("spec", "is required (its requests say what each operator asks for)")
    spec = mapping(doc["spec"], "spec")
    if spec.get("requests") is None:
        raise InvalidInput("requests", "is required: operator -> cards per type, e.g. {face_1vn: {P4: 4}}")
    return parse_spec(spec, name=name, namespace=str(namespace))


def _config_requests(seed: Mapping[str, Any]) -> dict[str, Any]:
    """The product's JSON uses snake_case long forms; translate them to the CRD's camelCase."""
    out: dict[str, Any] = {}
    for op, value in seed.items():
        value = mapping(value, f"{SEED_KEY}.{op}")
        if any(k in value for k in _SEED_LONG):
            out[op] = {_SEED_LONG.get(k, k): v for k, v in value.items()}
        else:
            out[op] = dict(value)
    return out


def parse_spec(spec: Mapping[str, Any], name: str, namespace: str, ranges: bool = True) -> PlanSpec:
    """Parse and validate a plan's spec (``ranges``: card counts may be ``{min, max}``; the
    product's JSON configuration has fixed counts only)."""
    resources = _parse_resources(spec.get("resources"))
    operators = _parse_operators(spec.get("operators"))
    requests = _parse_requests(spec.get("requests"), resources, operators, ranges)
    scoring = spec.get("scoring", DEFAULT_SCORING) or DEFAULT_SCORING
    if not isinstance(scoring, str) or scoring not in SCORINGS:
        raise InvalidInput("scoring", f"must be one of {', '.join(SCORINGS)}, got {scoring!r}")
    flags = {}
    for key in ("deploy", "dryRun"):
        value = spec.get(key, False)
        if not isinstance(value, bool):
            raise InvalidInput(key, f"must be true or false, got {value!r}")
        flags[key] = value
    image = spec.get("image", "ragnaros/flamewaker:latest")
    if not isinstance(image, str) or not image:
        raise InvalidInput("image", "must be a non-empty string")
    attribute = spec.get("topologyAttribute", STANDARD_DOMAIN)
    if not isinstance(attribute, str) or not attribute:
        raise InvalidInput(
            "topologyAttribute", "must be a device attribute's name, e.g. resource.kubernetes.io/numaNode"
        )
    gang = spec.get("gang", Gang.PLAN.value)
    if not isinstance(gang, str) or gang not in {g.value for g in Gang}:
        raise InvalidInput("gang", f"must be {one_of(g.value for g in Gang)}, got {gang!r}")
    return PlanSpec(
        name=name,
        namespace=namespace,
        resources=resources,
        operators=operators,
        requests=requests,
        scoring=scoring,
        deploy=flags["deploy"],
        dry_run=flags["dryRun"],
        tolerations=parse_tolerations(spec.get("tolerations"), "tolerations"),
        image=image,
        topology_attribute=attribute,
        priority=_priority(spec.get("priority")),
        gang=Gang(gang),
    )


def _named(item: Any, field: str) -> tuple[Mapping[str, Any], str]:
    """A list entry that must be a mapping with a ``name`` (a resource type, an operator)."""
    entry = mapping(item, field)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{field}.name", "is required")
    return entry, name


def _parse_resources(value: Any) -> tuple[ResourceType, ...]:
    if value is None:
        return default_resources()
    if not isinstance(value, list) or not value:
        raise InvalidInput("resources", "must be a non-empty list")
    out: list[ResourceType] = []
    for i, item in enumerate(value):
        field = f"resources[{i}]"
        item, name = _named(item, field)
        if any(r.name == name for r in out):
            raise InvalidInput(f"{field}.name", f"resource {name!r} is listed twice")
        kind = item.get("kind", ResourceKind.GPU.value)
        if not isinstance(kind, str) or kind not in {k.value for k in ResourceKind}:
            raise InvalidInput(
                f"{field}.kind", f"must be {one_of(k.value for k in ResourceKind)}, got {kind!r}"
            )
        default_rn = "nvidia.com/gpu" if kind == ResourceKind.GPU else "cpu"
        resource_name = item.get("resourceName", default_rn) or default_rn
        selector = mapping(item.get("nodeSelector") or {}, f"{field}.nodeSelector")
        device_class = item.get("deviceClassName")
        if device_class is not None and (not isinstance(device_class, str) or not device_class):
            raise InvalidInput(f"{field}.deviceClassName", "must be a DeviceClass name")
        out.append(
            ResourceType(
                name=name,
                kind=ResourceKind(kind),
                resource_name=str(resource_name),
                node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
                device_class=device_class,
            )
        )
    return tuple(out)


def _parse_link(value: Any, field: str) -> LinkStrategy:
    m = _LINK_RE.match(str(value))
    if not m:
        raise InvalidInput(field, f"must look like share-A-B or detach-A-B, got {value!r}")
    return LinkStrategy(m.group(1), int(m.group(2)), int(m.group(3)))


# the values an operator's keyStrategy and topology may take, made once: a set made per operator
# took a sixth of reading 50 plans of 160 operators each (0.015 s of 0.095 s, load 5)
_KEY_STRATEGY_VALUES = frozenset(s.value for s in KEY_STRATEGIES)
_TOPOLOGY_VALUES = frozenset(t.value for t in Topology)


def _parse_operators(value: Any) -> tuple[OperatorSpec, ...]:
    catalog = {op.name: op for op in BUILTIN_OPERATORS}
    if value is None:
        return BUILTIN_OPERATORS
    if not isinstance(value, list):
        raise InvalidInput("operators", "must be a list")
    seen: set[str] = set()
    for i, item in enumerate(value):
        field = f"operators[{i}]"
        item, name = _named(item, field)
        if name in seen:  # the API server does not refuse it: the list is one atomic field there
            raise InvalidInput(f"{field}.name", f"operator {name!r} is listed twice")
        seen.add(name)
        base = catalog.get(name)
        strategy_text = item.get("keyStrategy", base.key_strategy.value if base else None)
        if strategy_text is None:
            raise InvalidInput(f"{field}.keyStrategy", "is required for an operator not in the catalog")
        if not isinstance(strategy_text, str) or strategy_text not in _KEY_STRATEGY_VALUES:
            raise InvalidInput(
                f"{field}.keyStrategy",
                f"must be {one_of(s.value for s in KEY_STRATEGIES)}, got {strategy_text!r}",
            )
        link = (
            _parse_link(item["linkStrategy"], f"{field}.linkStrategy")
            if "linkStrategy" in item
            else (base.link_strategy if base else LinkStrategy("share", 0, 0))
        )
        services = mapping(item.get("services") or {}, f"{field}.services")
        key = services.get("key", base.key_service if base else None)
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"{field}.services.key", "is required for a new operator")
        links = services.get("link", list(base.link_services) if base else [])
        if not isinstance(links, list) or not all(isinstance(s, str) and s for s in links):
            raise InvalidInput(f"{field}.services.link", "must be a list of service names")
        flamewaker = mapping(item.get("flamewaker") or {}, f"{field}.flamewaker")
        topology = item.get("topology", base.topology.value if base else Topology.PREFERRED.value)
        if not isinstance(topology, str) or topology not in _TOPOLOGY_VALUES:
            raise InvalidInput(
                f"{field}.topology", f"must be {one_of(t.value for t in Topology)}, got {topology!r}"
            )
        cpu = (
            _parse_cpu_request(item["cpuRequest"], f"{field}.cpuRequest")
            if item.get("cpuRequest") is not None
            else (base.cpu_request if base else None)
        )
        patches = item.get("patches") or []
        if not isinstance(patches, list) or not all(
            isinstance(p, Mapping) and "op" in p and "path" in p for p in patches
        ):
            raise InvalidInput(f"{field}.patches", "must be a list of JSON patch operations")
        catalog[name] = OperatorSpec(
            name=name,
            key_strategy=Strategy(strategy_text),
            link_strategy=link,
            key_service=key,
            link_services=tuple(links),
            flamewaker=dict(flamewaker),
            patches=tuple(dict(p) for p in patches),
            source=field,
            topology=Topology(topology),
            cpu_request=cpu,
        )
    return tuple(catalog.values())


def _parse_cpu_request(value: Any, field: str) -> CpuRequest:
    """``numaShare``, or a CPU quantity per pod (``4``, ``"4"``, ``"3500m"``)."""
    if value == NUMA_SHARE:
        return CpuRequest(None, NUMA_SHARE)
    if isinstance(value, bool) or not isinstance(value, int | str) or not _CPU_RE.match(str(value)):
        raise InvalidInput(field, f"must be {NUMA_SHARE} or a CPU quantity such as 4 or 3500m, got {value!r}")
    millicores = parse_quantity(value, "cpu", field)
    if millicores <= 0:
        raise InvalidInput(field, f"must be more than 0 CPUs, got {value!r}")
    return CpuRequest(millicores, str(value))


def _range(value: Any, field: str, ranges: bool) -> tuple[int, int]:
    """A card count ``p`` (meaning ``{min: p, max: p}``) or, where allowed, ``{min, max}``."""
    if not isinstance(value, Mapping):
        p = _count(value, field)
        return p, p
    if not ranges:
        raise InvalidInput(
            field, f"expected a whole number of cards (ranges need a plan manifest), got {value!r}"
        )
    extra = sorted(set(value) - {"min", "max"})
    if extra:
        raise InvalidInput(f"{field}.{extra[0]}", "unknown field in a range: expected min and max")
    for end in ("min", "max"):
        if end not in value:
            raise InvalidInput(f"{field}.{end}", "is required in a range {min, max}")
    low, high = _count(value["min"], f"{field}.min"), _count(value["max"], f"{field}.max")
    if low > high:
        raise InvalidInput(f"{field}.min", f"must not exceed max ({low} > {high})")
    return low, high


def _parse_requests(
    value: Any, resources: tuple[ResourceType, ...], operators: tuple[OperatorSpec, ...], ranges: bool = True
) -> tuple[Request, ...]:
    value = mapping(value if value is not None else {}, "requests")
    known_ops = {o.name for o in operators}
    known_res = {r.name for r in resources}
    out: list[Request] = []
    for op, body in value.items():
        field = f"requests.{op}"
        if op not in known_ops:
            raise InvalidInput(field, f"unknown operator {op!r} (not in spec.operators or the catalog)")
        body = mapping(body, field)
        long = "resourceNum" in body or "machineNum" in body
        if long:
            extra = set(body) - {"resourceNum", "machineNum"}
            if extra:
                raise InvalidInput(f"{field}.{sorted(extra)[0]}", "unknown field in the long form")
            cards = mapping(body.get("resourceNum") or {}, f"{field}.resourceNum")
            machines = mapping(body.get("machineNum") or {}, f"{field}.machineNum")
        else:
            cards, machines = body, {}
        for res, n in cards.items():
            where = f"{field}.resourceNum.{res}" if long and isinstance(n, Mapping) else f"{field}.{res}"
            if res not in known_res:
                raise InvalidInput(f"{field}.{res}", f"unknown resource type {res!r}")
            low, p = _range(n, where, ranges)
            m = _count(machines.get(res, 0) or 0, f"{field}.machineNum.{res}")
            if m and p == 0:
                raise InvalidInput(field, f"machineNum {m} given for {res} but no {res} cards requested")
            if m and p % m:
                raise InvalidInput(field, f"machineNum {m} does not divide {p} cards")
            if m and low % m:
                raise InvalidInput(f"{where}.min", f"machineNum {m} does not divide min {low}")
            if p:
                out.append(Request(op, res, p, m or None, None if low == p else low))
        for res in machines:
            if res not in known_res:
                raise InvalidInput(f"{field}.machineNum.{res}", f"unknown resource type {res!r}")
            if res not in cards and _count(machines[res] or 0, f"{field}.machineNum.{res}"):
                raise InvalidInput(field, f"machineNum given for {res} but no {res} cards requested")
    return tuple(out)


def _priority(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("priority", f"expected a whole number from 0 to {MAX_PRIORITY}, got {value!r}")
    if not 0 <= value <= MAX_PRIORITY:
        raise InvalidInput("priority", f"must be from 0 to {MAX_PRIORITY}, got {value}")
    return value


def parse_tolerations(value: Any, field: str) -> tuple[Toleration, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidInput(field, "must be a list")
    out = []
    for i, t in enumerate(value):
        t = mapping(t, f"{field}[{i}]")
        out.append(
            Toleration(
                key=t.get("key") or None,
                operator=t.get("operator", "Equal"),
                value=t.get("value"),
                effect=t.get("effect") or None,
            )
        )
    return tuple(out)


# --- nodes and pods ----------------------------------------------------------------------


def parse_nodes(doc: Any) -> list[Node]:
    """Parse ``kubectl get nodes -o yaml`` output.

    Written for 65,000-node lists: a field's name is spelled out only when it is refused, label
    pairs that are all strings are sorted as they are, and an allocatable value seen on an
    earlier node is not parsed again.
    """
    out: list[Node] = []
    quantities: dict[tuple[str, str], int] = {}
    seen: dict[tuple[tuple[Any, Any], ...], tuple[tuple[str, int], ...]] = {}
    names: dict[str, int] = {}  # name -> its item's index
    empty: dict[str, Any] = {}
    for i, item in enumerate(items(doc, "nodes", "Node")):
        if item.get("kind", "Node") != "Node":
            continue
        # a mapping is checked by its type first: the field's name is spelled out on refusal only
        meta = item.get("metadata") or empty
        if type(meta) is not dict:
            meta = _mapping(meta, i, "metadata")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"nodes.items[{i}].metadata.name", "is required")
        if names.setdefault(name, i) != i:  # two nodes of one name would share its free cards
            raise InvalidInput(f"nodes.items[{i}].metadata.name", f"{name!r} is also items[{names[name]}]")
        spec = item.get("spec") or empty
        if type(spec) is not dict:
            spec = _mapping(spec, i, "spec")
        status = item.get("status") or empty
        if type(status) is not dict:
            status = _mapping(status, i, "status")
        alloc = status.get("allocatable") or empty
        if type(alloc) is not dict:
            alloc = _mapping(alloc, i, "status.allocatable")
        raw_taints = spec.get("taints")
        taints = (
            tuple(Taint(str(t.get("key", "")), t.get("value"), str(t.get("effect", ""))) for t in raw_taints)
            if raw_taints
            else ()
        )
        out.append(
            Node(
                name,
                _pairs(meta.get("labels") or empty),
                _allocatable(seen, quantities, alloc, i),
                (),
                bool(spec.get("unschedulable", False)),
                taints,
            )
        )
    if not out:
        raise InvalidInput("nodes", "the node list is empty")
    return out


def _mapping(value: Any, i: int, where: str) -> Mapping[str, Any]:
    """:func:`planner.read.fields.mapping` with the field's name spelled out only on refusal."""
    if type(value) is dict:
        return value
    return mapping(value, f"nodes.items[{i}].{where}")


def _pairs(labels: Mapping[Any, Any]) -> tuple[tuple[str, str], ...]:
    """A node's labels as sorted (key, value) strings (a number in YAML is read as its text)."""
    if type(labels) is dict:
        try:  # joined, in C, only when every key and value is a string
            "".join(labels)
            "".join(labels.values())
        except TypeError:
            pass
        else:
            return tuple(sorted(labels.items()))
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _allocatable(
    seen: dict[tuple[tuple[Any, Any], ...], tuple[tuple[str, int], ...]],
    quantities: dict[tuple[str, str], int],
    alloc: Mapping[str, Any],
    i: int,
) -> tuple[tuple[str, int], ...]:
    """A node's allocatable as sorted (resource, units); nodes of one shape (most of a large
    cluster: the same cards, CPUs and memory) share the parsed tuple."""
    pairs = tuple(alloc.items())
    try:
        got = seen.get(pairs)
    except TypeError:  # a value that cannot be hashed: parsed (and refused) on its own
        got = None
    if got is None:
        got = tuple(sorted(_quantity(quantities, k, v, i) for k, v in pairs))
        if all(type(v) is str for _, v in pairs):
            seen[pairs] = got
    return got


def _quantity(seen: dict[tuple[str, str], int], key: Any, value: Any, i: int) -> tuple[str, int]:
    """(resource, units) of one allocatable entry; ``seen``: the strings parsed before."""
    k = str(key)
    if type(value) is str:
        got = seen.get((k, value))
        if got is None:
            got = seen[k, value] = parse_quantity(value, k, f"nodes.items[{i}].status.allocatable.{k}")
        return k, got
    return k, parse_quantity(value, k, f"nodes.items[{i}].status.allocatable.{k}")


def pod_requests(pod: Mapping[str, Any], field: str = "pod") -> dict[str, int]:
    """What a pod asks of its node: the larger of its containers' sum and any init container."""
    spec = mapping(pod.get("spec") or {}, f"{field}.spec")

    def of(container: Mapping[str, Any]) -> dict[str, int]:
        res = container.get("resources") or {}
        merged = dict(res.get("limits") or {})  # extended resources: requests default to limits
        merged.update(res.get("requests") or {})
        return {k: parse_quantity(v, k, f"{field}.resources.{k}") for k, v in merged.items()}

    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    return total


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def snapshot(
    nodes_doc: Any,
    pods_doc: Any | None = None,
    reserved: Mapping[str, Mapping[str, int]] | None = None,
    slices_doc: Any | None = None,
    claims_doc: Any | None = None,
    reserved_devices: Iterable[tuple[str, str]] = (),
    topology_doc: Any | None = None,
    own_zones: ZoneUnits | None = None,
    reserved_zones: ZoneUnits | None = None,
) -> Snapshot:
    """Nodes with what the given pods already use, and what is ``reserved``, subtracted.

    ``reserved`` maps node name -> resource name -> units (cpu in millicores); the operator uses it
    for cards that other plans have placed but whose pods may not exist yet. ``slices_doc`` (a List
    of ResourceSlices) gives the nodes' GPUs one by one; devices the ``claims_doc`` ResourceClaims
    hold, and ``reserved_devices`` ((node, device) other plans placed), are not free.
    ``topology_doc`` (a List of NodeResourceTopology) gives the NUMA zones of nodes without
    ResourceSlices; ``own_zones`` and ``reserved_zones`` (node -> zone -> resource -> units) are
    the cards this plan, and the other plans, placed in each zone (:mod:`planner.model.zones`).
    """
    nodes = parse_nodes(nodes_doc)
    held = parse_claims(claims_doc) if claims_doc is not None else set()
    devices = parse_slices(slices_doc, held, reserved_devices) if slices_doc is not None else {}
    topologies = parse_topologies(topology_doc) if topology_doc is not None else {}
    own, others = own_zones or {}, reserved_zones or {}
    used: dict[str, dict[str, int]] = {n: dict(r) for n, r in (reserved or {}).items()}
    if pods_doc is not None:
        for i, pod in enumerate(items(pods_doc, "pods", "Pod")):
            if not pod_is_active(pod):
                continue
            node = pod["spec"]["nodeName"]
            for k, v in pod_requests(pod, f"pods.items[{i}]").items():
                used.setdefault(node, {})[k] = used.get(node, {}).get(k, 0) + v
    extra = used.keys() | devices.keys() | topologies.keys() | own.keys() | others.keys()
    return Snapshot(
        tuple(
            n
            if n.name not in extra  # nothing to add: the node as read
            else Node(
                name=n.name,
                labels=n.labels,
                allocatable=n.allocatable,
                used=tuple(sorted(used.get(n.name, {}).items())),
                unschedulable=n.unschedulable,
                taints=n.taints,
                devices=devices.get(n.name, ()),
                topology=topologies.get(n.name),
                own_zones=own.get(n.name),
                reserved_zones=others.get(n.name),
            )
            for n in nodes
        )
    )
