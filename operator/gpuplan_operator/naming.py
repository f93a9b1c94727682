"""Names and labels of what a plan writes, derived by the renderer's own rules.

Notes
-----
Deletion and clean-up must find a plan's objects even when its spec no longer parses, so these
need only the plan's namespace and name. They call :mod:`planner.render` with a bare spec rather
than repeating its rules (label values are shortened with a hash past 63 characters there).
"""

from __future__ import annotations

from planner.model import PlanSpec
from planner.render import dns_name, plan_label_key, plan_labels


def _bare(namespace: str, name: str) -> PlanSpec:
    return PlanSpec(name=name, namespace=namespace, resources=(), operators=(), requests=())


def label_key_of(namespace: str, name: str) -> str:
    """The one node label key the plan ``namespace/name`` owns."""
    return plan_label_key(_bare(namespace, name))


def plan_selector(namespace: str, name: str) -> dict[str, str]:
    """Labels on every namespaced object the plan writes (managed-by and plan name)."""
    return plan_labels(_bare(namespace, name))


def configmap_name(name: str) -> str:
    return dns_name(name, "flamewakers", limit=253)
