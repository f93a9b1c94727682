"""Pure: can the devices of a plan's placement be allocated now (DRA claims, the gang gates)?

Notes
-----
A pod whose GPUs come from a ResourceClaim asks for no card count: the ledger of
:mod:`.gang` sees nothing of them. Its claim (made from the plan's ResourceClaimTemplate) names
the very devices the plan chose, and kube-scheduler can allocate it only when every one of them
is published on the planned node (a ResourceSlice) and allocated to no other claim. Released
before that, the pod would stay Pending, unschedulable, while the rest of its plan runs: the
half-started plan the gates exist to prevent.

So a plan's group of gated pods that use claims is held back while some device of the plan's
placement (``status.applied.devices``) is missing from its node's slices, or is allocated to a
claim that is not the plan's own: another workload's, or a leaving plan's (its pods going, their
claims deallocated once they are gone). A claim of the plan's own (its labels, made for one of
its pods still there) holds a device the plan counts as its own already. Devices are named by
(driver, pool, device), as the scheduler names them; a slice's pool defaults to its node.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner import PLAN_LABEL

DeviceRef = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True)
class Holder:
    """A claim that has devices allocated."""

    namespace: str
    name: str
    plan: str | None  # the plan label it carries
    pod: str | None  # the pod it was made for (its owner), by name


@dataclass(frozen=True)
class DeviceShortfall:
    """A device of the placement that cannot be allocated now."""

    node: str
    device: str
    holder: str  # ``namespace/claim`` holding it; empty: not published on the node

    def text(self) -> str:
        if not self.holder:
            return f"{self.node}: device {self.device} not published in its ResourceSlices"
        return f"{self.node}: device {self.device} held by claim {self.holder}"


class DeviceIndex:
    """Each node's published devices and the claim that holds each allocated one."""

    def __init__(
        self, slices: Iterable[Mapping[str, Any]] = (), claims: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self.published: dict[str, dict[str, tuple[str, str]]] = {}  # node -> device -> (driver, pool)
        for item in slices:
            spec = item.get("spec") or {}
            node = spec.get("nodeName")
            if not node:  # slices for many nodes are no node's GPUs
                continue
            driver = str(spec.get("driver") or "")
            pool = str((spec.get("pool") or {}).get("name") or node)
            for dev in spec.get("devices") or []:
                if isinstance(dev, Mapping) and dev.get("name"):
                    self.published.setdefault(str(node), {})[str(dev["name"])] = (driver, pool)
        self.holders: dict[DeviceRef, Holder] = {}
        for claim in claims:
            meta = claim.get("metadata") or {}
            allocation = (claim.get("status") or {}).get("allocation") or {}
            owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
            holder = Holder(
                str(meta.get("namespace") or ""),
                str(meta.get("name") or ""),
                (meta.get("labels") or {}).get(PLAN_LABEL),
                str(owners[0].get("name")) if owners else None,
            )
            for r in (allocation.get("devices") or {}).get("results") or []:
                if isinstance(r, Mapping) and r.get("device"):
                    self.holders[(str(r.get("driver")), str(r.get("pool")), str(r["device"]))] = holder

    def short(
        self, namespace: str, plan: str, placed: Mapping[str, Sequence[str]], live: Collection[str]
    ) -> list[DeviceShortfall]:
        """The devices of the plan's placement (node -> device names) that cannot be allocated
        now. ``live``: names of the plan's pods in ``namespace`` that are not going."""
        out: list[DeviceShortfall] = []
        for node, names in sorted(placed.items()):
            for name in names:
                ref = self.published.get(node, {}).get(name)
                if ref is None:
                    out.append(DeviceShortfall(node, name, ""))
                    continue
                holder = self.holders.get((*ref, name))
                if holder is None:
                    continue
                own = holder.namespace == namespace and holder.plan == plan and holder.pod in live
                if not own:
                    out.append(DeviceShortfall(node, name, f"{holder.namespace}/{holder.name}"))
        return out
