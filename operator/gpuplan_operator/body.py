"""Pure: a GpuAllocationPlan object as one typed, frozen value, built once where it enters.

Notes
-----
The operator reads a plan from the API server (or gets its body from kopf) as a dict. Everything
downstream needs the same few things from it: who it is (namespace, name, uid), which generation
of the spec it shows, the spec, the status it last wrote, whether it is being deleted, and how
objects it owns refer back to it. :class:`PlanBody` unpacks them once, like kopf's ``bodies``
structs, so no module digs through ``metadata`` again. The raw object stays available as
:attr:`PlanBody.raw` for kopf's event posting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from planner import API_VERSION, GROUP, KIND, configmap_name, plan_label_key, plan_labels

FINALIZER = f"{GROUP}/finalizer"  # kopf's, on every plan: the plan stays until its clean-up ran


def _frozen(value: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else MappingProxyType({})


@dataclass(frozen=True)
class PlanBody:
    """What the operator knows of one plan, as it was read."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: Mapping[str, Any] = field(repr=False)
    status: Mapping[str, Any] = field(repr=False)
    deleting: bool = False
    api_version: str = API_VERSION
    kind: str = KIND
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PlanBody:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            generation=int(meta.get("generation") or 0),
            spec=_frozen(obj.get("spec")),
            status=_frozen(obj.get("status")),
            deleting=bool(meta.get("deletionTimestamp")),
            api_version=str(obj.get("apiVersion") or API_VERSION),
            kind=str(obj.get("kind") or KIND),
            raw=obj,
        )

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def resource_version(self) -> str:
        """Changes with every write to the plan, status included."""
        return str((self.raw.get("metadata") or {}).get("resourceVersion") or "")

    @property
    def guarded(self) -> bool:
        """Does it carry :data:`FINALIZER`? Only then is its clean-up sure to run when it is
        deleted: one deleted before it was added goes at once, with no handler called."""
        return FINALIZER in ((self.raw.get("metadata") or {}).get("finalizers") or ())

    @property
    def label_key(self) -> str:
        """The node label key this plan owns."""
        return plan_label_key(self.namespace, self.name)

    @property
    def labels(self) -> dict[str, str]:
        """The labels on every namespaced object the plan writes."""
        return plan_labels(self.name)

    @property
    def configmap(self) -> str:
        return configmap_name(self.name)

    @property
    def deploy(self) -> bool:
        return bool(self.spec.get("deploy", False))

    def owner_reference(self) -> dict[str, Any]:
        """How the objects the plan owns point back to it (garbage-collected with it)."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def with_status(self, status: Mapping[str, Any]) -> PlanBody:
        """The same plan, as it reads after its status was patched to ``status``."""
        return PlanBody(
            self.namespace,
            self.name,
            self.uid,
            self.generation,
            self.spec,
            _frozen(status),
            self.deleting,
            self.api_version,
            self.kind,
            self.raw,
        )
