"""The end-to-end suite as a GPU driver: ResourceSlices, a DeviceClass and claims of ``resource.k8s.io/v1``.

Notes
-----
kwok fakes the kubelet, so no DRA kubelet plugin ever runs on the test nodes. What a driver does
on the API side is publish one ResourceSlice per node listing its devices; kube-scheduler's
DynamicResources plugin allocates claims from those slices (writing ``status.allocation``), the
controller-manager's resourceclaim controller creates a claim per pod from a
ResourceClaimTemplate and deletes it when the pod is gone, and kwok turns the bound pod Running
without preparing anything. This module publishes the slices and reads the allocations back, so
tests prove on the real scheduler which devices each pod got.

Each node's GPUs sit in ``domains`` equal groups (sockets with their PCIe roots). Every device
carries the standard attribute ``resource.kubernetes.io/pcieRoot`` (the only standard device
attribute Kubernetes 1.34 defines), ``resource.kubernetes.io/numaNode`` (standardised in 1.37 as
an int, or a list of ints behind a feature gate there; 1.34 accepts it like any qualified name),
and the driver's own ``index``, ``uuid`` and ``productName``. CEL cannot see a device's name, so
exact devices are chosen by ``uuid`` or ``index``.

Slices are owned by their Node (as a kubelet plugin's are), so deleting a test's node removes
them; :func:`remove_slices` does it at once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpuplan_operator.kube import path_for
from kubernetes.client.exceptions import ApiException

from e2e.support import Api

RESOURCE_API = "resource.k8s.io/v1"
DRIVER = "gpu.gpuplan.test"
DEVICE_CLASS = DRIVER
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
REQUEST = "gpus"  # the request name of the claims made here
_UUIDS = uuid.UUID("6c1f0a8e-2d0b-4e57-9a43-5b0f6b7f5e21")  # namespace of the devices' uuid5s


class DeviceRef(NamedTuple):
    """A device as an allocation result names it (``driver``/``pool``/``device``)."""

    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class Gpu:
    """One published GPU: its name in the slice and the attributes a claim can select on."""

    node: str
    name: str
    index: int
    uuid: str
    pcie_root: str
    numa: int
    product: str
    driver: str = DRIVER

    @property
    def ref(self) -> DeviceRef:
        """One pool per node, named after the node."""
        return DeviceRef(self.driver, self.node, self.name)


def pcie_root(domain: int) -> str:
    """The standard attribute's format, ``pci<domain>:<bus>``: one PCI domain per socket here."""
    return f"pci{domain:04x}:00"


def gpus_of(
    node: str, count: int = 8, domains: int = 2, product: str = "Tesla-P4", driver: str = DRIVER
) -> list[Gpu]:
    """``count`` GPUs ``gpu-0``.. in ``domains`` equal consecutive groups (8 in 2: 0-3 and 4-7)."""
    if count < 1 or domains < 1 or count % domains:
        raise ValueError(f"{count} GPUs do not split into {domains} equal domains")
    per = count // domains
    return [
        Gpu(
            node=node,
            name=f"gpu-{i}",
            index=i,
            uuid=f"GPU-{uuid.uuid5(_UUIDS, f'{driver}/{node}/{i}')}",
            pcie_root=pcie_root(i // per),
            numa=i // per,
            product=product,
            driver=driver,
        )
        for i in range(count)
    ]


def domains_of(gpus: Iterable[Gpu]) -> dict[str, list[Gpu]]:
    """PCIe root -> its GPUs, in index order."""
    out: dict[str, list[Gpu]] = {}
    for g in sorted(gpus, key=lambda g: g.index):
        out.setdefault(g.pcie_root, []).append(g)
    return out


# --- what a driver publishes -----------------------------------------------------------------


def slice_name(node: str, driver: str = DRIVER) -> str:
    return f"{node}.{driver}"


def resource_slice(node: Mapping[str, Any], gpus: Sequence[Gpu]) -> dict[str, Any]:
    """The ResourceSlice of one node: one pool named after it, owned by the Node object."""
    name = node["metadata"]["name"]
    drivers = {g.driver for g in gpus}
    if len(drivers) != 1 or any(g.node != name for g in gpus):
        raise ValueError(f"a slice holds one driver's devices of one node ({name})")
    driver = drivers.pop()
    devices = [
        {
            "name": g.name,
            "attributes": {
                PCIE_ROOT: {"string": g.pcie_root},
                NUMA_NODE: {"int": g.numa},
                "index": {"int": g.index},
                "uuid": {"string": g.uuid},
                "productName": {"string": g.product},
            },
        }
        for g in gpus
    ]
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(name, driver),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                    "controller": True,
                },
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def publish_slices(
    api: Api,
    nodes: Sequence[str],
    count: int = 8,
    domains: int = 2,
    product: str = "Tesla-P4",
    driver: str = DRIVER,
) -> dict[str, list[Gpu]]:
    """Publish a slice for each node (``count`` GPUs in ``domains``); node -> its GPUs."""
    out: dict[str, list[Gpu]] = {}
    for name in nodes:
        node = api.node(name)
        if node is None:
            raise ValueError(f"no node {name} to publish devices for")
        gpus = gpus_of(name, count, domains, product, driver)
        api.create(RESOURCE_API, "resourceslices", resource_slice(node, gpus))
        out[name] = gpus
    return out


def remove_slices(api: Api, nodes: Iterable[str], driver: str = DRIVER) -> None:
    for name in nodes:
        api.delete(RESOURCE_API, "resourceslices", slice_name(name, driver))


def device_class(name: str = DEVICE_CLASS, driver: str = DRIVER) -> dict[str, Any]:
    """A DeviceClass of every device of ``driver``."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == {cel_string(driver)}"}}]},
    }


def ensure_device_class(api: Api, name: str = DEVICE_CLASS, driver: str = DRIVER) -> str:
    """Create or update the class (server-side apply: safe when several tests do it)."""
    api.kube.apply(path_for(RESOURCE_API, "deviceclasses", name), device_class(name, driver), "e2e")
    return name


def dra_served(api: Api) -> bool:
    """Whether the API server serves ``resource.k8s.io/v1`` (1.34 does by default)."""
    try:
        api.kube.get(f"/apis/{RESOURCE_API}")
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


# --- claims ----------------------------------------------------------------------------------


def cel_string(value: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL)."""
    return json.dumps(value)


def cel_attribute(attribute: str, driver: str = DRIVER) -> str:
    """``device.attributes["<domain>"].<name>``; an unqualified name is in the driver's domain."""
    domain, _, name = attribute.rpartition("/")
    return f"device.attributes[{cel_string(domain or driver)}].{name}"


def cel_equals(attribute: str, value: str | int, driver: str = DRIVER) -> str:
    literal = cel_string(value) if isinstance(value, str) else str(int(value))
    return f"{cel_attribute(attribute, driver)} == {literal}"


def cel_in(attribute: str, values: Iterable[str | int], driver: str = DRIVER) -> str:
    items = ", ".join(cel_string(v) if isinstance(v, str) else str(int(v)) for v in values)
    return f"{cel_attribute(attribute, driver)} in [{items}]"


def claim_spec(
    count: int,
    selectors: Sequence[str] = (),
    match_attribute: str | None = None,
    device_class_name: str = DEVICE_CLASS,
    request: str = REQUEST,
) -> dict[str, Any]:
    """A ResourceClaimSpec: ``count`` devices of the class passing every CEL selector, optionally
    all with one value of ``match_attribute`` (a qualified name, e.g. :data:`PCIE_ROOT`)."""
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    devices: dict[str, Any] = {"requests": [{"name": request, "exactly": exactly}]}
    if match_attribute:
        devices["constraints"] = [{"requests": [request], "matchAttribute": match_attribute}]
    return {"devices": devices}


def claim_template(ns: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": dict(spec)},
    }


def claim_deployment(
    ns: str, name: str, template: str, node: str | None = None, replicas: int = 1, claim: str = "gpus"
) -> dict[str, Any]:
    """A Deployment whose pods each get a claim from ``template`` (one container uses it)."""
    pod: dict[str, Any] = {
        "resourceClaims": [{"name": claim, "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/gpuplan/idle",
                "resources": {"claims": [{"name": claim}]},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if node:
        pod["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def hold_devices(api: Api, ns: str, name: str, gpus: Sequence[Gpu]) -> dict[str, Any]:
    """A claim that holds ``gpus`` (of one node) with no pod: allocated out of band.

    The claim selects exactly those GPUs (by uuid) and its ``status.allocation`` is written
    directly, as a driver or an earlier scheduler decision leaves it. The scheduler counts every
    allocated claim's devices as taken; the resourceclaim controller deallocates only claims
    whose last consumer went away, so one never reserved for a pod stays allocated until deleted.
    """
    nodes = {g.node for g in gpus}
    if len(nodes) != 1:
        raise ValueError(f"hold_devices takes the GPUs of one node, not {sorted(nodes)}")
    spec = claim_spec(len(gpus), [cel_in("uuid", [g.uuid for g in gpus], gpus[0].driver)], request="held")
    claim = {"apiVersion": RESOURCE_API, "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}
    api.create(RESOURCE_API, "resourceclaims", claim, ns=ns)
    allocation = {
        "devices": {
            "results": [
                {"request": "held", "driver": g.driver, "pool": g.ref.pool, "device": g.name} for g in gpus
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": sorted(nodes)}]}
            ]
        },
    }
    path = path_for(RESOURCE_API, "resourceclaims", name, ns) + "/status"
    return api.kube.merge_patch(path, {"status": {"allocation": allocation}}, "e2e")


# --- reading allocations back ----------------------------------------------------------------


def claims(api: Api, ns: str | None = None) -> list[dict[str, Any]]:
    """The ResourceClaims of ``ns`` (all namespaces when None)."""
    doc = api.kube.get(path_for(RESOURCE_API, "resourceclaims", namespace=ns))
    return list(doc.get("items") or [])


def allocated(claim: Mapping[str, Any]) -> list[DeviceRef]:
    """The devices in a claim's ``status.allocation`` (empty while unallocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return sorted(DeviceRef(r["driver"], r["pool"], r["device"]) for r in results)


def pod_claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's claim entry -> the ResourceClaim the controller made for it (once it exists)."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return {s["name"]: s["resourceClaimName"] for s in statuses if s.get("resourceClaimName")}


def pod_devices(api: Api, pod: Mapping[str, Any]) -> list[DeviceRef]:
    """Every device allocated to the pod's claims; empty until all of them are allocated."""
    ns = pod["metadata"]["namespace"]
    wanted = (pod.get("spec") or {}).get("resourceClaims") or []
    names = pod_claim_names(pod)
    if len(names) < len(wanted):
        return []
    out: list[DeviceRef] = []
    for claim_name in names.values():
        claim = api.kube.get_or_none(path_for(RESOURCE_API, "resourceclaims", claim_name, ns))
        devices = allocated(claim or {})
        if not devices:
            return []
        out += devices
    return sorted(out)


def holders(api: Api, driver: str = DRIVER) -> dict[DeviceRef, list[str]]:
    """Every allocated device of ``driver`` in the cluster -> the claims (``ns/name``) holding it.

    More than one holder would be a double allocation (shared devices are not used here).
    """
    out: dict[DeviceRef, list[str]] = {}
    for claim in claims(api):
        meta = claim["metadata"]
        for ref in allocated(claim):
            if ref.driver == driver:
                out.setdefault(ref, []).append(f"{meta['namespace']}/{meta['name']}")
    return out


def by_ref(gpus: Iterable[Gpu]) -> dict[DeviceRef, Gpu]:
    return {g.ref: g for g in gpus}
